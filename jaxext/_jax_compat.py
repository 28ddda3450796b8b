"""The one place jaxext touches jax internals: version-gated, so a new jax is a one-file change.

Everything with a public equivalent is used publicly elsewhere (`jax.extend.core.Primitive`,
`jax.ffi`, `jax.core.ShapedArray`, `jax.numpy`). What a primitive still needs that jax exposes only
through `jax.interpreters` (its rule registries and a few helpers) is wrapped here:

* `register_lowering(prim, rule, platform)`   mlir.register_lowering (several platforms at once
                                              too: jax.export(..., platforms=("cpu", "cuda")))
* `register_jvp(prim, rule)`                  ad.primitive_jvps
* `register_batching(prim, rule)`             batching.primitive_batchers
* `register_transpose(prim, rule)`, `is_undefined_primal(x)`, `undefined_primal_aval(x)`
                                              ad.primitive_transposes, for primitives linear in
                                              some operands (the shape of an undefined operand)
* `NOT_MAPPED`, `is_mapped(dim)`              the batch dimension of an operand vmap does not map
* `batch_size(args, dims)`                    the size of the axis vmap maps (from a mapped operand)
* `batch_axis_to_front(x, dim, size)`         an operand with its batch axis first (broadcast if
                                              unmapped), written with jax.numpy
* `is_zero_tangent(t)`, `instantiate_zeros(t)`   symbolic-zero tangents in JVP rules
* `source_line(eqn)`                          the user's line that made a jaxpr equation
* `evaluating_now()`                          a context in which binding a primitive on concrete
                                              values computes it, whatever trace surrounds the
                                              caller (core.eval_context)
* `Primitive`                                 jax.extend.core.Primitive whose operands and results
                                              carry the manual mesh axes they vary over inside
                                              jax.shard_map (its check_vma=True typing), and
                                              under explicit sharding the splits its factors give
* `varying_axes(aval)`, `match_varying(args)`  those axes; operands cast to vary alike
* `in_shard_map(ctx)`                         whether a lowering runs inside jax.shard_map
* `for_export(ctx)`                           whether a lowering is for jax.export
* `is_split(aval)`                            whether explicit sharding splits a value's type

Supported: jax 0.10.0 (the FFI floor) through 0.12.x; `tests/compat_test.py` checks the gates.
"""

from __future__ import annotations

import functools
import os
import re

import jax
import jax.extend
import jax.numpy as jnp
from jax.interpreters import ad, batching, mlir

__all__ = [
    "JAX_VERSION", "NOT_MAPPED", "Primitive", "batch_axis_to_front", "batch_size",
    "evaluating_now", "in_shard_map", "instantiate_zeros", "is_mapped", "is_split",
    "is_undefined_primal", "is_zero_tangent", "match_varying", "register_batching", "register_jvp", "register_lowering",
    "register_transpose", "source_line", "undefined_primal_aval", "varying_axes",
]


def _parse_version(text: str) -> tuple[int, ...]:
  """(major, minor, patch) of a jax version string, e.g. '0.12.0.1' or '0.13.0.dev20270101'."""
  m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
  if not m:
    raise RuntimeError(f"jaxext cannot parse the jax version {text!r}")
  return tuple(int(g or 0) for g in m.groups())


JAX_VERSION = _parse_version(jax.__version__)

# Unmapped operands have batch dim None. jax 0.10 names it `batching.not_mapped`; the alias is gone
# by 0.11.2 (seen on the lent GPU machine's jax 0.11.2, not only in 0.12 as first assumed), so the
# alias is looked up rather than gated on a version.
NOT_MAPPED = getattr(batching, "not_mapped", None)


def is_mapped(dim) -> bool:
  return dim is not NOT_MAPPED


def batch_size(args, dims) -> int:
  """The vmapped axis' size, read off the first operand it maps (a batching rule has one)."""
  return next(x.shape[d] for x, d in zip(args, dims) if is_mapped(d))


