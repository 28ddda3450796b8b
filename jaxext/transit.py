"""Transit light curves: one fused kernel from times to flux (orbit, Kepler, occultation).

    flux = jaxext.transit_light_curve(t, period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1,
                                      u=(0.4, 0.25), ecc=0.1, omega=0.5, texp=0.02)

Conventions (those of batman and jaxoplanet): the observer looks down the +z axis; the planet
transits (passes in front of the star) at time t0, when its true anomaly is f = pi/2 - omega; the
impact parameter is the sky-projected distance at that moment,
    impact = a cos(i) (1 - e^2) / (1 + e sin(omega)),
in units of the stellar radius, as is the semi-major axis a. The planet is dark: only transits
(planet in front, z > 0) dim the star; secondary eclipses are not modelled.

Every argument may be a JAX value: the model is differentiable in all of them (jit, grad, vmap,
hessian). Parameters broadcast against `t` (a period of shape (W, 1) with t of shape (T,) gives W
light curves of T points in one kernel call).

The primitive `transit_p` is defined as jaxlib defines its primitives:

* operands t[S], q[L + (10,)] and u[L + (n,)] with L a leading prefix of S: one row of kernel
  parameters q = (n, t0, m_tr, a, cos_i, ecc, sin_w, cos_w, r, texp) (jaxext/kernels/transit.h;
  `_kernel_params` maps the public parameters onto them) and of limb-darkening coefficients per
  light curve; parameter `oversample` (sub-exposures per point);
* parameter `grad`: False -> (flux[S],); True -> (flux, dflux/dq[S + (10,)], dflux/du[S + (n,)]),
  exact derivatives computed by the same kernel pass;
* abstract evaluation, one lowering per platform (`jaxext_transit[_grad]_<f32|f64>`), sharded
  along the points;
* first derivatives from the kernel in three forms, none writing a per-point array of
  derivatives unless asked: `transit_lin_p` (the JVP: the flux's tangent), its transpose
  `transit_vjp_p` (cotangent sums per light curve, in fixed blocks: deterministic), and
  `grad=True` (per-point derivatives; used when only the tangents or cotangents are batched, as
  in jacfwd/jacrev, so that the kernel runs once for all of them);
* second derivatives (`jax.hessian`): the JVPs of those forms differentiate the same model written
  with `jaxext.kepler` and `jaxext.limb_dark_flux` (`_unfused_flux`), whose own derivatives are
  kernels too;
* batching rules (batch axes moved to the front; parameters broadcast where needed).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand, kernel_float, static_int
from jaxext.kepler import kepler
from jaxext.limbdark import MAX_ORDER, limb_dark_flux

__all__ = ["sky_separation", "transit_light_curve", "transit_p"]

# Columns of the kernel parameters q (jaxext::transit::Param).
N, T0, MTR, A, COS_I, ECC, SIN_W, COS_W, R, TEXP = range(10)
NUM_PARAMS = 10

transit_p = compat.Primitive("jaxext_transit")
transit_p.multiple_results = True
# Forward and reverse mode of the same kernel, with nothing per point but the tangent (or the
# cotangent of t): (t, q, u, tt, tq, tu) -> tangent[S]; (t, q, u, ct) -> (ct_t, ct_q, ct_u).
transit_lin_p = compat.Primitive("jaxext_transit_lin")
transit_lin_p.multiple_results = True
transit_vjp_p = compat.Primitive("jaxext_transit_vjp")
transit_vjp_p.multiple_results = True
# Points per block of the reverse-mode kernel's partial sums (summed in order: deterministic).
VJP_BLOCK = 4096
# Light curves of at least this many sub-exposures (points x oversample) get the CPU value
# kernel's occultation from series in b built once per call (see _uses_flux_series).
FLUX_SERIES_MIN_POINTS = 4096


def _safe_sqrt(x):
  positive = x > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1)), 0)


def sky_separation(t: ArrayLike, *, period: ArrayLike, t0: ArrayLike, a: ArrayLike,
                   impact: ArrayLike | None = None, inclination: ArrayLike | None = None,
                   ecc: ArrayLike = 0.0, omega: ArrayLike = 0.0) -> tuple[jax.Array, jax.Array]:
  """Sky-projected planet-star distance (stellar radii) and whether the planet is in front.

  Give exactly one of `impact` (impact parameter) and `inclination` (radians).
  Returns (separation, in_front), each of the broadcast shape of the inputs. Out of the domain
  (as transit_light_curve's: ecc outside [0, 1), a or period not positive, a non-finite value)
  the separation is NaN and in_front False.
  """
  if (impact is None) == (inclination is None):
    raise ValueError("give exactly one of impact and inclination")
  t = float_operand(t, "t")
  period = float_operand(period, "period")
  t0 = float_operand(t0, "t0")
  a = float_operand(a, "a")
  ecc = float_operand(ecc, "ecc")
  omega = float_operand(omega, "omega")
  sin_w, cos_w = jnp.sin(omega), jnp.cos(omega)
  if inclination is not None:
    cos_i = jnp.cos(float_operand(inclination, "inclination"))
  else:
    cos_i = float_operand(impact, "impact") * (1 + ecc * sin_w) / (a * (1 - ecc**2))
  sin_i = jnp.sqrt(jnp.maximum(1 - cos_i**2, 0))

  # Time of periastron from the time of transit: f = pi/2 - omega at t0.
  f_tr = 0.5 * jnp.pi - omega
  e_tr = 2 * jnp.arctan2(jnp.sqrt(1 - ecc) * jnp.sin(0.5 * f_tr),
                         jnp.sqrt(1 + ecc) * jnp.cos(0.5 * f_tr))
  m_tr = e_tr - ecc * jnp.sin(e_tr)
  mean_anomaly = 2 * jnp.pi * (t - t0) / period + m_tr

  sin_e, cos_e = kepler(mean_anomaly, ecc)
  denom = 1 - ecc * cos_e
  cos_f = (cos_e - ecc) / denom
  sin_f = jnp.sqrt(1 - ecc**2) * sin_e / denom
  dist = a * denom
  # Angle from the ascending node: omega + f.
  sin_wf = sin_w * cos_f + cos_w * sin_f
  cos_wf = cos_w * cos_f - sin_w * sin_f
  x = -dist * cos_wf
  y = -dist * sin_wf * cos_i
  z = dist * sin_wf * sin_i
  valid = (ecc >= 0) & (ecc < 1) & (a > 0) & (period > 0)
  for v in (t, period, t0, a, ecc, omega, cos_i):
    valid = valid & jnp.isfinite(v)
  return jnp.where(valid, _safe_sqrt(x * x + y * y), jnp.nan), valid & (z > 0)


def _cos_inclination(a, ecc, sin_w, impact, inclination):
  if inclination is not None:
    return jnp.cos(inclination)
  return impact * (1 + ecc * sin_w) / (a * (1 - ecc**2))


def _transit_mean_anomaly(ecc, omega):
  """Mean anomaly at mid-transit, where the true anomaly is pi/2 - omega."""
  f_tr = 0.5 * jnp.pi - omega
  e_tr = 2 * jnp.arctan2(jnp.sqrt(1 - ecc) * jnp.sin(0.5 * f_tr),
                         jnp.sqrt(1 + ecc) * jnp.cos(0.5 * f_tr))
  return e_tr - ecc * jnp.sin(e_tr)


def _kernel_params(*, period, t0, a, r, impact, inclination, ecc, omega, texp):
  """The kernel parameters q (last axis) from the public ones (broadcast together)."""
  sin_w, cos_w = jnp.sin(omega), jnp.cos(omega)
  cols = [2 * jnp.pi / period, t0, _transit_mean_anomaly(ecc, omega), a,
          _cos_inclination(a, ecc, sin_w, impact, inclination), ecc, sin_w, cos_w, r, texp]
  shape = jnp.broadcast_shapes(*(jnp.shape(c) for c in cols))
  cols = _sharding.whole(*cols)  # (a few numbers per light curve; explicit sharding: one split)
  return jnp.stack([jnp.broadcast_to(c, shape) for c in cols], axis=-1)


def transit_light_curve(t: ArrayLike, *, period: ArrayLike, t0: ArrayLike, a: ArrayLike,
                        r: ArrayLike, u: ArrayLike, impact: ArrayLike | None = None,
                        inclination: ArrayLike | None = None, ecc: ArrayLike = 0.0,
                        omega: ArrayLike = 0.0, texp: ArrayLike | None = None,
                        oversample: int = 7) -> jax.Array:
  """Relative flux of a star with polynomial limb darkening transited by a dark planet.

  Args:
    t: observation times (any shape).
    period, t0: orbital period and time of mid-transit (same unit as t).
    a: semi-major axis in stellar radii.
    r: planet radius in stellar radii.
    u: limb-darkening coefficients (u_1..u_n) along the last axis, n <= 16, e.g. (u1, u2) for the
      quadratic law; leading axes broadcast like the other parameters (one law per light curve).
    impact / inclination: exactly one of them (inclination in radians).
    ecc, omega: eccentricity (0 <= ecc < 1) and argument of periastron (radians).
    texp: exposure time; if given, each flux is the mean over the exposure, computed with
      `oversample` (odd) evenly spaced sub-exposure midpoints.

  Every parameter may be an array broadcasting against t (and u[..., 0]): the result has the
  broadcast shape. One fused kernel computes the flux (and, under differentiation, its exact
  derivatives); parameters that vary along leading axes only (one value per light curve, e.g.
  period of shape (W, 1) and t of shape (T,)) are computed once per light curve.

  Returns:
    The flux at each time (1 out of transit). NaN for every time of a light curve whose parameters
    are out of the domain (ecc outside [0, 1), a, period or r not positive, non-finite values) and
    at non-finite times.

  Raises:
    ValueError: neither or both of impact and inclination, a bad `oversample`, u with no axis or
      more than 16 coefficients, shapes that do not broadcast.
    TypeError: an argument is not a real number array (the message names it).
  """
  if (impact is None) == (inclination is None):
    raise ValueError("give exactly one of impact and inclination")
  if texp is None:
    oversample = 1
  elif isinstance(oversample, bool) or not isinstance(oversample, (int, np.integer)) or \
      oversample < 1 or oversample % 2 == 0 or oversample > 2**20:
    raise ValueError(f"oversample must be a positive odd integer (at most 2**20); got "
                     f"{oversample!r}")
  t = float_operand(t, "t")
  named: dict[str, ArrayLike | None] = dict(period=period, t0=t0, a=a, r=r, ecc=ecc,
                                            omega=omega, texp=0.0 if texp is None else texp)
  if impact is not None:
    named["impact"] = impact
  else:
    named["inclination"] = inclination
  params = {k: float_operand(v, k) for k, v in named.items()}
  u = float_operand(u, "u")
  if u.ndim < 1:
    raise ValueError("u must have at least one axis (the coefficients u_1..u_n); got a scalar")
  if u.shape[-1] > MAX_ORDER:
    raise ValueError(f"u has {u.shape[-1]} coefficients; at most {MAX_ORDER} are supported")
  dtype = jnp.result_type(t, u, *params.values())
  try:
    shape = jnp.broadcast_shapes(t.shape, u.shape[:-1], *(v.shape for v in params.values()))
  except ValueError as err:
    shapes = ", ".join(f"{k} {v.shape}" for k, v in dict(t=t, **params).items())
    raise ValueError(f"shapes do not broadcast: {shapes}, u {u.shape} (leading axes)") from err
  params = {k: v.astype(dtype) for k, v in params.items()}
  q = _kernel_params(impact=params.pop("impact", None),
                     inclination=params.pop("inclination", None), **params)
  # The parameters' axes, right-aligned against `shape`: keep the leading axes up to the last one
  # along which q or u varies (one row per light curve), broadcast those.
  def lead(x):
    return (1,) * (len(shape) - (x.ndim - 1)) + x.shape[:-1]
  k = max((i + 1 for x in (q, u) for i, d in enumerate(lead(x)) if d != 1), default=0)
  rows = shape[:k]
  q = jnp.broadcast_to(q.reshape(lead(q)[:k] + (NUM_PARAMS,)), rows + (NUM_PARAMS,))
  u = u.astype(dtype)
  u = jnp.broadcast_to(u.reshape(lead(u)[:k] + (u.shape[-1],)), rows + (u.shape[-1],))
  t = jnp.broadcast_to(t.astype(dtype), shape)
  (flux,) = transit_p.bind(t, q, u, grad=False, oversample=int(oversample))
  return flux


# ---------------------------------------------------------------------------------------------
# The primitive.


def _abstract_eval(t, q, u, *, grad, oversample):
  if not kernel_float(t.dtype):
    raise TypeError(f"transit_p supports float32 and float64; got {t.dtype}")
  if q.dtype != t.dtype or u.dtype != t.dtype:
    raise TypeError(f"transit_p expects t, q, u of one dtype; got {t.dtype}, {q.dtype}, {u.dtype}")
  if q.ndim < 1 or q.shape[-1] != NUM_PARAMS or u.ndim != q.ndim or u.shape[:-1] != q.shape[:-1]:
    raise TypeError(f"transit_p expects q[L..., {NUM_PARAMS}] and u[L..., n]; got "
                    f"{list(q.shape)} and {list(u.shape)}")
  if u.shape[-1] > MAX_ORDER:
    raise TypeError(f"transit_p: at most {MAX_ORDER} limb-darkening coefficients")
  rows = q.shape[:-1]
  if tuple(t.shape[:len(rows)]) != tuple(rows):
    raise TypeError(f"transit_p: the parameters' leading axes {list(rows)} must be a prefix of "
                    f"t's shape {list(t.shape)}")
  if not static_int(oversample) or not 1 <= oversample <= 2**20:
    raise TypeError(f"transit_p: oversample must be an int in [1, 2**20]; got {oversample!r}")
  out = jax.core.ShapedArray(t.shape, t.dtype)
  if not grad:
    return (out,)
  return (out, jax.core.ShapedArray(t.shape + (NUM_PARAMS,), t.dtype),
          jax.core.ShapedArray(t.shape + (u.shape[-1],), t.dtype))


transit_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(transit_p)


def _check_platform(platform):
  _ffi.require(platform, "jaxext.transit_light_curve")


def _target_name(kind: str, dtype) -> str:
  """jaxext_transit[_<kind>]_<f32|f64>."""
  suffix = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}[np.dtype(dtype)]
  return "_".join(["jaxext_transit"] + ([kind] if kind else []) + [suffix])


def _lowering(ctx, t, q, u, *, grad, oversample, platform):
  _check_platform(platform)
  aval_t, aval_q, _ = ctx.avals_in

  def like(t, q, u):
    out = jax.ShapeDtypeStruct(t.shape, t.dtype)
    if not grad:
      return (out,)
    return (out, jax.ShapeDtypeStruct(t.shape + (NUM_PARAMS,), t.dtype),
            jax.ShapeDtypeStruct(t.shape + (u.shape[-1],), t.dtype))

  attrs = dict(oversample=np.int64(oversample))
  if not grad:
    # From the global shapes (these avals), so that every shard of a sharded call decides as the
    # unsharded call does: the same flux to the last bit.
    attrs["flux_series"] = np.int64(_uses_flux_series(aval_t.shape, aval_q.ndim - 1, oversample))
  return _sharding.lower(
      ctx, (t, q, u),
      _sharding.ffi_per_shard(_target_name("grad" if grad else "", aval_t.dtype), like, **attrs),
      *transit_p.factors(*ctx.avals_in, grad=grad))


def _points_and_rows(t, q):
  """Factors of the times (every axis splits) and of the light curves' rows (q's leading axes)."""
  pts = _sharding.elementwise(t.ndim)
  return pts, pts[:q.ndim - 1]


def _factors(t, q, u, *, grad, **_):
  pts, rows = _points_and_rows(t, q)
  operands = [pts, rows + ("_q",), rows + ("_coef",)]
  return operands, [pts] if not grad else [pts, pts + ("_q",), pts + ("_coef",)]


def _lin_factors(t, q, u, *tangents, **_):
  pts, rows = _points_and_rows(t, q)
  return [pts, rows + ("_q",), rows + ("_coef",)] * 2, [pts]


def _vjp_factors(t, q, u, ct, **_):
  # The parameters' cotangents sum over the points of each light curve (see _vjp_lowering).
  pts, rows = _points_and_rows(t, q)
  operands = [pts, rows + ("_q",), rows + ("_coef",)]
  return operands + [pts], operands


_sharding.def_factors(transit_p, _factors)


def _uses_flux_series(t_shape, num_row_axes, oversample):
  """Whether the CPU value kernel takes the occultation from per-light-curve Chebyshev series in
  b (jaxext/kernels/transit.h, FluxSeries): for light curves of at least FLUX_SERIES_MIN_POINTS
  sub-exposures, where building the series' pieces costs less than it saves. Both ways agree to
  ~1e-15 (tests/transit_test.py); the choice depends on the shapes only (the global ones under
  jit's sharding; inside a user's shard_map, the per-shard ones). The derivative kernels always
  take the exact occultation: their derivatives are those of the exact model, and the flux they
  return may differ from this one at that ~1e-15 level."""
  points = math.prod(t_shape[num_row_axes:]) * oversample
  if jax.export.is_symbolic_dim(points):  # a shape-polymorphic export: any size, so exact
    return False
  return points >= FLUX_SERIES_MIN_POINTS



def _per_point(x, ndim):
  """A per-light-curve array x[L + (c,)] shaped to broadcast against per-point [S + (c,)]."""
  return x.reshape(x.shape[:-1] + (1,) * (ndim - (x.ndim - 1)) + x.shape[-1:])


def _unfused_flux(t, q, u, oversample):
  """The kernel's model written with jnp, jaxext.kepler and jaxext.limb_dark_flux (differentiable
  to the order those are); used for second derivatives."""
  qp = _per_point(q, t.ndim)[..., None, :]  # S + (1, 10): sub-exposures on the new axis
  col = lambda k: qp[..., k]
  offsets = (jnp.arange(oversample, dtype=t.dtype) + 0.5) / oversample - 0.5
  dt = t[..., None] + col(TEXP) * offsets - col(T0)
  mean_anomaly = col(MTR) + col(N) * dt
  e = col(ECC)
  sin_e, cos_e = kepler(mean_anomaly, jnp.broadcast_to(e, mean_anomaly.shape))
  x_orb = cos_e - e
  y_orb = jnp.sqrt((1 - e) * (1 + e)) * sin_e
  uu = col(COS_W) * x_orb - col(SIN_W) * y_orb
  vv = col(SIN_W) * x_orb + col(COS_W) * y_orb
  x = -col(A) * uu
  y = -col(A) * col(COS_I) * vv
  sep = _safe_sqrt(x * x + y * y)
  front = (vv > 0) & (jnp.abs(col(COS_I)) < 1)
  flux = jnp.where(front, limb_dark_flux(sep, col(R), _per_point(u, t.ndim)[..., None, :]), 1)
  return jnp.mean(flux, axis=-1)


def _unfused_with_derivatives(t, q, u, oversample):
  """(flux, dflux/dq, dflux/du) of `_unfused_flux`, per point: each point depends on its own row
  only, so a tangent of ones along column k of every row gives every point's partial in k."""
  fn = lambda q, u: _unfused_flux(t, q, u, oversample)

  def partials(tangents_q, tangents_u):
    return jax.jvp(fn, (q, u), (tangents_q, tangents_u))[1]

  basis = lambda k, x: jnp.broadcast_to(
      jnp.eye(k, dtype=x.dtype).reshape((k,) + (1,) * (x.ndim - 1) + (k,)), (k,) + x.shape)
  eye_q = basis(NUM_PARAMS, q)
  n = u.shape[-1]
  eye_u = basis(n, u)
  dq = jax.vmap(partials, in_axes=(0, None))(eye_q, jnp.zeros_like(u))
  du = jax.vmap(partials, in_axes=(None, 0))(jnp.zeros_like(q), eye_u)
  return fn(q, u), jnp.moveaxis(dq, 0, -1), jnp.moveaxis(du, 0, -1)


