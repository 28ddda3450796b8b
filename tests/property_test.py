"""Property-based tests of every op (hypothesis): random shapes, dtypes, broadcasting and edge
values, under jit, vmap and grad, against independent references (a long-double bisection of
Kepler's equation, mpmath quadrature, e3nn-jax, NumPy, matrix exponentials, finite differences).

Derandomised (the same examples on every run, no example database) and bounded: each property
draws at most JAXEXT_PROPERTY_EXAMPLES examples (default 20) with no per-example deadline, so CI
stays deterministic. A failure prints the falsifying example; rerun it with the same settings.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax.test_util import check_grads

import jaxext
from jaxext import equivariant as eq
from jaxext import ode

import e3nn_reference
import limbdark_reference

jax.config.update("jax_enable_x64", True)

settings.register_profile(
    "jaxext", derandomize=True, database=None, deadline=None, print_blob=True,
    max_examples=int(os.environ.get("JAXEXT_PROPERTY_EXAMPLES", "20")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("jaxext")

DTYPES = st.sampled_from([np.float32, np.float64])
EPS = {np.float32: float(np.finfo(np.float32).eps), np.float64: float(np.finfo(np.float64).eps)}


def arrays(dtype, shape, lo, hi, edges=()):
  """Finite floats in [lo, hi] of `dtype` and `shape`, with `edges` (and the bounds) likely."""
  as_dtype = lambda v: float(np.asarray(v, dtype))  # bounds representable in the dtype
  lo, hi, edges = as_dtype(lo), as_dtype(hi), [as_dtype(v) for v in edges]
  elements = st.one_of(st.floats(lo, hi, width=np.dtype(dtype).itemsize * 8),
                       st.sampled_from([lo, hi, *edges]))
  return hnp.arrays(dtype, shape, elements=elements)


# ---------------------------------------------------------------------------------------------
# Kepler's equation.


def kepler_reference(m, e):
  """E by bisection of E - e sin E = M in long double (no Newton, no series: another algorithm
  in more precision than float64), M reduced to [-pi, pi]."""
  m = np.asarray(m, np.longdouble)
  e = np.asarray(e, np.longdouble)
  two_pi = 2 * np.longdouble(np.pi)
  m = m - two_pi * np.round(m / two_pi)
  lo, hi = m - 1, m + 1  # |E - M| = e |sin E| < 1
  for _ in range(80):
    mid = (lo + hi) / 2
    f = mid - e * np.sin(mid) - m
    lo, hi = np.where(f < 0, mid, lo), np.where(f < 0, hi, mid)
  return (lo + hi) / 2


@given(data=st.data(), dtype=DTYPES,
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
def test_kepler_solves_the_equation_broadcast(data, dtype, shapes):
  (shape_m, shape_e), shape = shapes.input_shapes, shapes.result_shape
  m = data.draw(arrays(dtype, shape_m, -50.0, 50.0, edges=(0.0, np.pi, -np.pi, 2 * np.pi)), "m")
  e = data.draw(arrays(dtype, shape_e, 0.0, 0.999, edges=(0.5, 0.9)), "e")
  s, c = jaxext.kepler(m, e)
  assert s.shape == c.shape == shape and s.dtype == c.dtype == dtype
  big_e = kepler_reference(*np.broadcast_arrays(m, e))
  eb = np.broadcast_to(e, shape).astype(np.float64)
  # Error in E scales with the derivative dE/dM = 1 / (1 - e cos E) and with |M| (its own
  # rounding before reduction): the tolerance says so.
  cond = 1 / (1 - eb * np.cos(np.asarray(big_e, np.float64)))
  tol = 8 * EPS[dtype] * cond * (1 + np.abs(np.broadcast_to(m, shape)))
  np.testing.assert_array_less(np.abs(np.asarray(s, np.float64) - np.sin(big_e).astype(float)),
                               tol + 1e-300)
  np.testing.assert_array_less(np.abs(np.asarray(c, np.float64) - np.cos(big_e).astype(float)),
                               tol + 1e-300)
  # jit gives the same bits; vmap over the leading axis the same bits as row by row.
  sj, cj = jax.jit(jaxext.kepler)(m, e)
  np.testing.assert_array_equal(sj, s)
  np.testing.assert_array_equal(cj, c)
  if len(shape) >= 1 and shape[0] > 0:
    mb, eb2 = (np.broadcast_to(x, shape) for x in (m, e))
    sv, _ = jax.vmap(jaxext.kepler)(mb, eb2)
    np.testing.assert_array_equal(sv, s)


@given(m=st.floats(-10, 10), e=st.floats(0.01, 0.9))
def test_kepler_gradients(m, e):
  # e > 0: finite differences must stay inside the domain [0, 1). Second-order finite
  # differences are good to ~1e-5 here (derivatives up to (1 - e)^-3).
  f = lambda m, e: jnp.stack(jaxext.kepler(m, e))
  check_grads(f, (m, e), order=2, modes=("fwd", "rev"), atol=1e-4, rtol=1e-4)


@given(dtype=DTYPES, bad=st.sampled_from([np.nan, np.inf, -np.inf, -0.5, 1.0, 1.5]),
       m=st.floats(-5, 5))
def test_kepler_out_of_domain_is_nan(dtype, bad, m):
  m_is_bad = not math.isfinite(bad)
  s, c = jaxext.kepler(np.asarray(bad if m_is_bad else m, dtype),
                       np.asarray(0.3 if m_is_bad else bad, dtype))
  assert np.isnan(s) and np.isnan(c)


# ---------------------------------------------------------------------------------------------
# Limb darkening.


@given(data=st.data(), dtype=DTYPES, n=st.integers(1, 6), order=st.integers(0, 3))
def test_limb_dark_flux_against_quadrature(data, dtype, n, order):
  b = data.draw(arrays(dtype, (n,), 0.0, 2.2, edges=(1.0, 0.999, 1.001)), "b")
  r = data.draw(arrays(dtype, (n,), 1e-3, 1.5, edges=(0.1, 1.0)), "r")
  u = data.draw(arrays(np.float64, (order,), -0.3, 0.8), "u").astype(dtype)
  got = np.asarray(jaxext.limb_dark_flux(b, r, u), np.float64)
  want = np.array([float(limbdark_reference.relative_flux(float(bi), float(ri),
                                                          [float(x) for x in u]))
                   for bi, ri in zip(b, r)])
  tol = 1e-12 if dtype == np.float64 else 2e-5
  np.testing.assert_allclose(got, want, atol=tol * max(1.0, float(np.max(r))), rtol=0)
  # Disks that do not touch: exactly 1.
  far = b.astype(np.float64) >= 1 + r.astype(np.float64)
  assert np.all(got[far] == 1.0)
  np.testing.assert_array_equal(jax.jit(jaxext.limb_dark_flux)(b, r, u), got.astype(dtype))


@given(b=st.floats(0.05, 1.05), r=st.floats(0.02, 0.3), u1=st.floats(0, 0.6),
       u2=st.floats(0, 0.3))
def test_limb_dark_flux_gradients(b, r, u1, u2):
  if abs(b - (1 - r)) < 1e-3 or abs(b - (1 + r)) < 1e-3 or abs(b - r) < 1e-3:
    return  # the contact points, where the flux is not differentiable
  f = lambda b, r, u: jaxext.limb_dark_flux(b, r, u)
  check_grads(f, (b, r, jnp.array([u1, u2])), order=1, modes=("fwd", "rev"), atol=1e-5,
              rtol=1e-5, eps=1e-6)


# ---------------------------------------------------------------------------------------------
# Transit light curves.


@given(dtype=DTYPES, impact=st.floats(0.0, 0.9), r=st.floats(0.01, 0.2), a=st.floats(3.0, 30.0),
       period=st.floats(0.5, 20.0), u1=st.floats(0, 0.6), n=st.integers(1, 40))
def test_circular_transit_is_symmetric_and_matches_its_parts(dtype, impact, r, a, period, u1,
                                                             n):
  dt = np.linspace(0.0, 0.2 * period, n).astype(dtype)
  kw = dict(period=period, t0=0.0, a=a, impact=impact, r=r, u=np.array([u1, 0.1], dtype))
  early = np.asarray(jaxext.transit_light_curve(-dt, **kw), np.float64)
  late = np.asarray(jaxext.transit_light_curve(dt, **kw), np.float64)
  tol = 1e-12 if dtype == np.float64 else 1e-5
  np.testing.assert_allclose(early, late, atol=tol, rtol=0)
  assert np.all(late <= 1 + tol) and np.all(late >= 0)
  # The flux is the limb-darkened occultation at the sky separation (in front of the star).
  sep, front = jaxext.sky_separation(dt, period=period, t0=0.0, a=a, impact=impact)
  want = np.asarray(jaxext.limb_dark_flux(sep, np.asarray(r, dtype), kw["u"]), np.float64)
  front = np.asarray(front)
  np.testing.assert_allclose(late[front], want[front], atol=tol, rtol=0)


# ---------------------------------------------------------------------------------------------
# Equivariant kernels.


IRREPS = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 3)), min_size=1, max_size=3)


def _irreps(terms, parity=None):
  return "+".join(f"{m}x{l}{'e' if (parity or (-1) ** l) * 1 > 0 else 'o'}" for m, l in terms)


@given(dtype=DTYPES, lmax=st.integers(0, 7), shape=hnp.array_shapes(min_dims=0, max_dims=2,
                                                                   max_side=4),
       data=st.data())
def test_spherical_harmonics_equal_e3nn(dtype, lmax, shape, data):
  import e3nn_jax as e3nn
  v = data.draw(arrays(dtype, shape + (3,), -3.0, 3.0, edges=(0.0,)), "v")
  irreps = "+".join(f"{l}{'e' if l % 2 == 0 else 'o'}" for l in range(lmax + 1))
  got = eq.spherical_harmonics(range(lmax + 1), v)
  want = e3nn.spherical_harmonics(irreps, v.astype(np.float64), normalize=True).array
  tol = 1e-12 if dtype == np.float64 else 1e-4
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want), atol=tol, rtol=tol)
  # Under jit XLA may fuse the normalisation by |v| differently (a few ulps, amplified with l).
  jitted = jax.jit(lambda x: eq.spherical_harmonics(range(lmax + 1), x))(v)
  np.testing.assert_allclose(np.asarray(jitted, np.float64), np.asarray(want), atol=tol, rtol=tol)


@given(rows=st.integers(0, 5), feat=st.integers(1, 3), data=st.data(),
       index_dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]))
def test_gather_is_take_with_nan_rows(rows, feat, data, index_dtype):
  x = data.draw(arrays(np.float64, (rows, feat), -5.0, 5.0), "x")
  info = np.iinfo(index_dtype)
  idx = data.draw(hnp.arrays(index_dtype, st.integers(0, 6), elements=st.integers(
      max(int(info.min), -3), min(int(info.max), rows + 3))), "idx")
  got = np.asarray(eq.gather(x, idx))
  want = np.full((idx.size, feat), np.nan)
  ok = (idx.astype(np.int64) >= 0) & (idx.astype(np.int64) < rows)
  want[ok] = x[idx[ok].astype(np.int64)]
  np.testing.assert_array_equal(got, want)


@given(e=st.integers(0, 12), num=st.integers(0, 5), feat=st.integers(1, 3), dtype=DTYPES,
       sort=st.booleans(), data=st.data())
def test_segment_sum_equals_numpy_and_is_linear(e, num, feat, dtype, sort, data):
  d = data.draw(arrays(dtype, (e, feat), -4.0, 4.0), "data")
  ids = data.draw(hnp.arrays(np.int32, (e,), elements=st.integers(-2, num + 2)), "ids")
  if sort:
    ids = np.sort(ids)
  got = np.asarray(eq.segment_sum(d, ids, num, indices_are_sorted=sort), np.float64)
  want = np.zeros((num, feat))
  for i, s in enumerate(ids):
    if 0 <= s < num:
      want[s] += d[i].astype(np.float64)
  tol = 1e-12 if dtype == np.float64 else 1e-5
  np.testing.assert_allclose(got, want, atol=tol * (1 + e), rtol=0)
  # Its transpose is a gather (vjp): the cotangent of row i is ct[ids[i]] (0 if dropped).
  ct = np.arange(num * feat, dtype=dtype).reshape(num, feat)
  _, vjp = jax.vjp(lambda a: eq.segment_sum(a, ids, num), d)
  (g,) = vjp(ct)
  want_g = np.zeros((e, feat))
  for i, s in enumerate(ids):
    if 0 <= s < num:
      want_g[i] = ct[s]
  np.testing.assert_array_equal(np.asarray(g, np.float64), want_g)


@given(x_terms=IRREPS, y_ls=st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
       rows=st.integers(1, 4), dtype=DTYPES, data=st.data())
def test_tensor_product_equals_e3nn(x_terms, y_ls, rows, dtype, data):
  import e3nn_jax as e3nn
  ix = _irreps(x_terms)
  iy = "+".join(f"{l}{'e' if l % 2 == 0 else 'o'}" for l in sorted(y_ls))
  # Every reachable output with x's multiplicity.
  outs = sorted({(m, l3, (-1) ** (l1 + l2)) for m, l1 in x_terms for l2 in y_ls
                 for l3 in range(abs(l1 - l2), l1 + l2 + 1)})
  io = "+".join(f"{m}x{l}{'e' if p > 0 else 'o'}" for m, l, p in outs)
  nw = sum(e3nn.Irreps(ix)[a].mul for a, _, _ in eq.paths(ix, iy, io))
  dims = (e3nn.Irreps(ix).dim, e3nn.Irreps(iy).dim, nw)
  x, y, w = (data.draw(arrays(dtype, (rows, d), -2.0, 2.0), n) for d, n in zip(dims, "xyw"))
  got = np.asarray(eq.tensor_product(x, y, w, ix, iy, io), np.float64)
  want = np.asarray(e3nn_reference.tensor_product(*(a.astype(np.float64) for a in (x, y, w)), ix,
                                                  iy, io))
  tol = 1e-12 if dtype == np.float64 else 1e-4
  np.testing.assert_allclose(got, want, atol=tol * (1 + np.abs(want).max(initial=0)), rtol=0)
  np.testing.assert_array_equal(jax.vmap(lambda a, b, c: eq.tensor_product(
      a, b, c, ix, iy, io))(x, y, w), np.asarray(eq.tensor_product(x, y, w, ix, iy, io)))


@given(n_send=st.integers(0, 4), n_recv=st.integers(0, 4), e=st.integers(0, 8),
       dtype=DTYPES, data=st.data())
def test_conv_equals_its_composition(n_send, n_recv, e, dtype, data):
  ix, iy, io = "2x0e+2x1o", "0e+1o", "2x0e+2x1o+2x1e"
  nw = sum(2 for _ in eq.paths(ix, iy, io))
  x = data.draw(arrays(dtype, (n_send, 8), -2.0, 2.0), "x")
  sh = data.draw(arrays(dtype, (e, 4), -2.0, 2.0), "sh")
  w = data.draw(arrays(dtype, (e, nw), -2.0, 2.0), "w")
  snd = data.draw(hnp.arrays(np.int32, (e,), elements=st.integers(0, max(n_send - 1, 0))), "snd")
  rcv = data.draw(hnp.arrays(np.int32, (e,), elements=st.integers(0, max(n_recv - 1, 0))), "rcv")
  if (e and (n_send == 0 or n_recv == 0)):
    return  # an edge needs both ends (out-of-range ids raise: tests/equivariant_test.py)
  got = np.asarray(eq.conv(x, sh, w, snd, rcv, n_recv, ix, iy, io), np.float64)
  msgs = eq.tensor_product(eq.gather(x, snd), sh, w, ix, iy, io)
  want = np.asarray(eq.segment_sum(msgs, rcv, n_recv), np.float64)
  tol = 1e-12 if dtype == np.float64 else 1e-4
  np.testing.assert_allclose(got, want, atol=tol * (1 + e), rtol=0)


# ---------------------------------------------------------------------------------------------
# Numba kernels.


@jaxext.numba_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype))
def _fma(x, y, out, c=1.0):
  for i in range(x.shape[0]):
    out[i] = x[i] * y[i] + c


@given(dtype=DTYPES, n=st.integers(0, 9), batch=st.integers(0, 3), c=st.floats(-3, 3),
       data=st.data())
def test_numba_kernel_equals_numpy_under_jit_and_vmap(dtype, n, batch, c, data):
  x = data.draw(arrays(dtype, (batch, n), -3.0, 3.0), "x")
  y = data.draw(arrays(dtype, (batch, n), -3.0, 3.0), "y")
  want = x * y + np.asarray(c, dtype)
  got = jax.vmap(lambda a, b: _fma(a, b, c=c))(x, y)
  tol = 1e-15 if dtype == np.float64 else 1e-6
  np.testing.assert_allclose(np.asarray(got), want, atol=tol * 10, rtol=tol)
  if batch:
    np.testing.assert_array_equal(jax.jit(lambda a, b: _fma(a, b, c=c))(x[0], y[0]), got[0])


# ---------------------------------------------------------------------------------------------
# The ODE integrator.


def _linear_jacobian(t, y, p, dfdy, dfdp):
  dfdy[0, 0] = p[0]
  dfdy[0, 1] = p[1]
  dfdy[1, 0] = p[2]
  dfdy[1, 1] = p[3]
  dfdp[0, 0] = y[0]
  dfdp[0, 1] = y[1]
  dfdp[1, 2] = y[0]
  dfdp[1, 3] = y[1]


@ode.rhs(jacobian=_linear_jacobian)
def _linear(t, y, p, dydt):
  dydt[0] = p[0] * y[0] + p[1] * y[1]
  dydt[1] = p[2] * y[0] + p[3] * y[1]


@given(a=hnp.arrays(np.float64, (2, 2), elements=st.floats(-1, 1)),
       y0=hnp.arrays(np.float64, (2,), elements=st.floats(-2, 2)), t1=st.floats(0.1, 5.0),
       m=st.integers(1, 5))
def test_linear_system_equals_the_matrix_exponential(a, y0, t1, m):
  from scipy.linalg import expm
  t_eval = np.linspace(0, t1, m)
  sol = ode.dop853(_linear, y0[None], (0.0, t1), a.reshape(1, 4), t_eval=t_eval, rtol=1e-11,
                   atol=1e-13)
  assert int(sol.status[0]) == 0
  want = np.stack([expm(a * t) @ y0 for t in t_eval])
  scale = 1 + np.abs(want).max()
  np.testing.assert_allclose(np.asarray(sol.ys[0]), want, atol=1e-8 * scale, rtol=0)
  # d y(t1) / d y0 = expm(A t1), through the variational equations, which ride on the state's
  # steps: a state at the equilibrium y = 0 lets those grow unchecked (documented in dop853;
  # found by this test): there max_step bounds them, as the docstring advises.
  max_step = t1 / 64 if np.abs(y0).max() < 0.1 else None
  jac = jax.jacfwd(lambda y: ode.dop853(_linear, y[None], (0.0, t1), a.reshape(1, 4),
                                        rtol=1e-11, atol=1e-13, max_step=max_step).y_final[0])(y0)
  np.testing.assert_allclose(np.asarray(jac), expm(a * t1), atol=1e-7 * scale, rtol=0)