def batch_axis_to_front(x, dim, size: int):
  """`x` with its batch axis `dim` moved to the front; broadcast to `size` first if unmapped."""
  if dim is NOT_MAPPED:
    return jnp.broadcast_to(x, (size,) + tuple(jnp.shape(x)))
  return jnp.moveaxis(x, dim, 0)


# JAXEXT_CUDA_EMULATION (tests only; tests/cuda_emu/README.md): the CUDA handlers, built to run on
# the CPU, are registered as the CPU's (jaxext/_ffi.py), and every primitive with a CUDA lowering
# lowers that way on the CPU too, so that a CPU process runs what a GPU would.
_CUDA_ON_CPU = bool(os.environ.get("JAXEXT_CUDA_EMULATION"))
_cuda_lowered: set = set()


def register_lowering(prim, rule, platform: str | None, *, partitioned: bool = False) -> None:
  """Registers `rule` as `prim`'s lowering on `platform` (None: every platform).

  partitioned: the rule lowers through jax.experimental.custom_partitioning (jaxext._sharding),
  which needs the devices during lowering: jit otherwise lowers device-agnostically (its
  ShardingContext then has no device assignment, and custom_partitioning fails), and caches
  lowerings across device assignments. jax has no public switch for either (0.10 .. 0.12).
  """
  if _CUDA_ON_CPU:
    if platform == "cuda":
      _cuda_lowered.add(prim)
      _register_lowering(prim, rule, "cpu", partitioned)
    elif platform == "cpu" and prim in _cuda_lowered:
      return
  _register_lowering(prim, rule, platform, partitioned)


# prim -> {platform (None: any other): rule}, for the partitioned primitives (_register_lowering).
_platform_rules: dict = {}


def _register_lowering(prim, rule, platform, partitioned):
  if not partitioned:
    mlir.register_lowering(prim, rule, platform=platform)
    return
  # An uncacheable primitive with rules for several platforms cannot be lowered for several at
  # once (jax.export(..., platforms=("cpu", "cuda"))): jax's lower_per_platform then fails
  # ("can only concatenate list (not "tuple") to list", jax 0.10 .. 0.12: the uncached path's
  # rule context holds its result avals in a tuple). jax is given one rule for every platform,
  # which picks the platform's own (_lower_per_platform).
  if platform not in (None, "cpu", "cuda"):  # (jax's own registry would expand "gpu")
    raise ValueError(f"{prim}: a partitioned lowering is for cpu, cuda or None; got {platform!r}")
  rules = _platform_rules.setdefault(prim, {})
  rules[platform] = rule
  if len(rules) == 1:
    from jax._src import dispatch  # noqa: PLC0415 - no public equivalent
    mlir.register_lowering(prim, functools.partial(_lower_per_platform, prim), cacheable=False)
    dispatch.prim_requires_devices_during_lowering.add(prim)


def _lower_per_platform(prim, ctx, *args, **params):
  from jax._src.interpreters import mlir as mlir_internal  # noqa: PLC0415 - no public equivalent
  rules = _platform_rules[prim]
  platforms = mlir_internal._platforms_for_eqn(ctx)
  if len(platforms) == 1:
    rule = rules.get(platforms[0], rules.get(None))
    if rule is None:
      raise NotImplementedError(f"{prim} has no lowering for platform {platforms[0]} (jaxext "
                                f"lowers it for {', '.join(p for p in rules if p)})")
    return rule(ctx, *args, **params)
  # No jaxext primitive has effects (no tokens to thread through the platforms' branches).
  return mlir_internal.lower_per_platform(
      ctx.replace(avals_out=list(ctx.avals_out)), str(prim),
      {p: r for p, r in rules.items() if p is not None}, rules.get(None), set(), *args, **params)


def in_shard_map(ctx) -> bool:
  """Whether a lowering runs inside jax.shard_map (some mesh axes manual). custom_partitioning
  lowers directly where every axis is manual, but where only some are (shard_map's axis_names) it
  hands its callbacks shardings without a mesh (jax 0.10 .. 0.12): jaxext then lowers directly."""
  from jax._src import sharding_impls  # noqa: PLC0415 - no public equivalent
  context = ctx.module_context.axis_context
  return isinstance(context, sharding_impls.SPMDAxisContext) and bool(context.manual_axes)


