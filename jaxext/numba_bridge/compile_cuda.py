"""A Python function compiled by numba-cuda to a PTX kernel, for XLA's CUDA handler.

The CUDA half of the bridge's reusable layer (compile_cpu.py is the CPU half):
`compile_cuda(fn, name, signature, cc=...)` returns a `CudaEntry` holding the PTX of `fn` compiled
as a kernel taking the signature's arrays (C-contiguous) and scalar parameters, the kernel's
mangled entry name, and a content id. No GPU is needed: numba-cuda compiles through NVVM (it
loads libnvvm and libnvrtc; a CUDA toolkit found through `CUDA_HOME`, or NVIDIA's wheels, such as
`pip install 'numba-cuda[cu13]'`).

The handler (jaxext/cuda/numba_cuda.cc) passes each array as Numba's CUDA target expects it
(jaxext/common/numba_array_abi.h: meminfo, parent, nitems, itemsize, data, shape, strides), and
each parameter as a float64 or int64. Every compiled kernel's PTX is checked against that layout
here, at trace time, so a numba-cuda whose ABI differs fails with an error instead of a fault.

PTX is cached on disk next to the CPU cache (`JAXEXT_NUMBA_CACHE_DIR`), named by content id.

`compile_device_function` is the other half of this layer: a device function (not a kernel)
with Numba's calling convention under a fixed symbol, which jaxext's own CUDA code calls once the
driver has linked the two (jaxext.ode's right-hand sides).

Functions decorated with `numba.cuda.jit(device=True)` and called from a kernel compile without
a GPU too: numba-cuda 0.30 asks the current device for its compute capability when it compiles
such a callee; while jaxext compiles, it is told the target's (`_compiling_for`).

Limits (of loading PTX outside Numba's runtime): kernels run without Numba's module setup
(`cuda.random` states, `print`, and linked files are unsupported); exceptions raised in a kernel
are not reported (as in numba.cuda without debug=True): signal errors through an output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import re
import threading
import warnings

import numpy as np

from jaxext.numba_bridge import compile_cpu
from jaxext.numba_bridge.compile_cpu import DTYPES, Signature


@contextlib.contextmanager
def _numpy_for_numba_cuda():
  """numba-cuda 0.30.x registers an overload for np.row_stack when its typing registries load
  (at import or at the first compilation), and NumPy 2.5 removed np.row_stack. An alias that
  exists only while numba-cuda imports or compiles lets it load; NumPy is left as it was."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    added = not hasattr(np, "row_stack")
    if added:
      np.row_stack = np.vstack
    try:
      yield
    finally:
      if added:
        del np.row_stack


@contextlib.contextmanager
def _compiling_for(cc: tuple[int, int]):
  """numba-cuda 0.30 compiles a device function called from the function being compiled for
  `get_current_device().compute_capability`, which needs a CUDA driver (and may not be the
  target). While jaxext compiles (under `_lock`), that lookup answers the target's capability.
  The lookup is module-global: another thread compiling with numba.cuda at that moment would see
  the target's capability too."""
  from numba.cuda import dispatcher

  class _Target:
    compute_capability = tuple(cc)

  original = getattr(dispatcher, "get_current_device", None)
  if original is None:  # a numba-cuda without the lookup: nothing to redirect
    yield
    return
  dispatcher.get_current_device = _Target
  try:
    yield
  finally:
    dispatcher.get_current_device = original


