"""A Python function compiled by Numba to a native entry point for the CPU.

This is the reusable layer of the bridge: `compile_cpu(fn, signature)` returns a `CpuEntry` whose
address is a C function XLA's handler (jaxext/cpu/numba_cpu.cc) calls with raw buffers, and whose
`kernel_id` names it by content. Kernels (`jaxext.numba_kernel`) are one user; the ODE integrator's
right-hand sides are meant to be another.

The entry point is a generated Numba `cfunc`

    void entry(void** data, int64* shapes, double* fparams, int64* iparams, int32* status)

that rebuilds each operand with `numba.carray` (shapes are run-time values: one compilation per
dtypes, ranks and parameter kinds serves every shape), calls the user's function, and reports an
exception through `status` (Numba cannot propagate exceptions out of a cfunc; it would print them
and return as if nothing happened).

Caching: the generated wrapper is written to a file named by its content id under the cache
directory (`JAXEXT_NUMBA_CACHE_DIR`, default `~/.cache/jaxext/numba`) and compiled with Numba's
`cache=True`, so a new process loads machine code from disk instead of compiling. An unwritable
cache directory only disables the disk cache.

The content id (63 bits of a SHA-256) covers the function's bytecode and constants, the values of
the simple globals it reads (numbers, strings, tuples, NumPy arrays), the functions and Numba
dispatchers it calls (recursively), what it reads through a module (`cfg.SCALE`, `helpers.f(x)`:
the attribute's value or code, as for a plain global), the signature, and the Numba and jaxext
versions. Numba freezes every global when it compiles; since the id covers them, a kernel whose
globals changed is compiled anew (and found anew on disk) instead of serving the old machine code,
and the Numba dispatchers it calls whose own globals or code changed are recompiled first (Numba
would otherwise link their old machine code). Two
processes that define the same kernel agree on its id, which is how an executable restored from
jax's compilation cache finds the kernel compiled in the new process.
"""

from __future__ import annotations

import dataclasses
import dis
import functools
import hashlib
import importlib.util
import os
import sys
import threading
import types as pytypes
import weakref
from typing import Any

import numpy as np

try:
  import numba
  import numba.core.imputils
  import numba.extending
  from numba import types as nbtypes
except ImportError as err:  # pragma: no cover - exercised by tests without numba
  raise ImportError(
      "jaxext.numba_kernel needs Numba: pip install 'jaxext[numba]' (numba>=0.68)") from err

from jaxext.version import __version__ as _jaxext_version


@numba.extending.intrinsic
def readonly(typingctx, arr):
  """The same array, typed read-only: a function writing into it fails to compile (no run-time
  cost; the array's data model does not depend on the flag). Inputs are the caller's jax arrays,
  which XLA may share with other values: a write would change them behind jax's back."""
  if not isinstance(arr, nbtypes.Array):
    return None
  sig = arr.copy(readonly=True)(arr)

  def codegen(context, builder, signature, args):
    return numba.core.imputils.impl_ret_borrowed(context, builder, signature.return_type, args[0])
  return sig, codegen


_RETURNS_A_VALUE = "jaxext: the function returns a value"


@numba.extending.intrinsic
def returns_nothing(typingctx, value):
  """Compiles only if `value` (what the user's function returned) is None: kernels and
  right-hand sides write their results into their output arrays, and a function that returns
  them instead would leave the outputs unwritten (dy/dt = 0) without an error."""
  if not isinstance(value, nbtypes.NoneType):
    raise numba.core.errors.TypingError(f"{_RETURNS_A_VALUE} ({value})")
  sig = nbtypes.none(value)

  def codegen(context, builder, signature, args):
    return context.get_dummy_value()
  return sig, codegen


class ConventionError(TypeError):
  """A user function breaks jaxext's calling convention (it writes an input or returns its
  result): wrong on every platform, unlike what only one compiler refuses."""


def explain(err: Exception) -> tuple[str, bool]:
  """Numba's error, with what jaxext's conventions add; and whether it breaks them."""
  text = str(err)
  if _RETURNS_A_VALUE in text:
    m = text[text.index(_RETURNS_A_VALUE):].split("\n")[0].rstrip(")")
    return (f"{m}): it must write its results into its output arrays (dydt, dfdy, out, ...) and "
            "return nothing; a returned value would be dropped"), True
  if "Cannot modify readonly array" in text:  # Numba's message for a write into one
    return text + ("\n(jaxext: inputs are read-only, as jax arrays are: write results into the "
                   "outputs, and copy an input first (x.copy()) to use it as scratch space)"), True
  return text, False

# dtype name -> NumPy dtype the kernel sees (XLA's PRED is one byte, as NumPy's bool_).
DTYPES = {name: np.dtype(name) for name in ("float32", "float64", "int32", "int64", "bool")}