def for_export(ctx) -> bool:
  """Whether a lowering is for jax.export (whose modules cannot hold custom_partitioning's
  callbacks: they live in the exporting process)."""
  return bool(getattr(ctx.module_context.lowering_parameters, "for_export", False))


def lower_fun(fun, multiple_results: bool):
  """A lowering rule that lowers the JAX function `fun` in place of the primitive."""
  return mlir.lower_fun(fun, multiple_results=multiple_results)


def register_jvp(prim, rule) -> None:
  ad.primitive_jvps[prim] = rule


def register_batching(prim, rule) -> None:
  batching.primitive_batchers[prim] = rule


def register_transpose(prim, rule) -> None:
  """`rule(cotangent, *operands, **params)` -> one cotangent (or None) per operand; the operands
  the primitive is linear in arrive as undefined primals (see is_undefined_primal)."""
  ad.primitive_transposes[prim] = rule


def is_undefined_primal(x) -> bool:
  return ad.is_undefined_primal(x)


def undefined_primal_aval(x):
  """The abstract value (shape, dtype) of an operand a transpose rule receives undefined."""
  return x.aval


def is_traced(x) -> bool:
  """Whether `x` is a tracer (an abstract value inside jit, grad, vmap...) rather than data."""
  return isinstance(x, jax.core.Tracer)


def is_zero_tangent(t) -> bool:
  return type(t) is ad.Zero


def instantiate_zeros(t):
  return ad.instantiate_zeros(t)


def evaluating_now():
  """A context manager: primitives bound on concrete values inside it are computed there and then,
  even when the caller runs under a transformation's trace (constant folding while jax
  differentiates a jax.shard_map body, whose eager trace would otherwise take the values)."""
  from jax._src import core  # noqa: PLC0415 - no public equivalent (0.10 .. 0.12)
  return core.eval_context()


def source_line(eqn) -> str:
  """' (at file:line (function))': the user code that made a jaxpr equation, for error messages;
  '' where jax cannot say. jax.extend.source_info_util.summarize is public from jax 0.4.36; the
  equation's source_info attribute is not documented, hence here."""
  if eqn is None:
    return ""
  try:
    from jax.extend import source_info_util  # noqa: PLC0415
    where = source_info_util.summarize(eqn.source_info)
  except Exception:  # noqa: BLE001 - only an error message's detail is lost
    return ""
  return f" (at {where})" if where else ""


# Inside jax.shard_map with check_vma=True (jax's default) every value's type records the manual
# mesh axes it varies over (its "vma": jax.typeof(x).mat.varying in jax 0.10 .. 0.12), and
# differentiation checks that each cotangent varies exactly as its primal does: the transpose of
# jax.lax.pcast(x, axes, to="varying") (invariant -> varying) is the psum that makes a replicated
# operand's gradient whole. jax's own primitives cast their operands to one vma before binding
# and give their results that vma; a jax.extend Primitive does neither by itself, so its results
# would be typed invariant whatever its operands, and grad inside shard_map would fail ("Expected
# cotangent type float64[16]{V:x} but got float64[16]"). jaxext's primitives are made by the
# class below, which does both. Outside shard_map (or with check_vma=False) no value varies and
# it changes nothing.


def varying_axes(aval) -> frozenset:
  """The manual mesh axes an abstract value varies over (empty outside shard_map)."""
  mat = getattr(aval, "mat", None)  # jax 0.10 .. 0.12; should it move, nothing varies (as before)
  return frozenset(mat.varying) if mat is not None else frozenset()


