"""Tests of jaxext.transit_light_curve: the orbit against an independent NumPy Keplerian orbit,
physical identities, exposure-time integration and derivatives in every parameter."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402  (after enabling x64)

U = jnp.array([0.4, 0.26])
ORBIT = dict(period=3.5, t0=0.3, a=9.0, r=0.1, u=U)


def numpy_separation(t, period, t0, a, impact, ecc, omega):
  """Textbook orbit: Newton on Kepler's equation, true anomaly from tan(f/2), rotation to the sky."""
  cos_i = impact * (1 + ecc * math.sin(omega)) / (a * (1 - ecc**2))
  inc = math.acos(cos_i)
  f_tr = math.pi / 2 - omega
  e_tr = 2 * math.atan(math.sqrt((1 - ecc) / (1 + ecc)) * math.tan(f_tr / 2))
  t_peri = t0 - period / (2 * math.pi) * (e_tr - ecc * math.sin(e_tr))
  m = 2 * math.pi / period * (np.asarray(t) - t_peri)
  ea = m.copy()
  for _ in range(60):
    ea = ea - (ea - ecc * np.sin(ea) - m) / (1 - ecc * np.cos(ea))
  f = 2 * np.arctan2(math.sqrt(1 + ecc) * np.sin(ea / 2), math.sqrt(1 - ecc) * np.cos(ea / 2))
  dist = a * (1 - ecc**2) / (1 + ecc * np.cos(f))
  x = -dist * np.cos(omega + f)
  y = -dist * np.sin(omega + f) * math.cos(inc)
  z = dist * np.sin(omega + f) * math.sin(inc)
  return np.hypot(x, y), z > 0


@pytest.mark.parametrize("ecc,omega", [(0.0, 0.0), (0.3, 0.7), (0.6, -2.0), (0.9, 1.5)])
def test_orbit_matches_numpy(ecc, omega):
  t = np.linspace(-4.0, 4.0, 2001)
  sep, front = jaxext.sky_separation(t, period=3.5, t0=0.3, a=9.0, impact=0.4, ecc=ecc,
                                     omega=omega)
  want_sep, want_front = numpy_separation(t, 3.5, 0.3, 9.0, 0.4, ecc, omega)
  np.testing.assert_allclose(sep, want_sep, rtol=0, atol=1e-9 * 9.0)
  np.testing.assert_array_equal(front, want_front)
  # At t0 the separation is the impact parameter.
  s0, f0 = jaxext.sky_separation(0.3, period=3.5, t0=0.3, a=9.0, impact=0.4, ecc=ecc, omega=omega)
  assert float(s0) == pytest.approx(0.4, abs=1e-12) and bool(f0)


def test_flux_at_mid_transit_and_out_of_transit():
  t = jnp.array([0.3, 0.3 + 3.5 / 2, 0.3 + 0.5])
  f = jaxext.transit_light_curve(t, impact=0.2, **ORBIT)
  assert float(f[0]) == pytest.approx(float(jaxext.limb_dark_flux(0.2, 0.1, U)), abs=1e-14)
  assert float(f[1]) == 1.0  # planet behind the star (b ~ 0 there, but no secondary eclipse)
  assert float(f[2]) == 1.0


def test_symmetric_for_circular_orbit_and_inclination_equivalent():
  dt = jnp.linspace(0, 0.2, 101)
  f_after = jaxext.transit_light_curve(0.3 + dt, impact=0.5, **ORBIT)
  f_before = jaxext.transit_light_curve(0.3 - dt, impact=0.5, **ORBIT)
  np.testing.assert_allclose(f_after, f_before, atol=1e-13)
  inc = math.acos(0.5 / 9.0)
  f_inc = jaxext.transit_light_curve(0.3 + dt, inclination=inc, **ORBIT)
  np.testing.assert_allclose(f_inc, f_after, atol=1e-13)
  assert float(f_after.min()) < 0.99 and float(f_after.max()) == 1.0


