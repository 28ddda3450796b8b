"""Tests of jaxext.limb_dark_flux against an independent high-precision reference.

Reference: tests/limbdark_reference.py, the occulted flux integrated over circles centred on the
star by mpmath quadrature at 30 digits. The kernel uses a different decomposition (Green's theorem
on the occultor's boundary, elliptic integrals, recurrences), so agreement is a real check.

Contract (issue #5): float64 within 1e-12 absolute in every geometric regime, float32 within 1e-6;
exact first derivatives in b, r and every coefficient. Issue #15: exact second derivatives (within
1e-13 of the largest entry of the Hessian, against finite differences of 50-digit quadratures of
the occulted moments), under every composition of forward and reverse mode, jit and vmap.
"""

import functools
import math

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402  (after enabling x64)
from tests.limbdark_reference import relative_flux, relative_flux_mp  # noqa: E402


@functools.lru_cache(maxsize=None)
def ref_flux(b: float, r: float, u: tuple) -> float:
  return relative_flux(b, r, u)


def ref_grad(b, r, u, h=1e-7):
  """Central differences of the 30-digit reference (truncation error ~h^2 ~ 1e-14)."""
  out = []
  with mp.workdps(30):
    for k in range(2 + len(u)):
      args_p = [mp.mpf(b), mp.mpf(r)] + [mp.mpf(x) for x in u]
      args_m = list(args_p)
      args_p[k] += h
      args_m[k] -= h
      fp = relative_flux_mp(args_p[0], args_p[1], args_p[2:])
      fm = relative_flux_mp(args_m[0], args_m[1], args_m[2:])
      out.append(float((fp - fm) / (2 * h)))
  return np.array(out)


QUAD = (0.4, 0.26)
LAWS = {
    "uniform": (),
    "linear": (0.6,),
    "quadratic": QUAD,
    "quartic": (0.3, 0.2, -0.1, 0.05),
    "order8": (0.2, 0.15, 0.1, -0.05, 0.04, 0.03, -0.02, 0.01),
}

# Every geometric regime named in the issue, and the boundaries between them.
EPS = 1e-12
GEOMETRY = [
    ("no_overlap", 1.3, 0.1),
    ("external_contact", 1.1, 0.1),
    ("just_inside_external_contact", 1.1 - EPS, 0.1),
    ("ingress", 1.0, 0.1),
    ("ingress_large_planet", 0.9, 0.5),
    ("internal_contact", 0.9, 0.1),
    ("just_outside_internal_contact", 0.9 + EPS, 0.1),
    ("full_overlap", 0.5, 0.1),
    ("centre", 0.0, 0.1),
    ("b_equals_r", 0.3, 0.3),
    ("b_equals_r_half", 0.5, 0.5),
    ("b_near_r", 0.3 + 1e-9, 0.3),
    ("b_tiny", 1e-9, 0.4),
    ("r_tiny_inside", 0.5, 1e-6),
    ("r_tiny_limb", 1.0, 1e-6),
    ("r_equals_one_centre", 1e-9, 1.0),
    ("r_equals_one", 0.5, 1.0),
    ("r_above_one_partial", 1.5, 2.0),
    ("r_above_one_contact", 1.0, 2.0),
    ("r_above_one_covered", 0.5, 2.0),
    ("r_large", 10.5, 10.0),
    ("b_equals_r_large", 5.0, 5.0),
    ("r_very_large_half_covered", 1000.0, 1000.0),
]


@pytest.mark.parametrize("law", list(LAWS))
@pytest.mark.parametrize("name,b,r", GEOMETRY, ids=[g[0] for g in GEOMETRY])
def test_regimes_float64(name, b, r, law):
  u = LAWS[law]
  got = float(jaxext.limb_dark_flux(np.float64(b), np.float64(r), np.array(u, np.float64)))
  assert abs(got - ref_flux(b, r, u)) <= 1e-12, (name, law, got, ref_flux(b, r, u))


