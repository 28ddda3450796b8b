"""Tests of jaxext.ode.dop853 with right-hand sides and events written in jax.numpy (CPU).

References: jax itself (the generated code against jax's evaluation of the same function and of
its Jacobian, operation family by operation family, float32 and float64); the same model written
as a Numba right-hand side (bitwise the same integration); scipy's solve_ivp(DOP853); the built-in
C++ J2 model against J2 gravity written as jax.grad of the potential; finite differences and
check_grads for derivatives (y0, args, through events).
"""

import os
import tempfile

os.environ.setdefault("JAXEXT_NUMBA_CACHE_DIR",
                      os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "numba"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.integrate  # noqa: E402
import scipy.optimize  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxext import ode  # noqa: E402
from jaxext.ode import _jaxpr_numba  # noqa: E402
from jaxext.ode import _jnp  # noqa: E402
from jaxext.ode import models  # noqa: E402

# --- the translation, operation family by operation family ----------------------------------

M = np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0], [0.0, 1.5, 1.0]])
ARGS = {"k": np.array([0.5, 1.5, 2.0]), "M": M, "n": np.array(3, np.int32),
        "flag": np.array(True)}

FAMILIES = {
    "arithmetic": lambda t, y, a: y * a["k"] - y[::-1] / (1 + y**2) + t,
    "trig_exp": lambda t, y, a: (jnp.stack([jnp.sin(y[0]), jnp.cos(y[1]), jnp.tan(y[2])])
                                 + jnp.exp(-y) + jnp.log1p(y**2) + jnp.expm1(y / 3)),
    "inverse_hyperbolic": lambda t, y, a: (
        jnp.arctan2(y, y[::-1] + 2) + jnp.arcsinh(y) + jnp.tanh(y) + jnp.sinh(y / 4)
        + jnp.cosh(y / 5) + jnp.arctan(y) + jnp.arcsin(jnp.tanh(y))
        + jnp.arccos(jnp.tanh(y) / 2) + jnp.arccosh(2 + y**2) + jnp.arctanh(jnp.tanh(y) * 0.9)),
    "logs_roots": lambda t, y, a: (
        jnp.log(1 + y**2) + jnp.log2(2 + y**2) + jnp.log10(3 + y**2) + jnp.exp2(y)
        + jnp.sqrt(1 + y**2) + jnp.cbrt(y) + jax.lax.rsqrt(1 + y**2)),
    "powers": lambda t, y, a: (jnp.abs(y) ** 1.5 + y**3 + y**-2 + (1 + y**2) ** a["k"][0]
                               + (0.5 + jnp.abs(y)) ** -1.5
                               + jnp.power(2.0, y) + jnp.square(y)),
    "nonsmooth": lambda t, y, a: (
        jnp.abs(y) + jnp.sign(y) + jnp.floor(y) + jnp.ceil(y) + jnp.round(y)
        + jnp.clip(y, -0.5, 0.5) + jnp.maximum(y, 0.1) + jnp.minimum(y, y[::-1])),
    "where_logic": lambda t, y, a: (
        jnp.where((y > 0) & (y[0] < 1) | ~(y > 2), y**2, -y)
        + jnp.where(jnp.isfinite(y), 1.0, 0.0) + jnp.where(a["flag"], y, 0.0)),
    "linalg": lambda t, y, a: (M @ y + jnp.cross(y, M[0]) + jnp.linalg.norm(y) * y
                               + jnp.dot(y, y) + jnp.outer(y, y).sum(0)
                               + jnp.einsum("ij,j->i", a["M"], y) + a["M"].T @ y),
    "reductions": lambda t, y, a: (
        jnp.sum(y) + jnp.prod(y) + jnp.max(y) + jnp.min(y) + jnp.mean(y) + jnp.cumsum(y)
        + jnp.cumprod(y) + jnp.argmax(y) + jnp.var(y) + jax.lax.cumsum(y[::-1], reverse=True)),
    "data_movement": lambda t, y, a: (
        jnp.concatenate([y[1:], y[:1]]) + jnp.roll(y, 1) + jnp.flip(y)
        + y.reshape(3, 1).T.ravel() + y[jnp.array([2, 0, 1])] + jnp.pad(y[:2], (1, 0))
        + jnp.tile(y[:1], 3) + jnp.take(y, 1) + jax.lax.dynamic_slice(y, (1,), (2,)).sum()
        + jax.lax.dynamic_update_slice(y, y[:1] * 3, (2,))),
    "indexed_updates": lambda t, y, a: (
        jnp.zeros(3).at[0].set(y[1]).at[1].add(y[2] * 2).at[2].set(-y[0])
        + jnp.zeros(3).at[jnp.array([0, 0, 2])].add(y) + y.at[1].multiply(y[0])),
    "nn_special": lambda t, y, a: (
        jax.nn.sigmoid(y) + jax.nn.softplus(y) + jax.nn.relu(y) + jnp.logaddexp(y, 0.5)
        + jax.scipy.special.erf(y) + jax.nn.gelu(y) + jnp.hypot(y, 1.0)
        + jax.scipy.special.erfc(y)),  # (not jnp.sinc: its derivative cancels near 0 in float32)
    "nested_calls": lambda t, y, a: (jax.jit(lambda z: jnp.sin(z) * 2)(y)
                                     + jax.checkpoint(lambda z: z**2)(y)
                                     + jax.grad(lambda z: jnp.sum(jnp.sin(z) ** 2))(y)),
    "integer_args": lambda t, y, a: (y * a["n"] + (a["n"] % 2) + a["flag"] * y
                                     + jnp.asarray(y > 0, jnp.int32) // 2 + t * y),
    # Complex values inside a real function (written out as pairs of reals).
    "complex_inside": lambda t, y, a: jnp.real(
        jnp.exp(1j * y) * (y + 2j) / (y - 3j) + jnp.sqrt(y + 1j) + jnp.log(y + 2 + 1j)
        + jnp.sin(y * 1j) + jnp.cos(y + 0.5j) + (y + 1j) ** 3 + jnp.conj(y + 1j) * 1j
        + jnp.where(y > 0, y * 1j, 2.0 + 0j) + (a["M"] + 1j * a["M"].T) @ (y + 0.5j)
        ) + jnp.imag(jnp.sum(y * (1 + 2j)) + jnp.abs(y + 1j) * 1j),
    # XLA's semantics where a naive translation differs: signed zeros and NaN in max, min and
    # clamp; bitwise not of integers; integer division by zero; saturating float -> int casts;
    # x.at[i].apply(f); 0 - x at x = 0.
    "edge_semantics": lambda t, y, a: jnp.stack([
        jnp.maximum(jnp.where(y[0] > 0, 0.0, -0.0), jnp.where(y[1] > 0, -0.0, 0.0))
        + jnp.minimum(jnp.where(y[2] > 0, 0.0, -0.0), 0.0 * t),
        jnp.clip(y[1], jnp.where(y[0] > 1, jnp.nan, -1.0), 1.0)
        + (~jax.lax.convert_element_type(y[2] * 3, jnp.int32)).astype(y.dtype)
        + jax.lax.div(jax.lax.convert_element_type(y[0] * 5, jnp.int32), jnp.int32(0)),
        jax.lax.convert_element_type(y[2] * 1e12, jnp.int32).astype(y.dtype) * 1e-9
        + jax.lax.convert_element_type(jnp.where(y[0] > 2, jnp.nan, y[0]), jnp.int32)
        + jnp.arctan2(0.0 - y[0], -1.0)]),
}

# Agreement of Numba's math library with XLA's: relative (floor 1) differences of a few ulps.
TOL = {np.float64: 1e-14, np.float32: 4e-6}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_generated_code_equals_jax(family, dtype):
  f = FAMILIES[family]
  layout, params = _jnp.layout(ARGS, None, 1, dtype)
  rhs = _jnp.rhs(f, layout, 3, dtype)
  fn = numba.njit(**rhs.fn.numba_options)(rhs.fn)
  jac = numba.njit(**rhs.jacobian.numba_options)(rhs.jacobian)
  p = np.asarray(params[0])
  args = layout.unflatten(jnp.asarray(p))
  ref_f = jax.jit(lambda t, y: jnp.asarray(f(t, y, args), dtype))
  ref_j = jax.jit(jax.jacfwd(lambda t, y, p: jnp.asarray(f(t, y, layout.unflatten(p)), dtype),
                             argnums=(1, 2)))
  rng = np.random.default_rng(7)
  inputs = [rng.normal(size=3) * 1.5 for _ in range(30)]
  inputs += [np.array([0.0, -0.0, 1.0]), np.array([0.5, -0.5, 2.5]), np.array([-3.0, 3.0, 1e-3])]
  for y in inputs:
    y = y.astype(dtype)
    t = dtype(0.3)
    got = np.zeros(3, dtype)
    fn(t, y, p, got)
    want = np.asarray(ref_f(t, y))
    assert_close(got, want, TOL[dtype], (family, y))
    dfdy, dfdp = np.zeros((3, 3), dtype), np.zeros((3, layout.size), dtype)
    jac(t, y, p, dfdy, dfdp)
    want_j = [np.asarray(w) for w in ref_j(t, y, p)]
    if all(np.all(np.isfinite(w)) for w in want_j):
      # (At a singular point, e.g. cbrt'(0) = inf, jax's Jacobian has inf * 0 = NaN where the
      # generated code's folded x * 0 = 0: the documented difference.)
      for g, w in zip((dfdy, dfdp), want_j):
        assert_close(g, w, TOL[dtype], (family, y, "Jacobian"))


def assert_close(got, want, tol, what):
  """Equal infinities and NaNs where jax has them; elsewhere relative (floor 1) error <= tol."""
  special = ~np.isfinite(want)
  np.testing.assert_array_equal(got[special], want[special], err_msg=str(what))
  zeros = want == 0  # signed zeros as XLA gives them (values; Jacobians fold x * 0 to +0)
  if not (isinstance(what[-1], str) and what[-1] == "Jacobian"):
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]),
                                  err_msg=f"signs of zeros: {what}")
  assert np.all(np.isfinite(got[~special])), what
  err = np.abs(got[~special] - want[~special]) / np.maximum(1, np.abs(want[~special]))
  assert err.size == 0 or err.max() <= tol, (what, got, want)


