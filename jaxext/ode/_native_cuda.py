"""numba-cuda compilation of jaxext.ode's user functions for the CUDA integrator.

All of one run's Python functions (right-hand side, its Jacobian, the event functions) become one
device function with Numba's calling convention (jaxext/cuda/ode_user_kernels.h):

    int32 jaxext_ode_user(T* result, int32 op, T t, T* y, T* p, T* out, T* out2)

    op 0      rhs(t, y, p, dydt)              dydt = out (n)
    op 1      jacobian(t, y, p, dfdy, dfdp)   dfdy = out (n, n), dfdp = out2 (n, np)
    op 2 + e  *result = events[e](t, y, p)

The state and parameter sizes are compile-time constants of the generated wrapper, as on the CPU
(jaxext/ode/_native.py). The handler links this PTX with the integrator's kernels at run time. An
exception raised by the user's function returns non-zero, and the trajectory ends with status
CALLBACK_FAILED (a GPU cannot raise into Python).
"""

from __future__ import annotations

import numpy as np

from jaxext.numba_bridge import compile_cuda

SYMBOL = "jaxext_ode_user"


def compile_user(rhs, events, dtype, n: int, p: int) -> compile_cuda.DeviceFunction:
  """The PTX of `rhs` (a jaxext.ode.Rhs) and the Python functions among `events` for (dtype, n, p).

  rhs.fn must be set: a run with a built-in model has no user right-hand side to link."""
  from numba import types as nbtypes
  dt = np.dtype(dtype).name
  t = {"float32": nbtypes.float32, "float64": nbtypes.float64}[dt]
  ptr = nbtypes.CPointer(t)
  callees = {"rhs": rhs.fn}
  lines = ["def jaxext_entry(op, t, y, p, out, out2):",
           f"    yv = carray(y, ({n},))",
           f"    pv = carray(p, ({p},))",
           "    if op == 0:",
           f"        rhs(t, yv, pv, carray(out, ({n},)))"]
  if rhs.jacobian is not None:
    callees["jacobian"] = rhs.jacobian
    lines += ["    elif op == 1:",
              f"        jacobian(t, yv, pv, carray(out, ({n}, {n})), carray(out2, ({n}, {p})))"]
  for e, event in enumerate(events):
    if event.fn is not None:
      callees[f"event_{e}"] = event.fn
      lines += [f"    elif op == {2 + e}:", f"        return ZERO + event_{e}(t, yv, pv)"]
  lines.append("    return ZERO")
  width = ".b32" if dt == "float32" else ".b64"
  return compile_cuda.compile_device_function(
      "\n".join(lines) + "\n", callees, t(nbtypes.int32, t, ptr, ptr, ptr, ptr),
      symbol=SYMBOL, layout=(".b32", [".b64", ".b32", width, ".b64", ".b64", ".b64", ".b64"]),
      cc=compile_cuda.target_cc(), key=("ode-user", dt, n, p), env={"ZERO": np.dtype(dt).type(0)},
      what=f"jaxext.ode right-hand side '{rhs.name}' (CUDA)",
      describe=f"rhs(t: {dt}, y: {dt}[{n}], p: {dt}[{p}], dydt: {dt}[{n}]) and its events")
