"""jaxext.ode's Python functions evaluated on rows of states, as JAX operations.

Derivatives through events (dop853's JVP) need, at each event's time t_e and state y_e, the
right-hand side f(t_e, y_e, p) and the event's gradient (dg/dt, dg/dy, dg/dp). For Python
functions these come from the same Numba-compiled code the integrator calls, wrapped as
`jaxext.numba_kernel`s that loop over rows (the Numba bridge: disk-cached, named by content, so a
re-created function reuses its compilation). Rows whose time is NaN (event slots never filled,
trajectories not stopped by an event) are skipped and give zeros: the functions only ever see
states the integrator produced. CPU only (dop853's CUDA lowering refuses these derivatives first).
"""

from __future__ import annotations

import functools

import jax
import numba

from jaxext.numba_bridge import numba_kernel


@functools.lru_cache(maxsize=64)
def _rhs_rows(fn, name):
  user = numba.njit(getattr(fn, "py_func", fn))

  def rhs_rows(t, y, p, dydt):
    for i in range(t.shape[0]):
      dydt[i, :] = 0
      if t[i] == t[i]:
        user(t[i], y[i], p[i], dydt[i])

  return numba_kernel(outputs=lambda t, y, p: jax.ShapeDtypeStruct(y.shape, y.dtype),
                      vmap="elementwise", name=f"jaxext.ode right-hand side '{name}' at events")(
                          rhs_rows)


@functools.lru_cache(maxsize=64)
def _gradient_rows(fn, name):
  user = numba.njit(getattr(fn, "py_func", fn))

  def gradient_rows(t, y, p, dgdt, dgdy, dgdp):
    for i in range(t.shape[0]):
      dgdy[i, :] = 0
      dgdp[i, :] = 0
      dgdt[i] = 0
      if t[i] == t[i]:
        dgdt[i] = user(t[i], y[i], p[i], dgdy[i], dgdp[i])

  def outputs(t, y, p):
    return (jax.ShapeDtypeStruct(t.shape, t.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype),
            jax.ShapeDtypeStruct(p.shape, p.dtype))

  return numba_kernel(outputs=outputs, vmap="elementwise",
                      name=f"jaxext.ode gradient of the event '{name}'")(gradient_rows)


def rhs(fn, name, t, y, p):
  """f(t, y, p) of the Python right-hand side `fn` on rows: t (M,), y (M, d), p (M, q) -> (M, d);
  zeros where t is NaN."""
  return _rhs_rows(fn, name)(t, y, p)


def event_gradient(fn, name, t, y, p):
  """The Python event gradient `fn(t, y, p, dgdy, dgdp) -> dg/dt` on rows: (dg/dt (M,),
  dg/dy (M, d), dg/dp (M, q)); zeros where t is NaN."""
  return _gradient_rows(fn, name)(t, y, p)