def test_random_points_float64():
  rng = np.random.default_rng(5)
  n = 60
  b = rng.uniform(0, 2.2, n)
  r = np.exp(rng.uniform(np.log(1e-3), np.log(3.0), n))
  for order in (1, 2, 3, 5, 8, 16):  # 16 = jaxext.limbdark.MAX_ORDER
    u = rng.uniform(-0.2, 0.4, order) * (1.0 if order <= 8 else 0.25)
    got = np.asarray(jaxext.limb_dark_flux(b, r, u))
    want = np.array([ref_flux(bi, ri, tuple(u)) for bi, ri in zip(b, r)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"order {order}")


@pytest.mark.parametrize("name,b,r", GEOMETRY, ids=[g[0] for g in GEOMETRY])
def test_regimes_float32(name, b, r):
  b32, r32 = np.float32(b), np.float32(r)
  got = jaxext.limb_dark_flux(b32, r32, np.array(QUAD, np.float32))
  assert got.dtype == jnp.float32
  want = ref_flux(float(b32), float(r32), tuple(float(np.float32(x)) for x in QUAD))
  assert abs(float(got) - want) <= 1e-6


def test_uniform_disk_closed_form():
  # Uniform disk: 1 - lens area / pi; the lens area from the textbook formula.
  b, r = 0.95, 0.2
  k0 = math.acos((r * r + b * b - 1) / (2 * b * r))
  k1 = math.acos((1 - r * r + b * b) / (2 * b))
  lens = r * r * k0 + k1 - 0.5 * math.sqrt(4 * b * b - (1 + b * b - r * r) ** 2)
  got = float(jaxext.limb_dark_flux(b, r, np.zeros(0)))
  assert abs(got - (1 - lens / math.pi)) < 1e-14


def test_small_planet_limit():
  # r -> 0: the deficit tends to r^2 I(mu) / (pi <I>), the local intensity over the mean.
  b, r = 0.6, 1e-4
  u1, u2 = QUAD
  mu = math.sqrt(1 - b * b)
  i_mu = 1 - u1 * (1 - mu) - u2 * (1 - mu) ** 2
  mean = 1 - u1 / 3 - u2 / 6
  got = 1 - float(jaxext.quadratic_limb_dark_flux(b, r, u1, u2))
  assert got == pytest.approx(r * r * i_mu / mean, rel=1e-7)


def test_quadratic_equals_polynomial():
  b = np.linspace(0, 1.3, 50)
  np.testing.assert_array_equal(jaxext.quadratic_limb_dark_flux(b, 0.1, *QUAD),
                                jaxext.limb_dark_flux(b, 0.1, np.array(QUAD)))


@pytest.mark.parametrize("b,r", [(0.3, 0.1), (0.95, 0.1), (1.05, 0.1), (0.2, 0.2), (1.4, 1.5),
                                 (0.0, 0.3), (0.7, 0.5)])
@pytest.mark.parametrize("law", ["linear", "quadratic", "quartic"])
def test_gradients_match_reference(b, r, law):
  u = LAWS[law]
  fn = lambda b, r, u: jaxext.limb_dark_flux(b, r, u)
  got = jax.grad(fn, argnums=(0, 1, 2))(b, r, jnp.array(u))
  got = np.concatenate([[got[0], got[1]], np.asarray(got[2])])
  if b == 0.0:  # the reference's central difference would cross b = 0; dF/db = 0 by symmetry
    want = np.concatenate([[0.0], ref_grad(1e-300, r, u)[1:]])
  else:
    want = ref_grad(b, r, u)
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)


@pytest.mark.parametrize("b,r", [(0.3, 0.1), (0.95, 0.1), (1.05, 0.12), (0.25, 0.2),
                                 (1.4, 1.5), (0.7, 0.5)])
@pytest.mark.parametrize("dtype", [np.float64])
def test_check_grads(b, r, dtype):
  u = jnp.array((0.3, 0.2, -0.1), dtype)
  check_grads(jaxext.limb_dark_flux, (dtype(b), dtype(r), u), order=1, modes=("fwd", "rev"),
              eps=1e-6)


def test_float32_gradients_close_to_float64():
  args64 = (np.float64(0.95), np.float64(0.1), jnp.array(QUAD))
  args32 = tuple(jnp.asarray(a, jnp.float32) for a in args64)
  g64 = jax.grad(jaxext.limb_dark_flux, argnums=(0, 1, 2))(*args64)
  g32 = jax.grad(jaxext.limb_dark_flux, argnums=(0, 1, 2))(*args32)
  for a, b in zip(g32, g64):
    assert a.dtype == jnp.float32
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_jit_vmap_broadcasting():
  b = jnp.linspace(0.0, 1.3, 40)
  u = jnp.array([[0.4, 0.26], [0.1, 0.5], [0.0, 0.0]])
  # Three light curves with their own laws: u of shape (3, 1, 2) against b of shape (40,).
  direct = jaxext.limb_dark_flux(b, 0.1, u[:, None, :])
  assert direct.shape == (3, 40)
  per_law = jax.vmap(lambda uu: jaxext.limb_dark_flux(b, 0.1, uu))(u)
  jitted = jax.jit(jax.vmap(jaxext.limb_dark_flux, in_axes=(None, None, 0)))(b, 0.1, u)
  for row in range(3):
    single = jaxext.limb_dark_flux(b, 0.1, u[row])
    np.testing.assert_allclose(direct[row], single, rtol=0, atol=0)
    np.testing.assert_allclose(per_law[row], single, rtol=0, atol=0)
    np.testing.assert_allclose(jitted[row], single, rtol=0, atol=0)
  # vmap over b and r with shared u, and over everything at once.
  rs = jnp.array([0.05, 0.1, 0.2])
  vm = jax.vmap(lambda rr: jaxext.limb_dark_flux(b, rr, u[0]))(rs)
  np.testing.assert_allclose(vm, jaxext.limb_dark_flux(b[None, :], rs[:, None], u[0]), atol=0)
  vm2 = jax.vmap(jaxext.limb_dark_flux)(jnp.full(3, 0.5), rs, u)
  np.testing.assert_allclose(vm2, [jaxext.limb_dark_flux(0.5, rs[i], u[i]) for i in range(3)],
                             atol=0)
  # Gradients through vmap with per-row laws.
  gu = jax.grad(lambda uu: jaxext.limb_dark_flux(b, 0.1, uu[:, None, :]).sum())(u)
  for row in range(3):
    np.testing.assert_allclose(
        gu[row], jax.grad(lambda x: jaxext.limb_dark_flux(b, 0.1, x).sum())(u[row]), rtol=1e-12)


