"""Tests of jaxext.transit_light_curve (one fused kernel: orbit, Kepler, occultation): against a
30-digit reference (mpmath orbit and quadrature), an independent NumPy orbit with the occultation
op, physical identities, exposure-time integration, many light curves at once, derivatives in every
parameter, and bad input."""

import math
import zlib

import mpmath as mp

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402  (after enabling x64)
from jaxext import transit as transit_module  # noqa: E402
from tests.limbdark_reference import relative_flux_mp  # noqa: E402

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


def test_sky_separation_is_nan_out_of_the_domain_as_the_light_curve():
  """What makes transit_light_curve NaN makes sky_separation NaN (it gave 0, "in front of the
  star's centre", for NaN times, ecc = 1.1 or a = NaN); valid points are untouched."""
  t = jnp.array([0.3, 0.5, jnp.nan, 1.0])
  kw = dict(period=3.5, t0=0.3, a=9.0, impact=0.4)
  for f in (jaxext.sky_separation, jax.jit(jaxext.sky_separation, static_argnames=())):
    sep, front = f(t, **kw)
    assert np.isnan(np.asarray(sep)).tolist() == [False, False, True, False]
    assert not bool(front[2])
  bad = [dict(ecc=1.1), dict(ecc=-0.1), dict(a=jnp.nan), dict(a=-9.0), dict(period=0.0),
         dict(t0=jnp.inf), dict(omega=jnp.nan)]
  for change in bad:
    args = dict(kw, **change)
    sep, front = jaxext.sky_separation(t, **args)
    assert np.all(np.isnan(np.asarray(sep))) and not np.any(np.asarray(front)), change
    lc = jaxext.transit_light_curve(t, r=0.1, u=U, **{k: v for k, v in args.items()})
    assert np.all(np.isnan(np.asarray(lc))), change  # the light curve agrees
  sep, _ = jaxext.sky_separation(t[:2], **kw)
  np.testing.assert_allclose(np.asarray(sep)[0], 0.4, atol=1e-12)
  g = jax.grad(lambda a: jaxext.sky_separation(0.5, period=3.5, t0=0.3, a=a, impact=0.4)[0])(9.0)
  assert np.isfinite(float(g)) and float(g) > 0


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
  with pytest.raises(ValueError, match="u must have at least one axis"):
    jaxext.transit_light_curve(0.0, period=3.5, t0=0.3, a=9.0, r=0.1, u=0.3, impact=0.1)
  with pytest.raises(ValueError, match="at most 16"):
    jaxext.transit_light_curve(0.0, period=3.5, t0=0.3, a=9.0, r=0.1, u=jnp.zeros(17),
                               impact=0.1)
  with pytest.raises(ValueError, match="do not broadcast"):
    jaxext.transit_light_curve(jnp.zeros(5), period=jnp.ones(3) * 3.5, t0=0.3, a=9.0, r=0.1,
                               u=U, impact=0.1)
  with pytest.raises(ValueError, match="oversample"):
    jaxext.transit_light_curve(0.0, impact=0.1, texp=0.1, oversample=True, **ORBIT)
  with pytest.raises(TypeError, match="ecc"):
    jaxext.transit_light_curve(0.0, impact=0.1, ecc=1j, **ORBIT)
  with pytest.raises(TypeError, match="period"):
    jaxext.transit_light_curve(0.0, period="x", t0=0.3, a=9.0, r=0.1, u=U, impact=0.1)


# ---------------------------------------------------------------------------------------------
# The fused kernel against a 30-digit reference and an independent composition.


