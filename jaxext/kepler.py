"""Kepler's equation as a JAX primitive: sin E and cos E from mean anomaly M and eccentricity e.

The primitive `kepler_p` is defined the way jaxlib defines its LAPACK/cuSOLVER primitives:

* abstract evaluation (two outputs of the operands' shape and dtype);
* one lowering per platform family, calling the XLA FFI target `jaxext_kepler_<f32|f64>` registered
  for that platform by `jaxext._ffi`;
* a JVP by implicit differentiation of E - e sin E = M:
      dE = (dM + sin E de) / (1 - e cos E),  d sin E = cos E dE,  d cos E = -sin E dE,
  written with JAX operations on the primal outputs, so reverse mode and higher orders follow;
* a batching rule: the op is element-wise, so a batched call is one call on the broadcast operands.

Out of the domain (e < 0, e >= 1, NaN or infinite inputs) the outputs are NaN.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand, kernel_float

__all__ = ["kepler", "kepler_p"]

kepler_p = compat.Primitive("jaxext_kepler")
kepler_p.multiple_results = True


def kepler(mean_anomaly: ArrayLike, eccentricity: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Solves Kepler's equation E - e sin E = M for the eccentric anomaly E.

  Args:
    mean_anomaly: M, any finite real value (reduced modulo 2 pi internally); array-like.
    eccentricity: e, in [0, 1); array-like, broadcast against `mean_anomaly`.

  Returns:
    (sin E, cos E), each of the broadcast shape and of the common floating dtype (float32 or
    float64 kept; integers promote to JAX's default float; float16/bfloat16 compute in float32).
    NaN wherever e < 0, e >= 1, or an input is NaN or infinite.

  Raises:
    TypeError: if an argument is boolean, complex or not numeric (the message names it).
  """
  m = float_operand(mean_anomaly, "mean_anomaly")
  e = float_operand(eccentricity, "eccentricity")
  dtype = jnp.result_type(m, e)
  if dtype not in (jnp.float32, jnp.float64):
    dtype = np.dtype(np.float32)
  try:
    shape = jnp.broadcast_shapes(jnp.shape(m), jnp.shape(e))
  except ValueError as err:
    raise ValueError(
        f"mean_anomaly of shape {jnp.shape(m)} and eccentricity of shape {jnp.shape(e)} "
        "cannot be broadcast together") from err
  m = jnp.broadcast_to(m.astype(dtype), shape)
  e = jnp.broadcast_to(e.astype(dtype), shape)
  sin_e, cos_e = kepler_p.bind(m, e)
  return sin_e, cos_e


def _abstract_eval(m, e):
  if m.shape != e.shape or m.dtype != e.dtype:
    raise TypeError(
        "kepler_p expects operands of equal shape and dtype; got "
        f"mean_anomaly {m.dtype}{list(m.shape)} and eccentricity {e.dtype}{list(e.shape)}")
  if not kernel_float(m.dtype):
    raise TypeError(f"kepler_p supports float32 and float64; got {m.dtype}")
  out = jax.core.ShapedArray(m.shape, m.dtype)
  return out, out


kepler_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(kepler_p)


def _target_name(dtype) -> str:
  return "jaxext_kepler_" + {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}[np.dtype(dtype)]


def _lowering(ctx, m, e, *, platform):
  _ffi.require(platform, "jaxext.kepler")
  (aval_m, _) = ctx.avals_in
  like = lambda m, e: (jax.ShapeDtypeStruct(m.shape, m.dtype),) * 2
  return _sharding.lower(ctx, (m, e), _sharding.ffi_per_shard(_target_name(aval_m.dtype), like),
                         *kepler_p.factors(*ctx.avals_in))


def _factors(m, e):
  dims = _sharding.elementwise(m.ndim)  # element-wise: splits along any axis
  return [dims, dims], [dims, dims]


_sharding.def_factors(kepler_p, _factors)


# One rule per platform family; the same target name is registered for each platform.
compat.register_lowering(kepler_p, functools.partial(_lowering, platform="cpu"), "cpu",
                         partitioned=True)
compat.register_lowering(kepler_p, functools.partial(_lowering, platform="CUDA"), "cuda",
                         partitioned=True)


def _jvp(primals, tangents):
  m, e = primals
  dm, de = tangents
  sin_e, cos_e = kepler_p.bind(m, e)
  dm = compat.instantiate_zeros(dm)
  de = compat.instantiate_zeros(de)
  d_ecc_anom = (dm + sin_e * de) / (1 - e * cos_e)
  return (sin_e, cos_e), (cos_e * d_ecc_anom, -sin_e * d_ecc_anom)


compat.register_jvp(kepler_p, _jvp)


def _batch(args, dims):
  m, e = args
  dm, de = dims
  size = compat.batch_size(args, dims)
  m = compat.batch_axis_to_front(m, dm, size)
  e = compat.batch_axis_to_front(e, de, size)
  return kepler_p.bind(m, e), (0, 0)


compat.register_batching(kepler_p, _batch)
