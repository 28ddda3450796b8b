"""Tests of jaxext.numba_kernel (CPU): each kernel against the same Python function run by Numba on
NumPy arrays and against a jnp equivalent; every dtype, 0-d and empty arrays, several outputs,
both vmap modes (nested, in_axes other than 0, unmapped operands), user derivatives through
check_grads, errors, threads, no Python per execution, and executables from another process."""

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import types

os.environ.setdefault("JAXEXT_NUMBA_CACHE_DIR",
                      os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "numba"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from jaxext.numba_bridge import compile_cpu  # noqa: E402

like = lambda x, *_, **__: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype)


@jaxext.numba_kernel(outputs=like, vmap="elementwise")
def axpy(x, y, out, alpha):
  for i in range(x.shape[0]):
    out[i] = alpha * x[i] + y[i]


@axpy.defjvp
def _axpy_jvp(primals, tangents, alpha):
  x, y = primals
  dx, dy = tangents
  return axpy(x, y, alpha=alpha), alpha * dx + dy


@jaxext.numba_kernel(outputs=like)  # vmap="sequential": rows are coupled
def cumsum_rows(x, out):
  for i in range(x.shape[0]):
    acc = 0.0
    for j in range(x.shape[1]):
      acc += x[i, j]
      out[i, j] = acc


@jaxext.numba_kernel(outputs=lambda x: (jax.ShapeDtypeStruct(x.shape, x.dtype),
                                        jax.ShapeDtypeStruct((), x.dtype)))
def scaled_and_sum(x, out, total, scale=2.0):
  s = 0.0
  for i in range(x.size):
    out.flat[i] = scale * x.flat[i]
    s += x.flat[i]
  total[()] = s


def numba_reference(kernel, inputs, outputs, *params):
  """The same function, compiled by Numba itself, on NumPy arrays."""
  outs = [np.empty(o.shape, o.dtype) for o in outputs]
  numba.njit(kernel.py_func)(*[np.asarray(a) for a in inputs], *outs, *params)
  return outs


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_matches_numba_and_jnp(dtype):
  rng = np.random.default_rng(0)
  x = rng.normal(size=1000).astype(dtype)
  y = rng.normal(size=1000).astype(dtype)
  got = jax.jit(lambda a, b: axpy(a, b, alpha=2.5))(x, y)
  assert got.dtype == dtype
  want = numba_reference(axpy, (x, y), [like(x)], 2.5)[0]
  np.testing.assert_array_equal(got, want)
  tol = 1e-6 if dtype == np.float32 else 1e-15
  np.testing.assert_allclose(got, 2.5 * jnp.asarray(x) + y, rtol=tol, atol=tol)
  np.testing.assert_array_equal(axpy(x, y, alpha=2.5), got)  # eager


def test_parameters_are_attributes_not_code():
  x = np.arange(5.0)
  before = len(compile_cpu._entries)
  a = axpy(x, x, alpha=1.0)
  b = axpy(x, x, alpha=-3.0)
  np.testing.assert_array_equal(a, 2 * x)
  np.testing.assert_array_equal(b, -2 * x)
  assert len(compile_cpu._entries) - before <= 1  # one compilation serves every alpha
  hlo = jax.jit(lambda v: axpy(v, v, alpha=7.25)).lower(x).as_text()
  assert "7.25" in hlo and "jaxext_numba_call" in hlo


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_every_dtype(dtype):
  @jaxext.numba_kernel(outputs=like)
  def negate(x, out):
    for i in range(x.shape[0]):
      out[i] = not x[i]

  @jaxext.numba_kernel(outputs=like)
  def increment(x, out):
    for i in range(x.shape[0]):
      out[i] = x[i] + 1

  bump = negate if dtype == "bool" else increment

  rng = np.random.default_rng(1)
  x = (rng.integers(0, 2, 17) if dtype == "bool" else rng.integers(-50, 50, 17)).astype(dtype)
  got = jax.jit(bump)(x)
  assert got.dtype == np.dtype(dtype)
  want = np.logical_not(x) if dtype == "bool" else x + np.asarray(1, dtype)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(got, numba_reference(bump, (x,), [like(x)])[0])


