"""Tests of jaxext.ode.dop853 (CPU).

References: scipy.integrate.solve_ivp(method="DOP853") trajectory by trajectory (values, accepted
steps, right-hand side evaluations, event times); analytic two-body propagation through Kepler's
equation; conservation of energy and angular momentum; the secular J2 rates of node and perigee;
an independent NumPy implementation of the built-in models (gravity from the gradient of the zonal
potential, density from the table); closed-form event times. Plus statuses, bad rows, jit, vmap
and argument errors.
"""

import math
import os
import subprocess
import sys
import tempfile
import textwrap
import warnings

os.environ.setdefault("JAXEXT_NUMBA_CACHE_DIR",
                      os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "numba"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.integrate  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from jaxext import ode  # noqa: E402
from jaxext.ode import models  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

MU, RE = models.EARTH_MU, models.EARTH_RADIUS


def scipy_dop853(f, t_span, y0, **kw):
  return scipy.integrate.solve_ivp(f, t_span, y0, method="DOP853", **kw)


# --- user right-hand sides (Numba) and their NumPy twins for scipy ---------------------------

@ode.rhs
def van_der_pol(t, y, p, dydt):
  dydt[0] = y[1]
  dydt[1] = p[0] * (1 - y[0] * y[0]) * y[1] - y[0]


def van_der_pol_np(p):
  return lambda t, y: np.array([y[1], p[0] * (1 - y[0] * y[0]) * y[1] - y[0]])


@ode.rhs
def arenstorf(t, y, p, dydt):  # restricted three-body problem (Hairer's test orbit)
  m = p[0]
  mp = 1.0 - m
  d1 = ((y[0] + m) ** 2 + y[1] ** 2) ** 1.5
  d2 = ((y[0] - mp) ** 2 + y[1] ** 2) ** 1.5
  dydt[0] = y[2]
  dydt[1] = y[3]
  dydt[2] = y[0] + 2 * y[3] - mp * (y[0] + m) / d1 - m * (y[0] - mp) / d2
  dydt[3] = y[1] - 2 * y[2] - mp * y[1] / d1 - m * y[1] / d2


def arenstorf_np(p):
  m = p[0]
  mp = 1.0 - m

  def f(t, y):
    d1 = ((y[0] + m) ** 2 + y[1] ** 2) ** 1.5
    d2 = ((y[0] - mp) ** 2 + y[1] ** 2) ** 1.5
    return np.array([y[2], y[3], y[0] + 2 * y[3] - mp * (y[0] + m) / d1 - m * (y[0] - mp) / d2,
                     y[1] - 2 * y[2] - mp * y[1] / d1 - m * y[1] / d2])
  return f


ARENSTORF_Y0 = np.array([0.994, 0.0, 0.0, -2.00158510637908252240537862224])
ARENSTORF_T = 17.0652165601579625588917206249
ARENSTORF_MU = 0.012277471


@ode.rhs
def forced(t, y, p, dydt):  # time-dependent and with several parameters
  dydt[0] = y[1]
  dydt[1] = -p[0] * y[0] - p[1] * y[1] + p[2] * np.cos(p[3] * t)


def forced_np(p):
  return lambda t, y: np.array([y[1], -p[0] * y[0] - p[1] * y[1] + p[2] * np.cos(p[3] * t)])


@ode.rhs
def blow_up(t, y, p, dydt):  # y' = y^2: y = 1 / (1 - t) from y(0) = 1, singular at t = 1
  dydt[0] = y[0] * y[0]


@ode.rhs
def raises(t, y, p, dydt):
  if y[0] > 0.5:
    raise ValueError("boom")
  dydt[0] = 1.0


# --- independent NumPy model: zonal gravity as the gradient of the potential, table density ----

def zonal_potential_gradient(r, j2, j3, j4, mu=MU, radius=RE):
  """-grad V for V = -mu/r (1 - sum J_n (R/r)^n P_n(z/r)), by central differences of degree 8
  on the potential (independent of the closed-form accelerations in C++)."""
  def potential(q):
    x, y, z = q
    rr = np.sqrt(x * x + y * y + z * z)
    s = z / rr
    p2 = (3 * s * s - 1) / 2
    p3 = (5 * s ** 3 - 3 * s) / 2
    p4 = (35 * s ** 4 - 30 * s * s + 3) / 8
    return mu / rr * (1 - j2 * (radius / rr) ** 2 * p2 - j3 * (radius / rr) ** 3 * p3
                      - j4 * (radius / rr) ** 4 * p4)
  h = 1e-3 * np.linalg.norm(r)
  w = [(1, 4 / 5), (2, -1 / 5), (3, 4 / 105), (4, -1 / 280)]
  out = np.zeros(3)
  for k in range(3):
    e = np.zeros(3)
    e[k] = h
    out[k] = sum(c * (potential(r + m * e) - potential(r - m * e)) for m, c in w) / h
  return out


def model_np(model, p):
  atm = model.atmosphere

  def f(t, y):
    r, v = y[:3], y[3:]
    a = zonal_potential_gradient(r, model.j2, model.j3, model.j4, model.mu, model.radius)
    if atm is not None:
      rho = atm.density_at(np.linalg.norm(r) - model.radius)
      vrel = v - np.cross([0, 0, model.rotation], r)
      a = a - 0.5 * p[0] * rho * model.meters_per_unit * np.linalg.norm(vrel) * vrel
    return np.concatenate([v, a])
  return f


def circular_state(altitude, inclination, raan=0.0, u=0.0):
  r = RE + altitude
  v = np.sqrt(MU / r)
  ci, si, co, so, cu, su = (np.cos(inclination), np.sin(inclination), np.cos(raan), np.sin(raan),
                            np.cos(u), np.sin(u))
  pos = r * np.array([co * cu - so * su * ci, so * cu + co * su * ci, su * si])
  vel = v * np.array([-co * su - so * cu * ci, -so * su + co * cu * ci, cu * si])
  return np.concatenate([pos, vel])


def elements_state(a, e, i, raan, argp, nu, mu=MU):
  p = a * (1 - e * e)
  r = p / (1 + e * np.cos(nu))
  pf = np.array([r * np.cos(nu), r * np.sin(nu), 0.0])
  vf = np.sqrt(mu / p) * np.array([-np.sin(nu), e + np.cos(nu), 0.0])
  rot = lambda ang, ax: {
      "z": np.array([[np.cos(ang), -np.sin(ang), 0], [np.sin(ang), np.cos(ang), 0], [0, 0, 1]]),
      "x": np.array([[1, 0, 0], [0, np.cos(ang), -np.sin(ang)], [0, np.sin(ang), np.cos(ang)]])}[ax]
  q = rot(raan, "z") @ rot(i, "x") @ rot(argp, "z")
  return np.concatenate([q @ pf, q @ vf])


# --- against scipy, trajectory by trajectory ---------------------------------------------------

# (name, rhs, NumPy rhs, y0, params, t1, agreement relative to the solution's scale). Arenstorf's
# orbit ends with a close approach to the small body that amplifies roundoff differences (BLAS vs
# our summation order) by ~1e4; the others agree to 1e-10 over the whole interval.
CASES = [
    ("van_der_pol", van_der_pol, van_der_pol_np, np.array([2.0, 0.0]), np.array([1.0]), 20.0,
     1e-10),
    ("van_der_pol_stiffish", van_der_pol, van_der_pol_np, np.array([1.0, 0.5]), np.array([8.0]),
     15.0, 1e-10),
    ("arenstorf", arenstorf, arenstorf_np, ARENSTORF_Y0, np.array([ARENSTORF_MU]), ARENSTORF_T,
     1e-8),
    ("forced", forced, forced_np, np.array([1.0, 0.0]), np.array([4.0, 0.1, 0.5, 1.7]), 30.0,
     1e-10),
]


@pytest.mark.parametrize("tol", [1e-6, 1e-9, 1e-12])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_single_trajectories_match_scipy(case, tol):
  _, rhs, rhs_np, y0, p, t1, agree = case
  te = np.linspace(0.0, t1, 37)
  sol = ode.dop853(rhs, y0[None], (0.0, t1), p, t_eval=te, rtol=tol, atol=tol)
  ref = scipy_dop853(rhs_np(p), (0.0, t1), y0, rtol=tol, atol=tol, t_eval=te)
  steps = scipy_dop853(rhs_np(p), (0.0, t1), y0, rtol=tol, atol=tol)
  assert int(sol.status[0]) == ode.Status.SUCCESS == ref.status
  assert int(sol.n_accepted[0]) == len(steps.t) - 1  # scipy's accepted steps
  assert int(sol.n_rhs[0]) == ref.nfev                 # evaluations, dense output included
  assert float(sol.t_final[0]) == t1
  scale = np.abs(ref.y).max()
  np.testing.assert_allclose(sol.ys[0], ref.y.T, rtol=0, atol=agree * scale)
  np.testing.assert_allclose(sol.y_final[0], steps.y[:, -1], rtol=0, atol=agree * scale)
  np.testing.assert_allclose(sol.ys[0, -1], sol.y_final[0], rtol=0, atol=1e-12 * scale)


def test_many_trajectories_each_match_scipy():
  rng = np.random.default_rng(0)
  n = 64
  y0 = np.stack([rng.uniform(-2, 2, n), rng.uniform(-1, 1, n)], axis=1)
  mu = rng.uniform(0.1, 5.0, (n, 1))
  t1 = rng.uniform(1.0, 12.0, n)
  sol = ode.dop853(van_der_pol, y0, (np.zeros(n), t1), mu, rtol=1e-9, atol=1e-9)
  assert np.all(np.asarray(sol.status) == 0)
  steps = np.asarray(sol.n_accepted)
  assert steps.min() < steps.max()  # per-trajectory step sizes: no lockstep
  for j in range(0, n, 7):
    ref = scipy_dop853(van_der_pol_np(mu[j]), (0.0, t1[j]), y0[j], rtol=1e-9, atol=1e-9)
    assert steps[j] == len(ref.t) - 1
    assert int(sol.n_rhs[j]) == ref.nfev
    np.testing.assert_allclose(sol.y_final[j], ref.y[:, -1], rtol=1e-11, atol=1e-11)
    assert float(sol.t_final[j]) == t1[j]


def test_backward_integration_matches_scipy():
  te = np.linspace(5.0, -3.0, 9)
  sol = ode.dop853(forced, np.array([[0.3, -0.2]]), (5.0, -3.0), [2.0, 0.3, 1.0, 0.7], t_eval=te,
                   rtol=1e-10, atol=1e-10)
  ref = scipy_dop853(forced_np([2.0, 0.3, 1.0, 0.7]), (5.0, -3.0), [0.3, -0.2], rtol=1e-10,
                     atol=1e-10, t_eval=te)
  assert int(sol.n_rhs[0]) == ref.nfev
  np.testing.assert_allclose(sol.ys[0], ref.y.T, rtol=0, atol=1e-12)


def test_float32():
  te = np.linspace(0.0, 10.0, 11)
  y0 = np.array([[2.0, 0.0], [0.5, 1.0]], np.float32)
  sol = jax.jit(lambda y: ode.dop853(van_der_pol, y, (0.0, 10.0), np.float32([1.5]), t_eval=te,
                                     rtol=2e-5, atol=1e-7))(y0)  # float32's floor: 1.2e-5
  assert sol.ys.dtype == jnp.float32 and sol.t_final.dtype == jnp.float32
  assert np.all(np.asarray(sol.status) == 0)
  for j in range(2):
    ref = scipy_dop853(van_der_pol_np([1.5]), (0.0, 10.0), y0[j].astype(np.float64),
                       rtol=1e-10, atol=1e-12, t_eval=te)
    np.testing.assert_allclose(sol.ys[j], ref.y.T, rtol=0, atol=2e-4)


def test_first_and_max_step_as_scipy():
  kw = dict(rtol=1e-8, atol=1e-8, first_step=1e-3, max_step=0.05)
  sol = ode.dop853(van_der_pol, np.array([[2.0, 0.0]]), (0.0, 6.0), [1.0], **kw)
  ref = scipy_dop853(van_der_pol_np([1.0]), (0.0, 6.0), [2.0, 0.0], **kw)
  assert int(sol.n_accepted[0]) == len(ref.t) - 1 >= 6.0 / 0.05
  assert int(sol.n_rhs[0]) == ref.nfev
  np.testing.assert_allclose(sol.y_final[0], ref.y[:, -1], rtol=1e-12, atol=1e-12)


def test_per_trajectory_spans_and_t_eval_outside():
  te = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
  spans = np.array([[0.0, 4.0], [1.0, 2.5], [2.0, 2.0]])
  y0 = np.array([[1.0, 0.0], [0.5, 0.5], [0.3, 0.1]])
  sol = ode.dop853(forced, y0, spans, [1.0, 0.0, 0.0, 0.0], t_eval=te, rtol=1e-12, atol=1e-12)
  assert np.all(np.asarray(sol.status) == 0)
  ys = np.asarray(sol.ys)
  np.testing.assert_allclose(ys[0, :, 0], np.cos(te), atol=1e-10)
  assert np.all(np.isnan(ys[1, [0, 3, 4]])) and np.all(np.isfinite(ys[1, [1, 2]]))
  c, s = np.cos(te[1:3] - 1.0), np.sin(te[1:3] - 1.0)
  np.testing.assert_allclose(ys[1, 1:3, 0], 0.5 * c + 0.5 * s, atol=1e-10)
  # t0 == t1: nothing integrated, the state at t0 reported (as scipy)
  np.testing.assert_array_equal(ys[2, 2], y0[2])
  assert np.all(np.isnan(ys[2, [0, 1, 3, 4]]))
  assert int(sol.n_steps[2]) == 0 and int(sol.n_rhs[2]) == 1 and float(sol.t_final[2]) == 2.0
  # Outside every trajectory's span: refused, as scipy refuses t_eval outside t_span ...
  with pytest.raises(ValueError, match=r"outside t_span \(\[5.0\]"):
    ode.dop853(forced, y0, spans, [1.0, 0.0, 0.0, 0.0], t_eval=np.append(te, 5.0))
  with pytest.raises(ValueError, match="outside t_span"):
    ode.dop853(forced, y0[:1], (0.0, 1.0), [1.0, 0.0, 0.0, 0.0], t_eval=[0.5, 1.5])
  # ... and NaN when traced (the check needs values).
  ys = jax.jit(lambda te: ode.dop853(forced, y0[:1], (0.0, 1.0), [1.0, 0.0, 0.0, 0.0],
                                     t_eval=te).ys)(np.array([0.5, 1.5]))
  assert np.all(np.isfinite(ys[0, 0])) and np.all(np.isnan(ys[0, 1]))


# --- orbits -----------------------------------------------------------------------------------

def kepler_propagate(y0, t):
  """Analytic two-body propagation (jaxext.kepler for the eccentric anomaly)."""
  r0, v0 = y0[:3], y0[3:]
  h = np.cross(r0, v0)
  energy = v0 @ v0 / 2 - MU / np.linalg.norm(r0)
  a = -MU / (2 * energy)
  evec = np.cross(v0, h) / MU - r0 / np.linalg.norm(r0)
  e = np.linalg.norm(evec)
  p_hat = evec / e
  q_hat = np.cross(h / np.linalg.norm(h), p_hat)
  n = np.sqrt(MU / a ** 3)
  cos_e0 = (1 - np.linalg.norm(r0) / a) / e
  sin_e0 = (r0 @ v0) / (e * np.sqrt(MU * a))
  e0 = np.arctan2(sin_e0, cos_e0)
  m = e0 - e * np.sin(e0) + n * np.asarray(t)
  s, c = (np.asarray(x) for x in jaxext.kepler(m, np.full_like(m, e)))
  b = a * np.sqrt(1 - e * e)
  pos = (a * (c - e))[:, None] * p_hat + (b * s)[:, None] * q_hat
  edot = n / (1 - e * c)
  vel = (-a * s * edot)[:, None] * p_hat + (b * c * edot)[:, None] * q_hat
  return np.concatenate([pos, vel], axis=1)


def test_two_body_against_kepler_and_conservation():
  y0 = np.stack([elements_state(7000.0, 0.01, 0.9, 0.3, 0.5, 0.0),
                 elements_state(24396.0, 0.73, 0.5, 1.0, 3.0, 0.2),
                 elements_state(42164.0, 0.001, 0.01, 0.0, 0.0, 1.0)])
  te = np.linspace(0.0, 86400.0, 25)
  sol = ode.dop853(models.two_body(), y0, (0.0, 86400.0), t_eval=te, rtol=1e-12, atol=1e-12)
  assert np.all(np.asarray(sol.status) == 0)
  for j in range(3):
    exact = kepler_propagate(y0[j], te)
    scale = np.linalg.norm(y0[j, :3])
    np.testing.assert_allclose(sol.ys[j, :, :3], exact[:, :3], rtol=0, atol=1e-8 * scale)
    ys = np.asarray(sol.ys[j])
    energy = np.sum(ys[:, 3:] ** 2, 1) / 2 - MU / np.linalg.norm(ys[:, :3], axis=1)
    h = np.cross(ys[:, :3], ys[:, 3:])
    assert np.abs(energy / energy[0] - 1).max() < 1e-10
    assert np.abs(np.linalg.norm(h - h[0], axis=1) / np.linalg.norm(h[0])).max() < 1e-10


def test_j2_secular_node_and_perigee_rates():
  a, e, inc = 7200.0, 0.05, np.radians(50.0)
  y0 = elements_state(a, e, inc, 0.4, 0.7, 0.0)[None]
  days = 10
  te = np.linspace(0.0, days * 86400.0, 20 * days + 1)
  sol = ode.dop853(models.earth(j2=True), y0, (0.0, te[-1]), t_eval=te, rtol=1e-11, atol=1e-11)
  ys = np.asarray(sol.ys[0])
  r, v = ys[:, :3], ys[:, 3:]
  h = np.cross(r, v)
  node = np.unwrap(np.arctan2(h[:, 0], -h[:, 1]))
  evec = np.cross(v, h) / MU - r / np.linalg.norm(r, axis=1)[:, None]
  nvec = np.stack([np.cos(node), np.sin(node), np.zeros_like(node)], 1)
  argp = np.unwrap(np.arctan2(np.einsum("ij,ij->i", np.cross(nvec, evec), h /
                                        np.linalg.norm(h, axis=1)[:, None]),
                              np.einsum("ij,ij->i", nvec, evec)))
  n = np.sqrt(MU / a ** 3)
  k = 1.5 * n * models.EARTH_J2 * (RE / (a * (1 - e * e))) ** 2
  node_rate, argp_rate = -k * np.cos(inc), k * (2 - 2.5 * np.sin(inc) ** 2)
  assert abs(np.polyfit(te, node, 1)[0] / node_rate - 1) < 0.01
  assert abs(np.polyfit(te, argp, 1)[0] / argp_rate - 1) < 0.02


# One smooth density band: the table's bands meet with density jumps of up to 0.1%, and a step
# across a jump makes two correct integrations differ by more than their tolerance.
SMOOTH_AIR = models.Atmosphere(base_altitude=(300.0,), density=(2.418e-11,), scale_height=(53.628,))


@pytest.mark.parametrize("model", [
    models.earth(j2=True, j3=True, j4=True),
    models.Model(j2=models.EARTH_J2, atmosphere=SMOOTH_AIR, name="J2 + drag"),
], ids=["zonal", "j2_drag"])
def test_built_in_models_against_independent_numpy(model):
  y0 = np.stack([circular_state(350.0, 0.9, 0.1, 0.2), circular_state(800.0, 1.7, 2.0, 1.0),
                 elements_state(24396.0, 0.73, 0.4, 1.0, 3.0, 0.0)])
  p = np.array([[0.02], [0.005], [0.01]])
  te = np.linspace(0.0, 6 * 3600.0, 13)
  sol = ode.dop853(model, y0, (0.0, te[-1]), p, t_eval=te, rtol=1e-10, atol=1e-10)
  assert np.all(np.asarray(sol.status) == 0)
  for j in range(3):
    ref = scipy_dop853(model_np(model, p[j]), (0.0, te[-1]), y0[j], rtol=1e-10, atol=1e-10,
                       t_eval=te)
    # Both integrations are accurate to ~1e-10 relative: positions agree to a centimetre.
    np.testing.assert_allclose(sol.ys[j, :, :3], ref.y[:3].T, rtol=0, atol=1e-5)  # km
    # Same algorithm and model: the step counts agree up to roundoff-level ties.
    assert abs(int(sol.n_rhs[j]) - ref.nfev) <= 15


def test_drag_lowers_the_orbit():
  y0 = np.stack([circular_state(300.0, 0.9)] * 3)
  b = np.array([[0.0], [0.01], [0.05]])
  sol = ode.dop853(models.earth(j2=False, drag=True), y0, (0.0, 86400.0), b, rtol=1e-10,
                   atol=1e-10)
  energy = np.sum(np.asarray(sol.y_final)[:, 3:] ** 2, 1) / 2 - MU / np.linalg.norm(
      np.asarray(sol.y_final)[:, :3], axis=1)
  e0 = np.sum(y0[0, 3:] ** 2) / 2 - MU / np.linalg.norm(y0[0, :3])
  assert abs(energy[0] / e0 - 1) < 1e-9
  assert e0 > energy[1] > energy[2]


def test_atmosphere_table_is_continuous():
  atm = models.EXPONENTIAL_ATMOSPHERE
  b = np.asarray(atm.base_altitude, float)
  below = atm.density_at(b[1:] - 1e-9)
  np.testing.assert_allclose(below, np.asarray(atm.density)[1:], rtol=2e-3)


# --- events -----------------------------------------------------------------------------------

@ode.event
def crosses_zero(t, y, p):
  return y[0]


def test_events_at_known_times_and_counts():
  # y'' = -y from (1, 0): y = cos t crosses zero at pi/2 + k pi; up-crossings at 3pi/2 + 2k pi.
  up = ode.event(lambda t, y, p: y[0], direction=1, name="up")
  down = ode.event(lambda t, y, p: y[0], direction=-1, name="down")
  sol = ode.dop853(forced, np.array([[1.0, 0.0]]), (0.0, 20.0), [1.0, 0.0, 0.0, 0.0],
                   events=[crosses_zero, up, down], event_slots=4, rtol=1e-12, atol=1e-12)
  counts = np.asarray(sol.event_counts[0])
  assert counts.tolist() == [6, 3, 3]  # 6 crossings before t = 20; only 4 stored
  te = np.asarray(sol.t_events[0])
  np.testing.assert_allclose(te[0], np.pi / 2 + np.pi * np.arange(4), rtol=0, atol=1e-11)
  np.testing.assert_allclose(te[1, :3], 1.5 * np.pi + 2 * np.pi * np.arange(3), atol=1e-11)
  np.testing.assert_allclose(te[2, :3], 0.5 * np.pi + 2 * np.pi * np.arange(3), atol=1e-11)
  assert np.isnan(te[1, 3]) and np.isnan(te[2, 3])
  np.testing.assert_allclose(sol.y_events[0, 0, :, 0], 0.0, atol=1e-11)
  np.testing.assert_allclose(np.abs(sol.y_events[0, 0, :, 1]), 1.0, atol=1e-11)


def test_terminal_events_match_scipy():
  def g(t, y):
    return y[0] - 0.5
  g.terminal = 2
  g.direction = -1
  p = [2.0, 0.1, 0.3, 1.1]
  ref = scipy_dop853(forced_np(p), (0.0, 30.0), [1.0, 0.0], rtol=1e-10, atol=1e-10, events=[g])

  def g2(t, y, p):
    return y[0] - 0.5
  g2.terminal = 2
  g2.direction = -1
  te = np.linspace(0.0, 30.0, 61)
  sol = ode.dop853(forced, np.array([[1.0, 0.0]]), (0.0, 30.0), p, events=[g2], rtol=1e-10,
                   atol=1e-10, t_eval=te)
  assert int(sol.status[0]) == ode.Status.EVENT == ref.status
  assert int(sol.event_counts[0, 0]) == 2 == len(ref.t_events[0])
  np.testing.assert_allclose(sol.t_events[0, 0, :2], ref.t_events[0], rtol=1e-13)
  np.testing.assert_allclose(sol.y_events[0, 0, :2], ref.y_events[0], rtol=0, atol=1e-12)
  assert float(sol.t_final[0]) == pytest.approx(ref.t_events[0][1], rel=1e-14)
  np.testing.assert_allclose(sol.y_final[0, 0], 0.5, atol=1e-12)
  ys = np.asarray(sol.ys[0])
  reached = te <= ref.t_events[0][1]
  assert np.all(np.isfinite(ys[reached])) and np.all(np.isnan(ys[~reached]))


def test_decay_altitude_event_built_in():
  y0 = np.stack([circular_state(200.0, 0.9), circular_state(200.0, 0.9)])
  b = np.array([[0.0], [0.2]])  # only the second decays within a day
  sol = ode.dop853(models.earth(j2=True, drag=True), y0, (0.0, 86400.0), b, rtol=1e-9, atol=1e-9,
                   events=[models.altitude_event(120.0)])
  assert np.asarray(sol.status).tolist() == [0, 1]
  assert np.asarray(sol.event_counts[:, 0]).tolist() == [0, 1]
  t_hit = float(sol.t_events[1, 0, 0])
  assert 0 < t_hit < 86400 and float(sol.t_final[1]) == t_hit
  assert np.linalg.norm(np.asarray(sol.y_final[1, :3])) == pytest.approx(RE + 120.0, abs=1e-6)


# --- statuses and bad rows ----------------------------------------------------------------------

def test_float32_failure_statuses():  # rtol above float32's floor (1.2e-5: no warning)
  sol = ode.dop853(blow_up, np.array([[1.0]], np.float32), (0.0, 2.0), rtol=2e-5, atol=1e-6)
  assert int(sol.status[0]) == ode.Status.STEP_TOO_SMALL
  assert int(sol.n_steps[0]) < 1000 and 0.99 < float(sol.t_final[0]) < 1.0


def test_events_backward_and_several_terminal_in_one_step():
  # Backward from t = 10: cos t crosses zero (downwards in reversed time means g goes + to -).
  def g(t, y):
    return y[0]
  g.direction = -0.5  # scipy takes the sign
  p = [1.0, 0.0, 0.0, 0.0]
  ref = scipy_dop853(forced_np(p), (10.0, 0.0), [np.cos(10.0), -np.sin(10.0)], rtol=1e-12,
                     atol=1e-12, events=[g])
  g2 = lambda t, y, p: y[0]
  g2.direction = -0.5
  sol = ode.dop853(forced, np.array([[np.cos(10.0), -np.sin(10.0)]]), (10.0, 0.0), p,
                   events=[g2], rtol=1e-12, atol=1e-12)
  k = len(ref.t_events[0])
  assert int(sol.event_counts[0, 0]) == k >= 1
  np.testing.assert_allclose(sol.t_events[0, 0, :k], ref.t_events[0], rtol=1e-13)
  # Two terminal events in the same step: the earlier one stops the integration, the later one
  # is not recorded.
  early = ode.event(lambda t, y, p: t - 1.0, terminal=np.int64(1), name="early")
  late = ode.event(lambda t, y, p: t - 1.0 - 1e-9, terminal=True, name="late")
  sol = ode.dop853(forced, np.array([[1.0, 0.0]]), (0.0, 5.0), p, events=[late, early],
                   max_step=10.0, rtol=1e-6, atol=1e-6)
  assert int(sol.status[0]) == ode.Status.EVENT
  assert np.asarray(sol.event_counts[0]).tolist() == [0, 1]
  assert float(sol.t_final[0]) == pytest.approx(1.0, abs=1e-12)


def test_statuses():
  sol = ode.dop853(blow_up, np.array([[1.0]]), (0.0, 2.0), rtol=1e-8, atol=1e-8)
  ref = scipy_dop853(lambda t, y: y * y, (0.0, 2.0), [1.0], rtol=1e-8, atol=1e-8)
  assert ref.status == -1 and int(sol.status[0]) == ode.Status.STEP_TOO_SMALL
  assert float(sol.t_final[0]) == pytest.approx(ref.t[-1], rel=1e-12)
  sol = ode.dop853(van_der_pol, np.array([[2.0, 0.0]]), (0.0, 20.0), [1.0], max_steps=10)
  assert int(sol.status[0]) == ode.Status.MAX_STEPS and int(sol.n_steps[0]) == 10
  assert float(sol.t_final[0]) < 20.0


def test_non_finite_rows_leave_the_others_exact():
  rng = np.random.default_rng(1)
  y0 = rng.uniform(-1, 1, (6, 2))
  mu = rng.uniform(0.5, 2, (6, 1))
  te = np.linspace(0, 5, 6)
  good = ode.dop853(van_der_pol, y0, (0.0, 5.0), mu, t_eval=te)
  y0_bad, mu_bad = y0.copy(), mu.copy()
  y0_bad[1, 0] = np.nan
  mu_bad[3, 0] = np.inf
  y0_bad[4, 1] = -np.inf
  bad = ode.dop853(van_der_pol, y0_bad, (0.0, 5.0), mu_bad, t_eval=te)
  status = np.asarray(bad.status)
  assert status.tolist() == [0, -3, 0, -3, -3, 0]
  ok = status == 0
  np.testing.assert_array_equal(np.asarray(bad.ys)[ok], np.asarray(good.ys)[ok])
  np.testing.assert_array_equal(np.asarray(bad.n_rhs)[ok], np.asarray(good.n_rhs)[ok])
  assert np.all(np.isnan(np.asarray(bad.ys)[~ok]))


def test_user_exception_raises():
  with pytest.raises(Exception, match="raised an exception"):
    jax.block_until_ready(ode.dop853(raises, np.array([[0.0]]), (0.0, 1.0)).ys)


def test_states_and_parameters_are_read_only():
  """y and p belong to the integrator (its stage workspace) and the caller: a right-hand side,
  Jacobian or event writing them fails to compile, naming the rule, eagerly and under jit."""
  def writes_y(t, y, p, dydt):
    y[0] = 0.0
    dydt[0] = -y[0]

  def writes_p(t, y, p, dydt):
    p[0] = 2.0
    dydt[0] = -p[0] * y[0]

  def jac_writes_y(t, y, p, dfdy, dfdp):
    y[0] = 1.0
    dfdy[0, 0] = -1.0

  def decay(t, y, p, dydt):
    dydt[0] = -y[0]

  def event_writes_y(t, y, p):
    y[0] = 0.5
    return y[0] - 0.5

  y0, prm = jnp.array([[1.0]]), jnp.array([[1.0]])
  cases = [lambda y: ode.dop853(writes_y, y, (0.0, 1.0), prm).y_final,
           lambda y: ode.dop853(writes_p, y, (0.0, 1.0), prm).y_final,
           lambda y: ode.dop853(decay, y, (0.0, 1.0), prm,
                                events=[ode.event(event_writes_y)]).y_final,
           jax.grad(lambda y: ode.dop853(ode.rhs(decay, jacobian=jac_writes_y), y, (0.0, 1.0),
                                         prm).y_final.sum())]
  for case in cases:
    for call in (case, jax.jit(case)):
      with pytest.raises(TypeError, match="inputs are read-only"):
        jax.block_until_ready(call(y0))
  np.testing.assert_array_equal(y0, [[1.0]])
  np.testing.assert_array_equal(prm, [[1.0]])


def _reads_past_p(t, y, p, dydt):
  dydt[0] = -p[3] * y[0]  # p has one column


def _writes_past_dfdy(t, y, p, dfdy, dfdp):
  dfdy[0, 0] = -p[0]
  dfdp[0, 0] = -y[0]
  dfdy[5, 5] = 1.0  # d = 1


def _decay(t, y, p, dydt):
  dydt[0] = -p[0] * y[0]


def _event_past_y(t, y, p):
  return y[7] - 0.5


def test_boundscheck_on_every_user_function():
  """`boundscheck=True` (Numba's bounds checking) turns an out-of-range index in a right-hand
  side, Jacobian or event into the call's exception, eagerly and under jit."""
  y0, prm = jnp.array([[1.0]]), jnp.array([[0.5]])
  checked_rhs = ode.rhs(_reads_past_p, boundscheck=True)
  checked_jac = ode.rhs(_decay, jacobian=_writes_past_dfdy, boundscheck=True)
  checked_event = ode.event(_event_past_y, boundscheck=True)
  cases = [lambda y: ode.dop853(checked_rhs, y, (0.0, 1.0), prm).y_final,
           jax.grad(lambda y: ode.dop853(checked_jac, y, (0.0, 1.0), prm).y_final.sum()),
           lambda y: ode.dop853(_decay, y, (0.0, 1.0), prm, events=[checked_event]).y_final]
  for case in cases:
    for call in (case, jax.jit(case)):
      with pytest.raises(Exception, match="raised an exception"):
        jax.block_until_ready(call(y0))
  # The same functions without the flag are different primitives (nothing cached is shared).
  from jaxext.ode.dop853 import UserFunctions
  assert UserFunctions(checked_rhs, ()) != UserFunctions(ode.rhs(_reads_past_p), ())
  # In range, a checked function gives the unchecked one's numbers.
  fine = ode.rhs(_decay, boundscheck=True)
  np.testing.assert_array_equal(ode.dop853(fine, y0, (0.0, 1.0), prm).y_final,
                                ode.dop853(_decay, y0, (0.0, 1.0), prm).y_final)


def test_numba_boundscheck_environment_variable_is_honoured(tmp_path):
  """NUMBA_BOUNDSCHECK=1 checks every user function, as it does Numba's own, and is part of the
  content id: machine code compiled without checks (cached on disk) is not served under it."""
  script = textwrap.dedent("""
      import jax, jax.numpy as jnp
      jax.config.update("jax_enable_x64", True)
      from jaxext import ode

      def reads_past_p(t, y, p, dydt):
          dydt[0] = -p[3] * y[0]

      try:
          out = ode.dop853(reads_past_p, jnp.array([[1.0]]), (0.0, 1.0), jnp.array([[0.5]]))
          jax.block_until_ready(out.y_final)
          print("NO ERROR")
      except Exception as err:
          print("RAISED" if "raised an exception" in str(err) else f"OTHER {err}")
      """)
  env = dict(os.environ, JAXEXT_NUMBA_CACHE_DIR=str(tmp_path))
  env.pop("NUMBA_BOUNDSCHECK", None)
  run = lambda env: subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                                   text=True, timeout=300)
  first = run(env)  # unchecked: reads past p (garbage, no error), compiled and cached on disk
  assert first.returncode == 0 and "NO ERROR" in first.stdout, first.stdout + first.stderr
  second = run(dict(env, NUMBA_BOUNDSCHECK="1"))
  assert second.returncode == 0 and "RAISED" in second.stdout, second.stdout + second.stderr