def test_out_of_domain_gives_nan():
  b = jnp.array([0.5, -0.1, 0.5, 0.5, jnp.nan, 0.5, jnp.inf, 0.2])
  r = jnp.array([-0.1, 0.1, 0.0, jnp.nan, 0.1, jnp.inf, 0.1, 0.1])
  got = np.asarray(jaxext.limb_dark_flux(b, r, jnp.array(QUAD)))
  assert np.isnan(got[:5]).all()
  assert got[5] == 0.0  # infinite occultor hides the star
  assert got[6] == 1.0  # infinitely far away
  g = jax.grad(lambda bb: jaxext.limb_dark_flux(bb, r, jnp.array(QUAD)).sum())(b)
  assert np.isnan(np.asarray(g)[:5]).all() and np.isfinite(np.asarray(g)[5:]).all()
  got_u = jaxext.limb_dark_flux(0.5, 0.1, jnp.array([jnp.nan, 0.1]))
  assert np.isnan(float(got_u))


def test_bad_arguments():
  with pytest.raises(TypeError, match="b must be real"):
    jaxext.limb_dark_flux(1j, 0.1, QUAD)
  with pytest.raises(TypeError, match="r must be a real"):
    jaxext.limb_dark_flux(0.1, True, QUAD)
  with pytest.raises(TypeError, match="u must be a real"):
    jaxext.limb_dark_flux(0.1, 0.1, "abc")
  with pytest.raises(ValueError, match="u must have at least one axis"):
    jaxext.limb_dark_flux(0.1, 0.1, 0.3)
  with pytest.raises(ValueError, match="at most 16"):
    jaxext.limb_dark_flux(0.1, 0.1, np.zeros(17))
  with pytest.raises(ValueError, match="cannot be broadcast"):
    jaxext.limb_dark_flux(np.zeros(3), np.zeros(4), QUAD)
  with pytest.raises(ValueError, match="cannot be broadcast"):
    jaxext.limb_dark_flux(np.zeros(3), 0.1, np.zeros((4, 2)))
  with pytest.raises(ValueError, match="u1 of shape"):
    jaxext.quadratic_limb_dark_flux(0.1, 0.1, np.zeros(2), np.zeros(3))


def test_third_derivative_is_refused_clearly():
  f = lambda b: jaxext.limb_dark_flux(b, 0.1, jnp.array(QUAD))
  jax.grad(jax.grad(f))(0.5)  # second derivatives are fine
  with pytest.raises(NotImplementedError, match="third derivatives"):
    jax.grad(jax.grad(jax.grad(f)))(0.5)
  with pytest.raises(NotImplementedError, match="third derivatives"):
    jax.jacfwd(jax.hessian(lambda x: jaxext.limb_dark_flux(x[0], x[1], x[2:])))(
        jnp.array([0.5, 0.1, 0.4, 0.26]))


def test_empty_and_large_inputs():
  assert jaxext.limb_dark_flux(jnp.zeros(0), 0.1, jnp.array(QUAD)).shape == (0,)
  b = jnp.linspace(0, 1.2, 200_001)
  f = jaxext.limb_dark_flux(b, 0.1, jnp.array(QUAD))  # exercises the thread pool split
  np.testing.assert_array_equal(f[::1000], jaxext.limb_dark_flux(b[::1000], 0.1, jnp.array(QUAD)))


def test_flux_is_monotone_through_ingress():
  # Along ingress the deficit grows monotonically (a cheap global sanity check on dense input).
  b = jnp.linspace(1.1, 0.9, 20001)
  f = np.asarray(jaxext.limb_dark_flux(b, 0.1, jnp.array(QUAD)))
  assert (np.diff(f) <= 1e-15).all()