def _unfused_jvp(fn, primals, tangents, oversample):
  """The JVP of a derivative form, by differentiating its unfused counterpart `fn`."""
  tangents = tuple(compat.instantiate_zeros(x) for x in tangents)
  return jax.jvp(functools.partial(fn, oversample=oversample), primals, tangents)


def _jvp(primals, tangents, *, grad, oversample):
  t, q, u = primals
  if grad:
    return _unfused_jvp(_unfused_with_derivatives, primals, tangents, oversample)
  (flux,) = transit_p.bind(t, q, u, grad=False, oversample=oversample)
  tangents = tuple(compat.instantiate_zeros(x) for x in tangents)
  (out,) = transit_lin_p.bind(t, q, u, *tangents, oversample=oversample)
  return (flux,), (out,)


compat.register_jvp(transit_p, _jvp)


def _broadcast_batch(args, dims):
  size = compat.batch_size(args, dims)
  return [compat.batch_axis_to_front(x, d, size) if compat.is_mapped(d)
          else jnp.broadcast_to(x, (size,) + x.shape) for x, d in zip(args, dims)]


def _batch(args, dims, *, grad, oversample):
  outs = transit_p.bind(*_broadcast_batch(args, dims), grad=grad, oversample=oversample)
  return outs, (0,) * len(outs)