def test_rhs_returning_dydt_instead_of_writing_it_is_refused():
  """A right-hand side (or Jacobian) that returns its result ran with dy/dt = 0 and reported
  success; now it fails to compile at trace time, saying to write into dydt."""
  def returns_dydt(t, y, p, dydt):
    return -y

  def jac_returns(t, y, p, dfdy, dfdp):
    dfdy[0, 0] = -1.0
    return dfdy

  with pytest.raises(TypeError, match="returns a value.*dydt"):
    ode.dop853(returns_dydt, np.array([[1.0]]), (0.0, 1.0))
  with pytest.raises(TypeError, match="returns a value"):
    jax.jit(lambda y: ode.dop853(returns_dydt, y, (0.0, 1.0)).y_final)(np.array([[1.0]]))
  rhs = ode.rhs(_decay, jacobian=jac_returns)
  with pytest.raises(TypeError, match="returns a value"):
    jax.grad(lambda y: ode.dop853(rhs, y, (0.0, 1.0), np.array([[1.0]])).y_final.sum())(
        np.array([[1.0]]))


# --- transformations ----------------------------------------------------------------------------

def test_user_functions_are_equal_by_content():
  # The primitive carries the Python functions; equal contents give equal parameters (jit and
  # eager caches hit for a re-created function), different ones or other event positions do not.
  from jaxext.ode.dop853 import UserFunctions

  def make(k):
    def f(t, y, p, dydt):
      dydt[0] = -k * y[0]
    return ode.rhs(f)

  radius = models.radius_event(1.0)
  a, b, c = make(1.0), make(1.0), make(2.0)
  assert UserFunctions(a, ()) == UserFunctions(b, ()) and hash(UserFunctions(a, ())) == hash(
      UserFunctions(b, ()))
  assert UserFunctions(a, ()) != UserFunctions(c, ())
  assert UserFunctions(a, (radius, crosses_zero)) != UserFunctions(a, (crosses_zero, radius))
  assert UserFunctions(None, (crosses_zero,)) != UserFunctions(a, (crosses_zero,))


