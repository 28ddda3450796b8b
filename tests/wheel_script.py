"""What the wheel test runs where the wheel is installed: every op under jit, vmap and grad.

Prints one line of JSON; tests/wheel_test.py checks it against closed forms computed there
(uniform-disk flux, Kepler's equation, the addition theorem, circular orbits, exponential decay),
and, where no closed form is at hand, one op against another (conv against gather, tensor
product and segment_sum; gradients against finite differences). Run by `python -I` from an empty directory with nothing of the checkout
importable (tests/wheel_test.py), on the machine's own userland (tools/wheel_host_test), or on
another architecture under emulation (tools/wheel_emulated_test). Needs jax; the Numba checks run
when numba is installed (the wheel's `numba` extra), and the test requires them.
"""
import json, sys
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
import jaxext
out = {"file": jaxext.__file__, "version": jaxext.__version__, "path": sys.path,
       "jax": jax.__version__, "python": "%d.%d" % sys.version_info[:2]}
lst = lambda x: [float(v) for v in jnp.ravel(jnp.asarray(x))]
out["platforms"] = jaxext.platforms()
import importlib.util
def found(module):  # without importing it (a missing parent package: not found)
  try:
    return importlib.util.find_spec(module) is not None
  except ModuleNotFoundError:
    return False
out["cuda_module"] = found("jaxext.cuda._cuda_ops")
# The CPU handlers' form: the extension module, or the plain library registered through ctypes
# (the macOS wheel's form; a plain-library wheel on Linux: //tests:wheel_plain_test).
from jaxext import _ffi
out["cpu_handlers"] = "library" if "cpu" in _ffi._libraries else "extension"
out["numba_cuda"] = found("numba_cuda")

# kepler
m = jnp.array([0.5, 2.0, -3.0, 7.0])
s, c = jax.jit(jaxext.kepler)(m, 0.6)
out["kepler_jit"] = [lst(s), lst(c)]
mm = jnp.array([[0.1, 1.0, 2.5], [-1.0, 0.3, 3.0]])
ee = jnp.array([0.2, 0.9])
out["kepler_vmap"] = lst(jax.vmap(lambda a, e: jaxext.kepler(a, e)[0])(mm, ee))
out["kepler_vmap_rows"] = [lst(jaxext.kepler(mm[i], ee[i])[0]) for i in range(2)]
out["kepler_grad"] = float(jax.grad(lambda a: jaxext.kepler(a, 0.6)[0])(0.5))

# limb_dark_flux: a uniform disk (u = 0) has closed forms
zero = jnp.zeros(2)
b = jnp.array([0.0, 0.5, 0.95, 1.05, 2.0])
out["limbdark_jit"] = lst(jax.jit(jaxext.limb_dark_flux)(b, 0.1, zero))
bb = jnp.array([[0.0, 0.3, 0.95], [0.5, 1.0, 1.2]])
rr = jnp.array([0.1, 0.3])
out["limbdark_vmap"] = lst(jax.vmap(jaxext.limb_dark_flux, in_axes=(0, 0, None))(bb, rr, zero))
out["limbdark_grad_r"] = float(jax.grad(lambda r: jaxext.limb_dark_flux(0.3, r, zero))(0.1))
out["limbdark_grad_b"] = float(jax.grad(lambda x: jaxext.limb_dark_flux(x, 0.1, zero))(0.97))
u = jnp.array([0.4, 0.26])
out["quadratic"] = [float(jaxext.quadratic_limb_dark_flux(0.3, 0.1, 0.4, 0.26)),
                    float(jaxext.limb_dark_flux(0.3, 0.1, u))]

# transit_light_curve
orbit = dict(period=3.5, t0=0.3, a=9.0, impact=0.2, u=u)
t = jnp.array([0.3, 0.3 + 0.5, 0.3 + 1.75])
out["transit_jit"] = lst(jax.jit(lambda t: jaxext.transit_light_curve(t, r=0.1, **orbit))(t))
out["transit_mid_expected"] = float(jaxext.limb_dark_flux(0.2, 0.1, u))
radii = jnp.array([0.05, 0.1, 0.2])
out["transit_vmap"] = lst(jax.vmap(lambda r: jaxext.transit_light_curve(0.3, r=r, **orbit))(radii))
out["transit_vmap_rows"] = [float(jaxext.transit_light_curve(0.3, r=r, **orbit)) for r in radii]
f = lambda r: jaxext.transit_light_curve(jnp.array([0.28, 0.3, 0.33]), r=r, **orbit).sum()
out["transit_grad"] = float(jax.grad(f)(0.1))
out["transit_fd"] = float((f(0.1 + 1e-6) - f(0.1 - 1e-6)) / 2e-6)

# equivariant: spherical harmonics (addition theorem), gather, segment_sum, tensor product, conv.
# Each family is one jitted function holding its vmap and grad (an XLA compilation is what costs
# most under emulation: tools/wheel_emulated_test).
import numpy as np
from jaxext import equivariant as eq
v = jnp.array([[0.3, -1.2, 0.5], [2.0, 0.1, -0.7], [-0.4, 0.9, 1.1]])
sh = lambda w: eq.spherical_harmonics("0e+1o+2e", w)
res = jax.jit(lambda v: (sh(v), jax.vmap(sh)(v),
                         jax.grad(lambda w: jnp.dot(sh(w)[1:4], sh(v[1])[1:4]))(v[0])))(v)