compat.register_batching(transit_p, _batch)


# ---------------------------------------------------------------------------------------------
# Forward mode (transit_lin_p) and reverse mode (transit_vjp_p).


def _lin_abstract_eval(t, q, u, tt, tq, tu, *, oversample):
  _abstract_eval(t, q, u, grad=False, oversample=oversample)
  if (tt.shape, tq.shape, tu.shape) != (t.shape, q.shape, u.shape) or \
      {tt.dtype, tq.dtype, tu.dtype} != {t.dtype}:
    raise TypeError("transit_lin_p: tangents must have the shapes and dtype of t, q and u")
  return (jax.core.ShapedArray(t.shape, t.dtype),)


def _vjp_abstract_eval(t, q, u, ct, *, oversample):
  _abstract_eval(t, q, u, grad=False, oversample=oversample)
  if ct.shape != t.shape or ct.dtype != t.dtype:
    raise TypeError("transit_vjp_p: the cotangent must have the shape and dtype of t")
  return (jax.core.ShapedArray(t.shape, t.dtype), jax.core.ShapedArray(q.shape, q.dtype),
          jax.core.ShapedArray(u.shape, u.dtype))


transit_lin_p.def_abstract_eval(_lin_abstract_eval)
transit_vjp_p.def_abstract_eval(_vjp_abstract_eval)
_eager.def_jit_impl(transit_lin_p)
_eager.def_jit_impl(transit_vjp_p)


