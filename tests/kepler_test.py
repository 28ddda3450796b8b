"""Tests of jaxext.kepler against an independent high-precision reference (mpmath) and identities.

Accuracy contract (issue #2): the residual |E - e sin E - M|, with M reduced to [-pi, pi] exactly
and E recovered from the returned (sin E, cos E), is at most 2e-15 + |M| eps in float64 and
1e-6 + |M| eps in float32, for every e in [0, 1) and every finite M.
"""

import concurrent.futures
import functools

import jax
import jax.numpy as jnp
import mpmath as mp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402  (after enabling x64)

DTYPES = [np.float32, np.float64]
RESIDUAL_FLOOR = {np.float32: 1e-6, np.float64: 2e-15}


# --------------------------------------------------------------------------------------------
# Independent reference: bracketed Newton in 160-bit arithmetic.
# --------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _ref(m: float, e: float):
  with mp.workprec(160):
    M, E_ = mp.mpf(m), mp.mpf(e)
    twopi = 2 * mp.pi
    r = M - twopi * mp.nint(M / twopi)
    f = lambda x: x - E_ * mp.sin(x) - r
    lo, hi = -mp.pi, mp.pi  # f(lo) <= 0 <= f(hi); f is increasing
    x = r
    for _ in range(400):
      fx = f(x)
      if fx == 0:
        break
      if fx < 0:
        lo = x
      else:
        hi = x
      step = fx / (1 - E_ * mp.cos(x))
      nx = x - step
      if not (lo < nx < hi):
        nx = (lo + hi) / 2
      if abs(nx - x) < mp.mpf(2) ** -150 * (1 + abs(x)):
        x = nx
        break
      x = nx
    return float(mp.sin(x)), float(mp.cos(x)), float(1 - E_ * mp.cos(x)), r


def _residuals(m, e, s, c):
  """|E - e sin E - M_red| in 160-bit arithmetic, E = atan2(s, c), wrapped to [-pi, pi]."""
  out = np.empty(len(m))
  with mp.workprec(160):
    twopi = 2 * mp.pi
    for i, (mi, ei, si, ci) in enumerate(zip(m, e, s, c)):
      M = mp.mpf(float(mi))
      r = M - twopi * mp.nint(M / twopi)
      E = mp.atan2(mp.mpf(float(si)), mp.mpf(float(ci)))
      res = E - mp.mpf(float(ei)) * mp.sin(E) - r
      res -= twopi * mp.nint(res / twopi)
      out[i] = float(abs(res))
  return out


def _residuals_fast(m, e, s, c):
  """The same residual in x87 extended precision (64-bit mantissa), for large samples."""
  ld = np.longdouble
  twopi = ld(mp.nstr(2 * mp.pi, 40))
  M = np.asarray(m, dtype=ld)
  r = M - twopi * np.rint(M / twopi)
  E = np.arctan2(np.asarray(s, ld), np.asarray(c, ld))
  res = E - np.asarray(e, ld) * np.sin(E) - r
  res -= twopi * np.rint(res / twopi)
  return np.abs(res).astype(np.float64)


def _tolerance(m, dtype):
  return RESIDUAL_FLOOR[dtype] + np.abs(np.asarray(m, np.float64)) * np.finfo(dtype).eps