def test_rhs_reading_a_module_attribute_is_not_served_stale():
  # Numba freezes what a right-hand side reads through a module (`cfg.K`, `helpers.g(...)`) when
  # it compiles: a changed value or callee must give a new compilation, not the old code.
  import types
  cfg = types.ModuleType("jaxext_test_ode_cfg")
  cfg.K = 1.0
  cfg.g = numba.njit(lambda v: v)

  @ode.rhs
  def decay(t, y, p, dydt):
    dydt[0] = -cfg.K * cfg.g(y[0])

  run = lambda: np.asarray(ode.dop853(decay, np.array([[1.0]]), (0.0, 1.0), rtol=1e-10,
                                      atol=1e-12).y_final)[0, 0]
  np.testing.assert_allclose(run(), np.exp(-1.0), rtol=1e-8)
  cfg.K = 2.0
  np.testing.assert_allclose(run(), np.exp(-2.0), rtol=1e-8)
  cfg.g = numba.njit(lambda v: 0.5 * v)
  np.testing.assert_allclose(run(), np.exp(-1.0), rtol=1e-8)


def test_jit_and_vmap_equal_direct_calls():
  rng = np.random.default_rng(2)
  y0 = rng.uniform(-1, 1, (3, 4, 2))
  mu = rng.uniform(0.5, 2, (3, 4, 1))
  te = np.linspace(0, 3, 4)
  run = lambda y, p: ode.dop853(van_der_pol, y, (0.0, 3.0), p, t_eval=te, rtol=1e-9, atol=1e-9)
  batched = jax.jit(jax.vmap(run))(y0, mu)
  assert batched.ys.shape == (3, 4, 4, 2)
  for b in range(3):
    direct = run(y0[b], mu[b])
    np.testing.assert_array_equal(batched.ys[b], direct.ys)
    np.testing.assert_array_equal(batched.n_rhs[b], direct.n_rhs)
  # shared params (unmapped) and a mapped t_eval (one call per batch element)
  tes = np.stack([te, te * 0.5, te * 0.25])
  out = jax.vmap(lambda y, t: ode.dop853(van_der_pol, y, (0.0, 3.0), [1.0], t_eval=t),
                 in_axes=(0, 0))(y0, tes)
  for b in range(3):
    direct = ode.dop853(van_der_pol, y0[b], (0.0, 3.0), [1.0], t_eval=tes[b])
    np.testing.assert_array_equal(out.ys[b], direct.ys)