def test_zero_d_and_empty_arrays_and_several_outputs():
  x = np.arange(12.0).reshape(3, 4)
  out, total = jax.jit(lambda v: scaled_and_sum(v, scale=3.0))(x)
  np.testing.assert_array_equal(out, 3 * x)
  assert total.shape == () and float(total) == x.sum()
  out, total = scaled_and_sum(np.zeros((0, 4)))  # default parameter
  assert out.shape == (0, 4) and float(total) == 0.0
  out, total = scaled_and_sum(np.float64(4.0))  # rank 0 in and out
  assert float(out) == 8.0 and float(total) == 4.0
  np.testing.assert_array_equal(axpy(np.zeros(0), np.zeros(0), alpha=1.0), np.zeros(0))


# --------------------------------------------------------------------------------------------
# vmap
# --------------------------------------------------------------------------------------------
def test_sequential_vmap_keeps_rows_coupled():
  x = np.random.default_rng(2).normal(size=(5, 3, 4))
  want = np.cumsum(x, axis=-1)
  np.testing.assert_allclose(jax.vmap(cumsum_rows)(x), want, rtol=1e-14)
  np.testing.assert_allclose(jax.jit(jax.vmap(cumsum_rows, in_axes=1, out_axes=1))(
      x.transpose(1, 0, 2)), want.transpose(1, 0, 2), rtol=1e-14)
  # Nested vmap, the inner one over a non-leading axis.
  z = np.random.default_rng(3).normal(size=(2, 3, 5, 4))
  nested = jax.vmap(jax.vmap(cumsum_rows, in_axes=1), in_axes=0)(z)  # (2, 5, 3, 4)
  np.testing.assert_allclose(nested, np.cumsum(z, -1).transpose(0, 2, 1, 3), rtol=1e-14)


def test_sequential_vmap_with_unmapped_operand_and_nesting():
  @jaxext.numba_kernel(outputs=lambda x, w: jax.ShapeDtypeStruct(x.shape, x.dtype))
  def weighted_prefix(x, w, out):  # out[i] = sum_{j <= i} w[j] x[j]
    acc = 0.0
    for i in range(x.shape[0]):
      acc += w[i] * x[i]
      out[i] = acc

  rng = np.random.default_rng(4)
  x = rng.normal(size=(3, 4, 6))
  w = rng.normal(size=6)
  want = np.cumsum(w * x, axis=-1)
  got = jax.vmap(jax.vmap(weighted_prefix, in_axes=(0, None)), in_axes=(0, None))(x, w)
  np.testing.assert_allclose(got, want, rtol=1e-13)
  # The weights batched on the outer level only.
  ws = rng.normal(size=(3, 6))
  got = jax.vmap(jax.vmap(weighted_prefix, in_axes=(0, None)), in_axes=(0, 0))(x, ws)
  np.testing.assert_allclose(got, np.cumsum(ws[:, None, :] * x, axis=-1), rtol=1e-13)


def test_elementwise_vmap_folds_and_nests():
  rng = np.random.default_rng(5)
  x = rng.normal(size=(4, 3, 7))
  y = rng.normal(size=7)
  f = lambda a, b: axpy(a, b, alpha=0.5)
  got = jax.jit(jax.vmap(jax.vmap(f, in_axes=(0, None)), in_axes=(0, None)))(x, y)
  np.testing.assert_allclose(got, 0.5 * x + y, rtol=1e-15)
  xt = x[:, 0, :].T  # (7, 4): the batch is axis 1
  got = jax.vmap(f, in_axes=(1, None))(xt, y)
  np.testing.assert_allclose(got, 0.5 * x[:, 0, :] + y, rtol=1e-15)
  # A rank-0 call under vmap cannot fold; it runs sequentially.
  got = jax.vmap(lambda s: scaled_and_sum(s, scale=1.5))(np.arange(3.0))
  np.testing.assert_array_equal(got[0], 1.5 * np.arange(3.0))


