"""Flux of a limb-darkened star occulted by an opaque disk, as a JAX primitive.

The star has unit radius; the occultor (a planet, say) has radius `r` and its centre lies at
projected distance `b` from the star's centre. The limb darkening law is the polynomial
    I(mu) / I(1) = 1 - sum_{j=1..n} u_j (1 - mu)^j,
of any order n <= 16 (quadratic: u = (u1, u2)). The result is the visible flux divided by the
unocculted flux, computed analytically (closed forms and recurrences for the elliptic-integral
terms; see jaxext/kernels/limbdark.h), to ~1e-15 absolute in float64.

The primitive `limbdark_p` is defined as jaxlib defines its LAPACK/cuSOLVER primitives:

* operands b[S], r[S] or r[] (shared radius), same dtype, and u[L + (n,)] where L is a leading
  prefix of S
  (point i of the row-major flattening uses row i // (size(S) / size(L)) of u);
* parameter `grad`: False -> (flux[S],); True -> (flux, dflux/db, dflux/dr, dflux/du[S + (n,)]),
  all computed analytically by the kernel;
* abstract evaluation, one lowering per platform family (`jaxext_limbdark[_grad]_<f32|f64>`);
* a JVP that calls the `grad=True` form and contracts its derivatives with the tangents (reverse
  mode follows by transposition; second derivatives are not available);
* a batching rule (batch dimensions moved to the front; u broadcast where needed).

Out of the domain (b < 0, r <= 0, NaN) every output is NaN.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand

__all__ = ["MAX_ORDER", "limb_dark_flux", "limbdark_p", "quadratic_limb_dark_flux"]

MAX_ORDER = 16  # jaxext::limbdark::kMaxOrder

limbdark_p = Primitive("jaxext_limbdark")
limbdark_p.multiple_results = True


def limb_dark_flux(b, r, u):
  """Relative flux of a star with polynomial limb darkening, occulted by a disk.

  Args:
    b: projected centre-to-centre distance in units of the stellar radius (>= 0); array-like.
    r: occultor radius in units of the stellar radius (> 0); array-like, broadcast against `b`.
    u: limb-darkening coefficients (u_1, ..., u_n) along the last axis, n <= 16 (n = 0: uniform
      disk). Leading axes broadcast against `b` and `r`, so one law can serve every point
      (u of shape (n,)) or each light curve can have its own.

  Returns:
    Flux relative to the unocculted star, of the broadcast shape of b, r and u[..., 0], in the
    common floating dtype (float32 or float64; other inputs promote to JAX's default float).
    1 where the disks do not overlap, 0 where the occultor covers the star, NaN where b < 0,
    r <= 0 or an input is NaN. Absolute accuracy ~1e-16 max(1, r); partial overlaps by
    occultors larger than 1e8 stellar radii are NaN rather than inaccurate.

  Raises:
    TypeError: an argument is boolean, complex or not numeric.
    ValueError: `u` is a scalar, has more than 16 coefficients, or shapes do not broadcast.
  """
  b = float_operand(b, "b")
  r = float_operand(r, "r")
  u = float_operand(u, "u")
  if u.ndim < 1:
    raise ValueError("u must have at least one axis (the coefficients u_1..u_n); got a scalar")
  order = u.shape[-1]
  if order > MAX_ORDER:
    raise ValueError(f"u has {order} coefficients; at most {MAX_ORDER} are supported")
  dtype = jnp.result_type(b, r, u)
  if dtype not in (jnp.float32, jnp.float64):
    dtype = jnp.float32
  try:
    shape = jnp.broadcast_shapes(jnp.shape(b), jnp.shape(r), u.shape[:-1])
  except ValueError as err:
    raise ValueError(
        f"b of shape {jnp.shape(b)}, r of shape {jnp.shape(r)} and u of shape {u.shape} "
        "(leading axes) cannot be broadcast together") from err
  b = jnp.broadcast_to(b.astype(dtype), shape)
  # A scalar radius stays a scalar: the kernel broadcasts it (no array of copies is materialised).
  r = r.astype(dtype) if r.ndim == 0 else jnp.broadcast_to(r.astype(dtype), shape)
  # u's batch axes, right-aligned against `shape`: keep the leading axes up to the last one that
  # is not 1 (the kernel indexes u by a prefix of the point index), broadcast those to `shape`.
  lead = (1,) * (len(shape) - (u.ndim - 1)) + u.shape[:-1]
  k = max((i + 1 for i, d in enumerate(lead) if d != 1), default=0)
  u = jnp.broadcast_to(u.astype(dtype).reshape(lead + (order,)), shape[:k] + (1,) * (len(shape) - k) + (order,))
  u = u.reshape(shape[:k] + (order,))
  (flux,) = limbdark_p.bind(b, r, u, grad=False)
  return flux


def quadratic_limb_dark_flux(b, r, u1, u2):
  """`limb_dark_flux` for the quadratic law I(mu) = 1 - u1 (1 - mu) - u2 (1 - mu)^2.

  u1 and u2 may be arrays; they broadcast against b and r.
  """
  u1 = float_operand(u1, "u1")
  u2 = float_operand(u2, "u2")
  try:
    ushape = jnp.broadcast_shapes(jnp.shape(u1), jnp.shape(u2))
  except ValueError as err:
    raise ValueError(f"u1 of shape {jnp.shape(u1)} and u2 of shape {jnp.shape(u2)} "
                     "cannot be broadcast together") from err
  u = jnp.stack([jnp.broadcast_to(u1, ushape), jnp.broadcast_to(u2, ushape)], axis=-1)
  return limb_dark_flux(b, r, u)


def _abstract_eval(b, r, u, *, grad):
  if (r.shape not in (b.shape, ())) or b.dtype != r.dtype or u.dtype != b.dtype:
    raise TypeError(
        "limbdark_p expects r of b's shape or a scalar r, and b, r, u of one dtype; got "
        f"b {b.dtype}{list(b.shape)}, r {r.dtype}{list(r.shape)}, u {u.dtype}{list(u.shape)}")
  if np.dtype(b.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
    raise TypeError(f"limbdark_p supports float32 and float64; got {b.dtype}")
  if u.ndim < 1 or u.shape[-1] > MAX_ORDER:
    raise TypeError(f"limbdark_p: u must be [..., n] with n <= {MAX_ORDER}; got {list(u.shape)}")
  lead = u.shape[:-1]
  if tuple(b.shape[:len(lead)]) != tuple(lead):
    raise TypeError(f"limbdark_p: u's leading axes {list(lead)} must be a prefix of b's shape "
                    f"{list(b.shape)}")
  out = jax.core.ShapedArray(b.shape, b.dtype)
  if not grad:
    return (out,)
  return (out, out, out, jax.core.ShapedArray(b.shape + (u.shape[-1],), b.dtype))


limbdark_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(limbdark_p)


def _target_name(dtype, grad: bool) -> str:
  suffix = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}[np.dtype(dtype)]
  return ("jaxext_limbdark_grad_" if grad else "jaxext_limbdark_") + suffix


def _lowering(ctx, b, r, u, *, grad, platform):
  if platform not in _ffi.register_all():
    raise NotImplementedError(
        f"jaxext.limb_dark_flux has no {platform} kernel in this build of jaxext "
        f"(available: {', '.join(_ffi.register_all())})")
  # Split along the points' axes (b, r, the outputs; u along the prefix it has), never along the
  # coefficients.
  aval_b, aval_r, aval_u = ctx.avals_in
  pts = _sharding.elementwise(aval_b.ndim)
  coef = ("_coef",)

  def like(b, r, u):
    out = jax.ShapeDtypeStruct(b.shape, b.dtype)
    if not grad:
      return (out,)
    return (out, out, out, jax.ShapeDtypeStruct(b.shape + (u.shape[-1],), b.dtype))

  operands = [pts, pts if aval_r.ndim else (), pts[:aval_u.ndim - 1] + coef]
  results = [pts] if not grad else [pts, pts, pts, pts + coef]
  return _sharding.lower(ctx, (b, r, u),
                         _sharding.ffi_per_shard(_target_name(aval_b.dtype, grad), like),
                         operands, results)


compat.register_lowering(limbdark_p, functools.partial(_lowering, platform="cpu"), "cpu",
                         partitioned=True)
compat.register_lowering(limbdark_p, functools.partial(_lowering, platform="CUDA"), "cuda",
                         partitioned=True)


def _jvp(primals, tangents, *, grad):
  if grad:
    raise NotImplementedError(
        "jaxext.limb_dark_flux: second derivatives are not implemented (the kernel provides "
        "exact first derivatives)")
  b, r, u = primals
  db, dr, du = tangents
  flux, dfdb, dfdr, dfdu = limbdark_p.bind(b, r, u, grad=True)
  out = jnp.zeros_like(flux)
  if not compat.is_zero_tangent(db):
    out = out + dfdb * db
  if not compat.is_zero_tangent(dr):
    out = out + dfdr * dr
  if not compat.is_zero_tangent(du):
    lead = u.shape[:-1]
    du = du.reshape(lead + (1,) * (b.ndim - len(lead)) + (u.shape[-1],))
    out = out + jnp.sum(dfdu * du, axis=-1)
  return (flux,), (out,)


compat.register_jvp(limbdark_p, _jvp)


def _batch(args, dims, *, grad):
  b, r, u = args
  db, dr, du = dims
  size = compat.batch_size(args, dims)
  b = compat.batch_axis_to_front(b, db, size)
  if not compat.is_mapped(dr) and r.ndim == 0:
    pass  # still one radius for every point
  else:
    r = compat.batch_axis_to_front(r, dr, size)
    if r.shape != b.shape:  # a batched scalar radius: one per batch element
      r = jnp.broadcast_to(r.reshape((size,) + (1,) * (b.ndim - 1)), b.shape)
  if not compat.is_mapped(du):
    # u's leading axes must stay a prefix of the (now batched) point shape.
    u = jnp.broadcast_to(u, (size,) + u.shape)
  else:
    u = compat.batch_axis_to_front(u, du, size)
  outs = limbdark_p.bind(b, r, u, grad=grad)
  return outs, (0,) * len(outs)


compat.register_batching(limbdark_p, _batch)