def test_vectorised_and_general_paths_agree():
  # Laws of order <= 2 run through the CPU's lane-parallel path, higher orders through the general
  # one: the same law written with a zero cubic coefficient must give the same fluxes and gradients.
  rng = np.random.default_rng(3)
  b = np.concatenate([rng.uniform(0, 2.5, 5000), [0.0, 0.9, 1.1, 0.3, 1.0, 1e-9]])
  r = np.concatenate([np.exp(rng.uniform(np.log(1e-4), np.log(2.5), 5000)),
                      [0.1, 0.1, 0.1, 0.3, 1.0, 1.0]])
  for u in ([0.4, 0.26], [0.7], []):
    u2, u3 = np.array(u), np.array(u + [0.0] * (3 - len(u)))
    np.testing.assert_allclose(jaxext.limb_dark_flux(b, r, u2), jaxext.limb_dark_flux(b, r, u3),
                               rtol=0, atol=2e-15)
    f2 = lambda bb, rr: jaxext.limb_dark_flux(bb, rr, u2).sum()
    f3 = lambda bb, rr: jaxext.limb_dark_flux(bb, rr, u3).sum()
    for g2, g3 in zip(jax.grad(f2, argnums=(0, 1))(b, r), jax.grad(f3, argnums=(0, 1))(b, r)):
      np.testing.assert_allclose(g2, g3, rtol=1e-12, atol=1e-12)
  # Sorted light-curve-like input, so that whole blocks are out of transit (skipped early) or
  # entirely inside the disk.
  x = np.linspace(-2.0, 2.0, 4001)
  blc = np.sqrt(0.09 + x * x)
  for rr in (0.1, 1.5):
    np.testing.assert_allclose(jaxext.limb_dark_flux(blc, rr, np.array(QUAD)),
                               jaxext.limb_dark_flux(blc, rr, np.array(QUAD + (0.0,))),
                               rtol=0, atol=2e-15)
  # And the lane path's tail handling: every prefix length of a block gives the same values.
  bb = np.linspace(0.0, 1.2, 23)
  full = np.asarray(jaxext.limb_dark_flux(bb, 0.1, np.array(QUAD)))
  for n in range(1, 23):
    np.testing.assert_array_equal(jaxext.limb_dark_flux(bb[:n], 0.1, np.array(QUAD)), full[:n])


def test_handler_errors_surface_as_exceptions():
  # Calling the FFI targets directly with inconsistent buffers: the handler answers with an FFI
  # error, which reaches Python as an exception (never a crash).
  out = jax.ShapeDtypeStruct((6,), np.float64)
  call = jax.ffi.ffi_call("jaxext_limbdark_f64", out)
  with pytest.raises(Exception, match="do not divide"):
    jax.block_until_ready(call(np.ones(6), np.ones(6), np.ones((4, 2))))
  with pytest.raises(Exception, match="exceeds the maximum"):
    jax.block_until_ready(call(np.ones(6), np.ones(6), np.ones((1, 17))))
  with pytest.raises(Exception, match="b and r differ"):
    jax.block_until_ready(call(np.ones(6), np.ones(5), np.ones((1, 2))))
  grad_call = jax.ffi.ffi_call("jaxext_limbdark_grad_f64", (out, out, out,
                                                            jax.ShapeDtypeStruct((6, 3), np.float64)))
  with pytest.raises(Exception, match="wrong size"):
    jax.block_until_ready(grad_call(np.ones(6), np.ones(6), np.ones((1, 2))))
  coef = jax.ShapeDtypeStruct((6, 2), np.float64)
  for bad in ((out, out, out, coef, out, out, jax.ShapeDtypeStruct((5,), np.float64), coef, coef),
              (out, out, out, coef, out, out, out, coef, jax.ShapeDtypeStruct((6, 3), np.float64))):
    hess_call = jax.ffi.ffi_call("jaxext_limbdark_hess_f64", bad)
    with pytest.raises(Exception, match="same number of elements"):
      jax.block_until_ready(hess_call(np.ones(6), np.ones(6), np.ones((1, 2))))


def test_scalar_radius_is_broadcast_by_the_kernel():
  b = jnp.linspace(0.0, 1.3, 1001)
  u = jnp.array(QUAD)
  shared = jaxext.limb_dark_flux(b, 0.1, u)
  full = jaxext.limb_dark_flux(b, jnp.full_like(b, 0.1), u)
  np.testing.assert_array_equal(shared, full)
  g_shared = jax.grad(lambda r: jaxext.limb_dark_flux(b, r, u).sum())(0.1)
  g_full = jax.grad(lambda r: jaxext.limb_dark_flux(b, r, u).sum())(jnp.full_like(b, 0.1))
  np.testing.assert_allclose(g_shared, g_full.sum(), rtol=1e-12)
  # vmap over the (scalar) radius, with b shared or batched too.
  rs = jnp.array([0.05, 0.1, 0.2])
  v = jax.vmap(lambda r: jaxext.limb_dark_flux(b, r, u))(rs)
  v2 = jax.vmap(jaxext.limb_dark_flux, in_axes=(0, 0, None))(jnp.stack([b] * 3), rs, u)
  for i in range(3):
    want = jaxext.limb_dark_flux(b, jnp.full_like(b, rs[i]), u)
    np.testing.assert_array_equal(v[i], want)
    np.testing.assert_array_equal(v2[i], want)


