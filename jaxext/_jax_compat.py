"""The one place jaxext touches jax internals: version-gated, so a new jax is a one-file change.

Everything with a public equivalent is used publicly elsewhere (`jax.extend.core.Primitive`,
`jax.ffi`, `jax.core.ShapedArray`, `jax.numpy`). What a primitive still needs that jax exposes only
through `jax.interpreters` (its rule registries and a few helpers) is wrapped here:

* `register_lowering(prim, rule, platform)`   mlir.register_lowering
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

Supported: jax 0.10.0 (the FFI floor) through 0.12.x; `tests/compat_test.py` checks the gates.
"""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
from jax.interpreters import ad, batching, mlir

__all__ = [
    "JAX_VERSION", "NOT_MAPPED", "batch_axis_to_front", "batch_size", "instantiate_zeros", "is_mapped",
    "is_undefined_primal", "is_zero_tangent", "register_batching", "register_jvp",
    "register_lowering", "register_transpose", "source_line", "undefined_primal_aval",
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


def _register_lowering(prim, rule, platform, partitioned):
  if not partitioned:
    mlir.register_lowering(prim, rule, platform=platform)
    return
  from jax._src import dispatch
  mlir.register_lowering(prim, rule, platform=platform, cacheable=False)
  dispatch.prim_requires_devices_during_lowering.add(prim)


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