def mp_light_curve(times, *, period, t0, a, impact, ecc, omega, r, u, texp=None, oversample=7):
  """Flux at 30 digits: Kepler's equation by Newton in mpmath, the textbook orbit, and the
  occultation by quadrature (tests/limbdark_reference.py); exposures averaged over the same
  sub-exposure midpoints as the model."""
  mp.mp.dps = 30
  P, T0, A, B, e, w, R = (mp.mpf(float(x)) for x in (period, t0, a, impact, ecc, omega, r))
  cos_i = B * (1 + e * mp.sin(w)) / (A * (1 - e * e))
  sin_i = mp.sqrt(1 - cos_i**2)
  f_tr = mp.pi / 2 - w
  e_tr = 2 * mp.atan2(mp.sqrt(1 - e) * mp.sin(f_tr / 2), mp.sqrt(1 + e) * mp.cos(f_tr / 2))
  m_tr = e_tr - e * mp.sin(e_tr)
  k = 1 if texp is None else oversample
  offsets = [(mp.mpf(j) + mp.mpf(0.5)) / k - mp.mpf(0.5) for j in range(k)]
  out = []
  for t in np.asarray(times, dtype=float):
    total = mp.mpf(0)
    for o in offsets:
      ts = mp.mpf(float(t)) + (0 if texp is None else mp.mpf(float(texp)) * o)
      m = 2 * mp.pi / P * (ts - T0) + m_tr
      E = m + e * mp.sin(m)
      for _ in range(100):
        E = E - (E - e * mp.sin(E) - m) / (1 - e * mp.cos(E))
      f = 2 * mp.atan2(mp.sqrt(1 + e) * mp.sin(E / 2), mp.sqrt(1 - e) * mp.cos(E / 2))
      dist = A * (1 - e * mp.cos(E))
      x = -dist * mp.cos(w + f)
      y = -dist * mp.sin(w + f) * cos_i
      z = dist * mp.sin(w + f) * sin_i
      sep = mp.sqrt(x * x + y * y)
      total += relative_flux_mp(sep, R, u) if (z > 0 and sep < 1 + R) else 1
    out.append(float(total / k))
  return np.array(out)


# (name, parameters, times relative to t0): eccentric near e = 0.9 transiting near periastron and
# near apoastron, a grazing transit, a long exposure, a high-order law.
REFERENCE_CASES = [
    ("e0.9 periastron", dict(period=12.0, a=25.0, impact=0.4, ecc=0.9, omega=math.pi / 2, r=0.08,
                             u=(0.4, 0.26)), 0.03),
    ("e0.9 apoastron", dict(period=40.0, a=30.0, impact=0.2, ecc=0.9, omega=-math.pi / 2,
                            r=0.12, u=(0.3, 0.2)), 1.5),
    ("grazing", dict(period=3.0, a=8.0, impact=1.04, ecc=0.1, omega=0.3, r=0.1,
                     u=(0.5, 0.1)), 0.024),
    ("long exposure", dict(period=5.0, a=12.0, impact=0.3, ecc=0.2, omega=2.0, r=0.1,
                           u=(0.4, 0.26), texp=0.0204, oversample=5), 0.12),
    ("quartic law", dict(period=3.0, a=9.0, impact=0.5, ecc=0.0, omega=0.0, r=0.15,
                         u=(0.3, 0.2, -0.1, 0.05)), 0.1),
]


@pytest.mark.parametrize("name,params,half_width", REFERENCE_CASES,
                         ids=[c[0] for c in REFERENCE_CASES])
def test_light_curve_matches_30_digit_reference(name, params, half_width):
  t0 = 0.7
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  times = t0 + np.concatenate([rng.uniform(-half_width, half_width, 14),
                               np.linspace(-half_width, half_width, 9)])
  kwargs = dict(params, u=jnp.array(params["u"]))
  got = np.asarray(jaxext.transit_light_curve(times, t0=t0, **kwargs))
  want = mp_light_curve(times, t0=t0, **params)
  assert (want < 1).sum() >= 10, "the case must sample the transit"
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def reference_flux(t, *, period, t0, a, impact, ecc, omega, r, u, texp=None, oversample=7):
  """The independent NumPy orbit (numpy_separation) with the occultation op, exposure-averaged."""
  t = np.asarray(t, dtype=float)
  k = 1 if texp is None else oversample
  offsets = (np.arange(k) + 0.5) / k - 0.5
  ts = t[:, None] + (0.0 if texp is None else texp) * offsets
  sep, front = numpy_separation(ts, period, t0, a, impact, ecc, omega)
  f = np.where(front, np.asarray(jaxext.limb_dark_flux(sep, r, jnp.asarray(u))), 1.0)
  return f.mean(axis=1)