# --- derivatives (variational equations) ------------------------------------------------------

def van_der_pol_jacobian(t, y, p, dfdy, dfdp):
  dfdy[0, 0] = 0.0
  dfdy[0, 1] = 1.0
  dfdy[1, 0] = -2.0 * p[0] * y[0] * y[1] - 1.0
  dfdy[1, 1] = p[0] * (1.0 - y[0] * y[0])
  dfdp[0, 0] = 0.0
  dfdp[1, 0] = (1.0 - y[0] * y[0]) * y[1]


van_der_pol_j = ode.rhs(van_der_pol.fn, jacobian=van_der_pol_jacobian, name="van_der_pol_j")


def test_gradients_check_grads_user_rhs():
  te = np.linspace(0.0, 4.0, 5)
  f = lambda y0, mu: ode.dop853(van_der_pol_j, y0, (0.0, 4.0), mu, t_eval=te, rtol=1e-12,
                                atol=1e-12).ys
  y0 = np.array([[2.0, 0.0], [0.5, -0.3]])
  mu = np.array([[1.0], [2.5]])
  check_grads(f, (y0, mu), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("model", [models.earth(j2=True, j3=True, j4=True),
                                   models.Model(j2=models.EARTH_J2, atmosphere=SMOOTH_AIR)],
                         ids=["zonal", "j2_drag"])
def test_gradients_check_grads_models(model):
  y0 = np.stack([circular_state(350.0, 0.9, 0.1, 0.2), elements_state(9000.0, 0.2, 0.5, 1, 2, 0)])
  b = np.array([[0.02], [0.01]])
  f = lambda y0, b: ode.dop853(model, y0, (0.0, 3000.0), b, rtol=1e-12, atol=1e-12).y_final
  check_grads(f, (y0, b), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


def test_gradients_against_scipy_finite_differences():
  model = models.Model(j2=models.EARTH_J2, atmosphere=SMOOTH_AIR)
  y0 = circular_state(320.0, 0.7, 0.3, 0.1)
  b = 0.03
  t1 = 5400.0
  jac = jax.jacobian(lambda y, b: ode.dop853(model, y[None], (0.0, t1), b[None], rtol=1e-12,
                                             atol=1e-12).y_final[0], argnums=(0, 1))
  d_y0, d_b = (np.asarray(x) for x in jac(y0, np.array([b])))
  final = lambda y, b: scipy_dop853(model_np(model, [b]), (0.0, t1), y, rtol=1e-13,
                                    atol=1e-13).y[:, -1]
  # Steps large enough that the reference's roundoff noise (its gravity is a numerical gradient)
  # stays below the central differences' O(h^2) error, itself ~1e-8 relative here.
  steps = [0.1, 0.1, 0.1, 1e-4, 1e-4, 1e-4]  # km, km/s
  for k in (0, 2, 4):
    e = np.zeros(6)
    e[k] = steps[k]
    fd = (final(y0 + e, b) - final(y0 - e, b)) / (2 * steps[k])
    np.testing.assert_allclose(d_y0[:, k], fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
  fd = (final(y0, b * 1.01) - final(y0, b * 0.99)) / (0.02 * b)
  np.testing.assert_allclose(d_b[:, 0], fd, rtol=1e-5, atol=1e-5 * np.abs(fd).max())


# An orbit from 300 km to ~1400 km altitude crossing the 800 km sphere twice per revolution.
_CROSSING = elements_state(RE + 850.0, 0.08, 0.9, 0.3, 0.5, 0.2)
_CROSS_R = RE + 800.0


def _scipy_crossings(model, y, b, t1, terminal=False, direction=0, tol=1e-13):
  g = lambda t, yy: np.linalg.norm(yy[:3]) - _CROSS_R
  g.terminal, g.direction = terminal, direction
  sol = scipy_dop853(model_np(model, [b]), (0.0, t1), y, rtol=tol, atol=tol, events=[g])
  return sol.t_events[0], sol.y_events[0], sol.t[-1], sol.y[:, -1]


def _assert_as_accurate_as_scipy(ours, scipy_same_tol, reference):
  """Event times of ours and of scipy, both at rtol = atol = 1e-12, against scipy at 1e-13: ours
  miss the reference by at most twice scipy's own worst miss. (Not a fixed bound: rounding alone
  moves these crossings by ~1e-11 relative, e.g. where the compiler fuses multiply-adds on a CPU
  with FMA and scipy's NumPy does not; scipy at 1e-12 misses its own 1e-13 answer by 1.8e-11.)"""
  ours, scipy_same_tol, reference = (np.atleast_1d(np.asarray(x, np.float64))
                                     for x in (ours, scipy_same_tol, reference))
  theirs = np.abs(scipy_same_tol - reference) / np.abs(reference)
  mine = np.abs(ours - reference) / np.abs(reference)
  assert theirs.max() < 1e-10, theirs  # the reference itself is sound
  assert np.all(mine <= 2 * theirs.max()), (mine, theirs)


def test_event_derivatives_against_scipy_finite_differences():
  """d t_events and d y_events with respect to y0 and B (non-terminal crossings of a sphere)
  against central differences of scipy's event times and states."""
  model = models.Model(j2=models.EARTH_J2, atmosphere=SMOOTH_AIR)
  y0, b, t1 = _CROSSING, 0.03, 9000.0  # ~1.5 revolutions: 3 crossings

  def events(y, bb):
    sol = ode.dop853(model, y[None], (0.0, t1), bb[None], rtol=1e-12, atol=1e-12,
                     events=[models.radius_event(_CROSS_R)], event_slots=4)
    return sol.t_events[0, 0, :3], sol.y_events[0, 0, :3]

  t_ev, y_ev = events(y0, np.array([b]))
  ref_t, ref_y, _, _ = _scipy_crossings(model, y0, b, t1)
  assert ref_t.shape == (3,)
  _assert_as_accurate_as_scipy(t_ev, _scipy_crossings(model, y0, b, t1, tol=1e-12)[0], ref_t)
  (dt_y0, dt_b), (dy_y0, dy_b) = jax.jacobian(events, argnums=(0, 1))(y0, np.array([b]))
  steps = [0.1, 0.1, 0.1, 1e-4, 1e-4, 1e-4]
  for k in (0, 2, 3, 5):
    e = np.zeros(6)
    e[k] = steps[k]
    (tp, yp, _, _), (tm, ym, _, _) = (_scipy_crossings(model, y0 + e, b, t1),
                                      _scipy_crossings(model, y0 - e, b, t1))
    fd_t, fd_y = (tp - tm) / (2 * steps[k]), (yp - ym) / (2 * steps[k])
    np.testing.assert_allclose(np.asarray(dt_y0)[:, k], fd_t, rtol=1e-5,
                               atol=1e-6 * np.abs(fd_t).max())
    np.testing.assert_allclose(np.asarray(dy_y0)[:, :, k], fd_y, rtol=1e-5,
                               atol=1e-5 * np.abs(fd_y).max())
  (tp, yp, _, _), (tm, ym, _, _) = (_scipy_crossings(model, y0, b * 1.01, t1),
                                    _scipy_crossings(model, y0, b * 0.99, t1))
  fd_t, fd_y = (tp - tm) / (0.02 * b), (yp - ym) / (0.02 * b)
  np.testing.assert_allclose(np.asarray(dt_b)[:, 0], fd_t, rtol=1e-4, atol=1e-5 * np.abs(fd_t).max())
  np.testing.assert_allclose(np.asarray(dy_b)[:, :, 0], fd_y, rtol=1e-4,
                             atol=1e-4 * np.abs(fd_y).max())


def test_terminal_event_derivatives_of_t_final_and_y_final():
  """A terminal descending crossing: t_final and y_final move with the event; a trajectory that
  never meets the event keeps the plain sensitivities (and zero d t_final)."""
  model = models.Model(j2=models.EARTH_J2, atmosphere=SMOOTH_AIR)
  b, t1 = 0.03, 9000.0
  y0 = np.stack([_CROSSING, circular_state(400.0, 0.5)])  # the second never reaches 800 km

  def final(y, bb):
    sol = ode.dop853(model, y, (0.0, t1), bb, rtol=1e-12, atol=1e-12,
                     events=[models.radius_event(_CROSS_R, terminal=True, direction=-1)])
    return sol.t_final, sol.y_final, sol.status

  t_f, y_f, status = final(y0, np.full((2, 1), b))
  np.testing.assert_array_equal(np.asarray(status), [ode.Status.EVENT, ode.Status.SUCCESS])
  _, _, ref_t, ref_y = _scipy_crossings(model, y0[0], b, t1, terminal=True, direction=-1)
  _, _, same_t, _ = _scipy_crossings(model, y0[0], b, t1, terminal=True, direction=-1, tol=1e-12)
  _assert_as_accurate_as_scipy(t_f[0], same_t, ref_t)
  jac = jax.jacobian(lambda y, bb: final(y, bb)[:2], argnums=(0, 1))(y0, np.full((2, 1), b))
  (dtf_y0, dtf_b), (dyf_y0, dyf_b) = jac
  for k, h in ((0, 0.1), (4, 1e-4)):
    e = np.zeros(6)
    e[k] = h
    _, _, tp, yp = _scipy_crossings(model, y0[0] + e, b, t1, terminal=True, direction=-1)
    _, _, tm, ym = _scipy_crossings(model, y0[0] - e, b, t1, terminal=True, direction=-1)
    np.testing.assert_allclose(float(dtf_y0[0, 0, k]), (tp - tm) / (2 * h), rtol=1e-5)
    fd = (yp - ym) / (2 * h)
    np.testing.assert_allclose(np.asarray(dyf_y0)[0, :, 0, k], fd, rtol=1e-5,
                               atol=1e-5 * np.abs(fd).max())
  _, _, tp, _ = _scipy_crossings(model, y0[0], b * 1.01, t1, terminal=True, direction=-1)
  _, _, tm, _ = _scipy_crossings(model, y0[0], b * 0.99, t1, terminal=True, direction=-1)
  np.testing.assert_allclose(float(dtf_b[0, 0, 0]), (tp - tm) / (0.02 * b), rtol=1e-4)
  # the second trajectory: t_final = t1 does not move; y_final is that of a run without events
  assert np.all(np.asarray(dtf_y0)[1] == 0) and np.all(np.asarray(dtf_b)[1] == 0)
  plain = jax.jacobian(lambda y: ode.dop853(model, y[None], (0.0, t1), [b], rtol=1e-12,
                                            atol=1e-12).y_final[0])(y0[1])
  np.testing.assert_allclose(np.asarray(dyf_y0)[1, :, 1, :], np.asarray(plain), rtol=1e-12,
                             atol=1e-15)
  # no cross-talk between trajectories
  assert np.all(np.asarray(dyf_y0)[0, :, 1, :] == 0) and np.all(np.asarray(dyf_y0)[1, :, 0, :] == 0)


def test_event_gradients_check_grads_and_unused_slots():
  """Reverse mode equals forward mode (check_grads), and event slots never filled (NaN) give zero,
  finite gradients."""
  model = models.earth(j2=True)
  te = lambda y: ode.dop853(model, y[None], (0.0, 7000.0), rtol=1e-12, atol=1e-12,
                            events=[models.radius_event(_CROSS_R)], event_slots=6).t_events[0, 0]
  t_ev = np.asarray(te(_CROSSING))
  assert np.isfinite(t_ev[:2]).all() and np.isnan(t_ev[-1])
  loss = lambda y: jnp.sum(jnp.where(jnp.isfinite(te(y)), te(y), 0.0) ** 2)
  g = np.asarray(jax.grad(loss)(_CROSSING))
  assert np.isfinite(g).all() and np.abs(g).max() > 0
  first_two = lambda y: te(y)[:2]
  check_grads(first_two, (_CROSSING,), order=1, modes=("fwd", "rev"), eps=1e-3, atol=1e-3,
              rtol=1e-3)


# Python event functions with their gradients: g = y0 + 0.1 t - 0.3 mu crosses zero several
# times on the van der Pol limit cycle; it depends on t, y and p, so every gradient term counts.
def _tilted_gradient(t, y, p, dgdy, dgdp):
  dgdy[0] = 1.0
  dgdp[0] = -0.3
  return 0.1


@ode.event(gradient=_tilted_gradient)
def tilted(t, y, p):
  return y[0] + 0.1 * t - 0.3 * p[0]


tilted_down = ode.event(tilted.fn, terminal=2, direction=-1, gradient=_tilted_gradient,
                        name="tilted_down")


def _scipy_tilted(y, mu, t1, terminal=0, direction=0):
  g = lambda t, yy: yy[0] + 0.1 * t - 0.3 * mu
  g.terminal, g.direction = terminal, direction
  sol = scipy_dop853(van_der_pol_np([mu]), (0.0, t1), y, rtol=1e-13, atol=1e-13, events=[g])
  return sol.t_events[0], sol.y_events[0], sol.t[-1], sol.y[:, -1]


def _fd_columns(fn, y0, mu, h_y=1e-5, h_mu=1e-5):
  """Central differences of fn(y0, mu) (arrays) over y0's components and mu."""
  cols = []
  for k in range(2):
    e = np.zeros(2)
    e[k] = h_y
    cols.append((np.asarray(fn(y0 + e, mu)) - np.asarray(fn(y0 - e, mu))) / (2 * h_y))
  cols.append((np.asarray(fn(y0, mu + h_mu)) - np.asarray(fn(y0, mu - h_mu))) / (2 * h_mu))
  return np.stack(cols, -1)


def test_python_event_derivatives_against_scipy_finite_differences():
  y0, mu, t1 = np.array([2.0, 0.0]), 1.2, 14.0

  def run(y, m):
    sol = ode.dop853(van_der_pol_j, y[None], (0.0, t1), m[None], rtol=1e-12, atol=1e-12,
                     events=[tilted], event_slots=6)
    return sol.t_events[0, 0, :4], sol.y_events[0, 0, :4]

  ref_t, _, _, _ = _scipy_tilted(y0, mu, t1)
  assert ref_t.shape == (4,)
  t_ev, _ = run(y0, np.array([mu]))
  np.testing.assert_allclose(np.asarray(t_ev), ref_t, rtol=1e-10)
  (dt_y0, dt_mu), (dy_y0, dy_mu) = jax.jacobian(run, argnums=(0, 1))(y0, np.array([mu]))
  ours_t = np.concatenate([np.asarray(dt_y0), np.asarray(dt_mu)], -1)  # (4, 3)
  ours_y = np.concatenate([np.asarray(dy_y0), np.asarray(dy_mu)], -1)  # (4, 2, 3)
  fd_t = _fd_columns(lambda y, m: _scipy_tilted(y, m, t1)[0], y0, mu)
  fd_y = _fd_columns(lambda y, m: _scipy_tilted(y, m, t1)[1], y0, mu)
  np.testing.assert_allclose(ours_t, fd_t, rtol=1e-5, atol=1e-6 * np.abs(fd_t).max())
  np.testing.assert_allclose(ours_y, fd_y, rtol=1e-5, atol=1e-6 * np.abs(fd_y).max())
  # The event moves with mu (through its own p term as well as the trajectory): the comparison
  # above is not trivially satisfied in that column. (Dropping g_t or g_p fails it.)
  assert np.abs(fd_t[:, 2]).max() > 1e-2


def test_python_terminal_event_derivatives_of_t_final_and_y_final():
  y0 = np.array([[2.0, 0.0], [0.1, 0.0]])  # the second stops later (a different crossing)
  mu, t1 = np.array([[1.2], [0.8]]), 20.0

  def final(y, m):
    sol = ode.dop853(van_der_pol_j, y, (0.0, t1), m, rtol=1e-12, atol=1e-12,
                     events=[tilted, tilted_down])
    return sol.t_final, sol.y_final, sol.status

  t_f, _, status = final(y0, mu)
  np.testing.assert_array_equal(np.asarray(status), [ode.Status.EVENT] * 2)
  (dtf_y0, dtf_mu), (dyf_y0, dyf_mu) = jax.jacobian(lambda y, m: final(y, m)[:2],
                                                     argnums=(0, 1))(y0, mu)
  for b in range(2):
    ref = lambda y, m: _scipy_tilted(y, m, t1, terminal=2, direction=-1)
    assert float(t_f[b]) == pytest.approx(ref(y0[b], mu[b, 0])[2], rel=1e-10)
    fd_t = _fd_columns(lambda y, m: ref(y, m)[2], y0[b], mu[b, 0])
    fd_y = _fd_columns(lambda y, m: ref(y, m)[3], y0[b], mu[b, 0])
    ours_t = np.concatenate([np.asarray(dtf_y0)[b, b], np.asarray(dtf_mu)[b, b]], -1)
    ours_y = np.concatenate([np.asarray(dyf_y0)[b, :, b], np.asarray(dyf_mu)[b, :, b]], -1)
    np.testing.assert_allclose(ours_t, fd_t, rtol=1e-5, atol=1e-6 * np.abs(fd_t).max())
    np.testing.assert_allclose(ours_y, fd_y, rtol=1e-5, atol=1e-6 * np.abs(fd_y).max())


def _node_gradient(t, y, p, dgdy, dgdp):
  dgdy[2] = 1.0
  return 0.0


ascending_node = ode.event(lambda t, y, p: y[2], terminal=True, direction=1,
                           gradient=_node_gradient, name="ascending_node")


@pytest.mark.parametrize("order", ["node_first", "radius_first"])
def test_terminal_event_derivatives_pick_the_stopping_event(order):
  """Two terminal events with different g (a Python node crossing, a built-in sphere crossing):
  t_final's derivative must use the gradient of the one that stopped the run, whichever index."""
  model = models.two_body()
  y0 = elements_state(RE + 850.0, 0.08, 0.9, 0.3, 0.5, 0.2)
  radius = models.radius_event(_CROSS_R, terminal=True, direction=-1)
  events = [ascending_node, radius] if order == "node_first" else [radius, ascending_node]

  def t_final(y):
    return ode.dop853(model, y[None], (0.0, 9000.0), rtol=1e-12, atol=1e-12,
                      events=events).t_final[0]

  def scipy_t_final(y):
    g_node = lambda t, yy: yy[2]
    g_node.terminal, g_node.direction = True, 1
    g_r = lambda t, yy: np.linalg.norm(yy[:3]) - _CROSS_R
    g_r.terminal, g_r.direction = True, -1
    sol = scipy_dop853(model_np(model, []), (0.0, 9000.0), y, rtol=1e-13, atol=1e-13,
                       events=[g_node, g_r])
    assert sol.status == 1
    return sol.t[-1], [len(t) for t in sol.t_events]

  ref, fired = scipy_t_final(y0)
  assert float(t_final(y0)) == pytest.approx(ref, rel=1e-10)
  assert sorted(fired) == [0, 1]  # exactly one event stopped it
  # (In one of the two orders the stopping event has the higher index.)
  stopper = ["node", "radius"][fired.index(1)]
  grad = np.asarray(jax.grad(t_final)(y0))
  for k, h in ((0, 0.1), (2, 0.1), (4, 1e-4)):
    e = np.zeros(6)
    e[k] = h
    fd = (scipy_t_final(y0 + e)[0] - scipy_t_final(y0 - e)[0]) / (2 * h)
    assert grad[k] == pytest.approx(fd, rel=1e-5, abs=1e-6 * abs(fd) + 1e-9), (stopper, k)


def test_event_derivatives_with_no_trajectories():
  y0 = np.zeros((0, 2))
  run = lambda y: ode.dop853(van_der_pol_j, y, (0.0, 1.0), [1.0], events=[tilted, tilted_down])
  primal, tangent = jax.jvp(run, (y0,), (y0,))
  assert tangent.t_events.shape == (0, 2, 8) and tangent.t_final.shape == (0,)
  assert jax.grad(lambda y: run(y).t_final.sum())(y0).shape == (0, 2)


def test_python_event_gradients_check_grads():
  te = lambda y, m: ode.dop853(van_der_pol_j, y, (0.0, 9.0), m, rtol=1e-12, atol=1e-12,
                               events=[tilted], event_slots=6).t_events[:, 0, :2]
  y0 = np.array([[2.0, 0.0], [1.0, 0.5]])
  check_grads(te, (y0, np.array([[1.2], [1.0]])), order=1, modes=("fwd", "rev"), atol=1e-5,
              rtol=1e-5)
  # Slots never filled (NaN) give zero, finite gradients.
  loss = lambda y: jnp.sum(jnp.where(jnp.isfinite(t := ode.dop853(
      van_der_pol_j, y, (0.0, 9.0), [1.2], events=[tilted], event_slots=8).t_events), t, 0) ** 2)
  g = np.asarray(jax.grad(loss)(y0))
  assert np.isfinite(g).all() and np.abs(g).max() > 0


def _radius_gradient(t, y, p, dgdy, dgdp):
  r = math.sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2])
  for i in range(3):
    dgdy[i] = y[i] / r
  return 0.0


def test_python_event_on_a_built_in_model_equals_the_built_in_event():
  """g = |r| - R written in Python (with its gradient) and the built-in radius event give the
  same derivatives; and a Python right-hand side (two-body with its Jacobian) with the built-in
  event gives the built-in model's."""
  model = models.two_body()
  radius = ode.event(lambda t, y, p: math.sqrt(y[0] ** 2 + y[1] ** 2 + y[2] ** 2) - _CROSS_R,
                     gradient=_radius_gradient, name="radius")
  built_in = models.radius_event(_CROSS_R)

  def two_body(t, y, p, dydt):
    r3 = math.sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2]) ** 3
    for i in range(3):
      dydt[i] = y[3 + i]
      dydt[3 + i] = -MU * y[i] / r3

  def two_body_jacobian(t, y, p, dfdy, dfdp):
    r2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2]
    r = math.sqrt(r2)
    for i in range(3):
      dfdy[i, 3 + i] = 1.0
      for j in range(3):
        dfdy[3 + i, j] = MU * (3.0 * y[i] * y[j] / r2 - (1.0 if i == j else 0.0)) / (r2 * r)

  python_rhs = ode.rhs(two_body, jacobian=two_body_jacobian)

  def crossing(rhs, event):
    return lambda y: ode.dop853(rhs, y[None], (0.0, 9000.0), rtol=1e-12, atol=1e-12,
                                events=[event], event_slots=3).t_events[0, 0]

  reference = np.asarray(jax.jacobian(crossing(model, built_in))(_CROSSING))
  assert np.isfinite(reference).all() and np.abs(reference).max() > 0
  for rhs, event in ((model, radius), (python_rhs, built_in), (python_rhs, radius)):
    got = np.asarray(jax.jacobian(crossing(rhs, event))(_CROSSING))
    np.testing.assert_allclose(got, reference, rtol=1e-7, atol=1e-9 * np.abs(reference).max())


