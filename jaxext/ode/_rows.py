"""jaxext.ode's Python functions evaluated on rows of states, as JAX operations.

Derivatives through events (dop853's JVP) need, at each event's time t_e and state y_e, the
right-hand side f(t_e, y_e, p) and the event's gradient (dg/dt, dg/dy, dg/dp). For Python
functions these come from the same Python code the integrator calls, compiled by Numba into a
kernel over the rows: on the CPU a `jaxext.numba_kernel` looping over them, on CUDA a
`jaxext.numba_cuda_kernel` with one thread per row calling the function as a numba-cuda device
function (both disk-cached and named by content, so a re-created function reuses its
compilation). Which one runs is decided when the computation is lowered for its platform (the
primitive `jaxext_ode_rows` below lowers to one or the other), so a CPU-only process never
compiles for CUDA. Both are elementwise over the rows, so that under sharding each device
evaluates its own trajectories' rows. Rows whose time is NaN (event slots never filled,
trajectories not stopped by an event) are skipped and give zeros: the functions only ever see
states the integrator produced.
"""

from __future__ import annotations

import functools

import jax
import numba

from jaxext import _eager
from jaxext import _jax_compat as compat
from jaxext.numba_bridge import compile_cpu
from jaxext.numba_bridge import compile_cuda
from jaxext.numba_bridge import numba_cuda_kernel
from jaxext.numba_bridge import numba_kernel


def _rhs_shape(t, y, p):
  return jax.ShapeDtypeStruct(y.shape, y.dtype)


def _gradient_shapes(t, y, p):
  return (jax.ShapeDtypeStruct(t.shape, t.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype),
          jax.ShapeDtypeStruct(p.shape, p.dtype))


@functools.lru_cache(maxsize=64)
def _rhs_rows(fn, name, boundscheck=False):
  fn = getattr(fn, "py_func", fn)
  user = numba.njit(boundscheck=boundscheck, **compile_cpu.numba_options(fn))(fn)

  def rhs_rows(t, y, p, dydt):
    for i in range(t.shape[0]):
      dydt[i, :] = 0
      if t[i] == t[i]:
        user(t[i], y[i], p[i], dydt[i])

  return numba_kernel(outputs=_rhs_shape, vmap="elementwise", boundscheck=boundscheck,
                      name=f"jaxext.ode right-hand side '{name}' at events")(rhs_rows)


@functools.lru_cache(maxsize=64)
def _gradient_rows(fn, name, boundscheck=False):
  fn = getattr(fn, "py_func", fn)
  user = numba.njit(boundscheck=boundscheck, **compile_cpu.numba_options(fn))(fn)

  def gradient_rows(t, y, p, dgdt, dgdy, dgdp):
    for i in range(t.shape[0]):
      dgdy[i, :] = 0
      dgdp[i, :] = 0
      dgdt[i] = 0
      if t[i] == t[i]:
        dgdt[i] = user(t[i], y[i], p[i], dgdy[i], dgdp[i])

  return numba_kernel(outputs=_gradient_shapes, vmap="elementwise", boundscheck=boundscheck,
                      name=f"jaxext.ode gradient of the event '{name}'")(gradient_rows)


_BLOCK = 64  # CUDA threads per block, one row each