def test_elementwise_vmap_refuses_mismatched_first_axes():
  @jaxext.numba_kernel(outputs=lambda x: jax.ShapeDtypeStruct((2,), x.dtype), vmap="elementwise")
  def head2(x, out):
    out[0] = x[0]
    out[1] = x[1]

  with pytest.raises(TypeError, match="vmap='sequential'"):
    jax.vmap(head2)(np.ones((3, 5)))


# --------------------------------------------------------------------------------------------
# Derivatives
# --------------------------------------------------------------------------------------------
def test_user_jvp_through_check_grads_jit_and_vmap():
  rng = np.random.default_rng(6)
  x, y = rng.normal(size=8), rng.normal(size=8)
  f = lambda a, b: jnp.sum(jnp.sin(axpy(a, b, alpha=1.7)))
  check_grads(f, (x, y), order=1, modes=("fwd", "rev"))
  g = jax.jit(jax.grad(f))(x, y)
  np.testing.assert_allclose(g, 1.7 * np.cos(1.7 * x + y), rtol=1e-13)
  gv = jax.vmap(jax.grad(f))(np.stack([x, 2 * x]), np.stack([y, y]))
  np.testing.assert_allclose(gv[1], 1.7 * np.cos(3.4 * x + y), rtol=1e-13)


def test_user_vjp():
  @jaxext.numba_kernel(outputs=like)
  def cube(x, out):
    for i in range(x.shape[0]):
      out[i] = x[i] ** 3

  cube.defvjp(lambda x: (cube(x), x), lambda x, ct: (3 * x ** 2 * ct[0],))
  x = np.linspace(-1, 1, 5)
  check_grads(lambda a: cube(a).sum(), (x,), order=1, modes=("rev",))
  np.testing.assert_allclose(jax.grad(lambda a: cube(a).sum())(x), 3 * x ** 2, rtol=1e-14)


def test_no_derivative_is_a_clear_error():
  with pytest.raises(TypeError, match="cumsum_rows' has no derivative.*defjvp"):
    jax.grad(lambda x: cumsum_rows(x).sum())(np.ones((2, 2)))


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
@jaxext.numba_kernel(outputs=like)
def checked_sqrt(x, out):
  for i in range(x.shape[0]):
    if x[i] < 0:
      raise ValueError("negative input")
    out[i] = np.sqrt(x[i])


def test_exception_in_kernel_becomes_python_exception():
  np.testing.assert_allclose(checked_sqrt(np.array([4.0, 9.0])), [2.0, 3.0])
  with pytest.raises(Exception, match="checked_sqrt' raised an exception"):
    jax.block_until_ready(jax.jit(checked_sqrt)(np.array([4.0, -1.0])))
  # Under sequential vmap the failing slice is reported too.
  with pytest.raises(Exception, match="checked_sqrt' raised"):
    jax.block_until_ready(jax.vmap(checked_sqrt)(np.array([[1.0], [-1.0]])))


def test_out_of_bounds_with_boundscheck_raises():
  @jaxext.numba_kernel(outputs=like, boundscheck=True)
  def shifted(x, out):
    for i in range(x.shape[0]):
      out[i] = x[i + 1]

  with pytest.raises(Exception, match="shifted' raised"):
    jax.block_until_ready(shifted(np.ones(4)))


def _scale_by_int(x, out, k):
  for i in range(x.shape[0]):
    out[i] = x[i] * k


@numba.njit
def _write_first(a):
  a[0] = 1.0


def test_inputs_are_read_only():
  """A kernel may not write its inputs: they are the caller's jax arrays (XLA may alias them with
  other values); the write fails to compile, eagerly and under jit, and the array is unchanged."""
  @jaxext.numba_kernel(outputs=like)
  def scribbles(x, out):
    x[0] = 42.0
    for i in range(x.shape[0]):
      out[i] = x[i]

  @jaxext.numba_kernel(outputs=like)
  def through_a_callee(x, out):
    _write_first(x)
    for i in range(x.shape[0]):
      out[i] = x[i]

  x = jnp.arange(3.0)
  alias = x[:2]
  for kernel in (scribbles, through_a_callee):
    for call, arg in ((kernel, x), (jax.jit(kernel), x), (jax.vmap(kernel), x[None])):
      with pytest.raises(TypeError, match="inputs are read-only"):
        call(arg)
  np.testing.assert_array_equal(x, [0.0, 1.0, 2.0])
  np.testing.assert_array_equal(alias, [0.0, 1.0])

  @jaxext.numba_kernel(outputs=like)
  def scratch(x, out):
    y = x.copy()  # the documented way to use an input as scratch space
    y[0] = 5.0
    for i in range(x.shape[0]):
      out[i] = y[i]

  np.testing.assert_array_equal(jax.jit(scratch)(x), [5.0, 1.0, 2.0])
  np.testing.assert_array_equal(x, [0.0, 1.0, 2.0])