def test_differentiating_leaves_the_solution_unchanged():
  y0 = np.array([[2.0, 0.0], [0.5, -0.3]])
  mu = np.array([[1.0], [2.5]])
  te = np.linspace(0.0, 4.0, 5)
  run = lambda y: ode.dop853(van_der_pol_j, y, (0.0, 4.0), mu, t_eval=te)
  primal, tangent = jax.jvp(run, (y0,), (np.ones_like(y0),))
  plain = run(y0)
  for a, b in zip(primal, plain):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # same steps, same values
  assert tangent.ys.shape == plain.ys.shape


def test_gradients_under_vmap_and_shared_params():
  y0 = np.array([[[2.0, 0.0]], [[0.5, -0.3]], [[1.0, 1.0]]])
  loss = lambda y, mu: jnp.sum(ode.dop853(van_der_pol_j, y, (0.0, 2.0), mu, rtol=1e-11,
                                          atol=1e-11).y_final ** 2)
  g = jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(0, None))(y0, np.array([1.3]))
  for b in range(3):
    gy, gmu = jax.grad(loss, argnums=(0, 1))(y0[b], np.array([1.3]))
    np.testing.assert_allclose(g[0][b], gy, rtol=1e-12)
    np.testing.assert_allclose(g[1][b], gmu, rtol=1e-12)
  eps = 1e-6
  fd = (loss(y0[0], np.array([1.3 + eps])) - loss(y0[0], np.array([1.3 - eps]))) / (2 * eps)
  assert float(g[1][0][0]) == pytest.approx(float(fd), rel=1e-5)