def _valid_eccentricities(rng, n, dtype):
  e = np.concatenate([
      rng.uniform(0, 1, n // 2),
      1 - 10.0 ** rng.uniform(-16 if dtype == np.float64 else -7, 0, n - n // 2),
  ]).astype(dtype)
  return np.where(e >= 1, np.nextafter(dtype(1), dtype(0)), e)


def _adversarial_anomalies(rng, n, dtype):
  parts = [
      rng.uniform(-np.pi, np.pi, n // 4),
      np.sign(rng.uniform(-1, 1, n // 4)) * 10.0 ** rng.uniform(-20, 0.5, n // 4),
      rng.uniform(-1e6, 1e6, n // 4),
      np.pi - 10.0 ** rng.uniform(-16, 0, n - 3 * (n // 4)),
  ]
  return np.concatenate(parts).astype(dtype)


# --------------------------------------------------------------------------------------------
# Accuracy
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_high_precision_reference(dtype):
  rng = np.random.default_rng(0)
  n = 400
  m = _adversarial_anomalies(rng, n, dtype)
  e = _valid_eccentricities(rng, n, dtype)
  s, c = jax.jit(jaxext.kepler)(m, e)
  s, c = np.asarray(s), np.asarray(c)
  assert s.dtype == dtype and c.dtype == dtype
  eps = np.finfo(dtype).eps
  for i in range(n):
    rs, rc, slope, _ = _ref(float(m[i]), float(e[i]))
    # Conditioning: an error delta in the residual moves E by delta / (1 - e cos E).
    tol = (RESIDUAL_FLOOR[dtype] + abs(float(m[i])) * eps) / slope + 4 * eps
    assert abs(s[i] - rs) <= tol, (m[i], e[i], s[i], rs, tol)
    assert abs(c[i] - rc) <= tol, (m[i], e[i], c[i], rc, tol)
  res = _residuals(m, e, s, c)
  assert np.all(res <= _tolerance(m, dtype)), (res / _tolerance(m, dtype)).max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_on_a_large_adversarial_sample(dtype):
  rng = np.random.default_rng(1)
  n = 200_000
  m = _adversarial_anomalies(rng, n, dtype)
  e = _valid_eccentricities(rng, n, dtype)
  s, c = map(np.asarray, jax.jit(jaxext.kepler)(m, e))
  res = _residuals_fast(m, e, s, c)
  worst = np.argmax(res / _tolerance(m, dtype))
  assert res[worst] <= _tolerance(m, dtype)[worst], (m[worst], e[worst], res[worst])
  np.testing.assert_allclose(s.astype(np.float64) ** 2 + c.astype(np.float64) ** 2, 1,
                             rtol=0, atol=8 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_values(dtype):
  es = [0.0, 1e-9, 0.5, 0.9, 0.999, 1 - 1e-7]
  if dtype == np.float64:
    es += [1 - 1e-9, 1 - 1e-12, float(np.nextafter(1.0, 0.0))]
  ms = [0.0, -0.0, 1e-300, 1e-12, -1e-6, 0.5, np.pi, -np.pi, np.nextafter(np.pi, 0), 3.0,
        2 * np.pi, 1e3, -1e6, 1e6, 123456.789, 1e15, -1e300, float(np.finfo(dtype).max),
        float(np.finfo(dtype).tiny)]
  ms = [x for x in ms if abs(x) <= np.finfo(dtype).max]  # finite in this dtype
  m, e = np.meshgrid(np.array(ms, dtype), np.array(es, dtype))
  m, e = m.ravel(), e.ravel()
  s, c = map(np.asarray, jaxext.kepler(m, e))
  assert np.all(np.isfinite(s)) and np.all(np.isfinite(c))
  res = _residuals(m, e, s, c)
  tol = _tolerance(m, dtype)
  assert np.all(res <= tol), list(zip(m[res > tol], e[res > tol], res[res > tol]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_cases(dtype):
  m = np.array([0.0, 1.25, -2.5, np.pi], dtype)
  s, c = map(np.asarray, jaxext.kepler(m, np.zeros_like(m)))
  eps = np.finfo(dtype).eps
  np.testing.assert_allclose(s, np.sin(m), rtol=0, atol=2 * eps)
  np.testing.assert_allclose(c, np.cos(m), rtol=0, atol=2 * eps)
  s, c = jaxext.kepler(dtype(0), dtype(0.7))
  assert float(s) == 0 and float(c) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_of_domain_gives_nan(dtype):
  m = np.array([0.5, 0.5, 0.5, 0.5, 0.5, np.nan, np.inf, -np.inf, 1.0, 1.0], dtype)
  e = np.array([-0.1, 1.0, 1.5, np.nan, np.inf, 0.3, 0.3, 0.3, -np.inf, -0.0], dtype)
  s, c = map(np.asarray, jax.jit(jaxext.kepler)(m, e))
  assert np.all(np.isnan(s[:-1])) and np.all(np.isnan(c[:-1]))
  assert np.isfinite(s[-1]) and np.isfinite(c[-1])  # e = -0.0 is e = 0


# --------------------------------------------------------------------------------------------
# dtypes, shapes, layouts
# --------------------------------------------------------------------------------------------
def test_dtypes_are_kept_and_promoted():
  for dtype in DTYPES:
    s, c = jaxext.kepler(np.ones(3, dtype), np.full(3, 0.1, dtype))
    assert s.dtype == dtype and c.dtype == dtype
  s, _ = jaxext.kepler(np.ones(3, np.int32), 0)
  assert s.dtype == jnp.result_type(float)
  s, _ = jaxext.kepler(np.ones(3, np.float32), np.full(3, 0.1, np.float64))
  assert s.dtype == np.float64
  s, _ = jaxext.kepler(np.ones(3, np.float16), np.float16(0.1))
  assert s.dtype == np.float32


@pytest.mark.parametrize("bad, name", [
    (np.array([True, False]), "mean_anomaly"),
    (np.array([1 + 1j]), "mean_anomaly"),
    ("abc", "mean_anomaly"),
    (None, "mean_anomaly"),  # named (jnp's own error named no argument)
    ([None, 1.0], "mean_anomaly"),
    (object(), "mean_anomaly"),
])
def test_bad_mean_anomaly_dtype_raises(bad, name):
  with pytest.raises(TypeError, match=name):
    jaxext.kepler(bad, 0.1)


@pytest.mark.parametrize("bad", [np.array([True]), np.array([0.1 + 0j], np.complex64), None])
def test_bad_eccentricity_dtype_raises(bad):
  with pytest.raises(TypeError, match="eccentricity"):
    jaxext.kepler(np.ones(1), bad)
  with pytest.raises(TypeError, match="eccentricity"):
    jax.jit(jaxext.kepler)(np.ones(1), bad)


def test_incompatible_shapes_raise():
  with pytest.raises(ValueError, match="broadcast"):
    jaxext.kepler(np.ones(3), np.full(4, 0.1))


def test_empty_and_zero_d():
  s, c = jaxext.kepler(np.zeros((0,)), np.zeros((0,)))
  assert s.shape == (0,) and c.shape == (0,)
  s, c = jaxext.kepler(np.zeros((2, 0, 3)), 0.5)
  assert s.shape == (2, 0, 3)
  s, c = jaxext.kepler(1.0, 0.5)
  assert s.shape == () and c.shape == ()
  rs, rc, _, _ = _ref(1.0, 0.5)
  assert abs(float(s) - rs) < 1e-15 and abs(float(c) - rc) < 1e-15


def test_broadcasting():
  m = np.linspace(-4, 4, 5)[:, None]
  e = np.array([0.0, 0.3, 0.9])
  s, c = jaxext.kepler(m, e)
  assert s.shape == (5, 3)
  for i in range(5):
    for j in range(3):
      rs, rc, _, _ = _ref(float(m[i, 0]), float(e[j]))
      assert abs(float(s[i, j]) - rs) < 1e-14 and abs(float(c[i, j]) - rc) < 1e-14


def test_transposed_and_strided_inputs():
  rng = np.random.default_rng(2)
  m = rng.uniform(-5, 5, (64, 48))
  e = rng.uniform(0, 0.99, (48, 64))
  s_t, c_t = jax.jit(lambda a, b: jaxext.kepler(a.T, b))(m, e)  # non-default layout inside jit
  s_n, c_n = jaxext.kepler(np.ascontiguousarray(m.T), e)
  np.testing.assert_array_equal(np.asarray(s_t), np.asarray(s_n))
  np.testing.assert_array_equal(np.asarray(c_t), np.asarray(c_n))
  s_f, _ = jaxext.kepler(np.asfortranarray(m), e.T[::1, ::1])
  np.testing.assert_array_equal(np.asarray(s_f), np.asarray(jaxext.kepler(m, e.T)[0]))
  s_strided, _ = jaxext.kepler(m[::2, ::3], 0.4)
  np.testing.assert_array_equal(np.asarray(s_strided),
                                np.asarray(jaxext.kepler(np.ascontiguousarray(m[::2, ::3]), 0.4)[0]))


def test_threaded_split_matches_small_calls():
  # Large inputs are split over XLA's thread pool; the result must not depend on the split.
  rng = np.random.default_rng(3)
  m = rng.uniform(-10, 10, 300_001)
  e = rng.uniform(0, 1, 300_001)
  s_big, c_big = map(np.asarray, jax.jit(jaxext.kepler)(m, e))
  f = jax.jit(jaxext.kepler)
  for start in (0, 16383, 150_000, 299_000):
    s, c = map(np.asarray, f(m[start:start + 1000], e[start:start + 1000]))
    np.testing.assert_array_equal(s, s_big[start:start + 1000])
    np.testing.assert_array_equal(c, c_big[start:start + 1000])


def test_many_python_threads_agree_with_one():
  rng = np.random.default_rng(4)
  inputs = [(rng.uniform(-10, 10, n), rng.uniform(0, 1, n)) for n in [1, 100, 50_000, 200_000] * 4]
  f = jax.jit(jaxext.kepler)
  expected = [tuple(map(np.asarray, f(m, e))) for m, e in inputs]
  with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
    for _ in range(3):
      got = list(pool.map(lambda a: tuple(map(np.asarray, f(*a))), inputs))
      for (gs, gc), (es, ec) in zip(got, expected):
        np.testing.assert_array_equal(gs, es)
        np.testing.assert_array_equal(gc, ec)


# --------------------------------------------------------------------------------------------
# Transformations
# --------------------------------------------------------------------------------------------
def test_vmap_is_one_call_and_matches():
  rng = np.random.default_rng(5)
  m = rng.uniform(-5, 5, (7, 11))
  e = rng.uniform(0, 0.95, (7, 11))
  f = jax.vmap(jaxext.kepler)
  jaxpr = jax.make_jaxpr(f)(m, e).jaxpr
  kepler_eqns = [q for q in jaxpr.eqns if q.primitive is jaxext.kepler_p]
  assert len(kepler_eqns) == 1 and kepler_eqns[0].outvars[0].aval.shape == (7, 11)
  s, c = f(m, e)
  s0, c0 = jaxext.kepler(m, e)
  np.testing.assert_array_equal(np.asarray(s), np.asarray(s0))
  np.testing.assert_array_equal(np.asarray(c), np.asarray(c0))


def test_nested_vmap_and_in_axes():
  rng = np.random.default_rng(6)
  m = rng.uniform(-5, 5, (3, 4, 5))
  e = rng.uniform(0, 0.95, (5,))
  f = jax.jit(jax.vmap(jax.vmap(jaxext.kepler, in_axes=(0, None)), in_axes=(1, None)))
  s, c = f(m, e)
  assert s.shape == (4, 3, 5)
  s0, c0 = jaxext.kepler(np.moveaxis(m, 1, 0), e)
  np.testing.assert_array_equal(np.asarray(s), np.asarray(s0))
  np.testing.assert_array_equal(np.asarray(c), np.asarray(c0))
  # Batched eccentricity against an unbatched mean anomaly, batch axis last.
  g = jax.vmap(jaxext.kepler, in_axes=(None, 1), out_axes=1)
  s, _ = g(m[0, 0], rng.uniform(0, 0.9, (5, 6)))
  assert s.shape == (5, 6)


@pytest.mark.parametrize("m, e", [(0.3, 0.1), (2.5, 0.7), (-1.2, 0.95), (4.0, 0.01), (0.05, 0.99)])
def test_check_grads_order_two(m, e):
  m, e = np.float64(m), np.float64(e)
  check_grads(lambda a, b: jaxext.kepler(a, b)[0], (m, e), order=2, modes=["fwd", "rev"],
              eps=1e-5)
  check_grads(lambda a, b: jaxext.kepler(a, b)[1], (m, e), order=2, modes=["fwd", "rev"],
              eps=1e-5)


def test_gradients_match_reference_derivative():
  # dE/dM = 1 / (1 - e cos E), dE/de = sin E / (1 - e cos E), from the reference solution.
  rng = np.random.default_rng(7)
  m = rng.uniform(-3, 3, 20)
  e = rng.uniform(0, 0.9, 20)
  ds_dm = jax.vmap(jax.grad(lambda a, b: jaxext.kepler(a, b)[0]))(m, e)
  dc_de = jax.vmap(jax.grad(lambda a, b: jaxext.kepler(a, b)[1], argnums=1))(m, e)
  for i in range(20):
    rs, rc, slope, _ = _ref(float(m[i]), float(e[i]))
    assert abs(float(ds_dm[i]) - rc / slope) < 1e-12
    assert abs(float(dc_de[i]) - (-rs * rs / slope)) < 1e-12


@pytest.mark.parametrize("dtype", DTYPES)
def test_grad_under_jit_and_vmap(dtype):
  rng = np.random.default_rng(8)
  m = rng.uniform(-3, 3, 16).astype(dtype)
  e = rng.uniform(0, 0.9, 16).astype(dtype)
  loss = lambda a, b: jnp.sum(jaxext.kepler(a, b)[0] ** 2 + jaxext.kepler(a, b)[1])
  gm, ge = jax.jit(jax.grad(loss, argnums=(0, 1)))(m, e)
  assert gm.dtype == dtype and ge.dtype == dtype
  hess_diag = jax.vmap(jax.grad(jax.grad(lambda a, b: jaxext.kepler(a, b)[0])))(m, e)
  assert np.all(np.isfinite(np.asarray(hess_diag)))


# --------------------------------------------------------------------------------------------
# The FFI targets themselves
# --------------------------------------------------------------------------------------------
def test_registrations_and_handler_errors_surface():
  from jaxext.cpu import _cpu_ops
  regs = _cpu_ops.registrations()
  assert set(regs) == {"jaxext_kepler_f32", "jaxext_kepler_f64", "jaxext_limbdark_f32",
                       "jaxext_limbdark_f64", "jaxext_limbdark_grad_f32", "jaxext_limbdark_grad_f64",
                       "jaxext_limbdark_hess_f32", "jaxext_limbdark_hess_f64",
                       "jaxext_numba_call", "jaxext_dop853", "jaxext_sph", "jaxext_segment_sum",
                       "jaxext_tensor_product", "jaxext_conv", "jaxext_conv_factored",
                       "jaxext_conv_factored_bwd",
                       "jaxext_transit_f32", "jaxext_transit_f64", "jaxext_transit_grad_f32",
                       "jaxext_transit_grad_f64", "jaxext_transit_lin_f32", "jaxext_transit_lin_f64",
                       "jaxext_transit_vjp_f32", "jaxext_transit_vjp_f64"}
  assert _cpu_ops.xla_ffi_api_version[0] == 0
  # Mismatched element counts reach the handler, which answers with an FFI error: a Python
  # exception, not a crash.
  out = jax.ShapeDtypeStruct((3,), np.float64)
  call = jax.ffi.ffi_call("jaxext_kepler_f64", (out, out))
  with pytest.raises(Exception, match="same number of elements"):
    jax.block_until_ready(call(np.ones(3), np.ones(4) * 0.1))
  # A float32 buffer handed to the float64 target is refused by the typed binding.
  with pytest.raises(Exception):
    jax.block_until_ready(call(np.ones(3, np.float32), np.ones(3, np.float32)))