out["sh_jit"], out["sh_vmap"], out["sh_grad"] = [lst(a) for a in res]
x = jnp.arange(12.0).reshape(4, 3) * 0.25
idx = jnp.array([2, 0, 2, 3, 2])
ids = jnp.array([1, 0, 1, 1, 3])
data = jnp.arange(10.0).reshape(5, 2) ** 1.5
res = jax.jit(lambda x, data: (
    eq.gather(x, idx),
    jax.grad(lambda x: (eq.gather(x, idx) * jnp.arange(15.0).reshape(5, 3)).sum())(x),
    jax.vmap(eq.gather, in_axes=(None, 0))(x, idx.reshape(5, 1)),
    eq.segment_sum(data, ids, 4),
    jax.grad(lambda d: (eq.segment_sum(d, ids, 4)[:, 0] * jnp.arange(4.0)).sum())(data)))(x, data)
(out["gather_jit"], out["gather_grad"], out["gather_vmap"], out["segment_jit"],
 out["segment_grad"]) = [lst(a) for a in res]
irx, iry, iro = "2x0e+2x1o", "0e+1o", "2x0e+2x1o"
nw = 8  # weights: one per path (0e.0e, 0e.1o, 1o.0e, 1o.1o) and channel (2)
rng = np.random.default_rng(0)
xs, ws = jnp.asarray(rng.normal(size=(5, 8))), jnp.asarray(rng.normal(size=(5, nw)))
ys = sh(jnp.asarray(rng.normal(size=(5, 3))))[:, :4]
tp = lambda a, b, c: eq.tensor_product(a, b, c, irx, iry, iro)
out["tp_eager"] = lst(tp(xs, ys, ws))
res = jax.jit(lambda xs, ys, ws: (
    tp(xs, ys, ws), tp(2 * xs, ys, 3 * ws), jax.vmap(tp)(xs, ys, ws),
    jax.grad(lambda c: tp(xs, ys, c).sum())(ws),
    jax.vmap(lambda d: (tp(xs, ys, ws.at[0].add(d)).sum() - tp(xs, ys, ws.at[0].add(-d)).sum())
             / 2e-6)(1e-6 * jnp.eye(nw))))(xs, ys, ws)
out["tp_jit"], out["tp_scaled"], out["tp_vmap"], out["tp_grad"], out["tp_grad_fd"] = [lst(a) for a in res]
snd, rcv = jnp.array([0, 1, 2, 3, 1]), jnp.array([1, 1, 0, 2, 3])
conv = lambda a: eq.conv(a, ys, ws, snd, rcv, 4, irx, iry, iro)
composed = lambda a: eq.segment_sum(tp(eq.gather(a, snd), ys, ws), rcv, 4)
res = jax.jit(lambda a: (conv(a), composed(a), jax.grad(lambda a: (conv(a) ** 2).sum())(a),
                         jax.grad(lambda a: (composed(a) ** 2).sum())(a)))(xs[:4])
out["conv_jit"], out["conv_composed"], out["conv_grad"], out["conv_grad_composed"] = [lst(a) for a in res]

# ODE, built-in model: a circular two-body orbit, r(t) = r (cos wt, sin wt, 0)
from jaxext import ode
r0, mu = 7000.0, 398600.4418
v0 = (mu / r0) ** 0.5
y0 = jnp.array([[r0, 0, 0, 0, v0, 0], [0, r0, 0, -v0, 0, 0]])
t1 = 1500.0
sol = jax.jit(lambda y: ode.dop853(ode.models.two_body(mu), y, (0.0, t1), rtol=1e-11, atol=1e-9))(y0)
out["ode_model_final"] = [lst(row) for row in sol.y_final]
out["ode_model_status"] = [int(s) for s in sol.status]
out["ode_model_expected_angle"] = t1 * v0 / r0

# Numba: a kernel under jit, vmap and grad, and an ODE right-hand side (dy/dt = -k y)
try:
  import numba  # noqa: F401  (the wheel's `numba` extra)
except ImportError:
  numba = None
if numba is not None:
  @jaxext.numba_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
                       vmap="elementwise")
  def axpy(x, y, res, alpha):
    for i in range(x.shape[0]):
      res[i] = alpha * x[i] + y[i]

  @axpy.defjvp
  def _(primals, tangents, alpha):
    (x, y), (dx, dy) = primals, tangents
    return axpy(x, y, alpha=alpha), alpha * dx + dy

  xa, ya = jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, -1.0, 4.0])
  f = lambda x, y: axpy(x, y, alpha=2.5)
  res = jax.jit(lambda x, y: (f(x, y), jax.vmap(f)(x.reshape(3, 1), y.reshape(3, 1)),
                              jax.grad(lambda x: f(x, y).sum())(x)))(xa, ya)
  out["numba_jit"], out["numba_vmap"], out["numba_grad"] = [lst(a) for a in res]

  def decay_jac(t, y, p, dfdy, dfdp):
    dfdy[0, 0] = -p[0]
    dfdp[0, 0] = -y[0]

  @ode.rhs(jacobian=decay_jac)
  def decay(t, y, p, dydt):
    dydt[0] = -p[0] * y[0]

  k = jnp.array([[0.5], [1.5]])
  yd0 = jnp.array([[2.0], [1.0]])
  final = lambda y, k: ode.dop853(decay, y, (0.0, 2.0), k, rtol=1e-12, atol=1e-12).y_final
  res = jax.jit(lambda y, k: (final(y, k), jax.grad(lambda k: final(y, k).sum())(k),
                              jax.grad(lambda y: final(y, k).sum())(y)))(yd0, k)
  out["ode_rhs_final"], out["ode_rhs_dk"], out["ode_rhs_dy0"] = [lst(a) for a in res]
print(json.dumps(out))