def test_differentiating_a_built_in_model_leaves_the_solution_unchanged():
  model = models.earth(j2=True, drag=True)
  y0 = np.stack([circular_state(250.0, 0.9), elements_state(9000.0, 0.2, 0.5, 1, 2, 0)])
  b = np.array([[0.05], [0.01]])
  run = lambda y: ode.dop853(model, y, (0.0, 86400.0), b, rtol=1e-10, atol=1e-10)
  primal, _ = jax.jvp(run, (y0,), (np.ones_like(y0),))
  plain = run(y0)
  np.testing.assert_array_equal(np.asarray(primal.n_accepted), np.asarray(plain.n_accepted))
  np.testing.assert_array_equal(np.asarray(primal.y_final), np.asarray(plain.y_final))


def test_gradients_with_unreached_rows_are_finite():
  # Shared t_eval, per-trajectory spans: rows outside a span are NaN; masked, they must not
  # poison the gradient.
  te = np.linspace(0.0, 4.0, 5)
  spans = np.array([[0.0, 4.0], [0.0, 2.5]])
  y0 = np.array([[2.0, 0.0], [0.5, -0.3]])

  def loss(y):
    ys = ode.dop853(van_der_pol_j, y, spans, [1.2], t_eval=te, rtol=1e-11, atol=1e-11).ys
    return jnp.sum(jnp.where(jnp.isnan(ys), 0.0, ys) ** 2)
  g = np.asarray(jax.grad(loss)(y0))
  assert np.all(np.isfinite(g))
  eps = 1e-6
  e = np.zeros_like(y0)
  e[1, 0] = eps
  fd = (loss(y0 + e) - loss(y0 - e)) / (2 * eps)
  assert g[1, 0] == pytest.approx(float(fd), rel=1e-5)


def _bits(x):
  x = np.asarray(x)
  return x.view(f"i{x.itemsize}") if x.dtype.kind == "f" else x


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n, params", [(37, 1), (3, 1), (21, 0), (13, 2)])
def test_simd_lanes_round_as_the_scalar_model(dtype, n, params, monkeypatch):
  """The CPU handler runs the built-in models 8 trajectories per SIMD vector (interleaved
  integrators: stage sums, model, error norm), their sensitivities too (the model's dual-number
  Jacobian in lanes); JAXEXT_ODE_SIMD=0 runs them one trajectory at a time in scalar code. Same
  bits for every output, values and tangents: lanes neither fuse multiply-adds nor change exp,
  whichever lane (and idle lanes) a trajectory shares a vector with. n = 3: fewer trajectories
  than lanes; params: 0 (J2-J4, no drag), 1 (drag's B), 2 (an unused extra column: the scalar
  sensitivities path in both runs). (NaN payloads aside: no output here is NaN but unfilled
  slots, which both paths leave as the same quiet NaN.)"""
  rng = np.random.default_rng(7 + n)
  altitudes = rng.uniform(130.0, 900.0, n)
  altitudes[0] = 130.0  # decays within the run (with drag)
  y0 = np.stack([circular_state(h, rng.uniform(0, np.pi), rng.uniform(0, 6), rng.uniform(0, 6))
                 for h in altitudes]).astype(dtype)
  b = rng.uniform(0.005, 0.05, (n, max(params, 1)))[:, :params].astype(dtype)
  drag = params > 0
  model = models.earth(j2=True, j3=True, j4=True, drag=drag)  # the default 28-band atmosphere
  t1 = 20000.0 if drag else 3000.0
  # Events: re-entry (terminal; without drag, descending through trajectory 0's start), and
  # descending through trajectory 1's start (not terminal): J2's radial wobble crosses both.
  start = lambda i: float(np.linalg.norm(y0[i, :3].astype(np.float64))) - models.EARTH_RADIUS
  events = [models.altitude_event(100.0 if drag else start(0) - 0.01),
            models.altitude_event(start(1) - 0.01, terminal=False)]
  rtol = 1e-7 if dtype == np.float64 else 2e-5  # float32's floor: 1.2e-5
  run = lambda y: ode.dop853(model, y, (0.0, t1), b if params else None, rtol=rtol, atol=1e-7,
                             t_eval=np.linspace(0.0, t1, 5).astype(dtype), events=events)
  tangent = rng.standard_normal(y0.shape).astype(dtype)
  names = ("ys", "y_final", "t_final", "n_rhs", "t_events", "y_events", "event_counts", "status")
  from jaxext.cpu import _cpu_ops  # noqa: PLC0415 (the counter of lane runs)
  results = {}
  for simd in ("1", "0"):
    monkeypatch.setenv("JAXEXT_ODE_SIMD", simd)  # read by the handler when it runs
    before = _cpu_ops.ode_simd_lane_runs()
    plain = jax.block_until_ready(run(y0))
    after_plain = _cpu_ops.ode_simd_lane_runs()
    primal, tangents = jax.block_until_ready(jax.jvp(run, (y0,), (tangent,)))
    after_jvp = _cpu_ops.ode_simd_lane_runs()
    # The lanes ran when asked (the sensitivities with one parameter at most), never otherwise.
    assert (after_plain > before) == (simd == "1"), (simd, before, after_plain)
    assert (after_jvp > after_plain) == (simd == "1" and params <= 1), (simd, params)
    results[simd] = (plain, primal, tangents)
  plain = results["1"][0]
  assert np.asarray(plain.status).min() >= 0 and (np.asarray(plain.status) == 1).any()
  assert np.asarray(plain.event_counts)[:, 1].max() > 0  # the non-terminal event was crossed
  for name in names:
    reference = _bits(getattr(results["0"][0], name))
    for simd, which in (("1", 0), ("1", 1), ("0", 1)):
      # Bit patterns (assert_array_equal would take -0 for +0; NaN slots compare as NaN bits).
      np.testing.assert_array_equal(_bits(getattr(results[simd][which], name)), reference,
                                    err_msg=f"{name} (JAXEXT_ODE_SIMD={simd}, output {which})")
  for name in ("ys", "y_final", "t_final", "t_events", "y_events"):
    lanes, scalar = getattr(results["1"][2], name), getattr(results["0"][2], name)
    np.testing.assert_array_equal(_bits(lanes), _bits(scalar), err_msg=f"tangent of {name}")
  assert np.isfinite(np.asarray(results["1"][2].y_final)).all()


