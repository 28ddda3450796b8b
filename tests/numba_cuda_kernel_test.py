"""Tests of jaxext.numba_cuda_kernel that need no GPU (run with --config=cuda, which provides the
pinned toolkit's libnvvm/libnvrtc for numba-cuda and its ptxas):

* kernels of every dtype, ranks 0 to 3 and both parameter kinds compile to PTX whose entry takes
  exactly the parameters the handler passes (Numba's CUDA array ABI), and that PTX assembles for
  sm_90 with ptxas;
* lowering for CUDA (through jax.export, as from a CPU host) emits the handler's custom call
  with the kernel's PTX and the launch configuration, for plain calls, both vmap modes (nested,
  in_axes other than 0, unmapped operands), fixed and callable grids, and derivatives;
* errors: a kernel numba-cuda cannot compile, bad launch configurations, a CUDA kernel placed on
  the CPU, a CPU kernel lowered for CUDA;
* the PTX disk cache.

Execution is checked on a GPU by tools/gpu_checks.py.
"""

import os
import re
import subprocess
import tempfile

os.environ.setdefault("JAXEXT_NUMBA_CACHE_DIR",
                      os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "numba"))
_NVCC = os.path.abspath(os.environ["JAXEXT_TEST_NVCC"])
os.environ["CUDA_HOME"] = os.path.dirname(os.path.dirname(_NVCC))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from numba import cuda  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from jaxext.numba_bridge import compile_cuda  # noqa: E402
from jaxext.numba_bridge.compile_cpu import Signature  # noqa: E402

like = lambda x, *_, **__: jax.ShapeDtypeStruct(jnp.shape(x), x.dtype)


@jaxext.numba_cuda_kernel(outputs=like, vmap="elementwise")
def axpy(x, y, out, alpha):
  i = cuda.grid(1)
  if i < x.shape[0]:
    out[i] = alpha * x[i] + y[i]


@axpy.defjvp
def _axpy_jvp(primals, tangents, alpha):
  x, y = primals
  dx, dy = tangents
  return axpy(x, y, alpha=alpha), alpha * dx + dy


@jaxext.numba_cuda_kernel(outputs=like, vmap="sequential", block=1, grid=1)
def prefix_sum(x, out):  # row-coupled: one thread walks the row
  acc = x.dtype.type(0) if False else x[0] * 0
  for i in range(x.shape[0]):
    acc += x[i]
    out[i] = acc


def _export(fn, *specs):
  exported = jax.export.export(
      jax.jit(fn), platforms=("cuda",),
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("jaxext_numba_cuda_call")])(*specs)
  return exported.mlir_module()


def _calls(text):
  """The jaxext_numba_cuda_call custom calls of a StableHLO module, as {attribute: value}:
  arrays as lists, integers as ints, strings as str."""
  calls = []
  for m in re.finditer(r"stablehlo\.custom_call @jaxext_numba_cuda_call\(.*", text):
    attrs = {}
    pattern = r'(\w+) = (dense<[^>]*> : tensor<[^>]*>|-?\d+ : i64|"(?:[^"\\]|\\.)*")'
    for key, value in re.findall(pattern, m.group(0)):
      if value.startswith("dense<"):
        body, n = re.match(r"dense<\[?([^\]>]*)\]?> : tensor<(\d+)x", value).groups()
        vals = [float(v) if "." in v or "e" in v else int(v) for v in body.split(",")]
        attrs[key] = vals * int(n) if len(vals) == 1 else vals  # a splat: one value for all
      elif value.startswith('"'):
        attrs[key] = value[1:-1]
      else:
        attrs[key] = int(value.split(":")[0])
    calls.append(attrs)
  return calls


# -- compilation --------------------------------------------------------------------------------

