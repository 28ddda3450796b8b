"""Numba compilation of jaxext.ode's user functions into the native signatures of ode_cpu.h.

    right-hand side  void entry(T t, T* y, T* p, T* dydt, int32* status)
      its lanes form void entry(T* t, T* y, T* p, T* dydt, int32* status)   (LANES trajectories)
    Jacobian         void entry(T t, T* y, T* p, T* dfdy, T* dfdp, int32* status)
    event            T entry(T t, T* y, T* p, int32* status)

The lanes form evaluates LANES trajectories in one call, each array lane-major (element i of lane l
at [i * LANES + l]; status one flag per lane): the CPU handler integrates LANES trajectories side by
side, their stage sums and error norms as SIMD vectors, and calls it once per stage for all of
them (jaxext/cpu/ode_cpu_internal.h). The user's function sees each lane's y, p and dydt as strided
views; LLVM may vectorise it across the lanes where it has no calls.

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


# Trajectories per call of a right-hand side's lanes form: kLanes of ode_cpu_internal.h.
LANES = 8
# The largest state the lanes take (dop853.h's kMaxLaneRowsState); larger ones are integrated one
# trajectory per call.
MAX_LANE_STATE = 64


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
  kernel_id = _register(entry)
  if 0 < n <= MAX_LANE_STATE and kernel_id not in _no_lanes:
    lanes_source = "\n".join([
        "def jaxext_entry(t, y, p, dydt, status):",
        f"    tl = carray(t, ({LANES},), DTYPE_{dt})",
        f"    ys = readonly(carray(y, ({n}, {LANES}), DTYPE_{dt}))",
        f"    ps = readonly(carray(p, ({p}, {LANES}), DTYPE_{dt}))",
        f"    fs = carray(dydt, ({n}, {LANES}), DTYPE_{dt})",
        f"    for lane in range({LANES}):",
        "        try:",
        "            returns_nothing(kernel(tl[lane], ys[:, lane], ps[:, lane], fs[:, lane]))",
        "        except Exception:",
        "            status[lane] = 1",
        ""])
    try:
      lanes = compile_cpu.compile_entry(
          fn, name, key=("ode-rhs-lanes", dt, n, p, LANES), source=lanes_source,
          boundscheck=boundscheck,
          entry_type=nbtypes.void(ptr, ptr, ptr, ptr, nbtypes.CPointer(nbtypes.int32)),
          what=f"jaxext.ode right-hand side '{name}' (its lanes form)",
          describe=f"rhs(t: {dt}, y: {dt}[{n}] (strided), p: {dt}[{p}] (strided), "
                   f"dydt: {dt}[{n}] (strided))")
    except (TypeError, ValueError):
      # A Numba function that needs contiguous arrays (e.g. y.reshape): one trajectory per
      # call, as before (the scalar form compiled above).
      _no_lanes.add(kernel_id)
    else:
      _ffi.register_native_function(kernel_id, lanes.address, lanes=True)
  return kernel_id


_no_lanes: set[int] = set()  # right-hand sides whose lanes form Numba could not compile


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
