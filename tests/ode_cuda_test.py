"""Tests of jaxext.ode.dop853's CUDA path that need no GPU (run with --config=cuda, which provides
the pinned toolkit: libnvvm for numba-cuda, ptxas and nvlink):

* lowering for CUDA (through jax.export, as from a CPU host) emits the handler's custom call with
  the user's functions compiled by numba-cuda into one device function, `jaxext_ode_user`, with
  Numba's calling convention (right-hand side, Jacobian for derivatives, event functions);
* that PTX links, offline, with the integrator's relocatable device code (the fatbins the handler
  embeds) for sm_90, in float32 and float64: every kernel the handler may launch is there and the
  user's function resolves with the prototype our kernels call (nvlink checks it: a float32
  function does not link into the float64 kernels);
* errors: state sizes beyond the kernels, a function numba-cuda cannot compile, Python events
  with a built-in model.

Execution on a GPU (against the CPU, trajectory by trajectory) is tools/gpu_checks.py's.
"""

import math
import os
import re
import subprocess
import tempfile

os.environ.setdefault("JAXEXT_NUMBA_CACHE_DIR",
                      os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "numba"))
_NVCC = os.path.abspath(os.environ["JAXEXT_TEST_NVCC"])
os.environ["CUDA_HOME"] = os.path.dirname(os.path.dirname(_NVCC))
_FATBINS = {"float32": os.path.abspath(os.environ["JAXEXT_TEST_ODE_FATBIN_F32"]),
            "float64": os.path.abspath(os.environ["JAXEXT_TEST_ODE_FATBIN_F64"])}

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxext import _ffi  # noqa: E402
from jaxext import ode  # noqa: E402
from jaxext.ode import _native_cuda  # noqa: E402
from jaxext.ode import models  # noqa: E402

_BIN = os.path.dirname(_NVCC)
_STATE_BOUNDS = [8, 16, 32, 64]               # jaxext/cuda/ode_user_kernels.h
_SENSITIVITY_BOUNDS = [16, 32, 64, 128, 256]


def van_der_pol_fn(t, y, p, dydt):
  dydt[0] = y[1]
  dydt[1] = p[0] * (1 - y[0] * y[0]) * y[1] - y[0]


def van_der_pol_jacobian(t, y, p, dfdy, dfdp):
  dfdy[0, 1] = 1.0
  dfdy[1, 0] = -2.0 * p[0] * y[0] * y[1] - 1.0
  dfdy[1, 1] = p[0] * (1.0 - y[0] * y[0])
  dfdp[1, 0] = (1.0 - y[0] * y[0]) * y[1]


van_der_pol = ode.rhs(van_der_pol_fn, jacobian=van_der_pol_jacobian, name="van_der_pol")


@ode.event(terminal=True, direction=-1)
def crosses_zero(t, y, p):
  return y[0]


@ode.rhs
def chain(t, y, p, dydt):  # a state of any size: a damped chain of oscillators
  n = y.shape[0]
  for i in range(n):
    left = y[i - 1] if i > 0 else 0.0
    right = y[i + 1] if i + 1 < n else 0.0
    dydt[i] = p[0] * (left + right - 2.0 * y[i]) - 0.1 * math.sin(y[i])


def _crossing_gradient(t, y, p, dgdy, dgdp):
  dgdy[0] = 1.0
  return 0.0


crosses_zero_g = ode.event(lambda t, y, p: y[0], terminal=True, direction=-1,
                           gradient=_crossing_gradient, name="crossing")


def _export(fn, *args, platforms=("cuda",)):
  specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
  exported = jax.export.export(
      jax.jit(fn), platforms=platforms,
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(target)
                       for target in ("jaxext_dop853", "jaxext_numba_cuda_call")])(*specs)
  return exported.mlir_module()


def _attrs(text, key):
  """Every value of a string attribute `key` of the module's custom calls, MLIR escapes decoded."""
  return [re.sub(r"\\([0-9A-Fa-f]{2})", lambda g: chr(int(g.group(1), 16)),
                 m.replace('\\"', '"').replace("\\\\", "\\"))
          for m in re.findall(key + r' = "((?:[^"\\]|\\.)*)"', text)]


def _attr(text, key):
  """A string attribute of the (first) jaxext_dop853 custom call, MLIR escapes decoded."""
  values = _attrs(text, key)
  assert values, f"no {key} in the custom call"
  return values[0]


def _int_attr(text, key):
  return int(re.search(key + r" = (-?\d+)", text).group(1))