def _lin_lowering(ctx, *args, oversample, platform):
  _check_platform(platform)
  like = lambda t, *_: (jax.ShapeDtypeStruct(t.shape, t.dtype),)
  return _sharding.lower(
      ctx, args,
      _sharding.ffi_per_shard(_target_name("lin", ctx.avals_in[0].dtype), like,
                              oversample=np.int64(oversample)),
      *transit_lin_p.factors(*ctx.avals_in))


def _vjp_lowering(ctx, t, q, u, ct, *, oversample, platform):
  _check_platform(platform)
  pts, rows = _points_and_rows(*ctx.avals_in[:2])
  nrows = len(rows)

  def per_shard(t, q, u, ct):
    per_row = math.prod(t.shape[nrows:])  # (symbolic under a shape-polymorphic jax.export)
    blocks = -(-per_row // VJP_BLOCK)  # (none for no points; any for no rows: no sums either way)
    lead = t.shape[:nrows]
    ct_t, sq, su = jax.ffi.ffi_call(
        _target_name("vjp", t.dtype),
        (jax.ShapeDtypeStruct(t.shape, t.dtype),
         jax.ShapeDtypeStruct(lead + (blocks, NUM_PARAMS), t.dtype),
         jax.ShapeDtypeStruct(lead + (blocks, u.shape[-1]), t.dtype)))(
             t, q, u, ct, oversample=np.int64(oversample), block=np.int64(VJP_BLOCK))
    return ct_t, jnp.sum(sq, axis=-2), jnp.sum(su, axis=-2)

  # The sums run over the points of each light curve: where those are split across devices,
  # each device sums its own and the results are added across the mesh (see _sharding.lower).
  return _sharding.lower(ctx, (t, q, u, ct), per_shard, *transit_vjp_p.factors(*ctx.avals_in),
                         sums={1: pts[nrows:], 2: pts[nrows:]})


_sharding.def_factors(transit_lin_p, _lin_factors)
_sharding.def_factors(transit_vjp_p, _vjp_factors)


for _platform, _name in (("cpu", "cpu"), ("CUDA", "cuda")):
  compat.register_lowering(transit_p, functools.partial(_lowering, platform=_platform), _name,
                           partitioned=True)
  compat.register_lowering(transit_lin_p, functools.partial(_lin_lowering, platform=_platform),
                           _name, partitioned=True)
  compat.register_lowering(transit_vjp_p, functools.partial(_vjp_lowering, platform=_platform),
                           _name, partitioned=True)


def _unfused_lin(t, q, u, tt, tq, tu, *, oversample):
  fn = lambda t, q, u: _unfused_flux(t, q, u, oversample)
  return (jax.jvp(fn, (t, q, u), (tt, tq, tu))[1],)


def _unfused_vjp(t, q, u, ct, *, oversample):
  return jax.vjp(lambda t, q, u: _unfused_flux(t, q, u, oversample), t, q, u)[1](ct)


compat.register_jvp(transit_lin_p, lambda primals, tangents, *, oversample: _unfused_jvp(
    _unfused_lin, primals, tangents, oversample))
compat.register_jvp(transit_vjp_p, lambda primals, tangents, *, oversample: _unfused_jvp(
    _unfused_vjp, primals, tangents, oversample))


def _lin_transpose(cts, t, q, u, tt, tq, tu, *, oversample):
  (ct,) = cts
  if any(compat.is_undefined_primal(x) for x in (t, q, u)):
    raise NotImplementedError("transit_lin_p is linear in its tangents only")
  ct = compat.instantiate_zeros(ct)
  ct_t, ct_q, ct_u = transit_vjp_p.bind(t, q, u, ct, oversample=oversample)
  pick = lambda x, c: c if compat.is_undefined_primal(x) else None
  return None, None, None, pick(tt, ct_t), pick(tq, ct_q), pick(tu, ct_u)


def _vjp_transpose(cts, t, q, u, ct, *, oversample):
  if any(compat.is_undefined_primal(x) for x in (t, q, u)):
    raise NotImplementedError("transit_vjp_p is linear in its cotangent only")
  cts = tuple(compat.instantiate_zeros(c) for c in cts)
  (out,) = transit_lin_p.bind(t, q, u, *cts, oversample=oversample)
  return None, None, None, out


compat.register_transpose(transit_lin_p, _lin_transpose)
compat.register_transpose(transit_vjp_p, _vjp_transpose)


def _only_linear_batched(dims):
  return not any(compat.is_mapped(d) for d in dims[:3])


def _lin_batch(args, dims, *, oversample):
  if _only_linear_batched(dims):
    # Many tangents of one light-curve set (jacfwd): per-point derivatives once, contracted with
    # each tangent.
    t, q, u = args[:3]
    size = compat.batch_size(args, dims)
    tt, tq, tu = (compat.batch_axis_to_front(x, d, size) if compat.is_mapped(d) else x[None]
                  for x, d in zip(args[3:], dims[3:]))
    _, dq, du = transit_p.bind(t, q, u, grad=True, oversample=oversample)
    out = (-dq[..., T0] * tt + jnp.sum(dq * _per_point(tq, t.ndim + 1), axis=-1)
           + jnp.sum(du * _per_point(tu, t.ndim + 1), axis=-1))
    return (jnp.broadcast_to(out, (size,) + t.shape),), (0,)
  outs = transit_lin_p.bind(*_broadcast_batch(args, dims), oversample=oversample)
  return outs, (0,)


def _vjp_batch(args, dims, *, oversample):
  if _only_linear_batched(dims):
    # Many cotangents of one light-curve set (jacrev): per-point derivatives once.
    t, q, u, ct = args
    ct = compat.batch_axis_to_front(ct, dims[3], ct.shape[dims[3]])
    _, dq, du = transit_p.bind(t, q, u, grad=True, oversample=oversample)
    # Contract over the points of each light curve (no batch x points x params intermediate).
    rows = "abcdefgh"[:q.ndim - 1]
    pts = "ijklmnop"[:t.ndim - len(rows)]
    spec = f"z{rows}{pts},{rows}{pts}y->z{rows}y"
    ct_q = jnp.einsum(spec, ct, dq, precision=jax.lax.Precision.HIGHEST)
    ct_u = jnp.einsum(spec, ct, du, precision=jax.lax.Precision.HIGHEST)
    return (-ct * dq[..., T0], ct_q, ct_u), (0, 0, 0)
  outs = transit_vjp_p.bind(*_broadcast_batch(args, dims), oversample=oversample)
  return outs, (0, 0, 0)


compat.register_batching(transit_lin_p, _lin_batch)
compat.register_batching(transit_vjp_p, _vjp_batch)