def test_a_kernel_returning_its_result_is_refused():
  """Results go into the outputs; a kernel that returns them instead would leave the outputs
  unwritten (garbage) without an error: it fails to compile, saying what to do."""
  @jaxext.numba_kernel(outputs=like)
  def returns(x, out):
    return x * 2.0

  with pytest.raises(TypeError, match="returns a value.*write its results into its output"):
    jax.jit(returns)(np.ones(3))

  @jaxext.numba_kernel(outputs=like)
  def early_exit(x, out):  # a bare return is fine
    for i in range(x.shape[0]):
      out[i] = x[i]
    if x.shape[0] > 0:
      return
    out[:] = 0.0

  np.testing.assert_array_equal(early_exit(np.arange(3.0)), [0.0, 1.0, 2.0])


def test_compile_error_names_kernel_and_signature_at_trace_time():
  @jaxext.numba_kernel(outputs=like)
  def broken(x, out):
    out[0] = x.no_such_attribute

  with pytest.raises(TypeError, match=r"'broken': Numba cannot compile it for \(float64\[:\]\)"):
    jax.jit(broken).lower(np.ones(3))


def test_bad_arguments_raise_at_trace_time():
  with pytest.raises(TypeError, match="input x has dtype complex128"):
    axpy(np.ones(2, np.complex128), np.ones(2), alpha=1.0)
  with pytest.raises(TypeError, match="missing parameter 'alpha'"):
    axpy(np.ones(2), np.ones(2))
  with pytest.raises(TypeError, match="unexpected parameter"):
    axpy(np.ones(2), np.ones(2), alpha=1.0, beta=2.0)
  with pytest.raises(TypeError, match="parameter 'alpha' must be"):
    axpy(np.ones(2), np.ones(2), alpha=np.ones(2))
  with pytest.raises(TypeError, match="parameter 'alpha' must be"):
    jax.jit(lambda a: axpy(np.ones(2), np.ones(2), alpha=a))(1.0)  # traced: not static
  bad = jaxext.numba_kernel(outputs=lambda x: (3, 4))(cumsum_rows.py_func)
  with pytest.raises(TypeError, match="outputs= must return"):
    bad(np.ones((2, 2)))
  bad = jaxext.numba_kernel(outputs=lambda x: jax.ShapeDtypeStruct(x.shape, np.complex64))(
      cumsum_rows.py_func)
  with pytest.raises(TypeError, match="output 0 has dtype complex64"):
    bad(np.ones((2, 2)))
  with pytest.raises(ValueError, match="vmap must be one of"):
    jaxext.numba_kernel(outputs=like, vmap="parallel")