def _ptxas(ptx, tmp_path):
  ptxas = os.path.join(os.path.dirname(_NVCC), "ptxas")
  src = tmp_path / "k.ptx"
  src.write_text(ptx)
  res = subprocess.run([ptxas, "-arch=sm_90", str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
  assert res.returncode == 0, res.stderr


def _copy0(x, out, scale, shift):
  out[()] = x[()]


def _copy1(x, out, scale, shift):
  i = cuda.grid(1)
  if i < x.shape[0]:
    out[i] = x[i]


def _copy2(x, out, scale, shift):
  i = cuda.grid(1)
  if i < x.size:
    a, b = i // x.shape[1], i % x.shape[1]
    out[a, b] = x[a, b]


def _copy3(x, out, scale, shift):
  i = cuda.grid(1)
  if i < x.size:
    a, r = i // (x.shape[1] * x.shape[2]), i % (x.shape[1] * x.shape[2])
    out[a, r // x.shape[2], r % x.shape[2]] = x[a, r // x.shape[2], r % x.shape[2]]


_COPIES = [_copy0, _copy1, _copy2, _copy3]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_every_dtype_and_rank_compiles_to_the_handlers_abi(dtype, rank, tmp_path):
  copy = _COPIES[rank]
  sig = Signature(((dtype, rank),), ((dtype, rank),), ("f", "i"))
  entry = compile_cuda.compile_cuda(copy, "copy", sig, cc=(9, 0))
  name, types = compile_cuda.parse_entry(entry.ptx)
  assert name == entry.entry
  # Two arrays of 5 + 2 * rank 8-byte parameters each (numba_array_abi.h), then f64 and i64.
  assert types == [".u64"] * (2 * (5 + 2 * rank)) + [".f64", ".u64"]
  _ptxas(entry.ptx, tmp_path)


def test_layout_mismatch_is_refused():
  sig = Signature((("float64", 1),), (("float64", 1),), ())
  assert compile_cuda.param_layout(sig) == [".u64"] * 14
  ptx = ".visible .entry k(\n .param .u64 a,\n .param .f64 b\n)\n{ ret; }"
  assert compile_cuda.parse_entry(ptx) == ("k", [".u64", ".f64"])
  with pytest.raises(ValueError, match="one .entry"):
    compile_cuda.parse_entry(ptx + ptx)


def test_compile_error_names_kernel_and_signature():
  @jaxext.numba_cuda_kernel(outputs=like)
  def broken(x, out):
    out[0] = undefined_name  # noqa: F821
  with pytest.raises(TypeError, match=r"numba_cuda_kernel 'broken'.*float64\[:\]"):
    broken(jnp.ones(3))


def test_ptx_disk_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("JAXEXT_NUMBA_CACHE_DIR", str(tmp_path))

  def twice(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
      out[i] = 2 * x[i]
  sig = Signature((("float32", 1),), (("float32", 1),), ())
  first = compile_cuda.compile_cuda(twice, "twice", sig, cc=(9, 0))
  files = [f for f in os.listdir(tmp_path) if f.endswith(".ptx")]
  assert files == [f"jaxext_numba_cuda_{first.kernel_id:016x}.ptx"]
  # A new process (simulated: memory cache cleared) reads the file instead of compiling.
  monkeypatch.setattr(compile_cuda, "_entries", {})
  monkeypatch.setattr(compile_cuda, "_import_numba_cuda", lambda: pytest.fail("recompiled"))
  again = compile_cuda.compile_cuda(twice, "twice", sig, cc=(9, 0))
  assert again.ptx == first.ptx and again.entry == first.entry
  # A truncated file is not trusted: compiled again, and the file rewritten whole.
  (tmp_path / files[0]).write_text(first.ptx[:100])
  monkeypatch.undo()
  monkeypatch.setenv("JAXEXT_NUMBA_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(compile_cuda, "_entries", {})
  third = compile_cuda.compile_cuda(twice, "twice", sig, cc=(9, 0))
  assert compile_cuda.parse_entry(third.ptx)[1] == compile_cuda.param_layout(sig)
  assert compile_cuda._read_cache(first.kernel_id) == third.ptx


def test_kernels_calling_device_functions_compile_without_a_gpu(tmp_path):
  # numba-cuda 0.30 asks the current device for a callee's compute capability; jaxext answers
  # with the target's (compile_cuda._compiling_for), so no driver is needed.
  twice = cuda.jit(device=True)(lambda v: 2.0 * v)

  def scale(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
      out[i] = twice(x[i])
  sig = Signature((("float64", 1),), (("float64", 1),), ())
  entry = compile_cuda.compile_cuda(scale, "scale", sig, cc=(9, 0))
  assert compile_cuda.parse_entry(entry.ptx)[1] == compile_cuda.param_layout(sig)
  _ptxas(entry.ptx, tmp_path)
  from numba.cuda import dispatcher
  assert not isinstance(dispatcher.get_current_device, type)  # restored afterwards


def test_content_id_tracks_device_functions():
  from jaxext.numba_bridge import compile_cpu

  def make(dev):
    def k(x, out):
      i = cuda.grid(1)
      if i < x.shape[0]:
        out[i] = dev(x[i])
    return k

  def ident(dev):
    sig = Signature((("float64", 1),), (("float64", 1),), ())
    return compile_cpu.content_id(make(dev), sig, ())

  f1 = cuda.jit(device=True)(lambda v: v + 1.0)
  f2 = cuda.jit(device=True)(lambda v: v + 2.0)
  f1_again = cuda.jit(device=True)(lambda v: v + 1.0)
  assert ident(f1) != ident(f2)
  assert ident(f1) == ident(f1_again)


# -- lowering -----------------------------------------------------------------------------------

def test_lowering_carries_ptx_and_launch():
  x = jax.ShapeDtypeStruct((1000,), jnp.float32)
  (call,) = _calls(_export(lambda a, b: axpy(a, b, alpha=2.5), x, x))
  assert call["grid"] == [4, 1, 1]  # ceil(1000 / 256)
  assert call["block"] == [256, 1, 1]
  assert call["nbatch"] == 0
  assert ".entry" in call["ptx"] and call["entry"] in call["ptx"]
  assert call["name"] == "axpy" and call["shared_mem"] == 0
  assert call["fparams"] == [2.5] and call["pkinds"] == [0] and call["bmasks"] == [0, 0, 0]


def test_vmap_elementwise_folds_and_regrids():
  x = jax.ShapeDtypeStruct((7, 300), jnp.float64)
  (call,) = _calls(_export(jax.vmap(lambda a, b: axpy(a, b, alpha=1.0)), x, x))
  assert call["nbatch"] == 0
  assert call["grid"] == [-(-2100 // 256), 1, 1]  # the folded 2100 elements


def test_vmap_sequential_loops_natively_with_batch_masks():
  x = jax.ShapeDtypeStruct((5, 3, 40), jnp.float64)
  (call,) = _calls(_export(jax.vmap(jax.vmap(prefix_sum)), x))
  assert call["nbatch"] == 2
  assert call["bmasks"] == [3, 3]
  assert call["grid"] == [1, 1, 1] and call["block"] == [1, 1, 1]
  # in_axes=1 and an unmapped operand
  y = jax.ShapeDtypeStruct((40, 30), jnp.float64)
  z = jax.ShapeDtypeStruct((40,), jnp.float64)
  (call,) = _calls(_export(jax.vmap(lambda a, b: axpy(a, b, alpha=1.0), in_axes=(1, None)), y, z))
  assert call["nbatch"] == 0 and call["grid"] == [-(-1200 // 256), 1, 1]  # folded: 30 x 40


def test_fixed_grid_is_never_folded():
  @jaxext.numba_cuda_kernel(outputs=like, vmap="elementwise", grid=2, block=64)
  def scale(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
      out[i] = 3 * x[i]
  x = jax.ShapeDtypeStruct((4, 128), jnp.float32)
  (call,) = _calls(_export(jax.vmap(scale), x))
  assert call["nbatch"] == 1 and call["grid"] == [2, 1, 1]


def test_grid_callable_sees_one_batch_slice_and_parameters():
  seen = []

  def grid(x, *, tile):
    seen.append((x.shape, tile))
    return (-(-x.shape[0] // tile), -(-x.shape[1] // tile))

  @jaxext.numba_cuda_kernel(outputs=like, grid=grid, block=(16, 16))
  def add_tile(x, out, tile):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
      out[i, j] = x[i, j] + tile

  x = jax.ShapeDtypeStruct((3, 100, 40), jnp.float32)
  (call,) = _calls(_export(jax.vmap(lambda a: add_tile(a, tile=16)), x))
  assert call["grid"] == [7, 3, 1] and call["block"] == [16, 16, 1]
  assert ((100, 40), 16) in seen and call["pkinds"] == [1]


def test_jvp_and_grad_lower():
  x = jax.ShapeDtypeStruct((64,), jnp.float64)
  text = _export(jax.value_and_grad(lambda a, b: axpy(a, b, alpha=3.0).sum()), x, x)
  # the primal kernel once; the tangent is the user's jnp expression (3.0 * dx + dy)
  assert len(_calls(text)) == 1 and "3.000000e+00" in text


# -- errors -------------------------------------------------------------------------------------

def test_bad_launch_configurations():
  with pytest.raises(ValueError, match="1024"):
    jaxext.numba_cuda_kernel(outputs=like, block=(64, 32))
  with pytest.raises(ValueError, match="block"):
    jaxext.numba_cuda_kernel(outputs=like, block=0)
  with pytest.raises(ValueError, match="grid"):
    jaxext.numba_cuda_kernel(outputs=like, grid=(1, 1, 1, 1))
  with pytest.raises(ValueError, match="shared_mem"):
    jaxext.numba_cuda_kernel(outputs=like, shared_mem=-1)

  @jaxext.numba_cuda_kernel(outputs=like, grid=lambda x: "many")
  def k(x, out):
    out[0] = x[0]
  with pytest.raises(ValueError, match="grid callable returned 'many'"):
    k(jnp.ones(4))


def test_cuda_kernel_on_cpu_says_so():
  with pytest.raises(NotImplementedError, match="runs on CUDA devices.*numba_kernel"):
    jax.jit(lambda a, b: axpy(a, b, alpha=1.0))(jnp.ones(4), jnp.ones(4))


def test_cpu_kernel_lowered_for_cuda_says_so():
  @jaxext.numba_kernel(outputs=like)
  def cpu_double(x, out):
    for i in range(x.shape[0]):
      out[i] = 2 * x[i]
  with pytest.raises(NotImplementedError, match="CPU kernel.*numba_cuda_kernel"):
    _export(cpu_double, jax.ShapeDtypeStruct((4,), jnp.float32))


def test_handler_registered_for_cuda():
  from jaxext import _ffi
  assert "jaxext_numba_cuda_call" in _ffi.register_all().get("CUDA", ())
  # the CUDA extension's targets are the declared ones (what a process without them lowers
  # for, and jaxext.disabled_checks() names), one for one
  assert set(_ffi.register_all()["CUDA"]) == set(_ffi.declared_targets("cuda"))