def random_light_curves(rng, count):
  for _ in range(count):
    period = rng.uniform(0.5, 30.0)
    ecc = float(rng.choice([0.0, rng.uniform(0.0, 0.95)]))
    a = rng.uniform(1.8, 40.0) / (1 - ecc)  # periastron outside the star
    yield dict(period=period, t0=rng.uniform(-5, 5), a=a, impact=rng.uniform(0.0, 1.3),
               ecc=ecc, omega=rng.uniform(-math.pi, math.pi), r=rng.uniform(0.005, 0.4),
               u=rng.uniform(0.0, 0.5, 2),
               **(dict(texp=rng.uniform(0.001, 0.05) * period, oversample=int(rng.choice([3, 7])))
                  if rng.uniform() < 0.3 else {}))


def test_random_light_curves_match_independent_orbit():
  """Random orbits (circular and up to e = 0.95, close-in to wide, grazing, exposures): every
  phase (random times across the period, dense times around the transit, where the kernel's
  window for skipping the orbit begins and ends)."""
  rng = np.random.default_rng(7)
  for params in random_light_curves(rng, 40):
    P, t0 = params["period"], params["t0"]
    times = np.concatenate([t0 + rng.uniform(-3 * P, 3 * P, 300),
                            t0 + np.linspace(-0.08, 0.08, 301) * P])
    kwargs = dict(params, u=jnp.asarray(params["u"]))
    got = np.asarray(jaxext.transit_light_curve(times, **kwargs))
    want = reference_flux(times, **params)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-12, err_msg=str(params))


def test_many_light_curves_in_one_call():
  """Parameters of shape (W, 1) (one light curve each, u per light curve too) against a loop."""
  rng = np.random.default_rng(3)
  params = list(random_light_curves(rng, 6))
  t = np.linspace(-1.0, 1.0, 500)
  stack = lambda key: jnp.array([[p[key]] for p in params])
  common = dict(period=stack("period"), t0=stack("t0") * 0, a=stack("a"),
                impact=stack("impact"), ecc=stack("ecc"), omega=stack("omega"), r=stack("r"))
  u = jnp.array([[p["u"]] for p in params])  # (W, 1, 2)
  got = jaxext.transit_light_curve(t, u=u, **common)
  assert got.shape == (6, 500)
  for w, p in enumerate(params):
    one = jaxext.transit_light_curve(t, period=p["period"], t0=0.0, a=p["a"], impact=p["impact"],
                                     ecc=p["ecc"], omega=p["omega"], r=p["r"],
                                     u=jnp.asarray(p["u"]))
    np.testing.assert_array_equal(got[w], one)
  # The same through vmap over the parameter sets (MCMC walkers): no Python loop, same numbers.
  walkers = jax.vmap(lambda period, a, r: jaxext.transit_light_curve(
      t, period=period, t0=0.0, a=a, impact=0.3, r=r, u=U))
  periods, axes, radii = jnp.array([2.0, 3.0, 4.0]), jnp.array([8.0, 9.0, 10.0]), jnp.array(
      [0.05, 0.1, 0.2])
  batched = walkers(periods, axes, radii)
  broadcast = jaxext.transit_light_curve(t, period=periods[:, None], t0=0.0, a=axes[:, None],
                                         impact=0.3, r=radii[:, None], u=U)
  np.testing.assert_array_equal(batched, broadcast)


def test_float32():
  t = np.linspace(-0.2, 0.2, 2001)
  kw = dict(period=3.0, t0=0.0, a=10.0, impact=0.3, ecc=0.2, omega=1.0, r=0.1)
  f64 = jaxext.transit_light_curve(t, u=U, **kw)
  f32 = jaxext.transit_light_curve(jnp.asarray(t, jnp.float32), u=U.astype(jnp.float32),
                                   **{k: np.float32(v) for k, v in kw.items()})
  assert f32.dtype == jnp.float32
  np.testing.assert_allclose(f32, f64, rtol=0, atol=2e-6)