def test_unclear_errors_name_what_is_wrong():
  # A parameter passed by position: the message says parameters are keywords (it failed in
  # outputs= or in Numba, naming neither).
  with pytest.raises(TypeError, match=r"input out is a Python float; parameters are given by keyword"):
    axpy(np.ones(2), np.ones(2), 2.0)
  with pytest.raises(TypeError, match=r"outputs= failed for 2 input.*takes 1 positional.*by keyword"):
    jaxext.numba_kernel(outputs=lambda x: like(x))(axpy.py_func)(np.ones(2), np.ones(2))
  with pytest.raises(TypeError, match=r"got 4 positional inputs.*keyword"):
    axpy(np.ones(2), np.ones(2), np.ones(2), 2.0)
  # An integer parameter beyond int64 names the parameter (it gave NumPy's OverflowError).
  ints = jaxext.numba_kernel(outputs=like)(_scale_by_int)
  np.testing.assert_array_equal(ints(np.ones(2), k=2**63 - 1) > 0, [True, True])
  for big in (2**63, 2**64, -(2**63) - 1):
    with pytest.raises(TypeError, match="parameter 'k' = .* does not fit in int64"):
      ints(np.ones(2), k=big)
  # More than 30 arrays and parameters: a clear limit, not Numba blaming the user's kernel.
  names = [f"a{i}" for i in range(31)]
  ns = {}
  exec("def many(" + ", ".join(names) + ", out):\n    out[0] = a0[0]\n", ns)  # noqa: S102
  many = jaxext.numba_kernel(outputs=lambda *a: jax.ShapeDtypeStruct((1,), np.float64))(ns["many"])
  with pytest.raises(TypeError, match="at most 30 in all"):
    many(*[np.ones(1)] * 31)
  ns = {}
  exec("def fine(" + ", ".join(names[:29]) + ", out):\n    out[0] = a28[0]\n", ns)  # noqa: S102
  fine = jaxext.numba_kernel(outputs=lambda *a: jax.ShapeDtypeStruct((1,), np.float64))(ns["fine"])
  np.testing.assert_array_equal(fine(*[np.full(1, float(i)) for i in range(29)]), [28.0])


# --------------------------------------------------------------------------------------------
# Execution: native only, thread-safe
# --------------------------------------------------------------------------------------------
@pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="sys.monitoring needs Python >= 3.12")
def test_no_python_runs_per_execution():
  """Counts Python function starts in every thread while a compiled loop calls the kernel."""
  x = jnp.arange(16.0)

  def loop(n):
    return jax.jit(lambda v: jax.lax.fori_loop(0, n, lambda i, a: axpy(a, v, alpha=0.5), v))

  few, many = loop(3), loop(3000)
  jax.block_until_ready(few(x))
  jax.block_until_ready(many(x))  # compiled and warm
  mon = sys.monitoring
  tool = mon.PROFILER_ID
  counts = []
  mon.use_tool_id(tool, "jaxext-test")
  try:
    for f in (few, many):
      n = [0]
      mon.register_callback(tool, mon.events.PY_START, lambda code, off: n.__setitem__(0, n[0] + 1))
      mon.set_events(tool, mon.events.PY_START)
      jax.block_until_ready(f(x))
      mon.set_events(tool, 0)
      counts.append(n[0])
  finally:
    mon.register_callback(tool, mon.events.PY_START, None)
    mon.free_tool_id(tool)
  # 2997 more kernel calls, not a single extra Python function start.
  assert counts[1] <= counts[0], counts
  np.testing.assert_allclose(many(x), x * (1 - 0.5 ** 3001) / 0.5, rtol=1e-12)


def test_large_inputs_split_across_the_thread_pool():
  """Elementwise kernels split their first axis, vmapped ones their batch, over XLA's pool."""
  rng = np.random.default_rng(8)
  x, y = rng.normal(size=300_001), rng.normal(size=300_001)
  np.testing.assert_array_equal(jax.jit(lambda a, b: axpy(a, b, alpha=0.25))(x, y),
                                numba_reference(axpy, (x, y), [like(x)], 0.25)[0])
  z = rng.normal(size=(2, 400, 1000))
  np.testing.assert_allclose(jax.jit(jax.vmap(cumsum_rows))(z), np.cumsum(z, axis=-1),
                             rtol=1e-12, atol=1e-12)
  v = np.abs(rng.normal(size=200_000))
  v[123_456] = -1.0  # one failing row, in some chunk on some thread
  big_sqrt = jaxext.numba_kernel(outputs=like, vmap="elementwise")(checked_sqrt.py_func)
  with pytest.raises(Exception, match="raised an exception"):
    jax.block_until_ready(big_sqrt(v))
  v[123_456] = 4.0
  np.testing.assert_allclose(big_sqrt(v), np.sqrt(v), rtol=1e-15)
  with pytest.raises(Exception, match="raised an exception"):
    jax.block_until_ready(jax.vmap(checked_sqrt)(-np.ones((300, 200))))