def test_flux_uses_numpy_orbit():
  t = np.linspace(0.1, 0.5, 301)
  sep, front = numpy_separation(t, 3.5, 0.3, 9.0, 0.3, 0.2, 0.4)
  want = np.where(front, np.asarray(jaxext.limb_dark_flux(sep, 0.1, U)), 1.0)
  got = jaxext.transit_light_curve(t, impact=0.3, ecc=0.2, omega=0.4, **ORBIT)
  np.testing.assert_allclose(got, want, atol=1e-10)


def test_exposure_time_integration_converges():
  t = jnp.linspace(0.1, 0.5, 201)
  texp = 0.03
  f7 = jaxext.transit_light_curve(t, impact=0.3, texp=texp, **ORBIT)
  f201 = jaxext.transit_light_curve(t, impact=0.3, texp=texp, oversample=201, **ORBIT)
  f1 = jaxext.transit_light_curve(t, impact=0.3, **ORBIT)
  f51 = jaxext.transit_light_curve(t, impact=0.3, texp=texp, oversample=51, **ORBIT)
  # Midpoint rule: ingress (~0.012 d) is shorter than the exposure, so the error falls as 1/n^2.
  assert float(jnp.max(jnp.abs(f7 - f201))) < 5e-5
  assert float(jnp.max(jnp.abs(f51 - f201))) < 1e-6
  assert float(jnp.max(jnp.abs(f1 - f201))) > 1e-4  # smearing matters at this cadence
  # Integration preserves the mean flux deficit over a window containing the whole transit.
  tt = jnp.linspace(-0.5, 1.1, 16001)
  d1 = jnp.mean(1 - jaxext.transit_light_curve(tt, impact=0.3, **ORBIT))
  d7 = jnp.mean(1 - jaxext.transit_light_curve(tt, impact=0.3, texp=texp, **ORBIT))
  assert float(d7) == pytest.approx(float(d1), rel=1e-4)


def test_gradients_in_every_parameter():
  t = jnp.array([0.22, 0.25, 0.3, 0.36])

  def model(t0, period, a, impact, r, u, ecc, omega, texp):
    return jaxext.transit_light_curve(t, period=period, t0=t0, a=a, impact=impact, r=r, u=u,
                                      ecc=ecc, omega=omega, texp=texp)

  args = (0.3, 3.5, 9.0, 0.3, 0.1, U, 0.2, 0.4, 0.02)
  check_grads(model, args, order=1, modes=("rev",), eps=1e-6)
  grads = jax.jacrev(model, argnums=tuple(range(9)))(*args)
  for g in grads:
    assert np.isfinite(np.asarray(g)).all()
    assert np.abs(np.asarray(g)).max() > 0


def test_jit_and_vmap():
  t = jnp.linspace(0.1, 0.5, 50)
  fn = jax.jit(lambda r: jaxext.transit_light_curve(t, period=3.5, t0=0.3, a=9.0, impact=0.3, r=r,
                                                     u=U))
  rs = jnp.array([0.05, 0.1, 0.15])
  batched = jax.vmap(fn)(rs)
  for i in range(3):
    np.testing.assert_allclose(batched[i], fn(rs[i]), atol=0)


def test_bad_arguments():
  with pytest.raises(ValueError, match="exactly one of impact and inclination"):
    jaxext.transit_light_curve(0.0, **ORBIT)
  with pytest.raises(ValueError, match="exactly one of impact and inclination"):
    jaxext.transit_light_curve(0.0, impact=0.1, inclination=1.5, **ORBIT)
  with pytest.raises(ValueError, match="oversample"):
    jaxext.transit_light_curve(0.0, impact=0.1, texp=0.1, oversample=4, **ORBIT)
  with pytest.raises(ValueError, match="u must be a vector"):
    jaxext.transit_light_curve(0.0, period=3.5, t0=0.3, a=9.0, r=0.1, u=jnp.zeros((2, 2)),
                               impact=0.1)
  with pytest.raises(TypeError, match="period"):
    jaxext.transit_light_curve(0.0, period="x", t0=0.3, a=9.0, r=0.1, u=U, impact=0.1)