@pytest.mark.parametrize("exponent", [1.5, -1.5])
def test_three_halves_power_is_correctly_rounded_without_pow(exponent):
  """x ** 1.5 and x ** -1.5 (gravity's r2 ** 1.5, r2 ** -1.5) are written out as x sqrt(x) (and
  its reciprocal) in double-double (float64) or in float64 (float32), far cheaper than libm's
  pow. Checked against the 80-bit long double power (itself within 2^-11 of a float64 ulp):
  correctly rounded in float32; in float64 within 0.5 ulp + the reference's error over
  2^-600 <= x <= 2^600 (where libm's pow is off by up to 0.69 ulp), and pow itself outside that
  range and at zeros, negative values, infinities and NaN."""
  if np.finfo(np.longdouble).nmant < 63:
    pytest.skip("needs x87's 80-bit long double as the reference")
  helpers = _jaxpr_numba._numba_helpers()
  rng = np.random.default_rng(3)
  def sample(k):  # x^1.5 normal for x within 2^-k .. 2^k
    return np.concatenate([rng.uniform(0.0, 10.0, 20000),
                           np.exp(rng.uniform(-k * 0.69, k * 0.69, 20000)),
                           2.0 ** rng.integers(-k, k, 2000).astype(float)])
  specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -2.5, 5e-324, 1e-300, 1e300,
                       2.0 ** -600, 2.0 ** 600, 2.0 ** -601, 2.0 ** 601, 1.0, 4.0, 0.25])
  for dtype, tol, x in ((np.float64, 0.5 + 2.0 ** -10, sample(600)), (np.float32, 0.5, sample(80))):
    name = "_pow3half_" if exponent > 0 else "_powm3half_"
    helper = helpers[name + np.dtype(dtype).name.replace("float", "f")]
    each = numba.njit(lambda a, h=helper: np.array([h(v) for v in a]))
    power = numba.njit(lambda a, e=dtype(exponent): np.array([v ** e for v in a]))
    xs = x.astype(dtype)
    got = each(xs)
    ref = np.power(xs.astype(np.longdouble), np.longdouble(exponent))
    rounded = ref.astype(dtype)
    normal = np.isfinite(rounded) & (rounded >= np.finfo(dtype).tiny)
    ulps = np.abs((got.astype(np.longdouble) - ref) /
                  np.spacing(rounded).astype(np.longdouble))[normal]
    assert normal.mean() > 0.99 and ulps.max() <= tol, (dtype, ulps.max())
    if dtype == np.float32:
      np.testing.assert_array_equal(got, rounded)
    sp = specials.astype(dtype)
    with np.errstate(all="ignore"):
      np.testing.assert_array_equal(each(sp), power(sp))  # (NaN where NaN: equal_nan)
  # The translation writes it for a literal 1.5 only (other exponents keep pow).
  layout, _ = _jnp.layout(1.0, None, 1, np.float64)
  rhs = _jnp.rhs(lambda t, y, a: jnp.stack([y[0] ** exponent, y[1] ** 2.5 * a]), layout, 2,
                 np.float64)
  import linecache  # noqa: PLC0415
  source = "".join(linecache.getlines(rhs.fn.__code__.co_filename))
  assert source.count(f"{name}f64(") == 1 and " ** 2.5" in source, source