def test_many_threads_at_once():
  x = np.random.default_rng(7).normal(size=(64, 32))
  f = jax.jit(cumsum_rows)
  errors = []

  def work(k):
    try:
      for _ in range(20):
        np.testing.assert_array_equal(f(x * k), np.cumsum(x * k, axis=1))
    except Exception as e:  # noqa: BLE001 - reported below
      errors.append(e)

  threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 9)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors, errors[0]


# --------------------------------------------------------------------------------------------
# Executables from another process, disk cache, Numba missing
# --------------------------------------------------------------------------------------------
_KERNEL_SRC = textwrap.dedent("""
    import os, sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    import jaxext

    @jaxext.numba_kernel(outputs=lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype))
    def triple(x, out):
        for i in range(x.shape[0]):
            out[i] = 3 * x[i]
""")


def _run(code, tmp, **env):
  env = dict(os.environ, JAXEXT_NUMBA_CACHE_DIR=os.path.join(tmp, "numba"), **env)
  path = os.path.join(tmp, f"script{abs(hash(code))}.py")
  with open(path, "w") as f:
    f.write(code)
  return subprocess.run([sys.executable, path], capture_output=True, text=True, env=env, cwd=tmp)


def test_persistent_compilation_cache_reresolves_the_kernel(tmp_path):
  tmp = str(tmp_path)
  code = _KERNEL_SRC + textwrap.dedent("""
      jax.config.update("jax_compilation_cache_dir", sys.argv[0] + ".jaxcache")
      jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
      jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
      f = jax.jit(lambda x: triple(x) + 1)
      print("lowered-without-address", str(triple.entry) not in f.lower(np.ones(3)).as_text())
      print("result", np.asarray(f(np.arange(3.0))).tolist())
      print("cache-files", len(os.listdir(sys.argv[0] + ".jaxcache")))
  """)
  first = _run(code, tmp)
  assert first.returncode == 0, first.stderr
  second = _run(code, tmp)  # a new process: the executable comes from the cache
  assert second.returncode == 0, second.stderr
  for out in (first.stdout, second.stdout):
    assert "result [1.0, 4.0, 7.0]" in out, out
    assert "lowered-without-address True" in out
  assert "cache-files 0" not in second.stdout


def test_exported_function_in_a_new_process(tmp_path):
  tmp = str(tmp_path)
  export = _KERNEL_SRC + textwrap.dedent("""
      from jax import export
      exp = export.export(jax.jit(triple), disabled_checks=[
          export.DisabledSafetyCheck.custom_call("jaxext_numba_call")])(
          jax.ShapeDtypeStruct((3,), np.float64))
      open("triple.bin", "wb").write(exp.serialize())
  """)
  r = _run(export, tmp)
  assert r.returncode == 0, r.stderr
  # A process that never compiled the kernel: a clear error, not a call into another process.
  use = textwrap.dedent("""
      import jax, numpy as np
      jax.config.update("jax_enable_x64", True)
      import jaxext
      from jax import export
      exp = export.deserialize(open("triple.bin", "rb").read())
      print(np.asarray(exp.call(np.arange(3.0))).tolist())
  """)
  r = _run(use, tmp)
  assert r.returncode != 0
  assert "numba_kernel 'triple' is not compiled in this process" in r.stderr, r.stderr[-2000:]
  # Once the same kernel is compiled in the process, the exported function finds it by content.
  r = _run(_KERNEL_SRC + "triple(np.ones(3))\n" + use.split("import jaxext\n", 1)[1], tmp)
  assert r.returncode == 0, r.stderr
  assert "[0.0, 3.0, 6.0]" in r.stdout


def test_compiled_code_is_cached_on_disk(tmp_path):
  tmp = str(tmp_path)
  code = _KERNEL_SRC + "print(np.asarray(triple(np.arange(3.0))).tolist())\n"
  assert _run(code, tmp).returncode == 0
  files = []
  for root, _, names in os.walk(os.path.join(tmp, "numba")):
    files += names
  assert any(n.endswith(".nbi") for n in files) and any(n.endswith(".nbc") for n in files), files
  r = _run(code, tmp, NUMBA_DEBUG_CACHE="1")
  assert r.returncode == 0 and "[0.0, 3.0, 6.0]" in r.stdout
  assert "data loaded from" in r.stdout + r.stderr  # the second process loads, not compiles