def test_gradient_of_air_at_rest_is_finite():
  # v = omega x r: no velocity relative to the air, where |v_rel| is not differentiable (taken
  # as zero derivative: the drag force |v| v is smooth there).
  r = models.EARTH_RADIUS + 300.0
  y0 = np.array([[r, 0.0, 0.0, 0.0, models.EARTH_ROTATION * r, 0.0]])
  model = models.earth(j2=True, drag=True)
  f = lambda y: ode.dop853(model, y, (0.0, 60.0), [[0.02]], rtol=1e-10, atol=1e-10).y_final
  jac = np.asarray(jax.jacobian(f)(y0))
  assert int(f(y0).shape[0]) == 1 and np.all(np.isfinite(jac))


def test_gradient_errors():
  with pytest.raises(ValueError, match="Jacobian"):
    jax.grad(lambda y: ode.dop853(van_der_pol, y, (0.0, 1.0), [1.0]).y_final.sum())(
        np.array([[1.0, 0.0]]))
  with pytest.raises(ValueError, match="gradient=") as err:  # a Python event needs its gradient
    jax.grad(lambda y: ode.dop853(van_der_pol_j, y, (0.0, 1.0), [1.0],
                                  events=[crosses_zero]).y_final.sum())(np.array([[1.0, 0.0]]))
  assert "crosses_zero" in str(err.value)
  with pytest.raises(ValueError, match="gradient="):  # also on a built-in model
    jax.grad(lambda y: ode.dop853(models.two_body(), y, (0.0, 100.0),
                                  events=[ode.event(lambda t, y, p: y[2])]).y_final.sum())(
        _CROSSING[None])
  with pytest.raises(TypeError, match="gradient"):
    ode.event(lambda t, y, p: y[0], gradient=1.0)
  with pytest.raises(NotImplementedError, match="second derivatives"):
    jax.hessian(lambda t: ode.dop853(van_der_pol_j, np.array([[1.0, 0.0]]), (0.0, t),
                                     [1.0]).y_final.sum())(1.0)


# --- argument errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rtol=0.0), ValueError, "rtol"),
    (dict(atol=-1.0), ValueError, "atol"),
    (dict(atol=[1e-9, 1e-9, 1e-9]), ValueError, "atol"),
    (dict(y0=np.zeros(2)), ValueError, "y0"),
    (dict(y0=np.zeros((1, 2), complex)), TypeError, "y0"),
    (dict(t_span=(0.0, 1.0, 2.0)), ValueError, "t_span"),
    (dict(t_eval=[0.0, 0.5, 0.4]), ValueError, "t_eval"),
    (dict(t_eval=[1.0, 0.5]), ValueError, "t_eval"),
    (dict(params=np.zeros((3, 1))), ValueError, "params"),
    (dict(max_steps=0), ValueError, "max_steps"),
    (dict(first_step=5.0), ValueError, "first_step"),
    (dict(max_step=-1.0), ValueError, "max_step"),
    (dict(events=[1.0]), TypeError, "events"),
    (dict(events=[crosses_zero] * 17), ValueError, "events"),
    (dict(event_slots=0), ValueError, "event_slots"),
    (dict(rhs=3), TypeError, "rhs"),
    (dict(rhs=models.two_body()), ValueError, "y0"),
])
def test_bad_arguments(kwargs, error, match):
  args = dict(rhs=van_der_pol, y0=np.zeros((2, 2)), t_span=(0.0, 1.0), params=[1.0])
  args.update(kwargs)
  rhs, y0, t_span = args.pop("rhs"), args.pop("y0"), args.pop("t_span")
  with pytest.raises(error, match=match):
    ode.dop853(rhs, y0, t_span, **args)


def test_drag_needs_its_parameter():
  with pytest.raises(ValueError, match="params"):
    ode.dop853(models.earth(drag=True), np.zeros((2, 6)), (0.0, 1.0))


def test_tiny_rtol_is_raised_with_a_warning():
  with pytest.warns(UserWarning, match="rtol") as record:
    ode.dop853(van_der_pol, np.array([[1.0, 0.0]]), (0.0, 0.1), [1.0], rtol=1e-16)
  assert record[0].filename == __file__  # the warning points at the caller's line
  # The floor is 100 epsilons of the integration's own precision: float32's for float32 (an
  # rtol of 1e-12 there would only run into max_steps).
  with pytest.warns(UserWarning, match=r"float32"):
    sol = ode.dop853(van_der_pol, np.float32([[1.0, 0.0]]), (0.0, 1.0), np.float32([1.0]),
                     rtol=1e-12, atol=1e-6)
  assert int(sol.status[0]) == 0
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    ode.dop853(van_der_pol, np.array([[1.0, 0.0]]), (0.0, 0.1), [1.0], rtol=1e-12)
    # The default rtol is float32's floor there: no warning for a call that sets nothing.
    sol = ode.dop853(van_der_pol, np.float32([[1.0, 0.0]]), (0.0, 1.0), np.float32([1.0]))
  assert int(sol.status[0]) == 0


def test_t_eval_checks_hold_under_jit():
  """What raises for concrete t_eval (unsorted, NaN, against the direction of t_span) is a
  result under jit: that trajectory's ys is NaN and its status BAD_T_EVAL, never wrong numbers."""
  y0, mu = np.array([[1.0, 0.0], [0.5, 0.1]]), np.array([[1.0], [2.0]])
  good = np.linspace(0.0, 2.0, 9)
  run = lambda te, span=(0.0, 2.0): ode.dop853(van_der_pol, y0, span, mu, t_eval=te, rtol=1e-9)
  ref = run(good)
  for bad_te in (good[[0, 2, 1, 3, 4, 5, 6, 7, 8]], np.where(np.arange(9) == 4, np.nan, good)):
    with pytest.raises(ValueError, match="t_eval"):
      run(bad_te)
    sol = jax.jit(run)(bad_te)
    assert np.asarray(sol.status).tolist() == [ode.Status.BAD_T_EVAL] * 2
    assert np.all(np.isnan(np.asarray(sol.ys)))
    np.testing.assert_array_equal(sol.y_final, ref.y_final)  # the integration itself is right
  sol = jax.jit(run)(good)  # a valid traced t_eval: the eager numbers
  assert np.asarray(sol.status).tolist() == [0, 0]
  np.testing.assert_array_equal(sol.ys, ref.ys)
  # Backward and forward trajectories with one t_eval: only those it runs against are flagged.
  spans = jnp.array([[0.0, 2.0], [2.0, 0.0]])
  with pytest.raises(ValueError, match="direction"):
    run(good, spans)
  sol = jax.jit(lambda s: run(good, s))(spans)
  assert np.asarray(sol.status).tolist() == [0, ode.Status.BAD_T_EVAL]
  np.testing.assert_array_equal(sol.ys[0], ref.ys[0])
  assert np.all(np.isnan(np.asarray(sol.ys[1])))


def test_infinite_t_span_is_refused_not_silent():
  with pytest.raises(ValueError, match="t_span must be finite"):
    ode.dop853(van_der_pol, np.array([[1.0, 0.0]]), (0.0, np.inf), [1.0])
  # Traced, it is that trajectory's NON_FINITE status (the others exact).
  sol = jax.jit(lambda t1: ode.dop853(van_der_pol, np.array([[1.0, 0.0], [1.0, 0.0]]), (0.0, t1),
                                      [1.0]))(jnp.array([jnp.inf, 1.0]))
  assert np.asarray(sol.status).tolist() == [ode.Status.NON_FINITE, 0]



# --- CUDA lowering (built with --config=cuda; execution is checked by tools/gpu_checks.py) ------

def _export_cuda(fn, *args):
  specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
  exported = jax.export.export(
      jax.jit(fn), platforms=("cuda",),
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("jaxext_dop853")])(*specs)
  return exported.mlir_module()


def test_cuda_lowering():
  from jaxext import _ffi
  y0 = np.stack([circular_state(300.0, 0.5)] * 4)
  b = np.full((4, 1), 0.01)
  model = models.earth(j2=True, drag=True)
  run = lambda y, p: ode.dop853(model, y, (0.0, 600.0), p,
                                events=[models.altitude_event(100.0)]).y_final
  print("registered platforms:", sorted(_ffi.register_all()))
  # A CPU-only build lowers for CUDA too (for jax.export): the handlers run where it is loaded.
  text = _export_cuda(run, y0, b)
  assert text.count("@jaxext_dop853") >= 1 and "sensitivities = 0" in text
  grad = _export_cuda(jax.grad(lambda y, p: ode.dop853(model, y, (0.0, 600.0), p).y_final.sum()),
                      y0, b)
  assert "sensitivities = 1" in grad
  assert 'device_code = ""' in text  # built-in models link nothing
  # Python right-hand sides on CUDA, derivatives through Python events included:
  # tests/ode_cuda_test.py (it has the toolkit numba-cuda needs).


def _oscillator_jnp(t, y, omega):
  return jnp.stack([y[1], -omega * omega * y[0]])


def _oscillator_jacobian(t, y, p, dfdy, dfdp):
  dfdy[0, 0] = 0.0
  dfdy[0, 1] = 1.0
  dfdy[1, 0] = -p[0] * p[0]
  dfdy[1, 1] = 0.0
  dfdp[0, 0] = 0.0
  dfdp[1, 0] = -2.0 * p[0] * y[0]


@ode.rhs(jacobian=_oscillator_jacobian)
def _oscillator_numba(t, y, p, dydt):
  dydt[0] = y[1]
  dydt[1] = -p[0] * p[0] * y[0]


@pytest.mark.parametrize("form", ["jnp", "numba"])
def test_derivatives_with_respect_to_t_span_and_t_eval(form):
  """y(t) = R(omega (t - t0)) y0 for the oscillator: dy/dt0 = -f(t0, y0) propagated, dy_final/dt1
  = f(t1, y_final), dys/dt_eval = f(t_eval, ys); closed forms, forward and reverse mode."""
  omega = 1.3

  def run(y0, t0, t1, te):
    kw = dict(t_eval=te, rtol=1e-12, atol=1e-12)
    if form == "jnp":
      s = ode.dop853(_oscillator_jnp, y0, (t0, t1), args=omega, **kw)
    else:
      s = ode.dop853(_oscillator_numba, y0, (t0, t1), np.array([omega]), **kw)
    return s.ys, s.y_final, s.t_final

  def exact(y0, t0, t):
    c, s = np.cos(omega * (t - t0)), np.sin(omega * (t - t0))
    x, v = y0[..., 0], y0[..., 1]
    return np.stack([c * x + s * v / omega, -omega * s * x + c * v], -1)

  y0 = np.array([[1.0, 0.5], [-0.3, 2.0]])
  t0, t1 = np.array([0.2, -0.1]), np.array([3.0, 2.5])
  te = np.array([0.5, 1.0, 2.0])
  f = lambda y: np.stack([y[..., 1], -omega**2 * y[..., 0]], -1)
  ys, y_final, _ = run(y0, t0, t1, te)
  np.testing.assert_allclose(y_final, exact(y0, t0, t1), atol=1e-10)
  # d/dt0: forward mode, against the closed form -Phi(t, t0) f(t0, y0) = -f(t, y(t)).
  _, (d_ys, d_final, d_tf) = jax.jvp(lambda a: run(y0, a, t1, te), (t0,), (np.ones(2),))
  np.testing.assert_allclose(d_final, -f(exact(y0, t0, t1)), atol=1e-8)
  np.testing.assert_allclose(d_ys, -f(exact(y0[:, None], t0[:, None], te[None])), atol=1e-8)
  np.testing.assert_array_equal(d_tf, 0)
  # d/dt1: y_final moves by f(t1, y_final), t_final by 1; ys do not move.
  _, (d_ys, d_final, d_tf) = jax.jvp(lambda b: run(y0, t0, b, te), (t1,), (np.ones(2),))
  np.testing.assert_allclose(d_final, f(exact(y0, t0, t1)), atol=1e-8)
  np.testing.assert_array_equal(d_ys, 0)
  np.testing.assert_array_equal(d_tf, 1)
  # d/dt_eval: f at each output time; reverse mode agrees (a sum over trajectories).
  g = jax.grad(lambda e: run(y0, t0, t1, e)[0][..., 0].sum())(te)
  np.testing.assert_allclose(g, f(exact(y0[:, None], t0[:, None], te[None]))[..., 0].sum(0),
                             atol=1e-8)
  check_grads(lambda a, b: run(y0, a, b, te)[1], (t0, t1), order=1, modes=("fwd", "rev"),
              atol=1e-6, rtol=1e-6)