@pytest.mark.parametrize("order", [2, 3])  # the lane-parallel and the general path
def test_extreme_magnitudes_stay_finite(order):
  u = np.array([0.4, 0.26, 0.0][:order])
  bs = np.array([0.0, 5e-324, 1e-310, 1e-300, 1e-100, 0.5, 1.0, 1.0 - 1e-16, 1.0 + 1e-16, 2.0,
                 1e100, 1e300])
  rs = np.array([5e-324, 1e-310, 1e-300, 1e-120, 1e-20, 1e-8, 0.5, 1.0, 1e8, 1e20, 1e100, 1e300])
  b, r = (x.ravel() for x in np.meshgrid(bs, rs))
  f = np.asarray(jaxext.limb_dark_flux(b, r, u))
  # Partial overlaps by occultors beyond 1e8 stellar radii are documented to give NaN.
  huge = (r > 1e8) & (np.abs(b - r) < 1)
  assert huge.sum() == 2 and np.isnan(f[huge]).all()
  b, r, f = b[~huge], r[~huge], f[~huge]
  bad = ~(np.isfinite(f) & (f >= -1e-15) & (f <= 1 + 1e-15))
  assert not bad.any(), list(zip(b[bad], r[bad], f[bad]))
  g = jax.grad(lambda bb, rr: jaxext.limb_dark_flux(bb, rr, u).sum(), argnums=(0, 1))(b, r)
  assert all(np.isfinite(np.asarray(x)).all() for x in g)
  big = r >= 1e8
  np.testing.assert_array_equal(f[big & (b <= 2.0)], 0.0)  # the star is hidden
  tiny = r <= 1e-20
  np.testing.assert_allclose(f[tiny], 1.0, rtol=0, atol=1e-15)
  # The tiny-occultor limit joins the general formula: dF/dr = -2 pi r I(mu) / F0 inside the disk.
  for rr in (1e-90, 1e-110):
    g_r = jax.grad(lambda x: jaxext.limb_dark_flux(0.6, x, u))(rr)
    mu = 0.8
    want = -2 * rr * (1 - 0.4 * (1 - mu) - 0.26 * (1 - mu) ** 2) / (1 - 0.4 / 3 - 0.26 / 6)
    assert float(g_r) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subnormal_radii_are_tiny_occultors_not_out_of_domain(dtype):
  """XLA's CPU threads treat denormals as zero; a positive subnormal r is still r > 0 (flux 1,
  as for r = 1e-300), not r <= 0 (NaN): limb_dark_flux and transit_light_curve, jit and grad."""
  info = np.finfo(dtype)
  rs = np.array([info.smallest_subnormal, info.smallest_normal / 3], dtype)
  b = np.array([0.0, 0.5, 0.999, 1.0, 1.5], dtype)
  u = np.array([0.4, 0.26], dtype)
  for order_u in (u, np.array([0.4, 0.26, 0.1], dtype)):  # the lanes and the general path
    for r in rs:
      for f in (jaxext.limb_dark_flux, jax.jit(jaxext.limb_dark_flux)):
        np.testing.assert_array_equal(np.asarray(f(b, r, order_u)), 1.0)
      g = jax.grad(lambda bb: jaxext.limb_dark_flux(bb, r, order_u).sum())(b)
      assert np.all(np.isfinite(np.asarray(g)))
  np.testing.assert_array_equal(  # r <= 0 stays out of the domain
      np.asarray(jaxext.limb_dark_flux(b, dtype(0.0), u)), np.nan)
  t = np.linspace(-0.1, 0.1, 7).astype(dtype)
  lc = jaxext.transit_light_curve(t, period=3.0, t0=0.0, a=10.0, impact=0.1, r=rs[0], u=u)
  np.testing.assert_array_equal(np.asarray(lc), 1.0)


# --------------------------------------------------------------------------------------------
# Second derivatives (issue #15)
# --------------------------------------------------------------------------------------------
# Reference: the occulted moments M_j(b, r) = integral over the occulted region of (1 - mu)^j, by
# mpmath quadrature at 50 digits over circles centred on the star (as tests/limbdark_reference.py),
# differentiated in b and r by fourth-order central differences with steps of 1e-7 or less (error
# ~h^4 f^(6) ~ 1e-28, plus 1e-50 / h^2 from the quadrature). The flux is F = 1 - N / D with
# N = M_0 - sum_j u_j M_j and D = pi - sum_j u_j Q_j, Q_j = 2 pi / ((j + 1)(j + 2)); its Hessian in
# (b, r, u) follows from N's and D's derivatives by the quotient rule, in mpmath.
HESS_DPS = 50
HESS_MAX_ORDER = 4
HESS_LAWS = [(), (0.6,), QUAD, LAWS["quartic"]]  # n = 0, 1, 2, 4


def occulted_moments_mp(b, r, n):
  b, r = abs(mp.mpf(b)), mp.mpf(r)  # F is even in b: the stencil may cross b = 0

  def half_angle(rho):
    if b == 0:
      return mp.pi if rho < r else mp.mpf(0)
    c = (rho * rho + b * b - r * r) / (2 * b * rho)
    return mp.pi if c <= -1 else (mp.mpf(0) if c >= 1 else mp.acos(c))

  pts = sorted({mp.mpf(0), min(abs(b - r), mp.mpf(1)), min(b + r, mp.mpf(1)), mp.mpf(1)})
  return [mp.quad(lambda rho: 2 * rho * (1 - mp.sqrt(1 - rho * rho)) ** j * half_angle(rho), pts)
          for j in range(n + 1)]