def test_out_of_domain_is_nan():
  t = jnp.array([-0.05, 0.0, 0.05, 1.0])
  for bad in (dict(ecc=1.0), dict(ecc=-0.1), dict(a=0.0), dict(period=0.0), dict(r=-0.1),
              dict(period=float("nan")), dict(u=jnp.array([0.4, float("inf")]))):
    kw = dict(ORBIT, impact=0.3, **bad)
    assert np.isnan(np.asarray(jaxext.transit_light_curve(t, **kw))).all(), bad
  f = np.asarray(jaxext.transit_light_curve(jnp.array([0.3, float("nan"), 1.0]), impact=0.3,
                                            **ORBIT))
  assert f[0] < 1 and np.isnan(f[1]) and f[2] == 1.0


def test_derivatives_match_composition():
  """The kernel's derivatives (chain rule in C++) against JAX's differentiation of the unfused
  model (jnp orbit around the kepler and limbdark ops), for every parameter and the times."""
  names = ("period", "t0", "a", "impact", "ecc", "omega", "r", "u", "texp")

  def fused(t, *args):
    kw = dict(zip(names, args))
    return jaxext.transit_light_curve(t, oversample=5, **kw)

  def composed(t, *args):
    kw = dict(zip(names, args))
    q = transit_module._kernel_params(period=kw["period"], t0=kw["t0"], a=kw["a"], r=kw["r"],
                                      impact=kw["impact"], inclination=None, ecc=kw["ecc"],
                                      omega=kw["omega"], texp=kw["texp"])
    return transit_module._unfused_flux(t, q, kw["u"], 5)

  for ecc, omega in ((0.0, 0.0), (0.3, 0.8), (0.85, -1.2)):
    args = (3.0, 0.1, 12.0, 0.4, ecc, omega, 0.1, U, 0.02)
    t = 0.1 + jnp.linspace(-0.15, 0.15, 41)
    jf = jax.jacrev(fused, argnums=tuple(range(10)))(t, *args)
    jc = jax.jacrev(composed, argnums=tuple(range(10)))(t, *args)
    for name, a_, b_ in zip(("t",) + names, jf, jc):
      np.testing.assert_allclose(a_, b_, rtol=1e-9, atol=1e-11, err_msg=f"{name} e={ecc}")
    assert np.abs(np.asarray(jf[5])).max() > 0  # d/d ecc


def test_check_grads_forward_and_reverse():
  t = jnp.array([0.2, 0.26, 0.3, 0.33, 0.36, 2.0])

  def model(t, t0, period, a, impact, r, u, ecc, omega, texp):
    return jaxext.transit_light_curve(t, period=period, t0=t0, a=a, impact=impact, r=r, u=u,
                                      ecc=ecc, omega=omega, texp=texp, oversample=3)

  check_grads(model, (t, 0.3, 3.5, 9.0, 0.3, 0.1, U, 0.2, 0.4, 0.02), order=1,
              modes=("fwd", "rev"), eps=1e-6)
  # Circular orbits (e = 0 exactly skips the Kepler solve): the derivative in ecc there is the
  # one-sided limit (e < 0 is out of the domain).
  of_e = lambda e: model(t, 0.3, 3.5, 9.0, 0.3, 0.1, U, e, 0.4, 0.02)
  d0 = np.asarray(jax.jacfwd(of_e)(0.0))
  np.testing.assert_allclose(d0, jax.jacrev(of_e)(0.0), rtol=1e-12, atol=1e-15)
  np.testing.assert_allclose(d0, jax.jacfwd(of_e)(1e-9), rtol=1e-6, atol=1e-12)
  h = 1e-6
  one_sided = (-3 * of_e(0.0) + 4 * of_e(h) - of_e(2 * h)) / (2 * h)
  np.testing.assert_allclose(d0, one_sided, rtol=1e-4, atol=1e-8)
  assert np.abs(d0).max() > 1e-3



