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

With one device or inside shard_map the call is lowered directly, with no wrapper (along the mesh
axes a shard_map leaves automatic, XLA then replicates it). Only the Shardy partitioner (jax's
default) is supported; GSPMD is deprecated in jax and raises there.

Under explicit sharding (jax.sharding.AxisType.Explicit) the same factors type the results
(`def_factors`), and the ops that cannot split replicate their operands first (`whole`).
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


def _axes_of(pairs) -> dict[str, tuple]:
  """{factor: the mesh axes it is split along}, read off (factors, PartitionSpec) pairs in order:
  the first that splits a factor names its axes, and a mesh axis splits one factor only."""
  axes_of: dict[str, tuple] = {}
  used: set = set()
  for factors, spec in pairs:
    spec = tuple(spec) + (None,) * (len(factors) - len(spec))
    for f, entry in zip(factors, spec):
      if entry is None or _replicated(f) or f in axes_of:
        continue
      axes = tuple(entry) if isinstance(entry, tuple) else (entry,)
      if used.isdisjoint(axes):
        axes_of[f] = axes
        used.update(axes)
  return axes_of


def _entries(factors: Factors, axes_of: dict[str, tuple]) -> tuple:
  """PartitionSpec entries of an array of these factors."""
  entries = []
  for f in factors:
    axes = None if _replicated(f) else axes_of.get(f)
    entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
  return tuple(entries)


def def_factors(prim, factors) -> None:
  """Declares a primitive's factors: `factors(*avals, **params)` -> (one Factors per operand, one
  per result). Its lowering passes them to `lower` (`prim.factors`), and under explicit sharding
  (jax.sharding.AxisType.Explicit: shardings are part of the types) its results' types are split
  along the factors as its operands are (compat.Primitive asks `prim.result_specs`; a result
  typed replicated would be gathered onto every device), its operands resharded to agree
  (`prim.operand_specs`, e.g. a replicated one beside a split one is sliced)."""
  prim.factors = factors

  def specs(avals, params, which):
    operands, results = factors(*avals, **params)
    axes_of = _axes_of([(f, a.sharding.spec) for f, a in zip(operands, avals)])
    return [_entries(f, axes_of) for f in (operands if which == "operands" else results)]
  prim.result_specs = lambda avals, params: specs(avals, params, "results")
  prim.operand_specs = lambda avals, params: specs(avals, params, "operands")


def _per_device(fn):
  """`fn` as a partition callback's per-device function: traced with no mesh in context. Under
  explicit sharding the user's mesh is still the context while XLA compiles, and a jax.numpy
  operation traced there would carry a sharding annotation into this already partitioned code,
  which nothing then removes ("No registered implementation for untyped custom call to
  Sharding")."""
  def per_device(*xs):
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
      return fn(*xs)
  return per_device


def lower(ctx, args, per_shard, operands: list[Factors], results: list[Factors],
          sums: dict[int, Factors] | None = None):
  """Lowers `per_shard(*args)` (which returns a tuple) so that the partitioner splits it along
  the named factors; returns the lowering's results.

  `sums` maps a result index to the factors it is a sum over (factors of the operands that the
  result does not have, e.g. the points of a light curve in a gradient with respect to its
  parameters): each device's result is then its shard's partial sum, added up across the mesh
  axes that split those factors (an all-reduce of the small result, not a gather of the inputs).
  """
  if (not any(_splittable(f) for f in operands) or compat.in_shard_map(ctx)
      or compat.for_export(ctx)):
    # Nothing may be split, or inside shard_map (each device's block is the call's; along axes
    # shard_map leaves automatic, XLA replicates the call), or for jax.export (custom
    # partitioning's callbacks cannot be serialized: a sharded module gathers the call's
    # operands and runs it whole on each device): the call itself.
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
    if not all(hasattr(s.sharding, "spec") for s in [*arg_shapes, *result_shapes]):
      # Shardings without a mesh (a jit given GSPMDShardings): taken as they come, which is right
      # where the operands are split alike; a call that sums across devices cannot say where.
      if sums:
        raise NotImplementedError("jaxext: this op's sharded gradient needs NamedSharding "
                                  "(jax.sharding.NamedSharding) shardings of its operands")
      return (mesh, run, tuple(r.sharding for r in result_shapes),
              tuple(a.sharding for a in arg_shapes))
    axes_of = _axes_of([*zip(results, (r.sharding.spec for r in result_shapes)),
                        *zip(operands, (a.sharding.spec for a in arg_shapes))])
    sharding = lambda factors: NamedSharding(mesh, PartitionSpec(*_entries(factors, axes_of)))
    arg_shardings = tuple(sharding(f) for f in operands)
    result_shardings = tuple(sharding(f) for f in results)
    if not sums:
      return mesh, _per_device(run), result_shardings, arg_shardings

    @_per_device
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


def whole(*arrays):
  """The arrays, replicated where explicit sharding (jax.sharding.AxisType.Explicit) splits them;
  the rest unchanged. For the ops that need every row on every device (a graph's gathers and
  sums): jax refuses to sort or index a split array without being told how, and their calls
  would be replicated anyway. Their cotangents go back to the operands' shardings."""
  return [jax.sharding.reshard(a, PartitionSpec()) if compat.is_split(jax.typeof(a)) else a
          for a in arrays]


def ffi_per_shard(target: str, result_types, output_layouts=None, **attrs):
  """per_shard for an FFI target: `result_types(*shards)` gives the result ShapeDtypeStructs;
  `output_layouts` as jax.ffi.ffi_call's (None: row-major)."""
  def per_shard(*xs):
    return jax.ffi.ffi_call(target, tuple(result_types(*xs)),
                            output_layouts=output_layouts)(*xs, **attrs)
  return per_shard