def test_jacobian_is_folded_to_its_nonzero_entries():
  """jax.jacfwd's basis is folded away: the Kepler Jacobian's constant blocks are written as
  constants, with no multiplication left by a zero or a one."""
  def kepler(t, y, mu):
    r = y[:3]
    return jnp.concatenate([y[3:], -mu * r / jnp.linalg.norm(r) ** 3])
  layout, _ = _jnp.layout(1.0, None, 1, np.float64)
  rhs = _jnp.rhs(kepler, layout, 6, np.float64)
  import linecache  # noqa: PLC0415
  source = "".join(linecache.getlines(rhs.jacobian.__code__.co_filename))
  assert "dfdy[0, 3] = 1.0" in source and "dfdy[0, 0] = 0.0" in source
  assert "* 0.0" not in source and "* 1.0" not in source and "0.0 *" not in source
  assert source.count("math.sqrt") == 1  # once, not once per basis vector


# --- integrations ------------------------------------------------------------------------------

def lorenz(t, y, args):
  sigma, rho, beta = args
  return jnp.array([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1], y[0] * y[1] - beta * y[2]])


@ode.rhs
def lorenz_numba(t, y, p, dydt):
  dydt[0] = p[0] * (y[1] - y[0])
  dydt[1] = y[0] * (p[1] - y[2]) - y[1]
  dydt[2] = y[0] * y[1] - p[2] * y[2]


def lorenz_y0(n, dtype=np.float64):
  return (np.random.default_rng(0).normal(size=(n, 3)) + np.array([1.0, 1.0, 20.0])).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_same_integration_as_the_numba_form(dtype):
  """Written in jnp or in Numba, the same arithmetic: bitwise the same steps and results."""
  y0 = lorenz_y0(20, dtype)
  args = (10.0, 28.0, 8.0 / 3.0)
  te = np.linspace(0.0, 2.0, 7).astype(dtype)
  rtol = 1e-10 if dtype == np.float64 else 1e-5
  a = ode.dop853(lorenz, y0, (0.0, 2.0), args=args, t_eval=te, rtol=rtol, atol=rtol)
  b = ode.dop853(lorenz_numba, y0, (0.0, 2.0), np.asarray(args, dtype), t_eval=te, rtol=rtol,
                 atol=rtol)
  assert a.ys.dtype == dtype
  for name in ("ys", "y_final", "t_final", "n_rhs", "n_accepted", "status"):
    np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
  assert np.all(a.status == ode.Status.SUCCESS)