def test_forward_and_reverse_kernels_agree_with_per_point_derivatives():
  """jax.jvp (the forward-mode kernel), jax.grad (the reverse-mode kernel's block sums) and
  jacfwd/jacrev (per-point derivatives, computed once for all tangents) give the same numbers,
  for several light curves at once, with exposures, and more points than one reverse-mode block."""
  rng = np.random.default_rng(11)
  t = np.linspace(-0.3, 0.3, 3 * transit_module.VJP_BLOCK + 17)
  weights = jnp.asarray(rng.standard_normal((2, t.size)))

  def flux(p):
    period, a, r, ecc = p[0], p[1], p[2], p[3]
    return jaxext.transit_light_curve(t, period=jnp.stack([period, period + 0.5])[:, None],
                                      t0=0.01, a=a, impact=0.3, r=r, u=U, ecc=ecc, omega=0.7,
                                      texp=0.01, oversample=3)

  p = jnp.array([3.0, 9.0, 0.1, 0.2])
  jac = jax.jacfwd(flux)(p)  # (2, T, 4)
  few = lambda p: flux(p)[:, ::97]  # jacrev materialises one cotangent per output
  np.testing.assert_allclose(jax.jacrev(few)(p), jac[:, ::97], rtol=1e-12, atol=1e-15)
  tangent = jnp.array([0.3, -1.0, 0.5, 0.2])
  _, jvp = jax.jvp(flux, (p,), (tangent,))
  np.testing.assert_allclose(jvp, jac @ tangent, rtol=1e-12, atol=1e-14)
  grad = jax.grad(lambda p: jnp.sum(weights * flux(p)))(p)
  np.testing.assert_allclose(grad, jnp.einsum("ct,ctk->k", weights, jac), rtol=1e-11)
  # The times' cotangent: dflux/dt from the reverse-mode kernel against finite differences.
  ft = lambda tt: jaxext.transit_light_curve(tt, period=3.0, t0=0.01, a=9.0, impact=0.3, r=0.1,
                                             u=U, ecc=0.2, omega=0.7)
  tt = jnp.linspace(-0.05, 0.05, 7)
  gt = jax.grad(lambda tt: jnp.sum(ft(tt)))(tt)
  fd = (ft(tt + 1e-7) - ft(tt - 1e-7)) / 2e-7
  np.testing.assert_allclose(gt, fd, rtol=1e-6, atol=1e-9)
  assert np.abs(np.asarray(gt)).max() > 0.01


def test_second_derivatives_check_grads():
  """Second order (forward over reverse and reverse over reverse) in every parameter, with
  exposures, through the unfused model's kernels (limbdark's Hessian, kepler's derivatives).
  Times away from the contact points, where the flux is not twice differentiable (~ x^(3/2))."""
  t = jnp.array([0.22, 0.27, 0.29, 0.3, 0.315])

  def model(t0, period, a, impact, r, u, ecc, omega):
    return jaxext.transit_light_curve(t, period=period, t0=t0, a=a, impact=impact, r=r, u=u,
                                      ecc=ecc, omega=omega, texp=0.01, oversample=3)

  args = (0.3, 3.5, 9.0, 0.3, 0.1, U, 0.2, 0.4)
  # Against jax's finite differences (of the function and of its derivatives: tolerance for
  # their truncation error; the 30-digit test below is the accurate one).
  check_grads(model, args, order=2, modes=("fwd", "rev"), eps=2e-5, atol=1e-5, rtol=1e-5)
  # Every composition of forward and reverse mode gives the same Hessian (kernels: the
  # transit's forward/reverse-mode kernels, limbdark's Hessian, kepler's derivatives).
  weights = jnp.array([1.0, 2.0, -1.0, 0.5, 3.0])
  flat = lambda p: jnp.sum(weights * model(*p[:5], p[5:7], *p[7:]))
  p = jnp.array([0.3, 3.5, 9.0, 0.3, 0.1, 0.4, 0.26, 0.2, 0.4])
  h_ff = jax.jacfwd(jax.jacfwd(flat))(p)
  scale = np.abs(np.asarray(h_ff)).max()
  for h in (jax.jacfwd(jax.jacrev(flat))(p), jax.jacrev(jax.jacfwd(flat))(p),
            jax.jacrev(jax.jacrev(flat))(p), jax.hessian(flat)(p)):
    np.testing.assert_allclose(h, h_ff, rtol=0, atol=1e-13 * scale)
  np.testing.assert_allclose(h_ff, h_ff.T, rtol=0, atol=1e-13 * scale)


