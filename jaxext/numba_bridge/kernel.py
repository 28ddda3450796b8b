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

CUDA: `jaxext.numba_cuda_kernel` takes a numba.cuda kernel body (indexing with `cuda.grid`), with
the same arguments, outputs, parameters, vmap modes and derivatives. It is compiled to PTX at
trace time (compile_cuda.py; no GPU needed) and the PTX is carried in the custom call, which the
C++ handler (jaxext/cuda/numba_cuda.cc) loads once per CUDA context and launches on XLA's stream;
"sequential" vmap is one launch per batch slice, issued natively. The launch: `block` threads per
block (default 256) and `grid` blocks, by default enough one-dimensional blocks to give one
thread per element of the largest output; `grid` may be a callable of the inputs (per batch slice,
as `jax.ShapeDtypeStruct`s) and the parameters, for kernels that index differently.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext.numba_bridge import compile_cpu

__all__ = ["NumbaKernel", "numba_call_p", "numba_cuda_kernel", "numba_kernel"]

_VMAP_MODES = ("sequential", "elementwise")
VmapMode = Literal["sequential", "elementwise"]
# `outputs`: (inputs..., parameters by keyword) -> the outputs' shapes and dtypes.
OutputsFn = Callable[..., jax.ShapeDtypeStruct | tuple[jax.ShapeDtypeStruct, ...]]
# `grid`: blocks per launch, or a function of the inputs' shapes and the parameters giving them.
GridSpec = int | tuple[int, ...] | Callable[..., int | tuple[int, ...]]
_TARGET = "jaxext_numba_call"
_CUDA_TARGET = "jaxext_numba_cuda_call"

numba_call_p = compat.Primitive("jaxext_numba_call")
numba_call_p.multiple_results = True


# Arguments (arrays and parameters) of a kernel: CPython >= 3.12 compiles a call with more than 30
# positional arguments into LIST_TO_TUPLE + CALL_FUNCTION_EX, which Numba does not support (the
# generated wrapper calls the kernel with all of them).
_MAX_ARGS = 30


def numba_kernel(outputs: OutputsFn, *, vmap: VmapMode = "sequential", name: str | None = None,
                 boundscheck: bool = False) -> Callable[[Callable[..., None]], NumbaKernel]:
  """Decorator: turns a Numba-compatible function into a JAX operation (see the module docstring).

  Args:
    outputs: callable (inputs...) -> a jax.ShapeDtypeStruct or a tuple of them, the outputs'
      shapes and dtypes; called at trace time with the (possibly traced) inputs, and with the
      parameters it names as keyword arguments (all of them if it takes **kwargs).
    vmap: "sequential" (default) or "elementwise".
    name: used in error messages (default: the function's name).
    boundscheck: compile with Numba's bounds checking (an out-of-range index then raises, and
      the call fails with an error, instead of reading or writing arbitrary memory: an output
      smaller than what the function writes corrupts the process's memory without it).
      `NUMBA_BOUNDSCHECK=0/1` overrides it, as it does Numba's own.

  The function takes the inputs (read-only: writing one, directly or through a function it
  calls, fails to compile; copy it first, `x.copy()`, for scratch space), then the outputs (write
  every element: they are not initialised; return nothing), then the parameters. Supported
  dtypes: float32, float64, int32, int64, bool; any rank. Parameters are Python or NumPy scalars
  given by keyword at the call; floats reach the kernel as float64, ints and bools as int64.
  """
  if vmap not in _VMAP_MODES:
    raise ValueError(f"vmap must be one of {_VMAP_MODES}; got {vmap!r}")
  if not callable(outputs):
    raise TypeError("outputs must be a callable returning jax.ShapeDtypeStruct(s)")

  def wrap(fn):
    return NumbaKernel(fn, outputs, vmap=vmap, name=name, boundscheck=boundscheck)

  return wrap