# --------------------------------------------------------------------------------------------
# Stale code: Numba freezes the globals a kernel reads when it compiles; jaxext must compile anew
# (and not serve the old machine code from memory or disk) when one of them changed.
# --------------------------------------------------------------------------------------------
kcfg = types.ModuleType("jaxext_test_kcfg")  # a user's configuration module
kcfg.SCALE = 2.0
kcfg.sub = types.ModuleType("jaxext_test_kcfg.sub")
kcfg.sub.OFFSET = 0.5
hlp = types.ModuleType("jaxext_test_hlp")  # a user's helper module
hlp.f = numba.njit(lambda v: v + 1.0)


@jaxext.numba_kernel(outputs=like)
def scaled_by_module(x, out):
  for i in range(x.shape[0]):
    out[i] = kcfg.SCALE * x[i] + kcfg.sub.OFFSET + hlp.f(x[i])


def test_module_attribute_changes_are_not_served_stale():
  x = np.arange(4.0)
  expect = lambda: kcfg.SCALE * x + kcfg.sub.OFFSET + hlp.f.py_func(x)
  try:
    for change in (lambda: None,
                   lambda: setattr(kcfg, "SCALE", 3.0),             # a value read through a module
                   lambda: setattr(kcfg.sub, "OFFSET", -1.0),        # ... through two modules
                   lambda: setattr(hlp, "f", numba.njit(lambda v: v * v))):  # a callee's code
      change()
      np.testing.assert_array_equal(scaled_by_module(x), expect())  # eager
      # A new trace sees the change (one already traced keeps what it traced, as jax does for
      # any global a jitted function reads).
      np.testing.assert_array_equal(jax.jit(lambda v: scaled_by_module(v))(x), expect())
      np.testing.assert_array_equal(jax.vmap(scaled_by_module)(x[None]), expect()[None])
  finally:
    kcfg.SCALE, kcfg.sub.OFFSET, hlp.f = 2.0, 0.5, numba.njit(lambda v: v + 1.0)


def test_a_callee_reading_a_changed_global_is_recompiled():
  # Numba reuses a callee's compiled code, whose globals it froze: jaxext must recompile it.
  cfg = types.ModuleType("jaxext_test_callee_cfg")
  cfg.K = 2.0
  helpers = types.ModuleType("jaxext_test_callee_helpers")
  exec("def g(v):\n    return v * cfg.K\n", helpers.__dict__)
  helpers.cfg = cfg
  helpers.g = numba.njit(helpers.g)
  assert helpers.g(1.0) == 2.0  # compiled before the change, outside jaxext

  def body(x, out):
    for i in range(x.shape[0]):
      out[i] = helpers.g(x[i])

  k = jaxext.numba_kernel(outputs=like)(body)
  np.testing.assert_array_equal(k(np.ones(2)), [2.0, 2.0])
  cfg.K = 3.0
  np.testing.assert_array_equal(k(np.ones(2)), [3.0, 3.0])
  cfg.K = 5.0
  np.testing.assert_array_equal(jax.jit(lambda v: k(v))(np.ones(2)), [5.0, 5.0])


def test_unrelated_globals_named_like_attributes_do_not_change_the_id():
  # `x.shape` names "shape": a module global of that name is not something the kernel reads.
  sig = compile_cpu.Signature((("float64", 1),), (("float64", 1),), ())
  ident = lambda: compile_cpu.content_id(scaled_and_sum.py_func, sig, ())
  before = ident()
  globals()["size"] = np.arange(3.0)
  try:
    assert ident() == before
    globals()["size"] = np.arange(4.0)
    assert ident() == before
  finally:
    del globals()["size"]