@dataclasses.dataclass(frozen=True)
class Signature:
  """What one compilation serves: operand dtypes and ranks, and the kinds of the parameters."""
  args: tuple[tuple[str, int], ...]      # (dtype name, rank) per input
  results: tuple[tuple[str, int], ...]   # the same per output
  params: tuple[str, ...]                # "f" (float64) or "i" (int64) per parameter, in order

  def describe(self) -> str:
    fmt = lambda ops: ", ".join(f"{d}[{','.join(':' * r) if r else ''}]" for d, r in ops)
    params = ", ".join({"f": "float64", "i": "int64"}[k] for k in self.params)
    return f"({fmt(self.args)}) -> ({fmt(self.results)})" + (f" with ({params})" if params else "")


@dataclasses.dataclass(frozen=True)
class CpuEntry:
  kernel_id: int
  address: int
  signature: Signature
  cfunc: object  # keeps the compiled code alive


# Modules whose contents are identified by their name and version, not walked: the standard library
# and the numerical libraries a kernel calls into (their functions are Numba's builtins, not code a
# user edits between calls).
_VERSIONED_MODULES = frozenset(sys.stdlib_module_names) | {"numpy", "numba", "scipy"}


def _versioned(module) -> bool:
  name = getattr(module, "__name__", None)
  return isinstance(name, str) and name.partition(".")[0] in _VERSIONED_MODULES


class _Walk:
  """What one fingerprint has visited: function ids (cycles), and the Numba dispatchers it reached
  beneath the function fingerprinted (callees, whose own compiled code Numba reuses)."""

  def __init__(self):
    self.ids = set()
    self.dispatchers = []


def _fingerprint(obj, h, walk, top=True) -> None:
  """Feeds the content of a function (and what it depends on) into hash `h`."""
  if isinstance(obj, numba.core.dispatcher.Dispatcher) or isinstance(
      getattr(obj, "py_func", None), pytypes.FunctionType):  # also numba-cuda's dispatchers
    h.update(b"dispatcher")
    if not top and isinstance(obj, numba.core.dispatcher.Dispatcher):
      walk.dispatchers.append(obj)
    obj = obj.py_func
  if isinstance(obj, pytypes.FunctionType):
    if id(obj) in walk.ids:
      h.update(b"recursive")
      return
    walk.ids.add(id(obj))
    code = obj.__code__
    h.update(obj.__qualname__.encode())
    _code(code, h)
    names, chains = _reads(code)
    for name in sorted(names):  # the globals the code loads (not every name in co_names)
      if name in obj.__globals__:
        h.update(name.encode())
        _fingerprint_value(obj.__globals__[name], chains.get(("global", name), ()), h, walk)
    for var, cell in zip(code.co_freevars, obj.__closure__ or ()):
      try:
        value = cell.cell_contents
      except ValueError:  # empty cell
        h.update(b"empty-cell")
        continue
      _fingerprint_value(value, chains.get(("deref", var), ()), h, walk)
    if obj.__defaults__:
      _fingerprint(obj.__defaults__, h, walk, False)
  elif isinstance(obj, (bool, int, float, complex, str, bytes, type(None))):
    h.update(repr((type(obj).__name__, obj)).encode())
  elif isinstance(obj, (tuple, list)):
    h.update(f"seq{len(obj)}".encode())
    for x in obj:
      _fingerprint(x, h, walk, False)
  elif isinstance(obj, np.ndarray):
    h.update(repr((obj.dtype.str, obj.shape)).encode())
    h.update(np.ascontiguousarray(obj).tobytes())
  elif isinstance(obj, (np.generic, np.dtype)):
    h.update(repr(obj).encode())
  elif isinstance(obj, pytypes.ModuleType):
    h.update(b"module:" + str(getattr(obj, "__name__", "?")).encode())
    if _versioned(obj):
      h.update(repr(getattr(obj, "__version__", None)).encode())
  else:  # anything else Numba accepts as a global (e.g. a numba type) is identified by its repr
    try:
      text = repr(obj)
    except Exception:  # noqa: BLE001 - a repr that raises: identified by its type alone
      text = "<unrepresentable>"
    h.update(b"other:" + type(obj).__qualname__.encode() + text.encode())


def _fingerprint_value(value, chains, h, walk) -> None:
  """A global or closure variable, and for a module, the attributes the code reads through it
  (`cfg.SCALE`, `helpers.f`, `pkg.sub.g`): Numba freezes those at compile time, so their values
  and code are part of what the compiled kernel is."""
  _fingerprint(value, h, walk, False)
  if not isinstance(value, pytypes.ModuleType) or _versioned(value):
    return
  for chain in sorted(chains):
    obj: Any = value
    for depth, attr in enumerate(chain):
      try:
        obj = getattr(obj, attr, _MISSING)
      except Exception as err:  # noqa: BLE001 - a module __getattr__ that raises: so be it
        h.update(f"attr{depth}:{attr}:error:{type(err).__name__}".encode())
        break
      h.update(f"attr{depth}:{attr}".encode())
      if obj is _MISSING:
        h.update(b"missing")
        break
      if not isinstance(obj, pytypes.ModuleType) or _versioned(obj):
        _fingerprint(obj, h, walk, False)
        break
      h.update(b"module:" + str(getattr(obj, "__name__", "?")).encode())