def test_hessian_matches_30_digit_finite_differences():
  """jax.hessian of the flux with respect to (r, impact, a, ecc) against central second
  differences of the 30-digit reference, deep in transit and at ingress."""
  base = dict(period=3.0, t0=0.0, omega=0.5, u=(0.4, 0.26))
  x0 = np.array([0.1, 0.3, 10.0, 0.2])  # r, impact, a, ecc

  def ours(x, t):
    return jaxext.transit_light_curve(t, r=x[0], impact=x[1], a=x[2], ecc=x[3],
                                      **dict(base, u=jnp.asarray(base["u"])))

  def ref(x, t):
    return mp_light_curve([t], r=x[0], impact=x[1], a=x[2], ecc=x[3], **base)[0]

  h = 1e-4
  for t in (0.02, 0.041):  # deep in transit; partial overlap (ingress)
    hess = np.asarray(jax.hessian(ours)(jnp.asarray(x0), t))
    fd = np.zeros((4, 4))
    f0 = ref(x0, t)
    for i in range(4):
      ei = np.eye(4)[i] * h
      fd[i, i] = (ref(x0 + ei, t) - 2 * f0 + ref(x0 - ei, t)) / h**2
      for j in range(i):
        ej = np.eye(4)[j] * h
        fd[i, j] = fd[j, i] = (ref(x0 + ei + ej, t) - ref(x0 + ei - ej, t)
                               - ref(x0 - ei + ej, t) + ref(x0 - ei - ej, t)) / (4 * h * h)
    scale = np.abs(fd).max()
    assert scale > 1e-3
    np.testing.assert_allclose(hess, fd, rtol=0, atol=1e-6 * scale, err_msg=f"t={t}")


@pytest.mark.parametrize("ecc", [0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.97])
def test_eccentric_orbit_over_the_window_matches_kepler_solve(ecc):
  """The CPU kernel takes sin E, cos E over a light curve's transit window from a Chebyshev
  series built from Kepler solves at its nodes (or solves Kepler's equation per time where the
  series does not converge to double precision); against the unfused model, which solves it at
  every time with the kepler op, at times dense across the window and beyond."""
  for omega in (-2.0, 0.3, 1.6):
    a = 3.0 / (1 - ecc)
    q = transit_module._kernel_params(period=2.0, t0=0.1, a=a, r=0.12, impact=0.4,
                                      inclination=None, ecc=ecc, omega=omega, texp=0.0)
    t = jnp.linspace(-0.4, 0.6, 20001)
    (fused,) = transit_module.transit_p.bind(t, q, U, grad=False, oversample=1)
    unfused = transit_module._unfused_flux(t, q, U, 1)
    assert float(jnp.min(fused)) < 0.99
    np.testing.assert_allclose(fused, unfused, rtol=0, atol=5e-14, err_msg=f"omega={omega}")


