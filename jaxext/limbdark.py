"""Flux of a limb-darkened star occulted by an opaque disk, as a JAX primitive.

The star has unit radius; the occultor (a planet, say) has radius `r` and its centre lies at
projected distance `b` from the star's centre. The limb darkening law is the polynomial
    I(mu) / I(1) = 1 - sum_{j=1..n} u_j (1 - mu)^j,
of any order n <= 16 (quadratic: u = (u1, u2)). The result is the visible flux divided by the
unocculted flux, computed analytically (closed forms and recurrences for the elliptic-integral
terms; see jaxext/kernels/limbdark.h), to ~1e-15 absolute in float64. First and second derivatives
in b, r and u are analytic too (jax.grad, jax.hessian, forward or reverse mode in any
combination); third derivatives are not implemented.

The primitive `limbdark_p` is defined as jaxlib defines its LAPACK/cuSOLVER primitives:

* operands b[S], r[S] or r[] (shared radius), same dtype, and u[L + (n,)] where L is a leading
  prefix of S
  (point i of the row-major flattening uses row i // (size(S) / size(L)) of u);
* parameter `grad`: False (0) -> (flux[S],); True (1) -> (flux, dflux/db, dflux/dr,
  dflux/du[S + (n,)]); 2 -> those four, then d2flux/db2, d2flux/db dr, d2flux/dr2 [S] and
  d2flux/db du, d2flux/dr du [S + (n,)]; all computed analytically by the kernel;
* abstract evaluation, one lowering per platform family
  (`jaxext_limbdark[_grad|_hess]_<f32|f64>`);
* a JVP of each form that calls the next one and contracts its derivatives with the tangents
  (reverse mode follows by transposition). The block d2flux/du2 needs no kernel output: the flux
  is a ratio of two expressions linear in u, so d2F/du_j du_k = (Q_j dF/du_k + Q_k dF/du_j) / F0
  with Q_j = 2 pi / ((j + 1)(j + 2)) and F0 = pi - sum_j u_j Q_j the unocculted flux. The `grad=2`
  form has no JVP (third derivatives raise NotImplementedError);
* a batching rule (batch dimensions moved to the front; u broadcast where needed).

Out of the domain (b < 0, r <= 0, NaN) every output is NaN.
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

__all__ = ["MAX_ORDER", "limb_dark_flux", "limbdark_p", "quadratic_limb_dark_flux"]

MAX_ORDER = 16  # jaxext::limbdark::kMaxOrder

limbdark_p = compat.Primitive("jaxext_limbdark")
limbdark_p.multiple_results = True


def limb_dark_flux(b: ArrayLike, r: ArrayLike, u: ArrayLike) -> jax.Array:
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
    dtype = np.dtype(np.float32)
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


def quadratic_limb_dark_flux(b: ArrayLike, r: ArrayLike, u1: ArrayLike,
                             u2: ArrayLike) -> jax.Array:
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
  if not kernel_float(b.dtype):
    raise TypeError(f"limbdark_p supports float32 and float64; got {b.dtype}")
  if u.ndim < 1 or u.shape[-1] > MAX_ORDER:
    raise TypeError(f"limbdark_p: u must be [..., n] with n <= {MAX_ORDER}; got {list(u.shape)}")
  lead = u.shape[:-1]
  if tuple(b.shape[:len(lead)]) != tuple(lead):
    raise TypeError(f"limbdark_p: u's leading axes {list(lead)} must be a prefix of b's shape "
                    f"{list(b.shape)}")
  if grad not in (0, 1, 2):
    raise TypeError(f"limbdark_p: grad must be False, True or 2; got {grad!r}")
  return _result_avals(b.shape, b.dtype, u.shape[-1], grad, jax.core.ShapedArray)


def _result_avals(shape, dtype, order, grad, make):
  """The results of the `grad` form: `make(shape, dtype)` for each."""
  out = make(shape, dtype)
  if not grad:
    return (out,)
  coef = make(tuple(shape) + (order,), dtype)
  if grad == 1:
    return (out, out, out, coef)
  return (out, out, out, coef, out, out, out, coef, coef)


limbdark_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(limbdark_p)


def _target_name(dtype, grad: int) -> str:
  suffix = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}[np.dtype(dtype)]
  return ("jaxext_limbdark_", "jaxext_limbdark_grad_", "jaxext_limbdark_hess_")[grad] + suffix


def _lowering(ctx, b, r, u, *, grad, platform):
  _ffi.require(platform, "jaxext.limb_dark_flux")
  def like(b, r, u):
    return _result_avals(b.shape, b.dtype, u.shape[-1], grad, jax.ShapeDtypeStruct)

  return _sharding.lower(ctx, (b, r, u),
                         _sharding.ffi_per_shard(_target_name(ctx.avals_in[0].dtype, grad), like),
                         *limbdark_p.factors(*ctx.avals_in, grad=grad))


def _factors(b, r, u, *, grad):
  """Split along the points' axes (b, r, the outputs; u along the prefix it has), never along the
  coefficients."""
  pts = _sharding.elementwise(b.ndim)
  coef = ("_coef",)
  operands = [pts, pts if r.ndim else (), pts[:u.ndim - 1] + coef]
  results = [pts + coef if len(a.shape) > b.ndim else pts
             for a in _result_avals(b.shape, b.dtype, u.shape[-1], grad, jax.ShapeDtypeStruct)]
  return operands, results


_sharding.def_factors(limbdark_p, _factors)


compat.register_lowering(limbdark_p, functools.partial(_lowering, platform="cpu"), "cpu",
                         partitioned=True)
compat.register_lowering(limbdark_p, functools.partial(_lowering, platform="CUDA"), "cuda",
                         partitioned=True)


def _jvp(primals, tangents, *, grad):
  if grad == 2:
    raise NotImplementedError(
        "jaxext.limb_dark_flux: third derivatives are not implemented (the kernel provides "
        "exact first and second derivatives)")
  b, r, u = primals
  db, dr, du = tangents
  order = u.shape[-1]
  lead = u.shape[:-1]
  # u's leading axes are a prefix of the points' shape: the same arrays, shaped to broadcast
  # against the points (`per_point`) or against the points and the coefficients (`per_coef`).
  per_point = lambda x: x.reshape(lead + (1,) * (b.ndim - len(lead)))
  per_coef = lambda x: x.reshape(lead + (1,) * (b.ndim - len(lead)) + (order,))
  zero_b, zero_r, zero_u = (compat.is_zero_tangent(t) for t in (db, dr, du))

  def contract(dx_db, dx_dr, dx_du):
    """The tangent of a per-point output x from its derivatives (dx_du of shape S + (n,))."""
    out = jnp.zeros_like(dx_db)
    if not zero_b:
      out = out + dx_db * db
    if not zero_r:
      out = out + dx_dr * dr
    if not zero_u:
      out = out + jnp.sum(dx_du * per_coef(du), axis=-1)
    return out

  if not grad:
    flux, dfdb, dfdr, dfdu = limbdark_p.bind(b, r, u, grad=True)
    return (flux,), (contract(dfdb, dfdr, dfdu),)
  outs = limbdark_p.bind(b, r, u, grad=2)
  flux, dfdb, dfdr, dfdu, hbb, hbr, hrr, hbu, hru = outs
  t_flux = contract(dfdb, dfdr, dfdu)
  t_dfdb = contract(hbb, hbr, hbu)
  t_dfdr = contract(hbr, hrr, hru)
  # d(dF/du_j) = d2F/du_j db db + d2F/du_j dr dr + sum_k d2F/du_j du_k du_k, the last from
  # d2F/du_j du_k = (Q_j dF/du_k + Q_k dF/du_j) / F0.
  t_dfdu = jnp.zeros_like(dfdu)
  if not zero_b:
    t_dfdu = t_dfdu + hbu * jnp.expand_dims(db, -1)
  if not zero_r:
    t_dfdu = t_dfdu + hru * jnp.expand_dims(dr, -1)
  if not zero_u and order:
    j = np.arange(1, order + 1)
    q = jnp.asarray(2 * np.pi / ((j + 1) * (j + 2)), dfdu.dtype)
    total = np.pi - u @ q  # F0, the unocculted flux
    fu_du = jnp.sum(dfdu * per_coef(du), axis=-1, keepdims=True)
    q_du = per_point(du @ q)[..., None]
    t_dfdu = t_dfdu + (q * fu_du + dfdu * q_du) / per_point(total)[..., None]
  return outs[:4], (t_flux, t_dfdb, t_dfdr, t_dfdu)


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