def target_cc() -> tuple[int, int]:
  """The compute capability device code is compiled for: the lowest among this process's CUDA
  devices, `JAXEXT_NUMBA_CUDA_CC=X.Y` if set, else 9.0 (no CUDA device here, e.g. when exporting
  for CUDA from a CPU host)."""
  forced = os.environ.get("JAXEXT_NUMBA_CUDA_CC")
  if forced:
    try:
      major, minor = (int(x) for x in forced.split("."))
    except ValueError:
      raise ValueError(f"JAXEXT_NUMBA_CUDA_CC must look like 9.0; got {forced!r}") from None
    return major, minor
  import jax
  try:
    devices = jax.devices("cuda")
  except RuntimeError:  # no CUDA backend in this process
    devices = []
  ccs = []
  for d in devices:
    cc = getattr(d, "compute_capability", None)
    if cc:
      major, minor = (int(x) for x in str(cc).split(".")[:2])
      ccs.append((major, minor))
  return min(ccs) if ccs else (9, 0)


_NEEDS_NUMBA_CUDA = ("compiling Python functions for CUDA (jaxext.numba_cuda_kernel, jaxext.ode's "
                     "right-hand sides on CUDA) needs numba-cuda: pip install "
                     "'jaxext[numba-cuda]' (numba-cuda>=0.30.4)")


def _import_numba_cuda():
  # Numba still ships a deprecated numba.cuda of its own, which imports without numba-cuda and
  # then fails asking for a conda package: ask for numba-cuda's own module instead.
  if importlib.util.find_spec("numba_cuda") is None:
    raise ImportError(_NEEDS_NUMBA_CUDA + "; it is not installed")
  try:
    with _numpy_for_numba_cuda():
      from numba import cuda
      from numba.cuda import compiler  # noqa: F401 - fails here if numba-cuda is broken
  except ImportError as err:
    raise ImportError(_NEEDS_NUMBA_CUDA) from err
  except Exception as err:  # noqa: BLE001 - numba-cuda loads CUDA libraries as it imports
    # e.g. numba-cuda without its [cu13] extra, on a machine without the CUDA toolkit (exporting
    # for CUDA from a CPU host): cuda.pathfinder's DynamicLibNotFoundError for libcudart
    raise ImportError(f"{_NEEDS_NUMBA_CUDA}, with the CUDA libraries it loads (its [cu13] extra, "
                      f"or a CUDA toolkit); importing it failed: {err}") from err
  return cuda


@dataclasses.dataclass(frozen=True)
class CudaEntry:
  kernel_id: int
  ptx: str
  entry: str
  signature: Signature
  cc: tuple[int, int]


def param_layout(signature: Signature) -> list[str]:
  """The PTX parameter types a kernel of `signature` must declare (numba_array_abi.h)."""
  layout = []
  for _, rank in signature.args + signature.results:
    layout += [".u64"] * (5 + 2 * rank)
  layout += [".f64" if k == "f" else ".u64" for k in signature.params]
  return layout


_ENTRY = re.compile(r"\.visible\s+\.entry\s+([\w$]+)\s*\(([^)]*)\)", re.S)


def parse_entry(ptx: str) -> tuple[str, list[str]]:
  """(entry name, parameter types) of the one kernel in `ptx`."""
  found = _ENTRY.findall(ptx)
  if len(found) != 1:
    raise ValueError(f"expected one .entry in the PTX; found {len(found)}")
  name, params = found[0]
  types = [p.split()[1] for p in params.split(",") if p.strip()]
  return name, types


def _numba_types(signature: Signature):
  from numba import types as nbtypes
  scalar = {"float32": nbtypes.float32, "float64": nbtypes.float64, "int32": nbtypes.int32,
            "int64": nbtypes.int64, "bool": nbtypes.boolean}
  # Inputs read-only, as on the CPU (compile_cpu.readonly): writing one fails to compile.
  arrays = [nbtypes.Array(scalar[d], r, "C", readonly=True) for d, r in signature.args]
  arrays += [nbtypes.Array(scalar[d], r, "C") for d, r in signature.results]
  params = [nbtypes.float64 if k == "f" else nbtypes.int64 for k in signature.params]
  return tuple(arrays + params)


_lock = threading.Lock()
_entries: dict[int, CudaEntry] = {}


