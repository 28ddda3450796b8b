"""Numba compilation of jaxext.ode's user functions into the native signatures of ode_cpu.h.

    right-hand side  void entry(T t, T* y, T* p, T* dydt, int32* status)
    Jacobian         void entry(T t, T* y, T* p, T* dfdy, T* dfdp, int32* status)
    event            T entry(T t, T* y, T* p, int32* status)

The state and parameter sizes are compile-time constants of the generated wrapper (one compilation
per dtype and sizes: Numba can unroll the user's loops over them). An exception inside the user's
function sets `status`; the handler turns it into a Python exception. Content ids, the disk cache
and the wrapper modules are the Numba bridge's (jaxext/numba_bridge/compile_cpu.py).
"""

from __future__ import annotations

import numpy as np

from jaxext import _ffi
from jaxext.numba_bridge import compile_cpu

try:
  from numba import types as nbtypes
except ImportError as err:  # pragma: no cover
  raise ImportError("jaxext.ode's Python right-hand sides need Numba: "
                    "pip install 'jaxext[numba]'") from err

_NB = {"float32": nbtypes.float32, "float64": nbtypes.float64}


def _register(entry) -> int:
  _ffi.register_native_function(entry.kernel_id, entry.address)
  return entry.kernel_id


def compile_rhs(fn, name: str, dtype, n: int, p: int, boundscheck: bool = False) -> int:
  """The content id of `fn(t, y, p, dydt)` compiled for (dtype, n, p), registered for the CPU."""
  dt = np.dtype(dtype).name
  t = _NB[dt]
  ptr = nbtypes.CPointer(t)
  source = "\n".join([
      "def jaxext_entry(t, y, p, dydt, status):",
      "    try:",
      f"        returns_nothing(kernel(t, readonly(carray(y, ({n},), DTYPE_{dt})),",
      f"               readonly(carray(p, ({p},), DTYPE_{dt})), carray(dydt, ({n},), DTYPE_{dt})))",
      "    except Exception:",
      "        status[0] = 1",
      ""])
  entry = compile_cpu.compile_entry(
      fn, name, key=("ode-rhs", dt, n, p), source=source, boundscheck=boundscheck,
      entry_type=nbtypes.void(t, ptr, ptr, ptr, nbtypes.CPointer(nbtypes.int32)),
      what=f"jaxext.ode right-hand side '{name}'",
      describe=f"rhs(t: {dt}, y: {dt}[{n}], p: {dt}[{p}], dydt: {dt}[{n}])")
  return _register(entry)


def compile_jacobian(fn, name: str, dtype, n: int, p: int, boundscheck: bool = False) -> int:
  """The content id of `fn(t, y, p, dfdy, dfdp)` (Jacobians of a right-hand side) for (dtype, n, p)."""
  dt = np.dtype(dtype).name
  t = _NB[dt]
  ptr = nbtypes.CPointer(t)
  source = "\n".join([
      "def jaxext_entry(t, y, p, dfdy, dfdp, status):",
      "    try:",
      f"        returns_nothing(kernel(t, readonly(carray(y, ({n},), DTYPE_{dt})),",
      f"               readonly(carray(p, ({p},), DTYPE_{dt})),",
      f"               carray(dfdy, ({n}, {n}), DTYPE_{dt}),",
      f"               carray(dfdp, ({n}, {p}), DTYPE_{dt})))",
      "    except Exception:",
      "        status[0] = 1",
      ""])
  entry = compile_cpu.compile_entry(
      fn, name, key=("ode-jacobian", dt, n, p), source=source, boundscheck=boundscheck,
      entry_type=nbtypes.void(t, ptr, ptr, ptr, ptr, nbtypes.CPointer(nbtypes.int32)),
      what=f"jaxext.ode Jacobian of '{name}'",
      describe=f"jacobian(t: {dt}, y: {dt}[{n}], p: {dt}[{p}], dfdy: {dt}[{n},{n}], "
               f"dfdp: {dt}[{n},{p}])")
  return _register(entry)


def compile_event(fn, name: str, dtype, n: int, p: int, boundscheck: bool = False) -> int:
  """The content id of the event `fn(t, y, p) -> float` compiled for (dtype, n, p)."""
  dt = np.dtype(dtype).name
  t = _NB[dt]
  ptr = nbtypes.CPointer(t)
  source = "\n".join([
      "def jaxext_entry(t, y, p, status):",
      "    g = DTYPE_ZERO",
      "    try:",
      f"        g = DTYPE_ZERO + kernel(t, readonly(carray(y, ({n},), DTYPE_{dt})), "
      f"readonly(carray(p, ({p},), DTYPE_{dt})))",
      "    except Exception:",
      "        status[0] = 1",
      "    return g",
      ""])
  entry = compile_cpu.compile_entry(
      fn, name, key=("ode-event", dt, n, p), source=source, boundscheck=boundscheck,
      entry_type=t(t, ptr, ptr, nbtypes.CPointer(nbtypes.int32)),
      env={"DTYPE_ZERO": np.dtype(dt).type(0)},
      what=f"jaxext.ode event '{name}'",
      describe=f"event(t: {dt}, y: {dt}[{n}], p: {dt}[{p}]) -> {dt}")
  return _register(entry)