def test_per_trajectory_and_shared_args_pytrees():
  n = 6
  y0 = lorenz_y0(n)
  sigma = np.linspace(9.0, 11.0, n)

  def lorenz_dict(t, y, a):
    return lorenz(t, y, (a["sigma"], a["rho_beta"][0], a["rho_beta"][1]))

  a = ode.dop853(lorenz_dict, y0, (0.0, 1.0), args={"sigma": sigma, "rho_beta": (28.0, 8 / 3)},
                 args_axes={"sigma": 0, "rho_beta": None}, rtol=1e-10, atol=1e-10)
  p = np.stack([sigma, np.full(n, 28.0), np.full(n, 8 / 3)], axis=1)
  b = ode.dop853(lorenz_numba, y0, (0.0, 1.0), p, rtol=1e-10, atol=1e-10)
  np.testing.assert_array_equal(a.y_final, b.y_final)
  # jax.vmap over a shared args leaf folds into the trajectory axis: the same numbers again.
  one = lambda s, y: ode.dop853(lorenz_dict, y[None], (0.0, 1.0),
                                args={"sigma": s, "rho_beta": (28.0, 8 / 3)}, rtol=1e-10,
                                atol=1e-10).y_final[0]
  np.testing.assert_array_equal(jax.vmap(one)(sigma, y0), b.y_final)
  np.testing.assert_array_equal(jax.jit(one)(sigma[2], y0[2]), b.y_final[2])


ARENSTORF_Y0 = np.array([0.994, 0.0, 0.0, -2.00158510637908252240537862224])
ARENSTORF_T = 17.0652165601579625588917206249
ARENSTORF_MU = 0.012277471


def arenstorf(t, y, mu):
  """The restricted three-body problem in the rotating frame (Hairer's periodic orbit)."""
  x, yy, vx, vy = y
  d1 = jnp.hypot(x + mu, yy) ** 3
  d2 = jnp.hypot(x - (1 - mu), yy) ** 3
  ax = x + 2 * vy - (1 - mu) * (x + mu) / d1 - mu * (x - (1 - mu)) / d2
  ay = yy - 2 * vx - (1 - mu) * yy / d1 - mu * yy / d2
  return jnp.stack([vx, vy, ax, ay])


def test_arenstorf_orbit_against_scipy():
  te = np.linspace(0.0, ARENSTORF_T, 9)
  sol = ode.dop853(arenstorf, ARENSTORF_Y0[None], (0.0, ARENSTORF_T), args=ARENSTORF_MU,
                   t_eval=te, rtol=1e-10, atol=1e-10)
  f = jax.jit(lambda t, y: arenstorf(t, y, ARENSTORF_MU))
  ref = scipy.integrate.solve_ivp(lambda t, y: np.asarray(f(t, y)), (0.0, ARENSTORF_T),
                                  ARENSTORF_Y0, method="DOP853", t_eval=te, rtol=1e-10,
                                  atol=1e-10)
  assert int(sol.n_rhs[0]) == ref.nfev
  # The orbit ends with a close approach that amplifies roundoff differences (see ode_test).
  np.testing.assert_allclose(sol.ys[0], ref.y.T, rtol=0, atol=1e-7)
  # Periodic: back to the start.
  np.testing.assert_allclose(sol.y_final[0], ARENSTORF_Y0, atol=2e-6)


def j2_gravity(t, y, args):
  """Two-body + J2, the acceleration as jax.grad of the zonal potential (nested autodiff)."""
  mu, radius, j2 = args

  def potential(r):
    rr = jnp.linalg.norm(r)
    s = r[2] / rr
    return mu / rr * (1 - j2 * (radius / rr) ** 2 * (3 * s * s - 1) / 2)
  return jnp.concatenate([y[3:], jax.grad(potential)(y[:3])])


def test_j2_as_gradient_of_the_potential_equals_the_built_in_model():
  y0 = np.array([[7000.0, 100.0, 50.0, 0.1, 7.4, 1.2], [6800.0, -300.0, 900.0, -1.0, 6.9, 3.0]])
  args = (models.EARTH_MU, models.EARTH_RADIUS, models.EARTH_J2)
  te = np.linspace(0.0, 6000.0, 4)
  a = ode.dop853(j2_gravity, y0, (0.0, 6000.0), args=args, t_eval=te, rtol=1e-11, atol=1e-9)
  b = ode.dop853(models.earth(j2=True), y0, (0.0, 6000.0), t_eval=te, rtol=1e-11, atol=1e-9)
  np.testing.assert_allclose(a.ys, b.ys, rtol=1e-9, atol=1e-6)
  # Derivatives (Jacobian of jax.grad by jax.jacfwd) against the C++ model's dual numbers.
  f = lambda m: lambda y: m(y).y_final
  ga = jax.jacfwd(f(lambda y: ode.dop853(j2_gravity, y, (0.0, 3000.0), args=args, rtol=1e-11,
                                         atol=1e-9)))(y0[:1])
  gb = jax.jacfwd(f(lambda y: ode.dop853(models.earth(j2=True), y, (0.0, 3000.0), rtol=1e-11,
                                         atol=1e-9)))(y0[:1])
  np.testing.assert_allclose(ga, gb, rtol=1e-7, atol=1e-7)