_MISSING = object()
_GLOBAL_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS")


@functools.lru_cache(maxsize=4096)
def _reads(code) -> tuple[frozenset, dict]:
  """What the bytecode (nested code objects included) reads from outside: the global names it
  loads, and {(kind, name): {(attr, attr, ...), ...}}, the attribute chains it reads off each
  global and closure variable (`LOAD_GLOBAL cfg; LOAD_ATTR SCALE`)."""
  names: set = set()
  chains: dict = {}
  top_free = frozenset(code.co_freevars)

  def base_of(ins, top):
    if ins.opname in _GLOBAL_LOADS:
      names.add(ins.argval)
      return ("global", ins.argval)
    # A closure variable: the function's own, or (in nested code) one it passes on from its own.
    if ins.opname == "LOAD_DEREF" and (top or ins.argval in top_free):
      return ("deref", ins.argval)
    return None

  def walk(c, top):
    base, attrs = None, []

    def close():
      if base is not None and attrs:
        chains.setdefault(base, set()).add(tuple(attrs))

    for ins in dis.get_instructions(c):
      b = base_of(ins, top)
      if b is not None:
        close()
        base, attrs = b, []
      elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and base is not None:
        attrs.append(ins.argval)
      elif ins.opname not in ("CACHE", "EXTENDED_ARG", "NOP"):
        close()
        base, attrs = None, []
    close()
    for const in c.co_consts:
      if isinstance(const, pytypes.CodeType):
        walk(const, False)

  walk(code, True)
  return frozenset(names), {k: frozenset(v) for k, v in chains.items()}


def _code(code, h) -> None:
  h.update(code.co_code)
  h.update(repr(code.co_names).encode())
  h.update(repr(code.co_varnames).encode())
  for c in code.co_consts:
    if isinstance(c, pytypes.CodeType):
      _code(c, h)
    else:
      h.update(repr(c).encode())


def content_id(fn, signature: Signature | tuple, options: tuple) -> int:
  """A 63-bit id of `fn`'s code (with what it calls and reads), `signature` (a Signature or any
  repr-stable tuple naming the use) and `options`."""
  h = hashlib.sha256()
  h.update(f"jaxext {_jaxext_version} numba {numba.__version__} py {sys.version_info[:2]}".encode())
  _fingerprint(fn, h, _Walk())
  h.update(repr((signature, options)).encode())
  return int.from_bytes(h.digest()[:8], "little") & ((1 << 63) - 1)


# Numba dispatchers that compiled functions call, and the fingerprint of each when last compiled
# for: Numba reuses a callee's compiled code, in which its own globals are frozen.
_callee_prints: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _refresh_callees(fn) -> None:
  """Recompiles every Numba dispatcher `fn` reaches whose content (its code, or a global it
  reads) changed since jaxext last compiled something calling it, or, the first time jaxext meets
  it, that was already compiled (it may have been, before the change): so that a new compilation
  of `fn` does not link a callee's stale machine code."""
  walk = _Walk()
  _fingerprint(fn, hashlib.sha256(), walk)
  for d in walk.dispatchers:
    h = hashlib.sha256()
    _fingerprint(d, h, _Walk())
    now = h.digest()
    before = _callee_prints.get(d)
    if before != now and (before is not None or d.overloads):
      d.recompile()
    _callee_prints[d] = now


def _wrapper_source(signature: Signature) -> str:
  lines = ["def jaxext_entry(data, shapes, fparams, iparams, status):", "    try:"]
  pos = 0
  names = []
  for i, (dtype, rank) in enumerate(signature.args + signature.results):
    shape = "(" + "".join(f"shapes[{pos + k}], " for k in range(rank)) + ")"
    pos += rank
    array = f"carray(data[{i}], {shape}, DTYPE_{dtype})"
    if i < len(signature.args):
      array = f"readonly({array})"
    lines.append(f"        a{i} = {array}")
    names.append(f"a{i}")
  nf = ni = 0
  for kind in signature.params:
    if kind == "f":
      names.append(f"fparams[{nf}]")
      nf += 1
    else:
      names.append(f"iparams[{ni}]")
      ni += 1
  lines.append(f"        returns_nothing(kernel({', '.join(names)}))")
  lines.append("        status[0] = 0")
  lines.append("    except Exception:")
  lines.append("        status[0] = 1")
  return "\n".join(lines) + "\n"