def _run(args, **kw):
  res = subprocess.run(args, capture_output=True, text=True, **kw)
  return res.returncode, res.stdout + res.stderr


def _link(ptx, dtype, tmp_path):
  """Assembles the user's PTX (relocatable) and links it with our fatbin; (ok, log, cubin)."""
  src, obj, out = tmp_path / "user.ptx", tmp_path / "user.cubin", tmp_path / "linked.cubin"
  src.write_text(ptx)
  code, log = _run([os.path.join(_BIN, "ptxas"), "-c", "-arch=sm_90", str(src), "-o", str(obj)])
  assert code == 0, log
  code, log = _run([os.path.join(_BIN, "nvlink"), "-arch=sm_90", _FATBINS[dtype], str(obj),
                    "-o", str(out)])
  return code == 0, log, out


def _symbols(cubin):
  code, log = _run([os.path.join(_BIN, "cuobjdump"), "-symbols", str(cubin)])
  assert code == 0, log
  return log


def test_cuda_is_registered():
  assert "CUDA" in _ffi.register_all(), _ffi.register_all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_user_functions_lower_and_link(dtype, tmp_path):
  y0 = np.array([[2.0, 0.0], [1.0, 0.5], [0.5, -1.0]], dtype)
  mu = np.array([[1.0], [2.0], [0.5]], dtype)
  run = lambda y, p: ode.dop853(van_der_pol, y, (0.0, 5.0), p, events=[crosses_zero],
                                t_eval=np.linspace(0.0, 5.0, 4).astype(dtype)).y_final
  text = _export(run, y0, mu)
  ptx = _attr(text, "device_code")
  assert _int_attr(text, "rhs_id") != 0 and _int_attr(text, "sensitivities") == 0
  assert _int_attr(text, "jac_id") == 1  # the Jacobian is compiled in (op 1)
  # One visible function, renamed, with Numba's convention: status, result pointer, op, t, 4 ptrs.
  name, ret, params = _native_cuda.compile_cuda.parse_function(ptx)
  width = ".b32" if dtype == "float32" else ".b64"
  assert (name, ret, params) == ("jaxext_ode_user", ".b32",
                                 [".b64", ".b32", width, ".b64", ".b64", ".b64", ".b64"])
  ok, log, cubin = _link(ptx, dtype, tmp_path)
  assert ok, log
  symbols = _symbols(cubin)
  for b in _STATE_BOUNDS:
    assert re.search(rf"STO_ENTRY\s+jaxext_dop853_user_{b}\b", symbols), b
  for b in _SENSITIVITY_BOUNDS:
    assert re.search(rf"STO_ENTRY\s+jaxext_dop853_user_sens_{b}\b", symbols), b
  assert re.search(r"STB_GLOBAL\s+STV_DEFAULT\s+jaxext_ode_user\b", symbols), symbols

  # The other precision's kernels call a different prototype: nvlink refuses the pair.
  other = "float64" if dtype == "float32" else "float32"
  ok, log, _ = _link(ptx, other, tmp_path)
  assert not ok and "jaxext_ode_user" in log, log


def test_derivatives_lower_with_sensitivities(tmp_path):
  y0 = np.array([[2.0, 0.0], [1.0, 0.5]])
  mu = np.array([[1.0], [2.0]])
  grad = _export(jax.grad(lambda y, p: ode.dop853(van_der_pol, y, (0.0, 3.0), p).y_final.sum(),
                          argnums=(0, 1)), y0, mu)
  assert _int_attr(grad, "sensitivities") == 1
  ok, log, _ = _link(_attr(grad, "device_code"), "float64", tmp_path)
  assert ok, log
  plain = ode.rhs(van_der_pol_fn, name="no_jacobian")
  with pytest.raises(ValueError, match="Jacobian"):
    _export(jax.grad(lambda y, p: ode.dop853(plain, y, (0.0, 3.0), p).y_final.sum()), y0, mu)