# --- derivatives -------------------------------------------------------------------------------

def van_der_pol(t, y, mu):
  return jnp.array([y[1], mu * (1 - y[0] ** 2) * y[1] - y[0]])


def test_check_grads_y0_and_args():
  te = np.linspace(0.0, 4.0, 5)
  f = lambda y0, mu: ode.dop853(van_der_pol, y0, (0.0, 4.0), args=mu, args_axes=0, t_eval=te,
                                rtol=1e-12, atol=1e-12).ys
  y0 = np.array([[2.0, 0.0], [0.5, -0.3]])
  mu = np.array([1.0, 2.5])
  check_grads(f, (y0, mu), order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


def test_gradient_of_args_against_finite_differences():
  y0 = lorenz_y0(3)

  def loss(args):
    return ode.dop853(lorenz, y0, (0.0, 0.5), args=args, rtol=1e-12, atol=1e-12).y_final.sum()
  args = (10.0, 28.0, 8.0 / 3.0)
  g = jax.grad(loss)(args)
  for k in range(3):
    h = 1e-6 * args[k]
    up = tuple(a + h * (i == k) for i, a in enumerate(args))
    down = tuple(a - h * (i == k) for i, a in enumerate(args))
    fd = (loss(up) - loss(down)) / (2 * h)
    np.testing.assert_allclose(g[k], fd, rtol=1e-6)
  np.testing.assert_allclose(jax.jit(jax.grad(loss))(args), g, rtol=1e-12)


def test_events_in_jnp_with_derivatives():
  """A jnp event g(t, y, args) (its gradient from jax.grad): the same times as the Numba event,
  and derivatives of the stopping time against finite differences."""
  y0 = lorenz_y0(4)
  args = (10.0, 28.0, 8.0 / 3.0)
  level = lambda t, y, a: y[2] - 25.0
  a = ode.dop853(lorenz, y0, (0.0, 2.0), args=args, events=[level], rtol=1e-10, atol=1e-10)

  @ode.event
  def level_numba(t, y, p):
    return y[2] - 25.0
  b = ode.dop853(lorenz_numba, y0, (0.0, 2.0), np.asarray(args), events=[level_numba],
                 rtol=1e-10, atol=1e-10)
  np.testing.assert_array_equal(a.t_events, b.t_events)
  assert np.all(a.event_counts >= 1)

  stop = ode.event(level, terminal=True, direction=1)
  t_stop = lambda y0, rho: ode.dop853(lorenz, y0, (0.0, 2.0), args=(10.0, rho, 8.0 / 3.0),
                                      events=[stop], rtol=1e-12, atol=1e-12).t_final
  gy, grho = jax.jacfwd(t_stop, argnums=(0, 1))(y0[:2], 28.0)
  h = 1e-6
  for k in range(3):
    e = np.zeros_like(y0[:2])
    e[:, k] = h
    fd = (t_stop(y0[:2] + e, 28.0) - t_stop(y0[:2] - e, 28.0)) / (2 * h)
    np.testing.assert_allclose(gy[np.arange(2), np.arange(2), k], fd, rtol=1e-5, atol=1e-9)
  fd = (t_stop(y0[:2], 28.0 + h) - t_stop(y0[:2], 28.0 - h)) / (2 * h)
  np.testing.assert_allclose(grho, fd, rtol=1e-5)


# --- errors ------------------------------------------------------------------------------------

def test_unsupported_operation_names_it_and_the_line():
  def branchy(t, y, args):
    return jax.lax.cond(y[0] > 0, lambda: -y, lambda: y)  # the line the error names
  line = branchy.__code__.co_firstlineno + 1
  with pytest.raises(TypeError, match=rf"'cond'.*ode_jnp_test.py:{line}"):
    ode.dop853(branchy, np.ones((1, 2)), (0.0, 1.0))
  assert issubclass(_jaxpr_numba.Unsupported, TypeError)


@pytest.mark.parametrize("fn, kwargs, error, match", [
    (lambda t, y, a: y[:1], {}, ValueError, r"shape \(2,\).*got shape \(1,\)"),
    (lambda t, y, a: y * 1j, {}, TypeError, "complex"),
    (lambda t, y, a: "no", {}, TypeError, "must return dy/dt"),
    (lambda t, y, a: -y, {"params": np.ones(2)}, TypeError, "takes args="),
    (lorenz_numba, {"args": (1.0,)}, TypeError, "args and args_axes are for a jax.numpy"),
    (lambda t, y, a: -y * a, {"args": np.ones(3), "args_axes": 0}, ValueError,
     r"leading axis must be N = 2"),
    (lambda t, y, a: -y, {"args": "text"}, TypeError, "args leaf 0 is a str"),
    (lambda t, y, a: -y, {"args": 1.0, "args_axes": 1}, ValueError, "only 0"),
    (lambda t, y, a: -y, {"events": [ode.event(lambda t, y, a: y[0],
                                               gradient=lambda *x: 0.0)]},
     ValueError, "gradient comes from jax"),
    (lambda t, y, a: -y, {"events": [lambda t, y, a: y]}, ValueError, "must return a scalar"),
])
def test_bad_jnp_right_hand_sides(fn, kwargs, error, match):
  with pytest.raises(error, match=match):
    ode.dop853(fn, np.ones((2, 2)) if "lorenz" not in getattr(fn, "name", "") else np.ones((2, 3)),
               (0.0, 1.0), **kwargs)


def test_errors_name_the_users_line_and_say_what_to_do():
  def sorting(t, y, args):
    return jnp.sort(y)  # inside jnp.sort's own jit: the line named is this one
  line = sorting.__code__.co_firstlineno + 1
  with pytest.raises(TypeError, match=rf"'sort'.*ode_jnp_test.py:{line}"):
    ode.dop853(sorting, np.ones((1, 2)), (0.0, 1.0))

  def branching(t, y, args):
    if y[0] > 0:  # Python's if on a traced value
      return -y
    return y
  with pytest.raises(jax.errors.TracerBoolConversionError) as err:
    ode.dop853(branching, np.ones((1, 2)), (0.0, 1.0))
  assert "jnp.where" in "".join(getattr(err.value, "__notes__", []))

  with pytest.raises(TypeError, match="closes over a traced value.*args="):
    jax.grad(lambda k: ode.dop853(lambda t, y, a: -k * y, np.ones((1, 2)),
                                  (0.0, 1.0)).y_final.sum())(1.0)


def test_a_function_jax_cannot_differentiate_integrates_and_says_so_when_differentiated():
  """x.at[i].apply(f) has no JVP in jax: the integration runs (its scatter combines by f), and
  only a derivative raises, with jax's reason."""
  f = lambda t, y, a: -y.at[1].apply(jnp.sin)
  sol = ode.dop853(f, np.array([[1.0, 0.5]]), (0.0, 1.0), rtol=1e-12, atol=1e-12)
  ref = scipy.integrate.solve_ivp(lambda t, y: -np.array([y[0], np.sin(y[1])]), (0.0, 1.0),
                                  [1.0, 0.5], method="DOP853", rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(sol.y_final[0], ref.y[:, -1], rtol=1e-12)
  with pytest.raises(ValueError, match="could not compute.*scatter_apply"):
    jax.grad(lambda y: ode.dop853(f, y, (0.0, 1.0)).y_final.sum())(np.array([[1.0, 0.5]]))


def schrodinger(t, psi, H):
  return -1j * (H @ psi)


H2 = np.array([[1.0, 0.3 - 0.2j], [0.3 + 0.2j, -0.5]])


def propagate(psi0, t):
  import scipy.linalg  # noqa: PLC0415
  return np.stack([scipy.linalg.expm(-1j * H2 * t) @ p for p in psi0])


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64], ids=["c128", "c64"])
def test_complex_states(dtype):
  """A two-level Schrodinger equation against the matrix exponential: t_eval, the dense output,
  an event on the population (its time against the exact curve's root) and derivatives with
  respect to the Hamiltonian's scale against finite differences."""
  psi0 = np.array([[1.0, 0.0], [0.6, 0.8j]], dtype)
  ts = np.linspace(0.0, 5.0, 6)
  tol, agree = (1e-11, 1e-9) if dtype == np.complex128 else (2e-5, 2e-4)
  sol = ode.dop853(schrodinger, psi0, (0.0, 5.0), args=H2.astype(dtype), t_eval=ts, rtol=tol,
                   atol=tol, dense=True)
  assert sol.ys.dtype == dtype and sol.y_final.shape == (2, 2)
  exact = np.stack([propagate(psi0.astype(np.complex128), t) for t in ts], axis=1)
  np.testing.assert_allclose(sol.ys, exact, atol=agree)
  np.testing.assert_allclose(sol.evaluate(2.2), propagate(psi0.astype(np.complex128), 2.2),
                             atol=agree)
  if dtype == np.complex64:
    return
  # The population of the first level falls below 0.9: the same time as the exact curve's.
  level = ode.event(lambda t, psi, H: jnp.abs(psi[0]) ** 2 - 0.9, terminal=True)
  s = ode.dop853(schrodinger, psi0[:1], (0.0, 5.0), args=H2, events=[level], rtol=1e-12,
                 atol=1e-12)
  root = scipy.optimize.brentq(lambda t: abs(propagate(psi0[:1], t)[0, 0]) ** 2 - 0.9, 0.0,
                               float(s.t_final[0]) + 0.1)
  assert s.status[0] == ode.Status.EVENT
  np.testing.assert_allclose(s.t_final[0], root, rtol=1e-9)
  # Derivatives through the complex state, with respect to a real scale of H and to t1.
  f = lambda a, t1: jnp.abs(ode.dop853(schrodinger, psi0, (0.0, t1), args=a * H2, rtol=1e-12,
                                       atol=1e-12).y_final[0, 1]) ** 2
  ga, gt = jax.grad(f, argnums=(0, 1))(1.0, 2.0)
  h = 1e-6
  np.testing.assert_allclose(ga, (f(1 + h, 2.0) - f(1 - h, 2.0)) / (2 * h), rtol=1e-6)
  np.testing.assert_allclose(gt, (f(1.0, 2.0 + h) - f(1.0, 2.0 - h)) / (2 * h), rtol=1e-6)
  # Per-trajectory complex args.
  Hs = np.stack([H2, 2 * H2])
  both = ode.dop853(schrodinger, psi0, (0.0, 1.0), args=Hs, args_axes=0, rtol=1e-11,
                    atol=1e-11).y_final
  np.testing.assert_allclose(both[1], propagate(psi0[1:], 2.0)[0], atol=1e-9)