@functools.lru_cache(maxsize=None)
def moment_derivatives(b, r, h=1e-7, n=HESS_MAX_ORDER):
  """{j: {"v", "b", "r", "bb", "br", "rr"}}: M_j and its derivatives at (b, r)."""
  with mp.workdps(HESS_DPS):
    h = mp.mpf(h)
    grid = functools.lru_cache(maxsize=None)(
        lambda i, k: occulted_moments_mp(mp.mpf(b) + i * h, mp.mpf(r) + k * h, n))
    out = {}
    for j in range(n + 1):
      g = lambda i, k: grid(i, k)[j]
      first = lambda i, k: (g(-2 * i, -2 * k) - 8 * g(-i, -k) + 8 * g(i, k)
                            - g(2 * i, 2 * k)) / (12 * h)
      second = lambda i, k: (-g(2 * i, 2 * k) + 16 * g(i, k) - 30 * g(0, 0) + 16 * g(-i, -k)
                             - g(-2 * i, -2 * k)) / (12 * h * h)
      cross = lambda s: g(s, s) - g(s, -s) - g(-s, s) + g(-s, -s)
      out[j] = {"v": g(0, 0), "b": first(1, 0), "r": first(0, 1), "bb": second(1, 0),
                "rr": second(0, 1), "br": (16 * cross(1) - cross(2)) / (48 * h * h)}
    return out


def reference_hessian(b, r, u, h=1e-7):
  """The Hessian of the flux in (b, r, u_1..u_n), as floats."""
  mom = moment_derivatives(b, r, h)
  with mp.workdps(HESS_DPS):
    n, u = len(u), [mp.mpf(x) for x in u]
    q = [2 * mp.pi / ((j + 1) * (j + 2)) for j in range(1, n + 1)]
    den = mp.pi - sum(a * c for a, c in zip(u, q))
    nd = lambda key: mom[0][key] - sum(u[j - 1] * mom[j][key] for j in range(1, n + 1))
    num = nd("v")
    num1 = [nd("b"), nd("r")] + [-mom[j]["v"] for j in range(1, n + 1)]
    den1 = [0, 0] + [-c for c in q]
    num2 = [[mp.mpf(0)] * (n + 2) for _ in range(n + 2)]
    num2[0][0], num2[1][1] = nd("bb"), nd("rr")
    num2[0][1] = num2[1][0] = nd("br")
    for j in range(1, n + 1):
      num2[0][j + 1] = num2[j + 1][0] = -mom[j]["b"]
      num2[1][j + 1] = num2[j + 1][1] = -mom[j]["r"]
    # F = 1 - num / den, den linear in u.
    hess = [[-(num2[i][k] / den - (num1[i] * den1[k] + num1[k] * den1[i]) / den ** 2
               + 2 * num * den1[i] * den1[k] / den ** 3)
             for k in range(n + 2)] for i in range(n + 2)]
    return np.array([[float(x) for x in row] for row in hess])


def flux_of_vector(x):
  return jaxext.limb_dark_flux(x[0], x[1], x[2:])


_hessian = jax.jit(jax.hessian(flux_of_vector))

# (name, b, r, finite-difference step of the reference): every regime, away from the contact
# points by more than 100 steps.
HESS_GEOMETRY = [
    ("inside", 0.3, 0.1, 1e-7),
    ("centre", 0.0, 0.3, 1e-7),
    ("b_tiny", 1e-9, 0.4, 3e-10),
    ("b_equals_r_inside", 0.3, 0.3, 1e-7),
    ("b_equals_r_crossing", 0.8, 0.8, 1e-7),
    ("ingress", 0.95, 0.1, 1e-7),
    ("egress_outer", 1.05, 0.1, 1e-7),
    ("near_internal_contact", 0.8999, 0.1, 1e-9),
    ("near_external_contact", 1.0999, 0.1, 1e-10),
    ("r_tiny_inside", 0.5, 1e-6, 1e-7),
    ("r_tiny_on_limb", 1.0, 1e-6, 1e-11),
    ("r_equals_one", 0.5, 1.0, 1e-7),
    ("r_above_one", 1.5, 2.0, 1e-7),
    ("near_covering_contact", 0.1, 1.0999, 1e-10),
    ("downward_recurrence", 10.5, 10.0, 1e-7),
    ("b_equals_r_large", 5.0, 5.0, 1e-7),
]


@pytest.mark.parametrize("name,b,r,h", HESS_GEOMETRY, ids=[g[0] for g in HESS_GEOMETRY])
def test_hessian_matches_reference(name, b, r, h):
  for u in HESS_LAWS:
    want = reference_hessian(b, r, u, h)
    got = np.asarray(_hessian(np.array([b, r] + list(u))))
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * scale,
                               err_msg=f"{name} n={len(u)} (largest entry {scale:.3g})")