def _numba_cuda_version() -> str:
  try:
    from importlib.metadata import version
    return version("numba-cuda")
  except Exception:  # noqa: BLE001 - a source checkout: the module is what it is
    return "unknown"


def compile_cuda(fn, name: str, signature: Signature, *, cc: tuple[int, int],
                 fastmath: bool = False, lineinfo: bool = False) -> CudaEntry:
  """Compiles `fn` as a CUDA kernel for `signature` and compute capability `cc` (PTX)."""
  for d, _ in signature.args + signature.results:
    if d not in DTYPES:
      raise TypeError(f"jaxext.numba_cuda_kernel '{name}': unsupported dtype {d}")
  options = (("cuda", tuple(cc)), ("fastmath", bool(fastmath)), ("lineinfo", bool(lineinfo)),
             ("numba-cuda", _numba_cuda_version()))
  py_func = getattr(fn, "py_func", fn)
  kernel_id = compile_cpu.content_id(py_func, signature, options)
  with _lock:
    entry = _entries.get(kernel_id)
    if entry is not None:
      return entry
    ptx = _read_cache(kernel_id)
    if ptx is None:
      cuda = _import_numba_cuda()
      try:
        with _numpy_for_numba_cuda(), _compiling_for(cc):
          ptx, _ = cuda.compile(py_func, _numba_types(signature), device=False, abi="numba",
                                output="ptx", cc=tuple(cc), fastmath=fastmath,
                                lineinfo=lineinfo)
      except Exception as err:  # noqa: BLE001 - Numba raises many kinds; all mean "cannot compile"
        raise TypeError(
            f"jaxext.numba_cuda_kernel '{name}': numba-cuda cannot compile it for "
            f"{signature.describe()} (compute capability {cc[0]}.{cc[1]}):\n{err}") from None
      _write_cache(kernel_id, ptx)
    entry_name, types = parse_entry(ptx)
    expected = param_layout(signature)
    if types != expected:
      raise TypeError(
          f"jaxext.numba_cuda_kernel '{name}': the compiled kernel takes parameters {types}; "
          f"jaxext passes {expected} (Numba's CUDA array ABI; is this numba-cuda supported?)")
    entry = CudaEntry(kernel_id=kernel_id, ptx=ptx, entry=entry_name, signature=signature,
                      cc=(cc[0], cc[1]))
    _entries[kernel_id] = entry
    return entry


_FUNC = re.compile(r"\.visible\s+\.func\s+\(\s*\.param\s+(\.\w+)\s+\w+\s*\)\s*([\w$]+)\s*"
                   r"\(([^)]*)\)", re.S)


def parse_function(ptx: str) -> tuple[str, str, list[str]]:
  """(name, return type, parameter types) of the one visible device function in `ptx`."""
  found = _FUNC.findall(ptx)
  if len(found) != 1:
    raise ValueError(f"expected one visible .func in the PTX; found {len(found)}")
  ret, name, params = found[0]
  return name, ret, [p.split()[1] for p in params.split(",") if p.strip()]


_device_functions: dict = {}  # content id -> DeviceFunction, this process's


@dataclasses.dataclass(frozen=True)
class DeviceFunction:
  content_id: int
  ptx: str      # defines `symbol` (visible), Numba's calling convention
  symbol: str


def device_source(fn):
  """The Python function numba-cuda compiles for `fn`: its `for_cuda()` variant where it has one
  (jaxext's generated code, whose helpers differ per target), else the function itself."""
  variant = getattr(fn, "for_cuda", None)
  return variant() if variant is not None else getattr(fn, "py_func", fn)