def test_complex_arithmetic_at_its_edges():
  """Each result to its own relative accuracy where naive formulas lose it: sqrt's small part
  (cancellation), division near over- and underflow (Smith's algorithm, as XLA divides), and
  complex indexing (.at[].set/add, a gather, pad)."""
  def f(t, y, a):  # y: 6 components, the first 3 used
    return jnp.stack([
        jnp.imag(jnp.sqrt(y[0] + 1e-10j * y[1])), jnp.real(jnp.sqrt(-y[0] * 1e-5 + 1e-20j)),
        jnp.real(1 / (y[0] * 3e-170 + 0j)), jnp.real(1 / (1e-200 * y[0] + 1e-200j * y[1])),
        jnp.imag(1 / (1e200 * y[0] + 1e200j * y[1])),
        jnp.real(jnp.zeros(3, complex).at[0].set(y[0] + 1j).at[1].add(y[1] * 1j)
                 + (y[:3] + 1j)[jnp.array([2, 0, 1])] + jnp.pad((y[:3] + 1j)[:2], (1, 0))).sum()])
  layout, _ = _jnp.layout((), None, 1, np.float64)
  rhs = _jnp.rhs(f, layout, 6, np.float64)
  fn = numba.njit(**rhs.fn.numba_options)(rhs.fn)
  for y in (np.array([4.0, 1.0, 0.5, 0, 0, 0]), np.array([0.3, -2.0, 1.5, 0, 0, 0])):
    got = np.zeros(6)
    fn(0.0, y, np.zeros(0), got)
    np.testing.assert_allclose(got, np.asarray(f(0.0, jnp.asarray(y), None)), rtol=1e-14, atol=0)