def numba_cuda_kernel(outputs: OutputsFn, *, grid: GridSpec | None = None,
                      block: int | tuple[int, ...] = 256, shared_mem: int = 0,
                      vmap: VmapMode = "sequential", name: str | None = None,
                      fastmath: bool = False) -> Callable[[Callable[..., None]], NumbaKernel]:
  """Decorator: turns a numba.cuda kernel body into a JAX operation on CUDA devices.

      @jaxext.numba_cuda_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
                                vmap="elementwise")
      def axpy(x, y, out, alpha):
          i = cuda.grid(1)
          if i < x.shape[0]:
              out[i] = alpha * x[i] + y[i]

  Args:
    outputs, vmap, name: as for `numba_kernel`.
    grid: blocks per launch: an int, a tuple of up to 3 ints, a callable (inputs as
      jax.ShapeDtypeStructs of one batch slice, then the parameters it names by keyword) returning
      one of those, or None (default): ceil(size of the largest output / threads per block) blocks
      in x, one thread per element of the largest output.
    block: threads per block: an int or a tuple of up to 3 ints (at most 1024 in all).
    shared_mem: bytes of dynamic shared memory per block (`cuda.shared.array(0, ...)`).
    fastmath: numba-cuda's fastmath flag.

  The function takes the inputs (read them only), then the outputs (every element must be
  written: they are not initialised), then the parameters, like `numba_kernel`'s. Compiled to PTX
  at trace time for the lowest compute capability among the visible CUDA devices (9.0 if none, or
  `JAXEXT_NUMBA_CUDA_CC=X.Y`). Runs only in computations placed on CUDA devices.
  """
  if vmap not in _VMAP_MODES:
    raise ValueError(f"vmap must be one of {_VMAP_MODES}; got {vmap!r}")
  if not callable(outputs):
    raise TypeError("outputs must be a callable returning jax.ShapeDtypeStruct(s)")
  block3 = _dim3(block, "block", minimum=1)
  if math.prod(block3) > 1024:
    raise ValueError(f"block {block3} has {math.prod(block3)} threads; CUDA allows at most 1024")
  if grid is not None and not callable(grid):
    grid = _dim3(grid, "grid", minimum=0)
  if not isinstance(shared_mem, (int, np.integer)) or shared_mem < 0:
    raise ValueError(f"shared_mem must be a non-negative int; got {shared_mem!r}")

  def wrap(fn):
    return NumbaKernel(fn, outputs, vmap=vmap, name=name, boundscheck=False, platform="cuda",
                       launch=_Launch(grid, block3, int(shared_mem), bool(fastmath)))

  return wrap


class _Launch:
  """A CUDA kernel's launch configuration (identity-hashed: it may hold a callable)."""

  def __init__(self, grid, block, shared_mem, fastmath):
    self.grid, self.block, self.shared_mem, self.fastmath = grid, block, shared_mem, fastmath


def _dim3(value, what, *, minimum):
  dims = (value,) if isinstance(value, (int, np.integer)) else value
  if (not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3
      or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims)):
    raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints; got {value!r}")
  dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
  limits = (2**31 - 1, 65535, 65535) if what == "grid" else (1024, 1024, 64)
  if any(d < minimum or d > lim for d, lim in zip(dims, limits)):
    raise ValueError(f"{what} {tuple(dims)} is out of CUDA's range (each at least {minimum}, "
                     f"at most {limits})")
  return dims

