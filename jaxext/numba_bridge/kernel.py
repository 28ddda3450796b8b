"""`jaxext.numba_kernel`: a Numba-compatible Python function as a JAX operation.

    @jaxext.numba_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
                         vmap="elementwise")
    def axpy(x, y, out, alpha):          # inputs, then outputs (written in place), then parameters
        for i in range(x.shape[0]):
            out[i] = alpha * x[i] + y[i]

    z = jax.jit(axpy)(x, y, alpha=2.0)

One primitive, `numba_call_p`, serves every kernel. Its parameters hold the kernel, the static
scalar parameters (passed to the handler as FFI attributes: not compiled into the code, so a new
value does not recompile), the unbatched output types, and the batching state. Lowering compiles
the kernel for the operand dtypes and ranks (compile_cpu.py) and registers its entry point by
content id with the C++ handler, which then calls it with no Python involved.

vmap, declared per kernel:
* "sequential": the handler loops over the batch natively, calling the kernel once per batch
  slice; always correct, also for kernels that couple elements (a per-row prefix sum). Nested
  vmap and unmapped operands cost no copies (each operand's batch axes are described by a mask).
* "elementwise": the batch is folded into the operands' first axis (one call on a longer array);
  for kernels whose every index of the first axis is independent and whose operands and outputs
  share that axis. Operands of rank 0, or batches below another vmap, fall back to "sequential".

Derivatives come from the user: `@kernel.defjvp` (jax.custom_jvp) or `@kernel.defvjp`
(jax.custom_vjp); without one, differentiating raises an error that says so.
"""

from __future__ import annotations

import functools
import inspect
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive

from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext.numba_bridge import compile_cpu

__all__ = ["NumbaKernel", "numba_call_p", "numba_kernel"]

_VMAP_MODES = ("sequential", "elementwise")
_TARGET = "jaxext_numba_call"

numba_call_p = Primitive("jaxext_numba_call")
numba_call_p.multiple_results = True


def numba_kernel(outputs, *, vmap="sequential", name=None, boundscheck=False):
  """Decorator: turns a Numba-compatible function into a JAX operation (see the module docstring).

  Args:
    outputs: callable (inputs...) -> a jax.ShapeDtypeStruct or a tuple of them, the outputs'
      shapes and dtypes; called at trace time with the (possibly traced) inputs, and with the
      parameters it names as keyword arguments (all of them if it takes **kwargs).
    vmap: "sequential" (default) or "elementwise".
    name: used in error messages (default: the function's name).
    boundscheck: compile with Numba's bounds checking (an out-of-range index then raises, and
      the call fails with an error, instead of reading or writing arbitrary memory).

  The function takes the inputs (read them only), then the outputs (write every element: they are
  not initialised), then the parameters. Supported dtypes: float32, float64, int32, int64, bool;
  any rank. Parameters are Python or NumPy scalars given by keyword at the call; floats reach the
  kernel as float64, ints and bools as int64.
  """
  if vmap not in _VMAP_MODES:
    raise ValueError(f"vmap must be one of {_VMAP_MODES}; got {vmap!r}")
  if not callable(outputs):
    raise TypeError("outputs must be a callable returning jax.ShapeDtypeStruct(s)")

  def wrap(fn):
    return NumbaKernel(fn, outputs, vmap=vmap, name=name, boundscheck=boundscheck)

  return wrap