def test_complex_state_errors():
  psi0 = np.array([[1.0, 0.0]], np.complex128)
  with pytest.raises(TypeError, match="complex states need a jax.numpy"):
    ode.dop853(lambda t, y, p, dydt: None, psi0, (0.0, 1.0))
  with pytest.raises(ValueError, match=r"shape \(2,\)"):
    ode.dop853(lambda t, y, a: y[:1], psi0, (0.0, 1.0))
  with pytest.raises(TypeError, match="must return a real number"):
    ode.dop853(schrodinger, psi0, (0.0, 1.0), args=H2, events=[lambda t, y, a: y[0]])
  with pytest.raises(ValueError, match=r"atol must be a scalar or of shape \(d,\) = \(2,\)"):
    ode.dop853(schrodinger, psi0, (0.0, 1.0), args=H2, atol=[1e-9] * 3)
  ok = ode.dop853(schrodinger, psi0, (0.0, 1.0), args=H2, atol=[1e-9, 1e-10])
  assert ok.status[0] == ode.Status.SUCCESS
  with pytest.raises(ValueError, match="radius or altitude event needs a real state"):
    ode.dop853(schrodinger, np.ones((1, 3), complex), (0.0, 1.0), args=np.eye(3),
               events=[ode.models.radius_event(1.0)])


def test_args_axes_as_lists_and_tuples():
  y0 = lorenz_y0(3)
  rho = np.array([27.0, 28.0, 29.0])
  as_list = ode.dop853(lambda t, y, a: lorenz(t, y, (a[0], a[1], a[2])), y0, (0.0, 0.5),
                       args=[10.0, rho, 8 / 3], args_axes=[None, 0, None]).y_final
  as_tuple = ode.dop853(lorenz, y0, (0.0, 0.5), args=(10.0, rho, 8 / 3),
                        args_axes=(None, 0, None)).y_final
  np.testing.assert_array_equal(as_list, as_tuple)
  one = ode.dop853(lorenz, y0[1:2], (0.0, 0.5), args=(10.0, 28.0, 8 / 3)).y_final
  np.testing.assert_array_equal(as_tuple[1:2], one)


