"""The Python-independent handler library (ffi_handler_library) gives the same results as the
pybind11 extension: it is what tools/gpu_checks.py relies on where the build's Python is absent."""

import os
import subprocess
import sys

import numpy as np

LIB = os.path.abspath(os.environ["JAXEXT_CPU_HANDLERS"])

_SCRIPT = r"""
import sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxext, jaxext._ffi as ffi
assert ffi.register_all() == {"cpu": tuple(sorted(["jaxext_dop853", "jaxext_kepler_f32", "jaxext_kepler_f64",
    "jaxext_limbdark_f32", "jaxext_limbdark_f64", "jaxext_limbdark_grad_f32",
    "jaxext_limbdark_grad_f64", "jaxext_limbdark_hess_f32", "jaxext_limbdark_hess_f64",
    "jaxext_numba_call",
    "jaxext_transit_f32", "jaxext_transit_f64", "jaxext_transit_grad_f32", "jaxext_transit_grad_f64",
    "jaxext_transit_lin_f32", "jaxext_transit_lin_f64", "jaxext_transit_vjp_f32",
    "jaxext_transit_vjp_f64", "jaxext_sph", "jaxext_segment_sum", "jaxext_conv",
    "jaxext_conv_factored", "jaxext_conv_factored_bwd",
    "jaxext_tensor_product"]))}, ffi.register_all()
assert "jaxext.cpu._cpu_ops" not in sys.modules
try:
  ffi.register_native_function(12345, 0)
  raise AssertionError("a null native function address was accepted")
except ValueError as err:
  assert "null native function address" in str(err), err
m = np.linspace(-7, 7, 1001); e = np.linspace(0, 0.99, 1001)
s, c = jax.jit(jaxext.kepler)(m, e)
g = jax.grad(lambda a: jaxext.kepler(a, 0.3)[0])(1.0)
b = np.linspace(0, 1.2, 1001)
f = jaxext.limb_dark_flux(b, 0.1, np.array([0.4, 0.26]))
fb = jax.grad(lambda x: jaxext.limb_dark_flux(x, 0.1, np.array([0.4, 0.26])).sum())(b)
LC = dict(period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1, u=np.array([0.4, 0.26]), ecc=0.2)
tt = np.linspace(-0.2, 0.2, 1001)
lc = jaxext.transit_light_curve(tt, **LC)
lcg = jax.grad(lambda a: jaxext.transit_light_curve(tt, **dict(LC, a=a)).sum())(10.0)
np.save(sys.argv[1], np.stack([np.asarray(s), np.asarray(c), np.full(1001, float(g)),
                               np.asarray(f), np.asarray(fb), np.asarray(lc),
                               np.full(1001, float(lcg))]))
sol = jaxext.ode.dop853(jaxext.ode.models.earth(j2=True), ORBITS, (0.0, 3600.0))
np.save(sys.argv[2], np.asarray(sol.y_final))
np.save(sys.argv[3], np.concatenate([np.ravel(np.asarray(a)) for a in EQUIVARIANT()]))
np.save(sys.argv[4], np.concatenate([np.ravel(np.asarray(a)) for a in NUMBA()]))
"""


def equivariant():
  """Spherical harmonics, a tensor product, the fused convolution and a segment sum, with a
  gradient through the convolution (its backward kernels)."""
  import jax
  import jax.numpy as jnp
  from jaxext import equivariant as eq
  rng = np.random.default_rng(0)
  vec = rng.normal(size=(40, 3))
  x = rng.normal(size=(10, 16))             # 4x0e+4x1o
  w = rng.normal(size=(40, 16))             # 4 paths x 4 channels
  snd, rcv = rng.integers(0, 10, 40), rng.integers(0, 10, 40)
  ir = dict(irreps_x="4x0e+4x1o", irreps_sh="0e+1o", irreps_out="4x0e+4x1o")
  sh = eq.spherical_harmonics("0e+1o", vec)
  tp = eq.tensor_product(x[snd], sh, w, "4x0e+4x1o", "0e+1o", "4x0e+4x1o")
  out = eq.conv(x, sh, w, snd, rcv, 10, **ir)
  seg = eq.segment_sum(tp, rcv, 10)
  g = jax.grad(lambda v: jnp.sum(eq.conv(x, eq.spherical_harmonics("0e+1o", v), w, snd, rcv, 10,
                                         **ir) ** 2))(vec)
  return sh, tp, out, seg, g