class NumbaKernel:
  """A Numba kernel as a JAX operation; call it like a function of its inputs."""

  def __init__(self, fn, outputs, *, vmap, name, boundscheck):
    py_func = getattr(fn, "py_func", fn)
    if not callable(py_func):
      raise TypeError(f"numba_kernel needs a function; got {type(fn).__name__}")
    self.py_func = py_func
    self.name = name or getattr(py_func, "__name__", "kernel")
    self.outputs = outputs
    self.vmap = vmap
    self.boundscheck = boundscheck
    self._jvp = None
    self._vjp = None
    self._diff_fns = {}
    self._lock = threading.Lock()
    self._parameters = inspect.signature(py_func).parameters
    self._arg_names = list(self._parameters)
    # Parameters that `outputs` accepts by name (all of them with **kwargs) are passed to it.
    out_sig = inspect.signature(outputs).parameters.values()
    self._outputs_params = _Everything() if any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in out_sig) else {p.name for p in out_sig}
    functools.update_wrapper(self, py_func)

  def __repr__(self):
    return f"<jaxext.numba_kernel {self.name}>"

  # -- derivatives ------------------------------------------------------------------------------
  def defjvp(self, jvp):
    """`jvp(primals, tangents, **params) -> (primal_outputs, tangent_outputs)` (tuples)."""
    self._jvp, self._vjp = jvp, None
    self._diff_fns.clear()
    return jvp

  def defvjp(self, fwd, bwd):
    """`fwd(*inputs, **params) -> (outputs, residuals)`; `bwd(residuals, cotangents, **params)`
    -> one cotangent per input (tuples)."""
    self._jvp, self._vjp = None, (fwd, bwd)
    self._diff_fns.clear()
    return fwd

  # -- calling ----------------------------------------------------------------------------------
  def __call__(self, *args, **params):
    args = tuple(self._operand(x, i) for i, x in enumerate(args))
    single, outs = self._output_types(args, params)
    n_ops = len(args) + len(outs)
    param_names = self._arg_names[n_ops:]
    if len(self._arg_names) < n_ops:
      raise TypeError(f"jaxext.numba_kernel '{self.name}' takes {len(self._arg_names)} arrays "
                      f"but was given {len(args)} inputs and declares {len(outs)} outputs")
    items = self._params(param_names, params)
    results = self._call(args, items, outs)
    return results[0] if single else tuple(results)

  def _operand(self, x, i):
    label = self._arg_names[i] if i < len(self._arg_names) else f"#{i}"
    try:
      arr = jnp.asarray(x)
    except TypeError as err:
      raise TypeError(f"jaxext.numba_kernel '{self.name}': input {label} is not an array "
                      f"({type(x).__name__})") from err
    if np.dtype(arr.dtype).name not in compile_cpu.DTYPES:
      raise TypeError(f"jaxext.numba_kernel '{self.name}': input {label} has dtype {arr.dtype}; "
                      f"supported: {', '.join(compile_cpu.DTYPES)}")
    return arr

  def _output_types(self, args, params):
    spec = self.outputs(*args, **{k: v for k, v in params.items() if k in self._outputs_params})
    single = isinstance(spec, jax.ShapeDtypeStruct)
    specs = (spec,) if single else spec
    if not isinstance(specs, (tuple, list)) or not specs or not all(
        isinstance(s, jax.ShapeDtypeStruct) for s in specs):
      raise TypeError(f"jaxext.numba_kernel '{self.name}': outputs= must return a "
                      f"jax.ShapeDtypeStruct or a non-empty tuple of them; got {spec!r}")
    avals = []
    for k, s in enumerate(specs):
      if np.dtype(s.dtype).name not in compile_cpu.DTYPES:
        raise TypeError(f"jaxext.numba_kernel '{self.name}': output {k} has dtype {s.dtype}; "
                        f"supported: {', '.join(compile_cpu.DTYPES)}")
      if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in s.shape):
        raise TypeError(f"jaxext.numba_kernel '{self.name}': output {k} has shape {s.shape}; "
                        "need non-negative static integers")
      avals.append(jax.core.ShapedArray(tuple(int(d) for d in s.shape), np.dtype(s.dtype)))
    return single, tuple(avals)

  def _params(self, names, params):
    sig = self._parameters
    unknown = sorted(set(params) - set(names))
    if unknown:
      raise TypeError(f"jaxext.numba_kernel '{self.name}': unexpected parameter(s) {unknown}; "
                      f"its parameters are {names}")
    items = []
    for n in names:
      if n in params:
        v = params[n]
      elif sig[n].default is not inspect.Parameter.empty:
        v = sig[n].default
      else:
        raise TypeError(f"jaxext.numba_kernel '{self.name}': missing parameter {n!r}")
      if isinstance(v, (bool, np.bool_, int, np.integer)):
        v = int(v)
      elif isinstance(v, (float, np.floating)):
        v = float(v)
      else:
        raise TypeError(f"jaxext.numba_kernel '{self.name}': parameter {n!r} must be a Python or "
                        f"NumPy int, float or bool (static); got {type(v).__name__}")
      items.append((n, v))
    return tuple(items)

  def _call(self, args, items, outs):
    if self._jvp is None and self._vjp is None:
      return _bind(self, args, items, outs)
    key = (items, outs)
    with self._lock:
      fn = self._diff_fns.get(key)
      if fn is None:
        fn = self._diff_fns[key] = self._make_differentiable(items, outs)
    return fn(*args)

  def _make_differentiable(self, items, outs):
    params = dict(items)
    call = lambda *a: tuple(_bind(self, a, items, outs))
    if self._jvp is not None:
      user_jvp = self._jvp
      fn = jax.custom_jvp(call)

      def rule(primals, tangents):
        out, tan = user_jvp(tuple(primals), tuple(tangents), **params)
        return _as_tuple(out), _as_tuple(tan)

      fn.defjvp(rule)
      return fn
    fwd, bwd = self._vjp
    fn = jax.custom_vjp(call)
    fn.defvjp(lambda *a: (lambda o, r: (_as_tuple(o), r))(*fwd(*a, **params)),
              lambda res, cts: tuple(bwd(res, cts, **params)))
    return fn

  # -- compilation --------------------------------------------------------------------------------
  def entry(self, signature):
    return compile_cpu.compile_cpu(self.py_func, self.name, signature, boundscheck=self.boundscheck)


class _Everything:
  def __contains__(self, _):
    return True


def _as_tuple(x):
  return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _signature(in_avals, bmasks, out_avals, items):
  n_in = len(in_avals)
  args = tuple((np.dtype(a.dtype).name, a.ndim - bin(m).count("1"))
               for a, m in zip(in_avals, bmasks[:n_in]))
  results = tuple((np.dtype(a.dtype).name, a.ndim) for a in out_avals)
  params = tuple("f" if isinstance(v, float) else "i" for _, v in items)
  return compile_cpu.Signature(args, results, params)