def test_derivatives_through_python_events_lower(tmp_path):
  """f and the event's gradient at the event rows (the JVP's coefficients) become numba-cuda
  kernels, one thread per row, next to the integrator with sensitivities; their PTX assembles."""
  y0 = np.array([[2.0, 0.0], [1.0, 0.5], [0.5, -1.0]])
  mu = np.array([[1.0], [2.0], [0.5]])

  def loss(y, p):
    sol = ode.dop853(van_der_pol, y, (0.0, 5.0), p, events=[crosses_zero_g])
    return sol.y_final.sum() + jax.numpy.nansum(sol.t_events)

  text = _export(jax.grad(loss, argnums=(0, 1)), y0, mu)
  assert _int_attr(text, "sensitivities") == 1
  ok, log, _ = _link(_attr(text, "device_code"), "float64", tmp_path)
  assert ok, log
  names = " ".join(_attrs(text, "name"))
  assert "right-hand side 'van_der_pol' at events" in names, names
  assert "gradient of the event 'crossing'" in names, names
  ptxs = _attrs(text, "ptx")  # the row kernels' (the integrator's is device_code)
  assert len(ptxs) == 2
  for k, ptx in enumerate(ptxs):
    src = tmp_path / f"rows{k}.ptx"
    src.write_text(ptx)
    code, log = _run([os.path.join(_BIN, "ptxas"), "-arch=sm_90", str(src), "-o",
                      str(tmp_path / f"rows{k}.cubin")])
    assert code == 0, log
  # The same under vmap: the rows of every batch element are rows too.
  batched = _export(jax.vmap(jax.grad(loss)), np.stack([y0, y0[::-1]]), np.stack([mu, mu]))
  assert "jaxext_numba_cuda_call" in batched


@pytest.mark.parametrize("n", [1, 9, 64])
def test_state_sizes_up_to_the_largest_kernel(n, tmp_path):
  y0 = np.linspace(-1.0, 1.0, 2 * n).reshape(2, n)
  text = _export(lambda y: ode.dop853(chain, y, (0.0, 1.0), [1.0]).y_final, y0)
  ok, log, _ = _link(_attr(text, "device_code"), "float64", tmp_path)
  assert ok, log


def test_errors():
  with pytest.raises(NotImplementedError, match="at most 64"):
    _export(lambda y: ode.dop853(chain, y, (0.0, 1.0), [1.0]).y_final, np.zeros((2, 65)))
  with pytest.raises(NotImplementedError, match="256"):  # 12 + 12 * (12 + 10) > 256
    _export(jax.grad(lambda y, p: ode.dop853(van_der_pol_big, y, (0.0, 1.0), p).y_final.sum()),
            np.zeros((2, 12)), np.ones((2, 10)))

  @ode.rhs
  def bad(t, y, p, dydt):
    dydt[0] = "text"
  with pytest.raises(TypeError, match="'bad'"):  # the CPU compilation at trace time says so first
    _export(lambda y: ode.dop853(bad, y, (0.0, 1.0)).y_final, np.zeros((2, 1)))

  y0 = np.tile(np.array([models.EARTH_RADIUS + 400.0, 0.0, 0.0, 0.0, 7.67, 0.0]), (2, 1))
  with pytest.raises(NotImplementedError, match="Python event functions need a Python"):
    _export(lambda y: ode.dop853(models.two_body(), y, (0.0, 60.0),
                                 events=[ode.event(lambda t, y, p: y[0])]).y_final, y0)


def _big(t, y, p, dydt):
  for i in range(y.shape[0]):
    dydt[i] = -p[i % p.shape[0]] * y[i]


def _big_jacobian(t, y, p, dfdy, dfdp):
  for i in range(y.shape[0]):
    dfdy[i, i] = -p[i % p.shape[0]]
    dfdp[i, i % p.shape[0]] = -y[i]


van_der_pol_big = ode.rhs(_big, jacobian=_big_jacobian, name="big")


def test_built_in_models_need_no_device_code():
  y0 = np.tile(np.array([models.EARTH_RADIUS + 400.0, 0.0, 0.0, 0.0, 7.67, 0.0]), (2, 1))
  text = _export(lambda y: ode.dop853(models.two_body(), y, (0.0, 60.0)).y_final, y0)
  assert _int_attr(text, "rhs_id") == 0 and _attr(text, "device_code") == ""