def numba_functions():
  """A Numba kernel (vmapped) and an ODE with a Python right-hand side and event: Numba-compiled
  functions the handlers find by content id (registered in the library in that mode)."""
  import jax
  import jaxext
  from jaxext import ode

  @jaxext.numba_kernel(outputs=lambda x, y, **_: jax.ShapeDtypeStruct(x.shape, x.dtype))
  def axpy(x, y, out, alpha):
    for i in range(x.shape[0]):
      out[i] = alpha * x[i] + y[i]

  @ode.rhs
  def oscillator(t, y, p, dydt):
    dydt[0] = y[1]
    dydt[1] = -p[0] * y[0]

  crossing = ode.event(lambda t, y, p: y[0], name="crossing")
  x = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
  sol = ode.dop853(oscillator, np.array([[1.0, 0.0], [0.5, 0.3]]), (0.0, 5.0),
                   np.array([[2.0], [0.7]]), events=[crossing], rtol=1e-10, atol=1e-10)
  return jax.vmap(lambda a: axpy(a, a, alpha=0.5))(x), sol.y_final, sol.t_events


# Two orbits (km, km/s) for the ODE handler.
ORBITS = "np.array([[7000.0, 0, 0, 0, 5.0, 5.5], [0, 8000.0, 100.0, -7.0, 0, 1.0]])"
_SCRIPT = _SCRIPT.replace("ORBITS", ORBITS).replace(
    "EQUIVARIANT()", "__import__('handler_library_test').equivariant()").replace(
    "NUMBA()", "__import__('handler_library_test').numba_functions()")


def test_handler_library_matches_extension(tmp_path):
  out, out_ode = str(tmp_path / "r.npy"), str(tmp_path / "ode.npy")
  out_eq, out_nb = str(tmp_path / "eq.npy"), str(tmp_path / "nb.npy")
  env = dict(os.environ, JAXEXT_HANDLER_LIBRARIES=f"cpu={LIB}",
             PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
  subprocess.run([sys.executable, "-c", _SCRIPT, out, out_ode, out_eq, out_nb], check=True, env=env)
  got = np.load(out)
  import jax
  jax.config.update("jax_enable_x64", True)
  import jaxext
  m = np.linspace(-7, 7, 1001)
  e = np.linspace(0, 0.99, 1001)
  s, c = jaxext.kepler(m, e)
  np.testing.assert_array_equal(got[0], np.asarray(s))
  np.testing.assert_array_equal(got[1], np.asarray(c))
  assert got[2][0] == float(jax.grad(lambda a: jaxext.kepler(a, 0.3)[0])(1.0))
  b = np.linspace(0, 1.2, 1001)
  u = np.array([0.4, 0.26])
  np.testing.assert_array_equal(got[3], np.asarray(jaxext.limb_dark_flux(b, 0.1, u)))
  np.testing.assert_array_equal(
      got[4], np.asarray(jax.grad(lambda x: jaxext.limb_dark_flux(x, 0.1, u).sum())(b)))
  lc = dict(period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1, u=u, ecc=0.2)
  tt = np.linspace(-0.2, 0.2, 1001)
  np.testing.assert_array_equal(got[5], np.asarray(jaxext.transit_light_curve(tt, **lc)))
  assert got[6][0] == float(
      jax.grad(lambda a: jaxext.transit_light_curve(tt, **dict(lc, a=a)).sum())(10.0))
  sol = jaxext.ode.dop853(jaxext.ode.models.earth(j2=True), eval(ORBITS), (0.0, 3600.0))
  np.testing.assert_array_equal(np.load(out_ode), np.asarray(sol.y_final))
  np.testing.assert_array_equal(
      np.load(out_eq), np.concatenate([np.ravel(np.asarray(a)) for a in equivariant()]))
  numba = np.concatenate([np.ravel(np.asarray(a)) for a in numba_functions()])
  assert np.isfinite(numba).sum() > 12 + 4  # the kernel, the final states and some crossings
  np.testing.assert_array_equal(np.load(out_nb), numba)


def test_bad_spec_is_a_clear_error():
  env = dict(os.environ, JAXEXT_HANDLER_LIBRARIES="tpu=/nonexistent")
  r = subprocess.run([sys.executable, "-c", "import jaxext"], env=env, capture_output=True, text=True)
  assert r.returncode != 0 and "JAXEXT_HANDLER_LIBRARIES" in r.stderr