def test_t1_derivative_of_a_built_in_model_and_of_event_stopped_runs():
  """The built-in model's f at t1; a trajectory stopped by a terminal event does not move with t1
  (its t_final is the event's), and t0 moves the event time as a shift of y0 would."""
  y0 = elements_state(7000.0, 0.01, 0.5, 0.0, 0.0, 0.0)[None]  # at perigee, r = 6930 km
  run = lambda t1: ode.dop853(models.earth(j2=True), y0, (0.0, t1), rtol=1e-12, atol=1e-12)
  sol, (d_final, d_tf) = jax.jvp(lambda t1: (lambda s: (s.y_final, s.t_final))(run(t1)),
                                 (3000.0,), (1.0,))
  f = np.asarray(models.rhs_from_constants(models.earth(j2=True).constants(), sol[0],
                                           np.zeros((1, 0))))
  np.testing.assert_allclose(d_final, f, rtol=1e-12)
  np.testing.assert_array_equal(d_tf, [1.0])
  ev = models.radius_event(7000.0, terminal=True)  # crossed on the way to apogee
  stop = lambda t0, t1: (lambda s: (s.t_final, s.status))(ode.dop853(
      models.earth(j2=True), y0, (t0, t1), rtol=1e-12, atol=1e-12, events=[ev]))
  (t_stop, status), (d_t1, _) = jax.jvp(lambda t1: stop(0.0, t1), (5000.0,), (1.0,))
  assert status[0] == ode.Status.EVENT
  np.testing.assert_array_equal(d_t1, [0.0])
  # Starting later from the same state, the whole (autonomous) solution shifts: dt_event/dt0 = 1.
  _, (d_t0, _) = jax.jvp(lambda t0: stop(t0, 5000.0), (0.0,), (1.0,))
  np.testing.assert_allclose(d_t0, [1.0], rtol=1e-6)


# --- dense output ------------------------------------------------------------------------------

def _vdp_jnp(t, y, mu):
  return jnp.stack([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


@pytest.mark.parametrize("form", ["jnp", "numba", "model"])
def test_dense_output_equals_scipys_sol(form):
  """evaluate(t) is scipy's solve_ivp(dense_output=True).sol(t): per trajectory, at random times,
  at every step boundary (scipy's choice of segment) and backward; n_rhs counts the dense
  output's 3 stages per step as scipy's nfev does."""
  if form == "model":
    model = models.earth(j2=True)
    y0 = np.stack([circular_state(500.0, 0.3), elements_state(9000.0, 0.1, 1.0, 0.5, 0.2, 0.1)])
    span, f_np, kw = (0.0, 4000.0), [model_np(model, [0.0])] * 2, {}
    run = lambda y, **k: ode.dop853(model, y, span, rtol=1e-9, atol=1e-9, **k)
  else:
    y0 = np.array([[2.0, 0.0], [1.0, 0.5], [-0.5, 1.5]])
    mu = np.array([1.0, 2.0, 0.5])
    span, f_np = (0.0, 6.0), [van_der_pol_np([m]) for m in mu]
    if form == "jnp":
      run = lambda y, **k: ode.dop853(_vdp_jnp, y, span, args=mu, args_axes=0, rtol=1e-9,
                                      atol=1e-9, **k)
    else:
      run = lambda y, **k: ode.dop853(van_der_pol, y, span, mu[:, None], rtol=1e-9, atol=1e-9,
                                      **k)
  for direction in (1, -1):
    s = span if direction == 1 else span[::-1]
    run_d = run
    if direction == -1:  # backward from the forward run's end states
      ends = np.asarray(run(y0).y_final)
      if form == "model":
        run_d = lambda y, **k: ode.dop853(model, y, s, rtol=1e-9, atol=1e-9, **k)
      elif form == "jnp":
        run_d = lambda y, **k: ode.dop853(_vdp_jnp, y, s, args=mu, args_axes=0, rtol=1e-9,
                                          atol=1e-9, **k)
      else:
        run_d = lambda y, **k: ode.dop853(van_der_pol, y, s, mu[:, None], rtol=1e-9,
                                          atol=1e-9, **k)
      starts = ends
    else:
      starts = y0
    sol = run_d(starts, dense=True)
    assert sol.dense_t.shape == (len(starts), ode.dop853.__globals__["DEFAULT_DENSE_STEPS"] + 1)
    rng = np.random.default_rng(3)
    plain = run_d(starts)
    # The dense output's 3 stages at every accepted step, as scipy's nfev counts them.
    np.testing.assert_array_equal(sol.n_rhs, plain.n_rhs + 3 * plain.n_accepted)
    for i in range(len(starts)):
      ref = scipy_dop853(f_np[i], s, starts[i], rtol=1e-9, atol=1e-9, dense_output=True)
      t = np.concatenate([rng.uniform(min(s), max(s), 40), ref.t])
      got = np.asarray(sol.evaluate(t))[i]
      want = ref.sol(t).T
      scale = np.maximum(1.0, np.abs(want))
      if form == "model":
        # scipy runs the independent NumPy model (gravity by differences of the potential):
        # other roundoff and a step more or less, so other interpolants; the same solution to
        # the interpolants' accuracy (here 1e-4 km of 7000-9000 km orbits). The built-in
        # model's own interpolants are checked bit for bit against t_eval below.
        np.testing.assert_allclose(got[:, :3], want[:, :3], rtol=0, atol=1e-4)
        continue
      assert int(sol.n_rhs[i]) == ref.nfev and int(sol.n_accepted[i]) == len(ref.t) - 1
      # (The integrations themselves agree to roundoff, summed in another order: CASES' 1e-10.)
      assert np.max(np.abs(got - want) / scale) < 1e-10, (form, direction, i)
    # The interpolants are the ones t_eval evaluates: the same numbers.
    te = np.linspace(s[0], s[1], 13)
    np.testing.assert_array_equal(sol.evaluate(te), run_d(starts, t_eval=te).ys)


def test_dense_output_limits_and_nan_outside():
  y0 = np.array([[2.0, 0.0], [1.0, 0.5]])
  full = ode.dop853(van_der_pol, y0, (0.0, 6.0), [1.0], rtol=1e-9, atol=1e-9, dense=True)
  few = ode.dop853(van_der_pol, y0, (0.0, 6.0), [1.0], rtol=1e-9, atol=1e-9, dense=5)
  assert few.dense_t.shape == (2, 6) and few.dense_f.shape == (2, 5, 8, 2)
  np.testing.assert_array_equal(few.y_final, full.y_final)  # the integration does not change
  assert np.all(np.asarray(few.n_accepted) > 5)
  end = np.asarray(few.dense_t)[:, 5]  # the 5th step's end: beyond it, nothing kept
  for i in range(2):
    inside = np.linspace(0.0, end[i], 7)
    np.testing.assert_array_equal(few.evaluate(inside)[i], full.evaluate(inside)[i])
    assert np.all(np.isnan(few.evaluate(end[i] + 1e-3)[i]))
  assert np.all(np.isnan(full.evaluate(-0.1))) and np.all(np.isnan(full.evaluate(6.1)))
  np.testing.assert_allclose(full.evaluate(6.0), full.y_final, rtol=1e-12)
  # A terminal event: nothing beyond where it stopped.
  stop = ode.dop853(van_der_pol, y0, (0.0, 6.0), [1.0], dense=True,
                    events=[ode.event(lambda t, y, p: y[0], terminal=True)])
  tf = np.asarray(stop.t_final)
  assert np.all(tf < 6.0)
  for i in range(2):
    assert np.all(np.isnan(stop.evaluate(tf[i] + 1e-6)[i]))
    np.testing.assert_allclose(stop.evaluate(tf[i])[i], stop.y_final[i], atol=1e-12)
  # t0 == t1: the state at t0 only (and a finite derivative: no NaN from the unused rows).
  zero = ode.dop853(van_der_pol, y0, (1.0, 1.0), [1.0], dense=True)
  np.testing.assert_array_equal(zero.evaluate(1.0), y0)
  assert np.all(np.isnan(zero.evaluate(1.5)))
  assert np.isfinite(jax.grad(lambda t: zero.evaluate(t).sum())(1.0))
  with pytest.raises(ValueError, match="dense=True"):
    ode.dop853(van_der_pol, y0, (0.0, 1.0), [1.0]).evaluate(0.5)
  with pytest.raises(TypeError, match="dense"):
    ode.dop853(van_der_pol, y0, (0.0, 1.0), [1.0], dense="yes")
  with pytest.raises(ValueError, match="dense"):
    ode.dop853(van_der_pol, y0, (0.0, 1.0), [1.0], dense=-1)


def test_dense_output_under_jit_vmap_and_derivatives():
  y0 = np.array([[2.0, 0.0], [1.0, 0.5]])
  ts = np.linspace(0.0, 4.0, 9)
  at = lambda y, mu: ode.dop853(_vdp_jnp, y, (0.0, 4.0), args=mu, rtol=1e-12, atol=1e-12,
                                dense=200).evaluate(ts)
  eager = at(y0, 1.5)
  # (Under jit XLA fuses the polynomial and may contract its multiply-adds: ulps apart.)
  np.testing.assert_allclose(jax.jit(at)(y0, 1.5), eager, rtol=1e-15, atol=1e-300)
  batched = jax.vmap(at, in_axes=(0, None))(np.stack([y0, y0[::-1]]), 1.5)
  np.testing.assert_array_equal(batched[0], eager)
  np.testing.assert_array_equal(batched[1], eager[::-1])
  # Against t_eval (the same interpolants), and derivatives: y0 and args through the
  # sensitivities' interpolants, t through the polynomial (dy/dt ~ f to the tolerance).
  te = ode.dop853(_vdp_jnp, y0, (0.0, 4.0), args=1.5, t_eval=ts, rtol=1e-12, atol=1e-12).ys
  np.testing.assert_array_equal(eager, te)
  check_grads(at, (y0, 1.5), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
  sol = ode.dop853(_vdp_jnp, y0, (0.0, 4.0), args=1.5, rtol=1e-12, atol=1e-12, dense=True)
  dydt = jax.vmap(jax.jacfwd(lambda t: sol.evaluate(t)), out_axes=1)(ts)  # (N, T, d)
  f = np.asarray(jax.vmap(jax.vmap(lambda y: _vdp_jnp(0.0, y, 1.5)))(sol.evaluate(ts)))
  np.testing.assert_allclose(dydt, f, rtol=1e-8, atol=1e-8)