def test_numba_form_is_still_recognised():
  """Four parameters (t, y, p, dydt) is the Numba form; three is jax.numpy."""
  def decay(t, y, p, dydt):
    dydt[0] = -p[0] * y[0]
  assert _jnp.is_numba_form(decay) and _jnp.is_numba_form(lorenz_numba)
  assert not _jnp.is_numba_form(lorenz) and not _jnp.is_numba_form(lambda t, y, a=None: y)
  sol = ode.dop853(decay, np.ones((1, 1)), (0.0, 1.0), np.array([2.0]), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(sol.y_final[0, 0], np.exp(-2.0), rtol=1e-9)


# --- user right-hand sides in SIMD lanes ---------------------------------------------------------

def _bits(x):
  x = np.asarray(x)
  return x.view(f"i{x.itemsize}") if x.dtype.kind == "f" else x


def vdp(t, y, mu):
  return jnp.stack([y[1], mu * (1 - y[0] * y[0]) * y[1] - y[0]])


@ode.rhs
def vdp_numba(t, y, p, dydt):
  dydt[0] = y[1]
  dydt[1] = p[0] * (1 - y[0] * y[0]) * y[1] - y[0]


@ode.rhs
def vdp_numba_reshaped(t, y, p, dydt):  # needs a contiguous y: no lanes form
  z = y.reshape((2, 1))
  dydt[0] = z[1, 0]
  dydt[1] = p[0] * (1 - z[0, 0] * z[0, 0]) * z[1, 0] - z[0, 0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("n", [37, 3, 16])
@pytest.mark.parametrize("form", ["jnp", "numba"])
def test_simd_lanes_round_as_one_trajectory_per_call(form, n, dtype, monkeypatch):
  """A user's right-hand side runs 8 trajectories side by side on the CPU: the stage sums and
  error norms as SIMD vectors, one call of its lanes form per stage for all 8 (each lane's y, p
  and dydt strided views). JAXEXT_ODE_SIMD=0 calls it once per trajectory. Same bits for every
  output (t_eval, events, dense output, statistics), whichever lane a trajectory runs in and
  however many lanes idle (n = 3: fewer trajectories than lanes; 37: a partial last vector; per
  trajectory mu and spans so that lanes finish at different times)."""
  rng = np.random.default_rng(n)
  mu = rng.uniform(0.5, 2.0, n).astype(dtype)
  y0 = np.stack([2.0 + 0.1 * rng.normal(size=n), 0.1 * rng.normal(size=n)], 1).astype(dtype)
  t1 = rng.uniform(4.0, 10.0, n).astype(dtype)
  span = np.stack([np.zeros(n, dtype), t1], 1)
  crossing = ode.event(lambda t, y, m: y[0], direction=1)  # upward through x = 0
  stop = ode.event(lambda t, y, m: y[1] - 2.5, terminal=True)  # fast trajectories stop early
  tol = 1e-9 if dtype == np.float64 else 1e-5
  te = np.linspace(0.0, float(t1.max()), 6).astype(dtype)  # (some past shorter spans: NaN)
  if form == "jnp":
    run = lambda: ode.dop853(vdp, y0, span, args=mu, args_axes=0, events=[crossing, stop],
                             t_eval=te, dense=64, rtol=tol, atol=tol)
  else:
    run = lambda: ode.dop853(vdp_numba, y0, span, mu[:, None], t_eval=te, dense=64, rtol=tol,
                             atol=tol)
  from jaxext.cpu import _cpu_ops  # noqa: PLC0415 (the counter of lane runs)
  results = {}
  for simd in ("1", "0"):
    monkeypatch.setenv("JAXEXT_ODE_SIMD", simd)  # read by the handler when it runs
    before = _cpu_ops.ode_simd_lane_runs()
    results[simd] = jax.block_until_ready(run())
    assert (_cpu_ops.ode_simd_lane_runs() > before) == (simd == "1"), simd
  lanes, scalar = results["1"], results["0"]
  assert np.all(lanes.status >= 0)
  if form == "jnp":
    assert (np.asarray(lanes.event_counts)[:, 0] > 0).any()
    assert (lanes.status == ode.Status.EVENT).any() and (lanes.status == 0).any()
  for name in ("ys", "y_final", "t_final", "n_rhs", "n_accepted", "status", "t_events",
               "y_events", "event_counts", "dense_t", "dense_f"):
    if getattr(scalar, name) is None:
      continue
    np.testing.assert_array_equal(_bits(getattr(lanes, name)), _bits(getattr(scalar, name)),
                                  err_msg=name)


def test_simd_lanes_name_the_trajectory_that_raised():
  @ode.rhs
  def picky(t, y, p, dydt):
    if p[0] < 0:
      raise ValueError("negative")
    dydt[0] = -p[0] * y[0]

  p = np.ones((20, 1))
  p[13, 0] = -1.0
  with pytest.raises(Exception, match=r"raised an exception \(trajectory 13;"):
    jax.block_until_ready(ode.dop853(picky, np.ones((20, 1)), (0.0, 1.0), p).y_final)
  p[13, 0] = 2.0  # and without the bad one, every lane as alone
  sol = ode.dop853(picky, np.ones((20, 1)), (0.0, 1.0), p, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(sol.y_final[:, 0], np.exp(-p[:, 0]), rtol=1e-11)


def test_a_right_hand_side_numba_cannot_compile_in_lanes_runs_one_per_call():
  from jaxext.cpu import _cpu_ops  # noqa: PLC0415
  y0 = np.array([[2.0, 0.0], [1.5, 0.5], [0.5, -1.0]])
  mu = np.array([[1.0], [0.7], [1.8]])
  before = _cpu_ops.ode_simd_lane_runs()
  a = ode.dop853(vdp_numba_reshaped, y0, (0.0, 5.0), mu, rtol=1e-10, atol=1e-10)
  jax.block_until_ready(a.y_final)
  assert _cpu_ops.ode_simd_lane_runs() == before  # no lanes form: one trajectory per call
  b = ode.dop853(vdp_numba, y0, (0.0, 5.0), mu, rtol=1e-10, atol=1e-10)
  assert _cpu_ops.ode_simd_lane_runs() > before
  np.testing.assert_array_equal(_bits(a.y_final), _bits(b.y_final))