def _bind(kernel, args, items, outs):
  # Compile at trace time: a kernel Numba cannot type fails here, naming kernel and signature.
  in_avals = tuple(jax.core.ShapedArray(jnp.shape(a), a.dtype) for a in args)
  kernel.entry(_signature(in_avals, (0,) * (len(args) + len(outs)), outs, items))
  return numba_call_p.bind(*args, kernel=kernel, items=items, outs=outs, nbatch=0,
                           bmasks=(0,) * (len(args) + len(outs)))


def _batch_shape(avals, bmasks, nbatch):
  sizes = [None] * nbatch
  for a, m in zip(avals, bmasks):
    k = 0
    for j in range(nbatch):
      if (m >> j) & 1:
        sizes[j] = a.shape[k]
        k += 1
  if any(s is None for s in sizes):
    raise TypeError("jaxext numba_call_p: a batch axis no operand carries")
  return tuple(sizes)


def _abstract_eval(*avals, kernel, items, outs, nbatch, bmasks):
  batch = _batch_shape(avals, bmasks, nbatch)
  return tuple(jax.core.ShapedArray(batch + o.shape, o.dtype) for o in outs)


numba_call_p.def_abstract_eval(_abstract_eval)


@functools.lru_cache(maxsize=None)
def _jitted_impl(kernel, items, outs, nbatch, bmasks):
  return jax.jit(functools.partial(numba_call_p.bind, kernel=kernel, items=items, outs=outs,
                                   nbatch=nbatch, bmasks=bmasks))


numba_call_p.def_impl(lambda *args, **p: _jitted_impl(**p)(*args))


def _lowering(ctx, *args, kernel, items, outs, nbatch, bmasks):
  if "cpu" not in _ffi.register_all():
    raise NotImplementedError("jaxext.numba_kernel: this build of jaxext has no CPU extension")
  entry = kernel.entry(_signature(ctx.avals_in, bmasks, outs, items))
  from jaxext.cpu import _cpu_ops
  _cpu_ops.register_numba_kernel(entry.kernel_id, entry.address)
  fparams = [v for _, v in items if isinstance(v, float)] or [0.0]
  iparams = [v for _, v in items if isinstance(v, int)] or [0]
  return jax.ffi.ffi_lowering(_TARGET)(
      ctx, *args, kernel_id=np.int64(entry.kernel_id), name=kernel.name,
      fparams=np.asarray(fparams, np.float64), iparams=np.asarray(iparams, np.int64),
      nbatch=np.int64(nbatch), bmasks=np.asarray(bmasks, np.int64),
      split=np.int64(kernel.vmap == "elementwise"))


compat.register_lowering(numba_call_p, _lowering, "cpu")


def _no_derivative(primals, tangents, *, kernel, **_):
  raise TypeError(f"jaxext.numba_kernel '{kernel.name}' has no derivative: define one with "
                  f"@{kernel.name}.defjvp or @{kernel.name}.defvjp")


compat.register_jvp(numba_call_p, _no_derivative)


def _batch(args, dims, *, kernel, items, outs, nbatch, bmasks):
  size = compat.batch_size(args, dims)
  n_in = len(args)
  if kernel.vmap == "elementwise" and nbatch == 0:
    folded = _fold(kernel, args, dims, size, items, outs)
    if folded is not None:
      return folded
  new_args, new_masks = [], []
  for x, d, m in zip(args, dims, bmasks[:n_in]):
    if compat.is_mapped(d):
      new_args.append(jnp.moveaxis(x, d, 0))
      new_masks.append((m << 1) | 1)
    else:
      new_args.append(x)
      new_masks.append(m << 1)
  all_axes = (1 << (nbatch + 1)) - 1
  new_masks += [all_axes] * len(outs)
  results = numba_call_p.bind(*new_args, kernel=kernel, items=items, outs=outs,
                              nbatch=nbatch + 1, bmasks=tuple(new_masks))
  return results, (0,) * len(results)


def _fold(kernel, args, dims, size, items, outs):
  """vmap="elementwise": one call on operands whose first axis absorbs the batch, or None."""
  fronted = [compat.batch_axis_to_front(x, d, size) for x, d in zip(args, dims)]
  if any(x.ndim < 2 for x in fronted) or any(o.ndim < 1 for o in outs):
    return None  # a rank-0 operand has no first axis to fold into
  if len({x.shape[1] for x in fronted} | {o.shape[0] for o in outs}) != 1:
    raise TypeError(f"jaxext.numba_kernel '{kernel.name}': vmap='elementwise' needs every input "
                    "and output to share its first axis; declare vmap='sequential' for this kernel")
  folded = tuple(x.reshape((size * x.shape[1],) + x.shape[2:]) for x in fronted)
  fouts = tuple(jax.core.ShapedArray((size * o.shape[0],) + o.shape[1:], o.dtype) for o in outs)
  results = _bind(kernel, folded, items, fouts)
  return [r.reshape((size,) + o.shape) for r, o in zip(results, outs)], (0,) * len(outs)


compat.register_batching(numba_call_p, _batch)