def test_hessian_matches_reference_random_points():
  # Random geometries over the overlapping regimes, at least 1e-3 from the contact points.
  rng = np.random.default_rng(15)
  done = 0
  while done < 6:
    b, r = rng.uniform(0, 2.5), np.exp(rng.uniform(np.log(0.02), np.log(2.0)))
    contact = min(abs(b - (1 + r)), abs(b - abs(1 - r)))
    if b >= 1 + r or r >= 1 + b or contact < 1e-3:
      continue
    done += 1
    h = min(1e-7, contact * 1e-4)
    for u in (QUAD, LAWS["quartic"]):
      want = reference_hessian(b, r, u, h)
      got = np.asarray(_hessian(np.array([b, r] + list(u))))
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(want).max(),
                                 err_msg=f"b={b} r={r} n={len(u)}")


def test_hessian_agrees_with_the_gradient_at_higher_orders():
  # Orders 8 and 16 against fourth-order differences of the kernel's own gradient (the mpmath
  # reference is slow there), at points far from the contact points. The gradient's dF/du carries
  # ~1e-12 of rounding at order 16 (alternating binomial sums): a step of 1e-3 keeps its
  # differences' noise near 1e-9, their truncation below that.
  rng = np.random.default_rng(7)
  grad = jax.jit(jax.grad(flux_of_vector))
  for order in (8, 16):
    u = rng.uniform(-0.05, 0.1, order) * (1.0 if order <= 8 else 0.4)
    for b, r in ((0.4, 0.2), (0.8, 0.5), (1.3, 1.5), (10.3, 10.0)):
      x = np.array([b, r] + list(u))
      got = np.asarray(_hessian(x))
      want = np.zeros_like(got)
      h = 1e-3
      for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = h
        gs = [np.asarray(grad(x + k * e)) for k in (-2, -1, 1, 2)]
        want[i] = (gs[0] - 8 * gs[1] + 8 * gs[2] - gs[3]) / (12 * h)
      np.testing.assert_allclose(got, want, rtol=0, atol=1e-8, err_msg=f"order {order} b={b} r={r}")
      np.testing.assert_allclose(got, got.T, rtol=1e-14, atol=1e-18)  # (FMA contractions)


@pytest.mark.parametrize("b,r", [(1.3, 0.1), (1.1, 0.1), (2.0, 0.5), (0.5, 2.0), (1.0, 2.0),
                                 (0.0, 1.0), (1e300, 0.1), (0.5, np.inf)])
def test_hessian_without_partial_overlap_is_zero(b, r):
  # No overlap (including the external contact b = 1 + r) or a hidden star (including r = 1 + b):
  # the flux is locally constant (1 or 0).
  got = np.asarray(_hessian(np.array([b, r, 0.4, 0.26, 0.1])))
  np.testing.assert_array_equal(got, 0.0)


def test_hessian_at_contact_points_is_finite():
  # The flux is not twice differentiable at the contact points b = 1 - r (second derivatives in b
  # and r diverge logarithmically from inside): finite values are returned, never NaN.
  for b, r in ((0.9, 0.1), (0.5, 0.5), (0.0, 1.0 - 1e-12), (1e-9, 1.0), (1.0, 1.0), (0.2, 0.8)):
    got = np.asarray(_hessian(np.array([b, r, 0.4, 0.26])))
    assert np.isfinite(got).all(), (b, r, got)


@pytest.mark.parametrize("order", [2, 3])
def test_hessian_at_extreme_magnitudes_stays_finite(order):
  u = np.array([0.4, 0.26, 0.0][:order])
  bs = np.array([0.0, 5e-324, 1e-310, 1e-300, 1e-100, 0.5, 1.0, 1.0 - 1e-16, 1.0 + 1e-16, 2.0,
                 1e100, 1e300])
  rs = np.array([5e-324, 1e-310, 1e-300, 1e-120, 1e-20, 1e-8, 0.5, 1.0, 1e8, 1e20, 1e100, 1e300])
  b, r = (x.ravel() for x in np.meshgrid(bs, rs))
  keep = ~((r > 1e8) & (np.abs(b - r) < 1))  # documented NaN (see the flux test)
  x = np.concatenate([np.stack([b[keep], r[keep]], 1), np.tile(u, (keep.sum(), 1))], 1)
  h = np.asarray(jax.vmap(_hessian)(x))
  bad = ~np.isfinite(h).all(axis=(1, 2))
  assert not bad.any(), x[bad]