def _jnp_model(t, y, args):
  """A jax.numpy right-hand side touching what the generated code calls beyond arithmetic:
  selects, floor, sign, an integer power, powers 1.5 and -1.5 (their own helpers), hypot, erf
  (whose Jacobian bitcasts)."""
  import jax.numpy as jnp  # noqa: PLC0415
  k, c = args
  drive = jnp.where(y[0] > 0, jnp.floor(t) * 0.0 + jnp.sign(y[1]), jnp.maximum(y[1], -1.0))
  return jnp.stack([y[1], -k * y[0] ** 3 - c * jnp.hypot(y[1], 0.1)
                    + 0.01 * jax.scipy.special.erf(y[0]) + 0.001 * drive
                    + 0.001 * (1 + y[0] * y[0]) ** 1.5 + 0.001 * (2 + y[1] * y[1]) ** -1.5])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jnp_right_hand_side_lowers_and_links(dtype, tmp_path):
  """The jax.numpy form: the same generated source compiles with numba-cuda (its helpers bound
  to CUDA implementations) and links with the integrator, for values and for derivatives with a
  jax.numpy event."""
  import jax.numpy as jnp  # noqa: PLC0415
  y0 = np.array([[1.0, 0.0], [0.5, 0.5]], dtype)
  args = (1.5, 0.2)
  run = lambda y: ode.dop853(_jnp_model, y, (0.0, 3.0), args=args).y_final
  text = _export(run, y0)
  ok, log, _ = _link(_attr(text, "device_code"), dtype, tmp_path)
  assert ok, log
  stop = ode.event(lambda t, y, a: y[0] - 0.25 * jnp.tanh(y[1]), terminal=True, direction=-1)
  grad = _export(jax.grad(lambda y: ode.dop853(_jnp_model, y, (0.0, 3.0), args=args,
                                               events=[stop]).t_final.sum()), y0)
  assert _int_attr(grad, "sensitivities") == 1
  ok, log, _ = _link(_attr(grad, "device_code"), dtype, tmp_path)
  assert ok, log


def _result_shapes(text):
  """The result types of the (first) jaxext_dop853 custom call, as shape tuples."""
  call = text[text.index("@jaxext_dop853"):]
  results = call[call.index("-> (") + 4:call.index("\n")]
  return [tuple(int(d) for d in m.split("x")[:-1])
          for m in re.findall(r"tensor<([0-9x]*[a-z0-9]+)>", results)]


def test_dense_output_lowers_for_cuda(tmp_path):
  """dense=S on CUDA: the handler's kept-steps results (S + 1 boundaries, S x 8 rows of n_aug per
  trajectory) for a Numba right-hand side, a built-in model and the sensitivities' interpolants
  (a gradient through Solution.evaluate); the user's functions still link. The values against
  the CPU's are tools/gpu_checks.py's (ode_jnp, ode_user, ode)."""
  y0 = np.array([[2.0, 0.0], [1.0, 0.5], [0.5, 0.1]])
  dense_f = lambda y: ode.dop853(van_der_pol, y, (0.0, 1.0), [1.0], dense=7).dense_f
  text = _export(dense_f, y0)
  assert _int_attr(text, "dense_steps") == 7
  assert (3, 8) in _result_shapes(text) and (3, 7, 8, 2) in _result_shapes(text)
  # Kept steps trajectory-minor on CUDA (the kernels' threads write neighbouring addresses):
  # minor-to-major (0, 1) and (0, 3, 2, 1); the other results row-major. The CPU's are row-major.
  layouts = lambda t: re.search(r"result_layouts = \[(.*?)\]\s*[,}]", t).group(1)
  cuda = layouts(text)
  assert cuda.count("dense<[0, 1]>") == 1 and cuda.count("dense<[0, 3, 2, 1]>") == 1, cuda
  cpu = layouts(_export(dense_f, y0, platforms=("cpu",)))
  assert "dense<[0, 1]>" not in cpu and "dense<[0, 3, 2, 1]>" not in cpu, cpu
  assert cpu.count("dense<[3, 2, 1, 0]>") == 2, cpu  # y_events and dense_f, row-major
  ok, log, _ = _link(_attr(text, "device_code"), "float64", tmp_path)
  assert ok, log
  grad = _export(jax.grad(lambda y: ode.dop853(van_der_pol, y, (0.0, 1.0), [1.0], dense=5)
                          .evaluate(0.5).sum()), y0)
  assert _int_attr(grad, "sensitivities") == 1 and _int_attr(grad, "dense_steps") == 5
  assert (3, 5, 8, 2 + 2 * 3) in _result_shapes(grad)  # state + d y / d (y0, p) of 2 x 3
  orbit = np.tile(np.array([models.EARTH_RADIUS + 400.0, 0.0, 0.0, 0.0, 7.67, 0.0]), (2, 1))
  built_in = _export(lambda y: ode.dop853(models.two_body(), y, (0.0, 60.0), dense=True)
                     .evaluate(30.0), orbit)
  assert _int_attr(built_in, "dense_steps") == 1000  # dense=True: the documented 1000 steps
  assert (2, 1000, 8, 6) in _result_shapes(built_in)