@pytest.mark.parametrize("r", [0.005, 0.1, 0.45, 0.8, 0.97])
@pytest.mark.parametrize("impact", [0.0, 0.3])
def test_flux_series_matches_exact_occultation(r, impact):
  """The CPU value pass takes the occultation along a light curve from Chebyshev series in b built
  from the exact kernel (transit.h's FluxSeries: pieces graded geometrically towards the contact
  points b = 1 -/+ r, exact evaluation nearest to them and where a series does not converge).
  Against the unfused model (jaxext.limb_dark_flux at every time) at times spaced geometrically
  towards each contact point and b = 1 (so that every piece down to the exact zone gets points,
  and blocks straddle pieces) and uniformly over the transit (through b = 0 for a central one),
  for four laws, with and without exposures. The series must have been used: the result differs
  from the kernel's exact pass (the per-point derivative form) somewhere, at rounding level."""
  period, t0, a = 3.0, 0.2, 8.0
  cos_i = impact / a

  def time_at(sep):  # circular orbit: sep^2 = a^2 (sin^2 phi + cos_i^2 cos^2 phi)
    return t0 + period / (2 * np.pi) * np.arcsin(np.sqrt(((sep / a)**2 - cos_i**2) / (1 - cos_i**2)))

  steps = 0.01 * 2.0**-np.linspace(0.0, 40.0, 4001)
  ts = [np.linspace(t0 - 0.2, t0 + 0.2, 20001)]
  for sep in (1 - r, 1.0, 1 + r):
    if sep > impact:
      ts += [time_at(sep) - steps, time_at(sep) + steps]
  t = jnp.asarray(np.sort(np.concatenate(ts)))
  for u in ([0.5], [0.4, 0.26], [0.9, -0.3], [0.1, 0.2, 0.3, 0.1]):
    for texp, oversample in ((0.0, 1), (0.004, 5)):
      assert transit_module._uses_flux_series(t.shape, 0, oversample)
      q = transit_module._kernel_params(period=period, t0=t0, a=a, r=r, impact=impact,
                                        inclination=None, ecc=0.0, omega=0.0, texp=texp)
      u = jnp.asarray(u)
      (fused,) = transit_module.transit_p.bind(t, q, u, grad=False, oversample=oversample)
      exact = transit_module._unfused_flux(t, q, u, oversample)
      kernel_exact = transit_module.transit_p.bind(t, q, u, grad=True, oversample=oversample)[0]
      assert float(jnp.min(fused)) < 1 - 0.5 * r * r
      assert np.any(np.asarray(fused) != np.asarray(kernel_exact)), "the series was not used"
      np.testing.assert_allclose(fused, exact, rtol=0, atol=2e-15,
                                 err_msg=f"u={u}, oversample={oversample}")


def test_flux_does_not_depend_on_chunking():
  """The flux series' pieces are built by whichever chunk of the CPU kernel first needs them (in a
  table shared by the chunks, or the chunk's own for a light curve inside it), from r and the law
  only, and every lane step runs on whole vector blocks: a light curve's flux (and its
  derivatives) is bitwise the same alone and among others (other chunk boundaries, other threads,
  other block alignment), with and without exposures."""
  t = jnp.linspace(-0.25, 0.35, 30001)
  for texp in (None, 0.01):
    kw = dict(t0=0.05, a=9.0, impact=0.2, r=0.12, u=U, ecc=0.2, omega=0.4, texp=texp)
    alone = jaxext.transit_light_curve(t, period=3.0, **kw)
    # 16 curves: some with period 3 lie inside one chunk (a chunk-local series table), alone it
    # straddles chunks (a table shared between them).
    periods = jnp.array([2.0, 3.0, 3.7, 3.0] * 4)[:, None]
    among = jaxext.transit_light_curve(jnp.concatenate([t[:7], t]), period=periods, **kw)
    assert float(jnp.min(alone)) < 0.99
    for row in range(1, 16, 2):
      np.testing.assert_array_equal(np.asarray(among[row, 7:]), np.asarray(alone))
  # The derivative kernel (per-point derivatives) likewise.
  for texp, oversample in ((0.0, 1), (0.01, 5)):
    q = transit_module._kernel_params(period=jnp.array([2.0, 3.0]), t0=0.05, a=9.0, r=0.12,
                                      impact=0.2, inclination=None, ecc=0.2, omega=0.4, texp=texp)
    u = jnp.broadcast_to(U, (2, 2))
    (f1, dq1, du1) = transit_module.transit_p.bind(t, q[1], U, grad=True, oversample=oversample)
    (f2, dq2, du2) = transit_module.transit_p.bind(
        jnp.broadcast_to(jnp.concatenate([t[:7], t]), (2, 30008)), q, u, grad=True,
        oversample=oversample)
    for a, b in ((f1, f2), (dq1, dq2), (du1, du2)):
      np.testing.assert_array_equal(np.asarray(b[1, 7:]), np.asarray(a))