def test_hessian_of_a_tiny_occultor():
  # Below kTinyRadius the kernel uses the limits: inside the disk F = 1 - r^2 I(mu) / (F0 / pi),
  # so d2F/dr2 = -2 I(mu) pi / F0; on the limb (b = 1 exactly) half the occultor covers the star:
  # d2F/dr2 = -pi I(0) / F0 and d2F/db dr = 2 I(0) / F0. Both join the general formulas above it.
  u1, u2 = QUAD
  total = math.pi * (1 - u1 / 3 - u2 / 6)
  intensity = lambda mu: 1 - u1 * (1 - mu) - u2 * (1 - mu) ** 2
  for r in (1e-90, 1e-110):
    h = np.asarray(_hessian(np.array([0.6, r, u1, u2])))
    assert h[1, 1] == pytest.approx(-2 * math.pi * intensity(0.8) / total, rel=1e-12)
    h = np.asarray(_hessian(np.array([1.0, r, u1, u2])))
    assert h[1, 1] == pytest.approx(-math.pi * intensity(0.0) / total, rel=1e-12)
    assert h[0, 1] == pytest.approx(2 * intensity(0.0) / total, rel=1e-12)
    assert abs(h[0, 0]) < 1e-40


def test_second_derivative_compositions_agree():
  f = lambda b, r, u: jaxext.limb_dark_flux(b, r, u)
  args = (0.7, 0.2, jnp.array(QUAD))
  arg = (0, 1, 2)
  ways = [jax.hessian(f, arg), jax.jacfwd(jax.grad(f, arg), arg), jax.jacrev(jax.grad(f, arg), arg),
          jax.jacfwd(jax.jacfwd(f, arg), arg), jax.jacrev(jax.jacfwd(f, arg), arg),
          jax.jit(jax.hessian(f, arg))]
  want = ways[0](*args)
  for way in ways[1:]:
    for a, c in zip(jax.tree_util.tree_leaves(way(*args)), jax.tree_util.tree_leaves(want)):
      np.testing.assert_allclose(a, c, rtol=1e-14, atol=1e-15)
  assert float(jax.grad(jax.grad(f))(*args)) == pytest.approx(float(want[0][0]), rel=1e-14)
  assert float(jax.grad(jax.grad(f, 1), 0)(*args)) == pytest.approx(float(want[0][1]), rel=1e-14)


@pytest.mark.parametrize("b,r", [(0.3, 0.1), (0.95, 0.1), (1.05, 0.12), (1.4, 1.5), (10.3, 10.0)])
def test_check_grads_second_order(b, r):
  u = jnp.array((0.3, 0.2, -0.1))
  check_grads(jaxext.limb_dark_flux, (b, r, u), order=2, modes=("fwd", "rev"), eps=1e-6)


@pytest.mark.parametrize("b,r", [(0.3, 0.1), (1.05, 0.12), (1.4, 1.5)])
def test_check_grads_second_order_float32(b, r):
  # Differences in float32 need a large step: points far from the contact points.
  args = (np.float32(b), np.float32(r), jnp.array((0.3, 0.2, -0.1), jnp.float32))
  check_grads(jaxext.limb_dark_flux, args, order=2, modes=("fwd", "rev"), eps=1e-2)
  h32 = jax.hessian(jaxext.limb_dark_flux, (0, 1, 2))(*args)
  h64 = jax.hessian(jaxext.limb_dark_flux, (0, 1, 2))(*(jnp.asarray(a, jnp.float64) for a in args))
  for a, c in zip(jax.tree_util.tree_leaves(h32), jax.tree_util.tree_leaves(h64)):
    assert a.dtype == jnp.float32
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)


def test_hessian_under_vmap_and_broadcasting():
  rng = np.random.default_rng(11)
  x = np.stack([rng.uniform(0, 1.3, 12), rng.uniform(0.05, 0.4, 12), rng.uniform(0, 0.5, 12),
                rng.uniform(0, 0.3, 12)], 1)
  batched = np.asarray(jax.vmap(_hessian)(x))
  jitted = np.asarray(jax.jit(jax.vmap(jax.hessian(flux_of_vector)))(x))
  for i in range(len(x)):
    np.testing.assert_array_equal(batched[i], np.asarray(_hessian(x[i])))
    np.testing.assert_array_equal(jitted[i], batched[i])
  # Per-light-curve laws (u's leading axes broadcast against b) and a shared scalar radius: the
  # Hessian of a sum over points is the sum of per-point Hessians.
  b = jnp.linspace(0.0, 1.2, 9)
  u = jnp.array([[0.4, 0.26], [0.1, 0.5], [0.3, -0.1]])
  total = lambda r, u: jaxext.limb_dark_flux(b, r, u[:, None, :]).sum()
  (h_rr, h_ru), (_, h_uu) = jax.jit(jax.hessian(total, (0, 1)))(0.1, u)
  one = jax.jit(jax.hessian(lambda r, uu: jaxext.limb_dark_flux(b, r, uu).sum(), (0, 1)))
  want_rr = 0.0
  for row in range(3):
    (w_rr, w_ru), (_, w_uu) = one(0.1, u[row])
    want_rr += w_rr
    np.testing.assert_allclose(h_ru[row], w_ru, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(h_uu[row, :, row, :], w_uu, rtol=1e-13, atol=1e-15)
    other = [k for k in range(3) if k != row]
    np.testing.assert_array_equal(h_uu[row][:, other], 0.0)
  np.testing.assert_allclose(h_rr, want_rr, rtol=1e-13)