class NumbaKernel:
  """A Numba kernel as a JAX operation; call it like a function of its inputs."""

  def __init__(self, fn, outputs, *, vmap, name, boundscheck, platform="cpu", launch=None):
    py_func = getattr(fn, "py_func", fn)
    if not callable(py_func):
      raise TypeError(f"numba_kernel needs a function; got {type(fn).__name__}")
    self.py_func = py_func
    self.name = name or getattr(py_func, "__name__", "kernel")
    self.outputs = outputs
    self.vmap = vmap
    self.boundscheck = boundscheck
    self.platform = platform  # "cpu" (numba_kernel) or "cuda" (numba_cuda_kernel)
    self.launch = launch
    self._jvp = None
    self._vjp = None
    self._diff_fns = {}
    self._lock = threading.Lock()
    self._parameters = inspect.signature(py_func).parameters
    self._arg_names = list(self._parameters)
    # Parameters that `outputs` accepts by name (all of them with **kwargs) are passed to it.
    self._outputs_params = _accepted_names(outputs)
    functools.update_wrapper(self, py_func)

  @property
  def kind(self) -> str:
    return "jaxext.numba_kernel" if self.platform == "cpu" else "jaxext.numba_cuda_kernel"

  def __repr__(self):
    return f"<{self.kind} {self.name}>"

  # -- derivatives ------------------------------------------------------------------------------
  def defjvp(self, jvp: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
    """`jvp(primals, tangents, **params) -> (primal_outputs, tangent_outputs)` (tuples)."""
    self._jvp, self._vjp = jvp, None
    self._diff_fns.clear()
    return jvp

  def defvjp(self, fwd: Callable[..., tuple[Any, Any]],
             bwd: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, Any]]:
    """`fwd(*inputs, **params) -> (outputs, residuals)`; `bwd(residuals, cotangents, **params)`
    -> one cotangent per input (tuples)."""
    self._jvp, self._vjp = None, (fwd, bwd)
    self._diff_fns.clear()
    return fwd

  # -- calling ----------------------------------------------------------------------------------
  def __call__(self, *args: jax.Array | np.ndarray, **params: Any) -> Any:
    """The outputs for these inputs (parameters by keyword): one jax.Array for a kernel with one
    output, else a tuple of them."""
    if len(args) >= len(self._arg_names):
      raise TypeError(f"{self.kind} '{self.name}' takes {len(self._arg_names)} arguments (inputs, "
                      f"then at least one output, then parameters by keyword); got {len(args)} "
                      "positional inputs. Parameters are given by keyword: name=value")
    args = tuple(self._operand(x, i) for i, x in enumerate(args))
    single, outs = self._output_types(args, params)
    n_ops = len(args) + len(outs)
    param_names = self._arg_names[n_ops:]
    if len(self._arg_names) < n_ops:
      raise TypeError(f"{self.kind} '{self.name}' takes {len(self._arg_names)} arrays "
                      f"but was given {len(args)} inputs and declares {len(outs)} outputs")
    items = self._params(param_names, params)
    if n_ops + len(items) > _MAX_ARGS:
      raise TypeError(
          f"{self.kind} '{self.name}' has {n_ops} arrays and {len(items)} parameters; at most "
          f"{_MAX_ARGS} in all (Numba cannot compile the call of a function with more arguments "
          "under CPython >= 3.12, which builds it from a list). Pack arrays of one dtype into "
          "one array, or parameters into an input array")
    results = self._call(args, items, outs)
    return results[0] if single else tuple(results)

  def _operand(self, x, i):
    label = self._arg_names[i] if i < len(self._arg_names) else f"#{i}"
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):  # a parameter, surely
      raise TypeError(f"{self.kind} '{self.name}': input {label} is a Python {type(x).__name__}; "
                      "parameters are given by keyword (name=value), and a 0-d array input as "
                      "an array (jnp.asarray(value))")
    try:
      arr = jnp.asarray(x)
    except TypeError as err:
      raise TypeError(f"{self.kind} '{self.name}': input {label} is not an array "
                      f"({type(x).__name__})") from err
    if np.dtype(arr.dtype).name not in compile_cpu.DTYPES:
      raise TypeError(f"{self.kind} '{self.name}': input {label} has dtype {arr.dtype}; "
                      f"supported: {', '.join(compile_cpu.DTYPES)}")
    return arr

  def _output_types(self, args, params):
    try:
      spec = self.outputs(*args, **{k: v for k, v in params.items() if k in self._outputs_params})
    except TypeError as err:
      params_hint = ", ".join(f"{n}=..." for n in self._arg_names[len(args) + 1:]) or "name=value"
      raise TypeError(
          f"{self.kind} '{self.name}': outputs= failed for {len(args)} input(s): {err}. "
          f"Parameters are given by keyword, not position (e.g. {self.name}(x, y, {params_hint})"
          ")") from err
    single = isinstance(spec, jax.ShapeDtypeStruct)
    specs = (spec,) if single else spec
    if not isinstance(specs, (tuple, list)) or not specs or not all(
        isinstance(s, jax.ShapeDtypeStruct) for s in specs):
      raise TypeError(f"{self.kind} '{self.name}': outputs= must return a "
                      f"jax.ShapeDtypeStruct or a non-empty tuple of them; got {spec!r}")
    avals = []
    for k, s in enumerate(specs):
      if np.dtype(s.dtype).name not in compile_cpu.DTYPES:
        raise TypeError(f"{self.kind} '{self.name}': output {k} has dtype {s.dtype}; "
                        f"supported: {', '.join(compile_cpu.DTYPES)}")
      if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in s.shape):
        raise TypeError(f"{self.kind} '{self.name}': output {k} has shape {s.shape}; "
                        "need non-negative static integers")
      avals.append(jax.core.ShapedArray(tuple(int(d) for d in s.shape), np.dtype(s.dtype)))
    return single, tuple(avals)

  def _params(self, names, params):
    sig = self._parameters
    unknown = sorted(set(params) - set(names))
    if unknown:
      raise TypeError(f"{self.kind} '{self.name}': unexpected parameter(s) {unknown}; "
                      f"its parameters are {names}")
    items = []
    for n in names:
      if n in params:
        v = params[n]
      elif sig[n].default is not inspect.Parameter.empty:
        v = sig[n].default
      else:
        raise TypeError(f"{self.kind} '{self.name}': missing parameter {n!r}")
      if isinstance(v, (bool, np.bool_, int, np.integer)):
        v = int(v)
        if not -(2**63) <= v < 2**63:
          raise TypeError(f"{self.kind} '{self.name}': parameter {n!r} = {v} does not fit in "
                          "int64 (integer parameters reach the kernel as int64)")
      elif isinstance(v, (float, np.floating)):
        v = float(v)
      else:
        raise TypeError(f"{self.kind} '{self.name}': parameter {n!r} must be a Python or "
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
    # Inside jax.shard_map, operands cast to vary alike before the user's rules see them: a vjp's
    # cotangent for a replicated operand (which varies, being made from a device's block) then
    # matches its operand's type, and jax adds the devices' cotangents up.
    return fn(*compat.match_varying(args))

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

  def cuda_entry(self, signature):
    from jaxext.numba_bridge import compile_cuda
    return compile_cuda.compile_cuda(self.py_func, self.name, signature,
                                     cc=compile_cuda.target_cc(), fastmath=self.launch.fastmath)

  def compile(self, signature):
    """Compiles for `signature` on this kernel's platform (at trace time: errors surface here)."""
    return self.entry(signature) if self.platform == "cpu" else self.cuda_entry(signature)

  def launch_dims(self, in_avals, out_avals, items):
    """(grid, block) of one launch on inputs/outputs of one batch slice (CUDA kernels)."""
    cfg = self.launch
    threads = math.prod(cfg.block)
    if cfg.grid is None:
      n = max(math.prod(o.shape) for o in out_avals)  # one thread per element of the largest
      grid = (-(-n // threads), 1, 1)
      if grid[0] > 2**31 - 1:
        raise ValueError(f"{self.kind} '{self.name}': {n} output elements need more than 2^31 "
                         f"blocks of {threads} threads; pass a larger block or a grid")
      return grid, cfg.block
    if not callable(cfg.grid):
      return cfg.grid, cfg.block
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in in_avals]
    names = _accepted_names(cfg.grid)
    value = cfg.grid(*specs, **{k: v for k, v in items if k in names})
    try:
      return _dim3(value, "grid", minimum=0), cfg.block
    except ValueError as err:
      raise ValueError(f"{self.kind} '{self.name}': its grid callable returned {value!r}: "
                       f"{err}") from None


class _Everything:
  def __contains__(self, _):
    return True


def _accepted_names(fn):
  """The keyword arguments `fn` accepts (everything, if it takes **kwargs)."""
  params = inspect.signature(fn).parameters.values()
  if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
    return _Everything()
  return {p.name for p in params}


def _as_tuple(x):
  return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _batch_rank(mask) -> int:
  """How many leading axes of an operand are batch axes (the bits set in its batch mask)."""
  return bin(mask).count("1")


def _signature(in_avals, bmasks, out_avals, items):
  n_in = len(in_avals)
  args = tuple((np.dtype(a.dtype).name, a.ndim - _batch_rank(m))
               for a, m in zip(in_avals, bmasks[:n_in]))
  results = tuple((np.dtype(a.dtype).name, a.ndim) for a in out_avals)
  params = tuple("f" if isinstance(v, float) else "i" for _, v in items)
  return compile_cpu.Signature(args, results, params)


def _bind(kernel, args, items, outs):
  # Compile at trace time: a kernel Numba cannot type fails here, naming kernel and signature.
  in_avals = tuple(jax.core.ShapedArray(jnp.shape(a), a.dtype) for a in args)
  entry = kernel.compile(_signature(in_avals, (0,) * (len(args) + len(outs)), outs, items))
  if kernel.platform == "cuda":
    kernel.launch_dims(in_avals, outs, items)  # a bad grid fails here too
  # `content` (the compiled code's content id) is a parameter so that jax's caches keyed on the
  # parameters (eager calls, new jits) never serve code compiled before a global it reads changed.
  return numba_call_p.bind(*args, kernel=kernel, content=entry.kernel_id, items=items, outs=outs,
                           nbatch=0, bmasks=(0,) * (len(args) + len(outs)))


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


_MAX_BATCH_AXES = 62  # jaxext/common/batch_layout.h kMaxBatchAxes


def _abstract_eval(*avals, kernel, content, items, outs, nbatch, bmasks):
  if not isinstance(nbatch, int) or not 0 <= nbatch <= _MAX_BATCH_AXES or \
      len(bmasks) != len(avals) + len(outs):
    raise TypeError(f"jaxext numba_call_p: nbatch ({nbatch!r}) must be an int in "
                    f"[0, {_MAX_BATCH_AXES}] and bmasks one mask per operand and result; got "
                    f"{len(bmasks)} for {len(avals)} + {len(outs)}")
  for a, m in zip(avals, bmasks):
    if not isinstance(m, int) or not 0 <= m < 2**nbatch or _batch_rank(m) > a.ndim:
      raise TypeError(f"jaxext numba_call_p: batch mask {m!r} does not fit an operand of rank "
                      f"{a.ndim} with {nbatch} batch axes")
  if any(m != (1 << nbatch) - 1 for m in bmasks[len(avals):]):
    raise TypeError(f"jaxext numba_call_p: every result carries every batch axis (mask "
                    f"{(1 << nbatch) - 1}); got {bmasks[len(avals):]}")
  batch = _batch_shape(avals, bmasks, nbatch)
  return tuple(jax.core.ShapedArray(batch + o.shape, o.dtype) for o in outs)


numba_call_p.def_abstract_eval(_abstract_eval)


_eager.def_jit_impl(numba_call_p)


def _wrong_platform(kernel, platform):
  if kernel.platform == "cpu":
    return NotImplementedError(
        f"jaxext.numba_kernel '{kernel.name}' is a CPU kernel, but this computation runs on "
        f"{platform}: write a numba.cuda version and decorate it with jaxext.numba_cuda_kernel")
  return NotImplementedError(
      f"jaxext.numba_cuda_kernel '{kernel.name}' runs on CUDA devices, but this computation runs "
      f"on {platform}: use jaxext.numba_kernel for the CPU")


def _lowering(ctx, *args, kernel, content, items, outs, nbatch, bmasks):
  if kernel.platform != "cpu":
    raise _wrong_platform(kernel, "cpu")
  _ffi.require("cpu", "jaxext.numba_kernel")
  entry = kernel.entry(_signature(ctx.avals_in, bmasks, outs, items))
  _ffi.register_native_function(entry.kernel_id, entry.address)
  return _partitioned(ctx, args, kernel, outs, nbatch, bmasks, _TARGET, dict(
      kernel_id=np.int64(entry.kernel_id), name=kernel.name, **_param_attrs(items),
      nbatch=np.int64(nbatch), bmasks=np.asarray(bmasks, np.int64),
      split=np.int64(kernel.vmap == "elementwise")))


def _param_attrs(items):
  """The static parameters as FFI attributes: floats and ints apart, in order (each padded with
  one placeholder when empty: the handlers read them as non-empty arrays)."""
  fparams = [v for _, v in items if isinstance(v, float)] or [0.0]
  iparams = [v for _, v in items if isinstance(v, int)] or [0]
  return dict(fparams=np.asarray(fparams, np.float64), iparams=np.asarray(iparams, np.int64))


def _partitioned(ctx, args, kernel, outs, nbatch, bmasks, target, attrs):
  """The FFI call, split across devices where that is safe: along vmap's batch axes (each batch
  slice is its own kernel call), or along the shared first axis of an elementwise kernel; the
  kernel's own axes otherwise stay whole on each device."""
  in_avals = ctx.avals_in
  n_in = len(in_avals)
  masks = [int(m) for m in bmasks]
  if nbatch > 0:
    def result_types(*xs):
      batch = _batch_shape(xs, masks[:n_in], nbatch)
      return tuple(jax.ShapeDtypeStruct(batch + o.shape, o.dtype) for o in outs)
  elif _elementwise(in_avals, kernel, outs, nbatch):
    def result_types(*xs):
      return tuple(jax.ShapeDtypeStruct((xs[0].shape[0],) + o.shape[1:], o.dtype) for o in outs)
  else:
    result_types = lambda *xs: tuple(jax.ShapeDtypeStruct(o.shape, o.dtype) for o in ctx.avals_out)
  per_shard = _sharding.ffi_per_shard(target, result_types, **attrs)
  return _sharding.lower(ctx, args, per_shard,
                         *numba_call_p.factors(*in_avals, kernel=kernel, outs=outs, nbatch=nbatch,
                                               bmasks=bmasks))


def _elementwise(in_avals, kernel, outs, nbatch) -> bool:
  """Whether the call splits along the first axis its operands and outputs share."""
  return (nbatch == 0 and kernel.vmap == "elementwise" and len(in_avals) > 0
          and all(a.ndim >= 1 for a in in_avals) and all(o.ndim >= 1 for o in outs)
          and len({a.shape[0] for a in in_avals} | {o.shape[0] for o in outs}) == 1)


def _factors(*in_avals, kernel, outs, nbatch, bmasks, **_):
  masks = [int(m) for m in bmasks]
  if nbatch > 0:
    def factors(ndim, mask):  # an operand's batch axes lead its dimensions, in axis order
      lead = tuple(f"b{j}" for j in range(nbatch) if (mask >> j) & 1)
      return lead + (None,) * (ndim - len(lead))
    return ([factors(a.ndim, m) for a, m in zip(in_avals, masks[:len(in_avals)])],
            [factors(nbatch + o.ndim, (1 << nbatch) - 1) for o in outs])
  if _elementwise(in_avals, kernel, outs, nbatch):
    return ([("d0",) + (None,) * (a.ndim - 1) for a in in_avals],
            [("d0",) + (None,) * (o.ndim - 1) for o in outs])
  # the kernel may couple any elements: every device runs it whole
  return [(None,) * a.ndim for a in in_avals], [(None,) * o.ndim for o in outs]


_sharding.def_factors(numba_call_p, _factors)


compat.register_lowering(numba_call_p, _lowering, "cpu", partitioned=True)


def _core_avals(avals, bmasks):
  """The operands as one batch slice sees them (their batch axes dropped)."""
  return [jax.core.ShapedArray(a.shape[_batch_rank(m):], a.dtype) for a, m in zip(avals, bmasks)]


def _cuda_lowering(ctx, *args, kernel, content, items, outs, nbatch, bmasks):
  if kernel.platform != "cuda":
    raise _wrong_platform(kernel, "CUDA")
  _ffi.require("cuda", "jaxext.numba_cuda_kernel")
  from jaxext.numba_bridge import compile_cuda
  entry = kernel.cuda_entry(_signature(ctx.avals_in, bmasks, outs, items))
  grid, block = kernel.launch_dims(_core_avals(ctx.avals_in, bmasks), outs, items)
  pkinds = [0 if isinstance(v, float) else 1 for _, v in items] or [-1]
  # Under sharding each device launches this configuration (that of the whole call) on its
  # shard: kernels bounds-check their index, so the extra threads do nothing.
  return _partitioned(ctx, args, kernel, outs, nbatch, bmasks, _CUDA_TARGET, dict(
      name=kernel.name, ptx=entry.ptx, entry=entry.entry,
      module_id=np.int64(compile_cuda.module_id(entry)), grid=np.asarray(grid, np.int64),
      block=np.asarray(block, np.int64), shared_mem=np.int64(kernel.launch.shared_mem),
      pkinds=np.asarray(pkinds, np.int64), **_param_attrs(items), nbatch=np.int64(nbatch),
      bmasks=np.asarray(bmasks, np.int64)))


compat.register_lowering(numba_call_p, _cuda_lowering, "cuda", partitioned=True)


def _no_derivative(primals, tangents, *, kernel, **_):
  raise TypeError(f"{kernel.kind} '{kernel.name}' has no derivative: define one with "
                  f"@{kernel.name}.defjvp or @{kernel.name}.defvjp")


compat.register_jvp(numba_call_p, _no_derivative)


def _batch(args, dims, *, kernel, content, items, outs, nbatch, bmasks):
  size = compat.batch_size(args, dims)
  n_in = len(args)
  # A CUDA kernel with a fixed grid keeps its grid: folding the batch would need more threads.
  fixed_grid = kernel.platform == "cuda" and not (
      kernel.launch.grid is None or callable(kernel.launch.grid))
  if kernel.vmap == "elementwise" and nbatch == 0 and not fixed_grid:
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
  results = numba_call_p.bind(*new_args, kernel=kernel, content=content, items=items, outs=outs,
                              nbatch=nbatch + 1, bmasks=tuple(new_masks))
  return results, (0,) * len(results)


def _fold(kernel, args, dims, size, items, outs):
  """vmap="elementwise": one call on operands whose first axis absorbs the batch, or None."""
  fronted = [compat.batch_axis_to_front(x, d, size) for x, d in zip(args, dims)]
  if any(x.ndim < 2 for x in fronted) or any(o.ndim < 1 for o in outs):
    return None  # a rank-0 operand has no first axis to fold into
  if len({x.shape[1] for x in fronted} | {o.shape[0] for o in outs}) != 1:
    raise TypeError(f"{kernel.kind} '{kernel.name}': vmap='elementwise' needs every input "
                    "and output to share its first axis; declare vmap='sequential' for this kernel")
  folded = tuple(x.reshape((size * x.shape[1],) + x.shape[2:]) for x in fronted)
  fouts = tuple(jax.core.ShapedArray((size * o.shape[0],) + o.shape[1:], o.dtype) for o in outs)
  results = _bind(kernel, folded, items, fouts)
  return [r.reshape((size,) + o.shape) for r, o in zip(results, outs)], (0,) * len(outs)


compat.register_batching(numba_call_p, _batch)