_ENTRY_TYPE = nbtypes.void(nbtypes.CPointer(nbtypes.voidptr), nbtypes.CPointer(nbtypes.int64),
                           nbtypes.CPointer(nbtypes.float64), nbtypes.CPointer(nbtypes.int64),
                           nbtypes.CPointer(nbtypes.int32))

_lock = threading.Lock()
_entries: dict[int, CpuEntry] = {}


def cache_dir() -> str | None:
  path = os.environ.get("JAXEXT_NUMBA_CACHE_DIR") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
      "jaxext", "numba")
  try:
    os.makedirs(path, exist_ok=True)
  except OSError:
    return None
  return path if os.access(path, os.W_OK) else None


def _holds(path: str, source: str) -> bool:
  try:
    with open(path) as f:
      return f.read() == source
  except (OSError, UnicodeDecodeError):
    return False


def _load_wrapper_module(kernel_id: int, source: str, env: dict):
  """The wrapper as a module in a file of the cache directory (so Numba can cache it), or exec'd."""
  directory = cache_dir()
  name = f"jaxext_numba_entry_{kernel_id:016x}"
  if directory is not None:
    path = os.path.join(directory, name + ".py")
    try:
      if not _holds(path, source):  # absent, or damaged (a crash mid-write, an edit): rewritten
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
          f.write(source)
        os.replace(tmp, path)
      module = sys.modules.get(name)
      if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None  # a .py path always has both
        module = importlib.util.module_from_spec(spec)
        module.__dict__.update(env)
        spec.loader.exec_module(module)
        # Numba's disk cache finds the function's globals by module name when it loads.
        sys.modules[name] = module
      return module.jaxext_entry, True
    except OSError:
      pass
  namespace = dict(env)
  exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 - our own generated code
  return namespace["jaxext_entry"], False


def effective_boundscheck(requested):
  """What Numba compiles with: NUMBA_BOUNDSCHECK=0/1 overrides a function's own flag (Numba's
  rule); part of the content id, so that setting it never serves code compiled the other way."""
  forced = numba.config.BOUNDSCHECK
  return bool(requested) if forced is None else bool(forced)


def compile_cpu(fn, name: str, signature: Signature, *, boundscheck: bool = False) -> CpuEntry:
  """Compiles `fn` for `signature` (once per process; machine code cached on disk)."""
  return compile_entry(fn, name, key=signature, source=_wrapper_source(signature),
                       entry_type=_ENTRY_TYPE, boundscheck=boundscheck,
                       what=f"jaxext.numba_kernel '{name}'", describe=signature.describe())


def numba_options(fn) -> dict:
  """Numba options a function asks for through its `numba_options` attribute (jaxext's generated
  code asks for error_model="numpy": IEEE division by zero, as jax computes, where Numba's
  default raises ZeroDivisionError)."""
  return dict(getattr(fn, "numba_options", None) or {})


def compile_entry(fn, name: str, *, key, source: str, entry_type, env=None,
                  boundscheck: bool = False, what: str, describe: str) -> CpuEntry:
  """Compiles `fn` behind a generated cfunc wrapper (`source` defines `jaxext_entry`, which calls
  the user's function as `kernel`) of Numba type `entry_type`. `key` (any repr-able value) is what
  the compilation depends on beside `fn`; `env` adds globals to the wrapper's module. Once per
  process and content id; machine code cached on disk. Other users: jaxext.ode's right-hand sides.
  """
  boundscheck = effective_boundscheck(boundscheck)
  py_func = fn.py_func if isinstance(fn, numba.core.dispatcher.Dispatcher) else fn
  extra = numba_options(py_func)
  options = (("boundscheck", boundscheck), ("entry", source)) + tuple(sorted(extra.items()))
  kernel_id = content_id(fn, key, options)
  with _lock:
    entry = _entries.get(kernel_id)
    if entry is not None:
      return entry
    _refresh_callees(py_func)
    kernel = numba.njit(nogil=True, boundscheck=boundscheck, **extra)(py_func)
    module_env = {"carray": numba.carray, "kernel": kernel, "readonly": readonly,
                  "returns_nothing": returns_nothing}
    module_env.update({f"DTYPE_{k}": v for k, v in DTYPES.items()})
    module_env.update(env or {})
    wrapper, in_file = _load_wrapper_module(kernel_id, source, module_env)
    try:
      cf = numba.cfunc(entry_type, nopython=True, cache=in_file)(wrapper)
    except numba.core.errors.NumbaError as err:
      text, breaks_convention = explain(err)
      raise (ConventionError if breaks_convention else TypeError)(
          f"{what}: Numba cannot compile it for {describe}:\n{text}") from None
    entry = CpuEntry(kernel_id=kernel_id, address=cf.address, signature=key, cfunc=cf)
    _entries[kernel_id] = entry
    return entry