def _row_blocks(t, y, p):
  return -(-t.shape[0] // _BLOCK)


@functools.lru_cache(maxsize=64)
def _rhs_rows_cuda(fn, name, boundscheck=False):  # numba-cuda has no bounds checking
  from numba import cuda
  user = cuda.jit(device=True)(compile_cuda.device_source(fn))

  def rhs_rows(t, y, p, dydt):
    i = cuda.grid(1)
    if i < t.shape[0]:
      for k in range(dydt.shape[1]):
        dydt[i, k] = 0
      if t[i] == t[i]:
        user(t[i], y[i], p[i], dydt[i])

  return numba_cuda_kernel(outputs=_rhs_shape, block=_BLOCK, vmap="elementwise",
                           grid=_row_blocks,
                           name=f"jaxext.ode right-hand side '{name}' at events")(rhs_rows)


@functools.lru_cache(maxsize=64)
def _gradient_rows_cuda(fn, name, boundscheck=False):
  from numba import cuda
  user = cuda.jit(device=True)(compile_cuda.device_source(fn))

  def gradient_rows(t, y, p, dgdt, dgdy, dgdp):
    i = cuda.grid(1)
    if i < t.shape[0]:
      for k in range(dgdy.shape[1]):
        dgdy[i, k] = 0
      for k in range(dgdp.shape[1]):
        dgdp[i, k] = 0
      dgdt[i] = 0
      if t[i] == t[i]:
        dgdt[i] = user(t[i], y[i], p[i], dgdy[i], dgdp[i])

  return numba_cuda_kernel(outputs=_gradient_shapes, block=_BLOCK, vmap="elementwise",
                           grid=_row_blocks,
                           name=f"jaxext.ode gradient of the event '{name}'")(gradient_rows)


_KERNELS = {"cpu": {"rhs": _rhs_rows, "gradient": _gradient_rows},
            "cuda": {"rhs": _rhs_rows_cuda, "gradient": _gradient_rows_cuda}}

# rows_p(t (M,), y (M, d), p (M, q); fn, name, kind, boundscheck): kind "rhs" -> (f (M, d),),
# "gradient" -> (dg/dt (M,), dg/dy (M, d), dg/dp (M, q)). Lowered per platform to the Numba
# kernel for it.
rows_p = compat.Primitive("jaxext_ode_rows")
rows_p.multiple_results = True


def _abstract_eval(t, y, p, *, fn, name, kind, boundscheck):
  specs = (_rhs_shape if kind == "rhs" else _gradient_shapes)(t, y, p)
  specs = specs if isinstance(specs, tuple) else (specs,)
  return tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in specs)


def _on(platform):
  def impl(t, y, p, *, fn, name, kind, boundscheck):
    out = _KERNELS[platform][kind](fn, name, boundscheck)(t, y, p)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)
  return impl


def _batch(args, dims, *, fn, name, kind, boundscheck):
  """vmap: the rows of every batch element are rows too (the kernels treat each alone)."""
  size = compat.batch_size(args, dims)
  t, y, p = (compat.batch_axis_to_front(x, d, size) for x, d in zip(args, dims))
  m = t.shape[1]
  flat = lambda x: x.reshape((size * m,) + x.shape[2:])
  outs = rows_p.bind(flat(t), flat(y), flat(p), fn=fn, name=name, kind=kind,
                     boundscheck=boundscheck)
  return [o.reshape((size, m) + o.shape[1:]) for o in outs], [0] * len(outs)


rows_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(rows_p)
for _platform in ("cpu", "cuda"):  # partitioned: the kernels' own lowering splits the rows
  compat.register_lowering(rows_p, compat.lower_fun(_on(_platform), multiple_results=True),
                           _platform, partitioned=True)
compat.register_batching(rows_p, _batch)


def _jvp(primals, tangents, **params):
  # The rows are coefficients of dop853's first derivatives: differentiating them again is a
  # second derivative of the solution.
  raise NotImplementedError("jaxext.ode.dop853: second derivatives are not available")


compat.register_jvp(rows_p, _jvp)


def _rows(fn, name, kind, t, y, p, boundscheck):
  t, y, p = (jax.numpy.asarray(x) for x in (t, y, p))
  return rows_p.bind(t, y, p, fn=fn, name=name, kind=kind, boundscheck=bool(boundscheck))


def rhs(fn, name, t, y, p, *, boundscheck=False):
  """f(t, y, p) of the Python right-hand side `fn` on rows: t (M,), y (M, d), p (M, q) -> (M, d);
  zeros where t is NaN."""
  return _rows(fn, name, "rhs", t, y, p, boundscheck)[0]


def event_gradient(fn, name, t, y, p, *, boundscheck=False):
  """The Python event gradient `fn(t, y, p, dgdy, dgdp) -> dg/dt` on rows: (dg/dt (M,),
  dg/dy (M, d), dg/dp (M, q)); zeros where t is NaN."""
  return tuple(_rows(fn, name, "gradient", t, y, p, boundscheck))
