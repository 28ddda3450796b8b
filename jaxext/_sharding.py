"""How every jaxext op partitions under jit sharding (the one mechanism all ops share).

An FFI custom call is opaque to XLA's SPMD partitioner, which would replicate it: gather every
operand onto every device and compute the whole result everywhere. Each op instead lowers its FFI
call through `jax.experimental.custom_partitioning` with a Shardy sharding rule built here from a
per-operand list of *factors*: one name per dimension, equal names for dimensions that must be
split alike (the op is independent along them), and `None` (or a name starting with "_", to tie
several such dimensions together) for a dimension that must stay whole (e.g. the limb-darkening
coefficients). Each factor is split along the mesh axes the partitioner chose for it, every
operand and result alike (an operand that came otherwise, e.g. replicated beside a split one, is
resharded: a local slice), and the same FFI call runs on each device's blocks; `per_shard`
computes the result types from the blocks' shapes.

With one device (or inside shard_map) the call is lowered directly, with no wrapper. Only the
Shardy partitioner (jax's default) is supported; GSPMD is deprecated in jax and raises there.
"""

from __future__ import annotations

import jax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jaxext import _jax_compat as compat

Factors = tuple  # of str | None, one per dimension


def elementwise(ndim: int) -> Factors:
  """Factors of an element-wise operand: every dimension its own, shared with the others."""
  return tuple(f"d{i}" for i in range(ndim))


def _replicated(factor) -> bool:
  return factor is None or factor.startswith("_")


def rule(operands: list[Factors], results: list[Factors]) -> tuple[str, tuple[str, ...]]:
  """(Shardy einsum-like rule, need_replication factors) for the given factors. Splittable
  factors are named by the caller (lowercase first letter); replicated ones become R0, R1, ..."""
  replicated: list[str] = []
  tied: dict[str, str] = {}  # "_name" -> its factor

  def name(f) -> str:
    if not _replicated(f):
      if not f[:1].islower():
        raise ValueError(f"jaxext._sharding: factor names start with a lowercase letter; got {f!r}")
      return f
    if f in tied:
      return tied[f]
    n = f"R{len(replicated)}"
    replicated.append(n)
    if f is not None:
      tied[f] = n
    return n

  spec = lambda factors: " ".join(name(f) for f in factors)
  text = ", ".join(spec(f) for f in operands) + " -> " + ", ".join(spec(f) for f in results)
  return text, tuple(replicated)


def _splittable(factors: Factors) -> bool:
  return not all(_replicated(f) for f in factors)


def lower(ctx, args, per_shard, operands: list[Factors], results: list[Factors],
          sums: dict[int, Factors] | None = None):
  """Lowers `per_shard(*args)` (which returns a tuple) so that the partitioner splits it along
  the named factors; returns the lowering's results.

  `sums` maps a result index to the factors it is a sum over (factors of the operands that the
  result does not have, e.g. the points of a light curve in a gradient with respect to its
  parameters): each device's result is then its shard's partial sum, added up across the mesh
  axes that split those factors (an all-reduce of the small result, not a gather of the inputs).
  """
  if not any(_splittable(f) for f in operands):  # nothing may be split: XLA replicates the call
    return compat.lower_fun(per_shard, multiple_results=True)(ctx, *args)
  text, need_replication = rule(operands, results)

  def run(*xs):
    return tuple(per_shard(*xs))

  def partition(mesh, arg_shapes, result_shapes):
    # The mesh axes each factor is split along: as the partitioner chose them for the results
    # (it propagates the rule), else as an operand has them. Every operand and result is then
    # given those same axes along its factors, and XLA reshards an operand that came otherwise
    # (e.g. one replicated beside a split one: each device takes its slice). Handing the
    # operands' own shardings back instead would run each device's call on mismatched blocks.
    axes_of: dict[str, tuple] = {}
    used: set = set()
    for factors, shape in [*zip(results, result_shapes), *zip(operands, arg_shapes)]:
      spec = tuple(shape.sharding.spec) + (None,) * (len(factors) - len(shape.sharding.spec))
      for f, entry in zip(factors, spec):
        if entry is None or _replicated(f) or f in axes_of:
          continue
        axes = tuple(entry) if isinstance(entry, tuple) else (entry,)
        if used.isdisjoint(axes):  # a mesh axis splits one factor only
          axes_of[f] = axes
          used.update(axes)

    def sharding(factors):
      entries = []
      for f in factors:
        axes = None if _replicated(f) else axes_of.get(f)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
      return NamedSharding(mesh, PartitionSpec(*entries))

    arg_shardings = tuple(sharding(f) for f in operands)
    result_shardings = tuple(sharding(f) for f in results)
    if not sums:
      return mesh, run, result_shardings, arg_shardings

    def run_and_sum(*xs):
      outs = list(run(*xs))
      for i, factors in sums.items():
        axes = tuple(a for f in factors for a in axes_of.get(f, ()))
        if axes:
          outs[i] = jax.lax.psum(outs[i], axes)
      return tuple(outs)
    return mesh, run_and_sum, result_shardings, arg_shardings

  call = custom_partitioning(run)
  call.def_partition(partition=partition, sharding_rule=text,
                     need_replication_factors=need_replication)
  return compat.lower_fun(call, multiple_results=True)(ctx, *args)


def ffi_per_shard(target: str, result_types, output_layouts=None, **attrs):
  """per_shard for an FFI target: `result_types(*shards)` gives the result ShapeDtypeStructs;
  `output_layouts` as jax.ffi.ffi_call's (None: row-major)."""
  def per_shard(*xs):
    return jax.ffi.ffi_call(target, tuple(result_types(*xs)),
                            output_layouts=output_layouts)(*xs, **attrs)
  return per_shard