def match_varying(args):
  """`args` with each array cast (jax.lax.pcast, to="varying") to vary over every axis any of them
  varies over, as jax's own n-ary primitives do before binding."""
  avals = [jax.typeof(a) if isinstance(a, (jax.Array, jax.core.Tracer)) else None for a in args]
  union = frozenset().union(*(varying_axes(a) for a in avals if a is not None))
  if not union:
    return args
  out = []
  for a, aval in zip(args, avals):
    missing = union - varying_axes(aval) if aval is not None else frozenset()
    out.append(jax.lax.pcast(a, tuple(sorted(missing, key=str)), to="varying") if missing else a)
  return out


def is_split(aval) -> bool:
  """Whether an abstract value's type names a mesh axis it is split along (explicit sharding)."""
  sharding = getattr(aval, "sharding", None)
  return sharding is not None and any(e is not None for e in sharding.spec)


def _retyped(aval, like, axes: frozenset, entries):
  """`aval` (a result typed by shape and dtype alone) varying over the manual axes `axes` and split
  along the PartitionSpec `entries` (None: replicated), on the mesh of the operand `like`."""
  if not isinstance(aval, jax.core.ShapedArray):
    return aval
  from jax.sharding import PartitionSpec  # noqa: PLC0415
  entries = tuple(entries) if entries is not None else (None,) * len(aval.shape)
  mat = like.mat.update(varying=axes, unreduced=frozenset(), reduced=frozenset())
  return like.update(shape=aval.shape, dtype=aval.dtype, weak_type=aval.weak_type,
                     sharding=like.sharding.update(spec=PartitionSpec(*entries)),
                     manual_axis_type=mat, memory_space=aval.memory_space)


class Primitive(jax.extend.core.Primitive):
  """A jax.extend.core.Primitive typed as jax's own are: `bind` casts the operands to vary over
  the same manual axes, the abstract evaluation rule's results vary over them, and under explicit
  sharding its results are split as `result_specs` (set by jaxext._sharding.def_factors) says,
  else typed replicated."""

  result_specs = None  # (avals, params) -> PartitionSpec entries per result
  operand_specs = None  # (avals, params) -> PartitionSpec entries per operand

  def bind(self, *args, **params):
    if any(varying_axes(a) or is_split(a) for a in map(jax.typeof, args)):  # mesh-typed operands
      args = self._aligned(match_varying(args), params)
    return super().bind(*args, **params)

  def _aligned(self, args, params):
    """Under explicit sharding, the operands resharded to the splits the primitive's factors give
    them (all replicated for a primitive without factors), so that operands, results and
    cotangents agree: a replicated operand beside a split one is sliced (its cotangent goes back
    replicated through jax.sharding.reshard's transpose)."""
    avals = [jax.typeof(a) for a in args]
    if not any(is_split(a) for a in avals):
      return args
    specs = self.operand_specs(avals, params) if self.operand_specs else [None] * len(args)
    from jax.sharding import PartitionSpec  # noqa: PLC0415
    out = []
    for a, aval, spec in zip(args, avals, specs):
      if not isinstance(aval, jax.core.ShapedArray):
        out.append(a)
        continue
      want = tuple(spec) if spec is not None else (None,) * aval.ndim
      have = tuple(aval.sharding.spec) + (None,) * (aval.ndim - len(aval.sharding.spec))
      out.append(a if have == want else jax.sharding.reshard(a, PartitionSpec(*want)))
    return out

  def def_abstract_eval(self, abstract_eval):
    def typed(*avals, **params):
      out = abstract_eval(*avals, **params)
      shaped = [a for a in avals if isinstance(a, jax.core.ShapedArray)]
      axes = frozenset().union(*(varying_axes(a) for a in shaped))
      split = [a for a in shaped if is_split(a)]
      if not axes and not split:
        return out
      specs = self.result_specs(avals, params) if split and self.result_specs else None
      # bind made the operands vary alike; a split operand carries the mesh
      like = max(shaped, key=lambda a: (len(varying_axes(a)), is_split(a)))
      outs = out if self.multiple_results else [out]
      outs = [_retyped(r, like, axes, specs[i] if specs else None) for i, r in enumerate(outs)]
      return outs if self.multiple_results else outs[0]
    return super().def_abstract_eval(typed)