def test_nested_function_reading_a_closure_module_is_not_served_stale():
  cfg = types.ModuleType("jaxext_test_nested_cfg")
  cfg.K = 2.0
  sig = compile_cpu.Signature((("float64", 1),), (("float64", 1),), ())

  def make():
    def body(x, out):
      def scale(v):
        return cfg.K * v
      for i in range(x.shape[0]):
        out[i] = scale(x[i])
    return body

  body = make()
  before = compile_cpu.content_id(body, sig, ())
  cfg.K = 3.0
  assert compile_cpu.content_id(body, sig, ()) != before


def test_closure_module_attribute_changes_are_not_served_stale():
  cfg = types.ModuleType("jaxext_test_closure_cfg")
  cfg.K = 2.0

  def make():
    def body(x, out):
      for i in range(x.shape[0]):
        out[i] = cfg.K * x[i]
    return jaxext.numba_kernel(outputs=like)(body)

  k = make()
  np.testing.assert_array_equal(k(np.ones(2)), [2.0, 2.0])
  cfg.K = 5.0
  np.testing.assert_array_equal(k(np.ones(2)), [5.0, 5.0])


def test_content_id_covers_module_attributes_not_unrelated_ones():
  sig = compile_cpu.Signature((("float64", 1),), (("float64", 1),), ())
  ident = lambda: compile_cpu.content_id(scaled_by_module.py_func, sig, ())
  before = ident()
  try:
    kcfg.UNRELATED = 1.0  # not read by the kernel: same code, same id
    assert ident() == before
    kcfg.SCALE = 2.5
    assert ident() != before
  finally:
    del kcfg.UNRELATED
    kcfg.SCALE = 2.0
  assert ident() == before


def test_edited_module_files_are_not_served_stale_from_disk(tmp_path):
  """A fresh process after the user edited a module the kernel reads through an attribute:
  the on-disk cache must not serve the code compiled from the old file."""
  tmp = str(tmp_path)
  code = _KERNEL_SRC.replace("out[i] = 3 * x[i]", "out[i] = kcfg.SCALE * hlp.f(x[i])").replace(
      "import jaxext\n", "import jaxext\nsys.path.insert(0, os.getcwd())\nimport kcfg, hlp\n")
  code += "print('result', np.asarray(triple(np.arange(3.0))).tolist())\n"
  helper = "import numba\n@numba.njit\ndef f(v):\n    return {}\n"
  versions = [("SCALE = 2.0\n", helper.format("v + 1.0"), [2.0, 4.0, 6.0]),
              ("SCALE = 3.0\n", helper.format("v + 1.0"), [3.0, 6.0, 9.0]),
              ("SCALE = 3.0\n", helper.format("v * v"), [0.0, 3.0, 12.0])]
  for cfg_src, hlp_src, expected in versions:
    for name, src in (("kcfg.py", cfg_src), ("hlp.py", hlp_src)):
      with open(os.path.join(tmp, name), "w") as f:
        f.write(src)
    r = _run(code, tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"result {expected}" in r.stdout, (cfg_src, hlp_src, r.stdout)


def test_damaged_wrapper_file_in_the_cache_is_rewritten(tmp_path):
  tmp = str(tmp_path)
  code = _KERNEL_SRC + "print('result', np.asarray(triple(np.arange(3.0))).tolist())\n"
  assert _run(code, tmp).returncode == 0
  wrappers = [os.path.join(tmp, "numba", n) for n in os.listdir(os.path.join(tmp, "numba"))
              if n.startswith("jaxext_numba_entry_") and n.endswith(".py")]
  assert wrappers
  for w in wrappers:
    with open(w, "w") as f:
      f.write("def jaxext_entry(:\n")  # e.g. a crash mid-write
  r = _run(code, tmp)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "result [0.0, 3.0, 6.0]" in r.stdout


def test_jaxext_imports_without_numba(tmp_path):
  code = textwrap.dedent("""
      import sys
      sys.modules["numba"] = None  # as if not installed
      import jax, jaxext
      print(float(jaxext.kepler(1.0, 0.5)[0]) > 0)
      try:
          jaxext.numba_kernel(outputs=lambda x: x)
      except ImportError as e:
          print("ImportError:", e)
  """)
  r = _run(code, str(tmp_path))
  assert r.returncode == 0, r.stderr
  assert "True" in r.stdout and "pip install 'jaxext[numba]'" in r.stdout