def compile_device_function(source: str, callees: dict, types, *, symbol: str,
                            layout: tuple[str, list[str]], cc: tuple[int, int], key,
                            env: dict | None = None, what: str,
                            describe: str) -> DeviceFunction:
  """Compiles `source` (defining `jaxext_entry`, which calls the Python functions `callees`
  {name: function} by name) as a CUDA device function of Numba type `types` for compute
  capability `cc`, with Numba's calling convention

      int32 symbol(R* result, args...)   (0, or non-zero when the Python code raised)

  and returns its PTX with the function renamed `symbol`. `layout` is the (return type, parameter
  types) the PTX must declare: a numba-cuda whose convention differs fails here. `key` is what the
  compilation depends on beside the callees; `env` adds globals to the wrapper. Once per content
  id; the PTX is cached on disk."""
  options = (("cuda", tuple(cc)), ("source", source), ("symbol", symbol), ("types", str(types)),
             ("layout", repr(layout)), ("env", repr(sorted((env or {}).items()))),
             ("numba-cuda", _numba_cuda_version()))
  fns = tuple(getattr(f, "py_func", f) for f in callees.values())
  content = compile_cpu.content_id(fns, key, options)
  with _lock:
    if content in _device_functions:
      return _device_functions[content]
    ptx = _read_cache(content)
    if ptx is None:
      cuda = _import_numba_cuda()
      from numba.cuda.np.numpy_support import carray
      module_env = {"carray": carray}
      module_env.update(env or {})
      try:
        module_env.update({name: cuda.jit(device=True)(device_source(f))
                           for name, f in callees.items()})
        exec(compile(source, f"<jaxext {what}>", "exec"), module_env)  # noqa: S102 - ours
        with _numpy_for_numba_cuda(), _compiling_for(cc):
          ptx, _ = cuda.compile(module_env["jaxext_entry"], types, device=True, abi="numba",
                                output="ptx", cc=tuple(cc))
      except Exception as err:  # noqa: BLE001 - Numba raises many kinds; all mean "cannot compile"
        raise TypeError(f"{what}: numba-cuda cannot compile it for {describe} (compute "
                        f"capability {cc[0]}.{cc[1]}; numba-cuda finds the CUDA toolkit through "
                        f"CUDA_HOME or NVIDIA's wheels: pip install 'numba-cuda[cu13]'):\n"
                        f"{type(err).__name__}: {err}") from None
      name, ret, params = parse_function(ptx)
      if (ret, params) != (layout[0], list(layout[1])):
        raise TypeError(f"{what}: the compiled device function returns {ret} and takes {params}; "
                        f"jaxext calls it as returning {layout[0]} and taking {list(layout[1])} "
                        "(Numba's CUDA calling convention; is this numba-cuda supported?)")
      ptx = re.sub(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", symbol, ptx)
      ptx = ptx.replace(name + "_param_", symbol + "_param_")
      _write_cache(content, ptx)
    function = DeviceFunction(content_id=content, ptx=ptx, symbol=symbol)
    _device_functions[content] = function
    return function


_COMPLETE = "\n// jaxext-complete\n"


def _cache_path(kernel_id: int) -> str | None:
  directory = compile_cpu.cache_dir()
  return None if directory is None else os.path.join(directory,
                                                     f"jaxext_numba_cuda_{kernel_id:016x}.ptx")


def _read_cache(kernel_id: int) -> str | None:
  path = _cache_path(kernel_id)
  if path is None:
    return None
  try:
    with open(path) as f:
      ptx = f.read()
  except OSError:
    return None
  # A partial or foreign file is ignored (recompiled and rewritten).
  return ptx[:-len(_COMPLETE)] if ptx.endswith(_COMPLETE) else None


def _write_cache(kernel_id: int, ptx: str) -> None:
  path = _cache_path(kernel_id)
  if path is None:
    return
  try:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
      f.write(ptx + _COMPLETE)
    os.replace(tmp, path)
  except OSError:
    pass


def module_id(entry: CudaEntry) -> int:
  """The handler's module cache key: a hash of exactly what it loads."""
  h = hashlib.sha256(entry.ptx.encode())
  h.update(entry.entry.encode())
  return int.from_bytes(h.digest()[:8], "little") & ((1 << 63) - 1)
