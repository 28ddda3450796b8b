"""jaxext.ode.dop853: many trajectories of one ODE system at once, each with its own adaptive steps.

Hairer's DOP853 exactly as scipy's `solve_ivp(method="DOP853")` runs it (jaxext/kernels/dop853.h):
for one trajectory the accepted steps, right-hand side evaluations and results are scipy's, to
roundoff. Trajectories are independent: on the CPU they are spread over XLA's thread pool, each
stepping on its own (no lockstep, unlike jax.vmap of a while loop).

On CUDA one thread integrates one trajectory; Python functions are compiled by numba-cuda into a
device function the handler links into the integrator's kernels (jaxext/ode/_native_cuda.py).

The primitive `dop853_p` is defined as jaxlib defines its ops: abstract evaluation, CPU and CUDA
lowerings to the FFI target `jaxext_dop853` (partitioned along the trajectory axis under jit
sharding), and a
batching rule (vmap folds into the trajectory axis), and a JVP through the variational equations
(forward sensitivities with respect to y0 and params, integrated with the state on its own steps;
linear in the tangents, so jax.grad works too).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand, kernel_float, static_int
from jaxext.ode import _jnp
from jaxext.ode import functions
from jaxext.ode import models
from jaxext.ode.models import Model

__all__ = ["Solution", "Status", "dop853", "dop853_p"]

MAX_EVENTS = 16  # jaxext/kernels/dop853.h kMaxEvents
_MAX_STEPS_LIMIT = 10**8  # counters are int32 (up to 15 evaluations per step)


class Status(enum.IntEnum):
  """Outcome per trajectory (`Solution.status`); scipy's sign convention: >= 0 is success."""
  SUCCESS = 0          # reached t1
  EVENT = 1            # stopped by a terminal event (t_final is the event's time)
  MAX_STEPS = -1       # max_steps step attempts (accepted + rejected) without reaching t1
  STEP_TOO_SMALL = -2  # the step size fell below 10 ulp(t) (scipy's "Required step size...")
  NON_FINITE = -3      # non-finite y0, params, t_span, or right-hand side
  CALLBACK_FAILED = -4  # CUDA only: a Python function raised (on the CPU that raises instead)
  BAD_T_EVAL = -5      # traced t_eval not finite, not strictly monotonic, or against t_span's
                       # direction (concrete ones raise): ys is NaN, the rest is the integration's


class Solution(NamedTuple):
  """Results per trajectory (N trajectories, state size d, T = len(t_eval), E events, K slots).

  `evaluate(t)` evaluates the dense output (see its docstring).

  Attributes:
    ys: (N, T, d) the state at t_eval (dense output); NaN where not reached (a failure, a terminal
      event before it, or a point outside that trajectory's t_span).
    t_final: (N,) where integration stopped: t1, a terminal event's time, or the last accepted
      step's end on failure.
    y_final: (N, d) the state at t_final.
    status: (N,) int32, a `Status` value.
    n_steps: (N,) int32 step attempts (accepted and rejected).
    n_accepted: (N,) int32 accepted steps (scipy's len(sol.t) - 1 without t_eval).
    n_rhs: (N,) int32 right-hand side evaluations (scipy's nfev).
    t_events: (N, E, K) the first K occurrences of each event, NaN-padded.
    y_events: (N, E, K, d) the state there.
    event_counts: (N, E) int32 occurrences of each event (may exceed K: only K are stored).
    dense_t: with dense=S: (N, S + 1) the kept steps' boundaries (NaN-padded), else None.
    dense_f: with dense=S: (N, S, 8, d) each kept step's interpolant (scipy's Dop853DenseOutput:
      rows F[0..6], then y_old), else None.
  """
  ys: jax.Array
  t_final: jax.Array
  y_final: jax.Array
  status: jax.Array
  n_steps: jax.Array
  n_accepted: jax.Array
  n_rhs: jax.Array
  t_events: jax.Array
  y_events: jax.Array
  event_counts: jax.Array
  dense_t: jax.Array | None = None
  dense_f: jax.Array | None = None

  def evaluate(self, t: ArrayLike) -> jax.Array:
    """The solution at times `t` (a scalar: (N, d); shape (T,): (N, T, d)) from the dense output
    of a `dop853(..., dense=True)` run: each trajectory's own step interpolants, exactly as
    scipy's `solve_ivp(..., dense_output=True).sol(t)` evaluates them (the same segment for a t
    on a step boundary). NaN for a t outside [t0, t_final] of that trajectory, or beyond its last
    kept step (only the first S steps are kept: n_accepted > S). Jittable and vmappable;
    differentiable with respect to t and, through dop853's derivatives, y0, params/args and t0.
    Eagerly the values are those t_eval gives, bit for bit; under jit XLA fuses the polynomial
    and may contract its multiply-adds (a few ulps apart).
    """
    if self.dense_t is None or self.dense_f is None:
      raise ValueError("Solution.evaluate needs the dense output: call dop853(..., dense=True)")
    return _evaluate(self.dense_t, self.dense_f, self.n_accepted, self.t_final, self.y_final, t)


dop853_p = compat.Primitive("jaxext_dop853")
dop853_p.multiple_results = True


def dop853(rhs: Callable[..., Any] | Model | functions.Rhs, y0: ArrayLike,
           t_span: tuple[ArrayLike, ArrayLike] | ArrayLike, params: ArrayLike | None = None, *,
           args: Any = None, args_axes: Any = None, t_eval: ArrayLike | None = None,
           rtol: ArrayLike | Sequence[float] | None = None,
           atol: ArrayLike | Sequence[float] = 1e-9,
           events: (functions.Event | Callable[..., Any]
                   | Sequence[functions.Event | Callable[..., Any]]) = (),
           max_steps: int = 100_000,
           first_step: float | None = None, max_step: float | None = None,
           event_slots: int = 8, dense: bool | int = False) -> Solution:
  """Integrates dy/dt = rhs(t, y, p) for N trajectories with DOP853 (scipy's algorithm).

  Args:
    rhs: the right-hand side, one of

      - a function `rhs(t, y, args) -> dy/dt` written with jax.numpy (diffrax's convention: one
        trajectory, `y` of shape (d,), `args` as given below). jax traces it once per shapes and
        dtypes and it is compiled to native code (through Numba: needs `jaxext[numba]`); its
        Jacobians come from jax. See "Right-hand sides in jax.numpy" below.
      - a built-in model (`jaxext.ode.models.earth(...)`, `two_body()`, a `Model`);
      - a Numba function `rhs(t, y, p, dydt)` writing dy/dt into `dydt` (four parameters;
        decorated with `jaxext.ode.rhs` or plain; needs `jaxext[numba]`).
    y0: (N, d) initial states; float32 or float64 (the integration's precision), or complex64 /
      complex128 with a jax.numpy `rhs` (integrated as real and imaginary parts, each under
      the tolerances; `ys`, `y_final`, `y_events` and the dense output are complex again).
    t_span: a tuple (t0, t1) of scalars or (N,) arrays, or an array (2,) or (N, 2) of rows
      [t0, t1]. t1 < t0 integrates backwards.
    params: None, (p,) shared or (N, p) per trajectory parameters, passed to a built-in model or
      a Numba `rhs` and events.
    args: for a jax.numpy `rhs`: any pytree of arrays (floating, integer or bool), passed to `rhs`
      and to the events as the third argument; derivatives flow to its floating leaves.
    args_axes: which leaves of `args` hold one entry per trajectory, as jax.vmap's in_axes: None
      (the default: every leaf is shared by all trajectories), 0 (every leaf has a leading axis of
      size N, and trajectory i sees leaf[i]), or a tree prefix of `args` with 0/None leaves.
    t_eval: None or (T,) times, strictly monotonic in the direction of integration, at which to
      return the state (from the 7th-order dense output, as scipy does). A time outside every
      trajectory's t_span raises (scipy's rule); one outside only some trajectories' spans (or
      any, when t_eval or t_span is traced) gives NaN in those trajectories' rows.
    rtol, atol: relative and absolute tolerances, > 0, scalars or (d,) per component (static).
      rtol defaults to 1e-6 (scipy's default), or to 100 machine epsilons of float32 (1.2e-5)
      for float32 integrations; a given rtol below 100 epsilons of the integration's dtype is
      raised to it with a warning (scipy's rule, which uses float64's: it integrates in float64).
    events: functions g(t, y, p) (`jaxext.ode.event`, scipy-style callables with `terminal` and
      `direction` attributes) or built-in `jaxext.ode.models.radius_event/altitude_event`; at most
      16. They follow the right-hand side: with a jax.numpy `rhs` they are jax.numpy functions
      g(t, y, args) -> scalar (gradients from jax), else Numba functions g(t, y, p). Roots are
      located by Brent's method on the dense output to 4 machine epsilons.
    max_steps: step attempts per trajectory before giving up (status MAX_STEPS).
    first_step: initial step size (> 0); None selects it as scipy does.
    max_step: largest step size; None for no limit.
    event_slots: K, occurrences stored per event and trajectory.
    dense: keep every accepted step's interpolant for `Solution.evaluate(t)` (scipy's
      dense_output=True): True keeps up to 1000 steps per trajectory, an int S up to S (memory:
      N x S x 8 x d values, and d (1 + d + p) under derivatives, which integrate the
      sensitivities' interpolants too). As in scipy, each step then evaluates the right-hand side
      3 more times (n_rhs counts them). Keep S near the steps you expect: 1e5 Lorenz
      trajectories on an H100 take 2.6 ms without, 9.3 ms with S = 128, 10.5 ms with S = 256.

  Returns:
    A `Solution` (see its fields). Non-finite inputs of one trajectory set its status to NON_FINITE
    and leave the others untouched.

  Right-hand sides in jax.numpy: arithmetic, comparisons, jnp.where, the transcendental
  functions, powers, casts, indexing and slicing with static indices (`y[0]`, `y[:3]`,
  `.at[0].set`), concatenate/stack/reshape, dot products and reductions over small arrays, nested
  jit and custom_jvp functions, complex arithmetic (and complex states: see y0); no loops or
  branches on traced values (lax.cond, while_loop, fori_loop) and no random numbers. Anything
  else raises a TypeError at trace time naming the operation and the line of your code. Each
  array is written out element by element (at most 50,000 scalar operations per function):
  meant for states and parameters of modest size.

  Derivatives: jax.jvp / jax.grad / jax.jacobian of `ys` and `y_final` with respect to y0 and
  params (or args), through the variational equations integrated with the state on the state's own steps
  (the error is controlled on the state; the solution is bitwise the same as without derivatives).
  So the derivatives are as accurate as those steps make them: a state that stays at an
  equilibrium (e.g. y0 = 0 of a linear system) lets the steps grow unchecked, and its derivatives
  are then only good to ~1e-5 relative; bound them with `max_step` where that matters.
  Built-in models use their exact Jacobians (dual numbers through the same C++ model); a
  jax.numpy right-hand side and its events get theirs from jax (jax.jacfwd, jax.grad); a Numba
  right-hand side needs `@jaxext.ode.rhs(jacobian=...)`. With events: t_events, y_events, and
  t_final / y_final of trajectories a terminal event stopped too; an event time moves by
  -(g_y . dy + g_p . dp) / (g_t + g_y . f), infinite where the trajectory grazes the event surface
  (for a radius event, r . v = 0). Built-in events know their gradient; a Python event needs
  `@jaxext.ode.event(gradient=...)` for any derivative of a run that has it (on CUDA too: f and
  the gradient at the events then run as numba-cuda kernels). With respect to t_span: t0 acts
  as y0 - f(t0, y0) dt0 (on every output, events included); t1 moves y_final by
  f(t1, y_final) dt1 and t_final by dt1 for the trajectories that reached it. With respect to
  t_eval: ys[:, j] moves by f(t_eval[j], ys[:, j]) dt_eval[j]. Not yet: second derivatives.

  Raises:
    TypeError / ValueError at trace time for bad arguments (the message names the argument).
  """
  return _integrate(rhs, y0, t_span, params, args=args, args_axes=args_axes, t_eval=t_eval,
                    rtol=rtol, atol=atol, events=events, max_steps=max_steps,
                    first_step=first_step, max_step=max_step, event_slots=event_slots,
                    dense=dense)


def _integrate(rhs, y0, t_span, params, *, args, args_axes, t_eval, rtol, atol, events,
               max_steps, first_step, max_step, event_slots, dense):
  """dop853's body (its typed signature and documentation are the public face)."""
  # A complex state is integrated as its real and imaginary parts, [re(y), im(y)].
  complex_d = _complex_size(y0)
  if complex_d is not None:
    y0 = jnp.asarray(y0)
    y0 = jnp.concatenate([jnp.real(y0), jnp.imag(y0)], axis=-1)
  y0 = float_operand(y0, "y0")
  if y0.ndim != 2 or y0.shape[1] == 0:
    raise ValueError(f"y0 must have shape (N, d) with d >= 1 (N trajectories of d components); "
                     f"got shape {y0.shape}")
  count, n = y0.shape
  dtype = y0.dtype

  # The right-hand side.
  jnp_form = False
  if isinstance(rhs, Model):
    if n != Model.state_size:
      raise ValueError(f"y0: the model '{rhs.name}' integrates states of 6 components "
                       f"(x, y, z, vx, vy, vz); got d = {n}")
    user_rhs, name, constants = None, rhs.name, tuple(rhs.constants().tolist())
    needs = rhs.num_params
  elif not callable(rhs) and not isinstance(rhs, functions.Rhs):
    raise TypeError("rhs must be a function rhs(t, y, args) -> dy/dt (jax.numpy), a Numba "
                    "function rhs(t, y, p, dydt), or a jaxext.ode.models.Model; got "
                    f"{type(rhs).__name__}")
  elif _jnp.is_numba_form(rhs):
    if not isinstance(rhs, functions.Rhs):
      rhs = functions.Rhs(fn=rhs, name=getattr(rhs, "__name__", "rhs"))
    user_rhs, name, constants, needs = rhs, rhs.name, (0.0,), 0
  else:
    jnp_form = True
    name = getattr(rhs, "__name__", "rhs")
    constants, needs = (0.0,), 0
  if not jnp_form and (args is not None or args_axes is not None):
    raise TypeError("args and args_axes are for a jax.numpy right-hand side rhs(t, y, args); "
                    f"the right-hand side '{name}' takes params")
  if complex_d is not None:
    if not jnp_form:
      raise TypeError(f"y0 is complex: complex states need a jax.numpy right-hand side "
                      f"rhs(t, y, args) (the Numba form and the built-in models are real)")
    rhs = _jnp.on_complex_state(rhs, complex_d, "rhs")
    # Per-component tolerances of the complex state apply to both parts.
    rtol, atol = (_complex_tolerance(v, what, complex_d)
                  for v, what in ((rtol, "rtol"), (atol, "atol")))

  # Parameters, time span, output times.
  if jnp_form:
    if params is not None:
      raise TypeError(f"params: the jax.numpy right-hand side '{name}' takes args= (any pytree "
                      "of arrays), not params")
    _native_module()  # a clear error if Numba is missing
    layout, params = _jnp.layout(args, args_axes, count, dtype)
    user_rhs = _jnp.rhs(rhs, layout, n, dtype)
  elif params is None:
    params = jnp.zeros((count, 0), dtype)
  else:
    params = float_operand(params, "params").astype(dtype)
    if params.ndim == 1:
      params = jnp.broadcast_to(params, (count, params.shape[0]))
    elif params.ndim != 2 or params.shape[0] not in (1, count):
      raise ValueError(f"params must have shape (p,) or (N, p) with N = {count}; "
                       f"got {params.shape}")
    params = jnp.broadcast_to(params, (count, params.shape[1]))
  if params.shape[1] < needs:
    raise ValueError(f"params: the model '{name}' needs {needs} parameter(s) per trajectory "
                     f"(the ballistic coefficient C_d A / m in m^2/kg); got {params.shape[1]}")
  t_span = _time_span(t_span, count, dtype)
  span = _concrete(t_span)
  if span is not None and not np.all(np.isfinite(span)):
    raise ValueError("t_span must be finite (to integrate until an event, give a t1 beyond it "
                     "and make the event terminal); a traced non-finite t_span gives its "
                     "trajectories status NON_FINITE")
  if t_eval is None:
    t_eval = jnp.zeros((0,), dtype)
  else:
    t_eval = float_operand(t_eval, "t_eval").astype(dtype)
    if t_eval.ndim != 1:
      raise ValueError(f"t_eval must be 1-D; got shape {t_eval.shape}")
  _check_t_eval(t_eval, t_span)

  # Static settings.
  floor = 100 * float(np.finfo(dtype).eps)  # of the integration's precision (scipy: float64's)
  rtol = _tolerance(max(1e-6, floor) if rtol is None else rtol, "rtol", n)
  atol = _tolerance(atol, "atol", n)
  if min(rtol) < floor:
    warnings.warn(f"rtol below {floor:.3g} (100 machine epsilons of {np.dtype(dtype).name}) is "
                  "raised to it (scipy's rule, for the integration's own precision)",
                  stacklevel=3)  # the caller of dop853
    rtol = tuple(max(r, floor) for r in rtol)
  max_steps = _static_int(max_steps, "max_steps")
  if not 1 <= max_steps <= _MAX_STEPS_LIMIT:
    raise ValueError(f"max_steps must be in [1, {_MAX_STEPS_LIMIT}]; got {max_steps}")
  first_step = 0.0 if first_step is None else _positive(first_step, "first_step")
  if first_step:
    if span is not None and np.any(first_step > np.abs(span[:, 1] - span[:, 0])):
      raise ValueError("first_step exceeds the length of t_span (as scipy refuses)")
  max_step = math.inf if max_step is None else _positive(max_step, "max_step", allow_inf=True)
  event_slots = _static_int(event_slots, "event_slots")
  if event_slots < 1:
    raise ValueError(f"event_slots must be >= 1; got {event_slots}")

  # Events and user functions (compiled for this dtype and these sizes).
  if isinstance(events, (functions.Event,)) or callable(events):
    events = (events,)
  events = tuple(functions.as_event(e, i) for i, e in enumerate(events))
  if len(events) > MAX_EVENTS:
    raise ValueError(f"events: at most {MAX_EVENTS}; got {len(events)}")
  if jnp_form:
    if complex_d is not None:
      if any(e.fn is None for e in events):
        raise ValueError("events: a radius or altitude event needs a real state (of positions); "
                         "for a complex state write the event in jax.numpy")
      events = tuple(dataclasses.replace(e, fn=_jnp.on_complex_state(e.fn, complex_d, "event"))
                     for e in events)
    events = tuple(_jnp.event(e, i, layout, n, dtype) for i, e in enumerate(events))
  spec = []
  for i, e in enumerate(events):
    if e.fn is None:
      if n < 3:
        raise ValueError(f"events[{i}]: a radius event needs y0 with d >= 3; got d = {n}")
      try:
        radius = float(e.radius)
      except (TypeError, ValueError):
        radius = math.nan
      if not math.isfinite(radius):
        raise ValueError(f"events[{i}]: the radius must be a finite float; got {e.radius!r}")
      spec.append((0, 0, radius, int(e.direction), e.max_count))
    else:
      spec.append((1, 0, 0.0, int(e.direction), e.max_count))  # its id: at lowering (_user_attrs)
  user = None
  if user_rhs is not None or any(e.fn is not None for e in events):
    _native_module()  # a clear error if Numba is missing
    user = UserFunctions(user_rhs, events)
    # Compiled for the CPU here (disk-cached), so that Numba's errors surface at trace time for
    # CPU runs. A function only numba-cuda compiles (e.g. calling @cuda.jit device functions) is
    # left to the lowering: that of the platform it runs on reports what fails there.
    try:
      _user_attrs(user, "cpu", name, dtype, n, params.shape[1], sensitivities=False)
    except TypeError as err:
      # What breaks the calling convention (a returned dy/dt, a write into y or p) is wrong on
      # every platform: raised whatever the platform (numba-cuda compiles as written).
      from jaxext.numba_bridge import compile_cpu  # noqa: PLC0415 (importable: compiled above)
      if isinstance(err, compile_cpu.ConventionError):
        raise

  dense_steps = _dense_steps(dense)
  outs = dop853_p.bind(y0, params, t_span, t_eval, user=user, name=str(name),
                       model=constants, rtol=rtol, atol=atol, first_step=float(first_step),
                       max_step=float(max_step), max_steps=max_steps, events=tuple(spec),
                       event_slots=event_slots if spec else 0, sensitivities=False,
                       dense_steps=dense_steps)
  ys, t_final, y_final, stats, t_events, y_events, counts, dense_t, dense_f = outs
  status = stats[:, 0]
  bad = _traced_t_eval_check(t_eval, t_span)
  if bad is not None:
    # What _check_t_eval raises for concrete values, as a result under jit (rows that failed
    # as NON_FINITE keep that status).
    bad = bad & (status != Status.NON_FINITE)
    ys = jnp.where(bad[:, None, None], jnp.nan, ys)
    status = jnp.where(bad, jnp.int32(Status.BAD_T_EVAL), status)
  if complex_d is not None:
    ys, y_final, y_events, dense_f = (jax.lax.complex(x[..., :complex_d], x[..., complex_d:])
                                      for x in (ys, y_final, y_events, dense_f))
  return Solution(ys=ys, t_final=t_final, y_final=y_final, status=status,
                  n_steps=stats[:, 1], n_accepted=stats[:, 2], n_rhs=stats[:, 3],
                  t_events=t_events, y_events=y_events, event_counts=counts,
                  dense_t=dense_t if dense_steps else None,
                  dense_f=dense_f if dense_steps else None)


def _complex_tolerance(value, what, d):
  """A tolerance of a complex state of d components, for its 2 d real parts."""
  if value is None or np.ndim(value) == 0:
    return value
  v = _concrete(value)
  if v is None:
    return value  # traced: _tolerance says so
  if v.ndim != 1 or v.shape[0] != d:
    raise ValueError(f"{what} must be a scalar or of shape (d,) = ({d},); got shape {v.shape}")
  return np.tile(v, 2)


def _complex_size(y0):
  """d for a complex y0 of shape (N, d), else None."""
  try:
    dtype = np.dtype(jnp.result_type(y0))
  except TypeError:
    return None
  if dtype.kind != "c":
    return None
  shape = np.shape(y0)
  if len(shape) != 2 or shape[1] == 0:
    raise ValueError(f"y0 must have shape (N, d) with d >= 1 (N trajectories of d components); "
                     f"got shape {shape}")
  return int(shape[1])


DEFAULT_DENSE_STEPS = 1000


def _dense_steps(dense) -> int:
  if isinstance(dense, (bool, np.bool_)):
    return DEFAULT_DENSE_STEPS if dense else 0
  steps = _static_int(dense, "dense", "a bool or an int (steps kept)")
  if not 1 <= steps <= _MAX_STEPS_LIMIT:
    raise ValueError(f"dense: the steps kept must be in [1, {_MAX_STEPS_LIMIT}]; got {steps}")
  return steps


def _static_int(value, what, kind="an int") -> int:
  try:
    return operator.index(value)
  except TypeError:
    raise TypeError(f"{what} must be {kind}; got {type(value).__name__}") from None


def _evaluate(dense_t, dense_f, n_accepted, t_final, y_final, t):
  """Solution.evaluate: per trajectory, scipy's OdeSolution segment choice and
  Dop853DenseOutput._call_impl."""
  t = jnp.asarray(t, dense_t.dtype)
  if t.ndim > 1:
    raise ValueError(f"evaluate: t must be a scalar or 1-D; got shape {t.shape}")
  scalar = t.ndim == 0
  t = jnp.atleast_1d(t)
  kept = dense_t.shape[1] - 1
  rows = dense_f.shape[2] - 1  # F[0..6]

  def one(ts, fs, accepted, tf, yf):
    k = jnp.minimum(accepted, kept)  # steps kept
    backward = ts[1] < ts[0]
    sign = jnp.where(backward, -1, 1).astype(ts.dtype)
    index = jnp.arange(kept + 1)
    s = jnp.where(index <= k, sign * ts, jnp.inf)  # ascending in the direction of integration
    u = sign * t
    # scipy's OdeSolution: the segment whose closed end holds t (the earlier one at a boundary).
    segment = jnp.clip(jnp.searchsorted(s, u, side="left") - 1, 0, jnp.maximum(k - 1, 0))
    t_old, t_new = ts[segment], ts[segment + 1]
    f = fs[segment]  # (T, 8, d)
    # No step kept: the rows are NaN; stand-ins keep the unused branch's derivatives finite.
    f = jnp.where(k > 0, f, 0)
    t_old, t_new = jnp.where(k > 0, t_old, 0), jnp.where(k > 0, t_new, 1)
    x = ((t - t_old) / (t_new - t_old))[:, None]
    y = jnp.zeros(f.shape[:1] + f.shape[2:], f.dtype)
    for i, r in enumerate(range(rows - 1, -1, -1)):
      y = (y + f[:, r]) * (x if i % 2 == 0 else 1 - x)
    y = y + f[:, rows]
    inside = (u >= s[0]) & (u <= sign * tf) & (u <= s[jnp.maximum(k, 0)]) & (k > 0)
    y = jnp.where(inside[:, None], y, jnp.nan)
    # No step taken (t0 == t1, or a failure at the start): the state at t0 only.
    return jnp.where(((k == 0) & (t == tf))[:, None], yf, y)

  out = jax.vmap(one)(dense_t, dense_f, n_accepted, t_final, y_final)
  return out[:, 0] if scalar else out


def _native_module(platform: str = "cpu"):
  try:
    if platform == "cpu":
      from jaxext.ode import _native
      return _native
    from jaxext.ode import _native_cuda
    return _native_cuda
  except ImportError as err:
    raise ImportError(f"jaxext.ode: Python right-hand sides and events are compiled by Numba, "
                      f"which is not importable ({err}); install it with: "
                      "pip install 'jaxext[numba]' (or use a built-in model and events)") from err


class UserFunctions:
  """The Python functions of one run (a primitive parameter): the right-hand side (None with a
  built-in model) and the events (built-in ones too: their index is the event's). Equal when
  their contents are (the Numba bridge's content id), so jit caches hit for a re-created
  function; compiled for a platform when lowered."""

  def __init__(self, rhs: functions.Rhs | None, events: tuple[functions.Event, ...]):
    self.rhs = rhs
    self.events = events
    from jaxext.numba_bridge import compile_cpu  # importable: _native_module() succeeded
    fns = (None if rhs is None else (rhs.fn, rhs.jacobian),
           tuple((i, e.fn, e.gradient) for i, e in enumerate(events) if e.fn is not None))
    checked = compile_cpu.effective_boundscheck  # what each function is compiled with
    checks = (None if rhs is None else checked(rhs.boundscheck),
              tuple(checked(e.boundscheck) for e in events))
    self.key = compile_cpu.content_id(fns, ("ode-user", len(events), checks), ()) or 1

  def __eq__(self, other):
    return isinstance(other, UserFunctions) and other.key == self.key

  def __hash__(self):
    return hash(self.key)

  def __repr__(self):
    return f"UserFunctions({self.rhs.name if self.rhs else 'model'}, key={self.key:016x})"


def _user_attrs(user, platform, name, dtype, n, p, sensitivities):
  """FFI attributes naming the compiled user functions on `platform` (rhs_id, jac_id, event ids,
  device_code). The CPU compiles the Jacobian only for a run that integrates sensitivities."""
  attrs = dict(rhs_id=0, jac_id=0, event_ids=[0] * len(user.events), device_code="")
  native = _native_module(platform)
  if platform == "cpu":
    if user.rhs is not None:
      check = user.rhs.boundscheck
      attrs["rhs_id"] = native.compile_rhs(user.rhs.fn, name, dtype, n, p, check)
      if user.rhs.jacobian is not None and sensitivities:
        attrs["jac_id"] = native.compile_jacobian(user.rhs.jacobian, name, dtype, n, p, check)
    attrs["event_ids"] = [0 if e.fn is None else
                          native.compile_event(e.fn, e.name, dtype, n, p, e.boundscheck)
                          for e in user.events]
    return attrs
  if user.rhs is None:
    raise NotImplementedError(
        f"jaxext.ode.dop853 '{name}': on CUDA, Python event functions need a Python right-hand "
        "side (with a built-in model, use radius/altitude events)")
  compiled = native.compile_user(user.rhs, user.events, dtype, n, p)
  attrs.update(rhs_id=user.key, jac_id=int(user.rhs.jacobian is not None),
               device_code=compiled.ptx)
  return attrs


def _time_span(t_span, count, dtype):
  if isinstance(t_span, tuple) and len(t_span) == 2:  # (t0, t1); a list or array: rows
    t0 = float_operand(t_span[0], "t_span[0]")
    t1 = float_operand(t_span[1], "t_span[1]")
    for t, what in ((t0, "t_span[0]"), (t1, "t_span[1]")):
      if t.ndim > 1 or (t.ndim == 1 and t.shape[0] not in (1, count)):
        raise ValueError(f"{what} must be a scalar or of shape (N,) with N = {count}; "
                         f"got shape {t.shape}")
    return jnp.stack([jnp.broadcast_to(t0.astype(dtype), (count,)),
                      jnp.broadcast_to(t1.astype(dtype), (count,))], axis=1)
  span = float_operand(t_span, "t_span").astype(dtype)
  if span.shape == (2,):
    return jnp.broadcast_to(span, (count, 2))
  if span.shape != (count, 2):
    raise ValueError(f"t_span must be (t0, t1), or of shape (N, 2) with N = {count}; "
                     f"got shape {span.shape}")
  return span


def _concrete(x):
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None


def _check_t_eval(t_eval, t_span):
  te = _concrete(t_eval)
  if te is None or te.size == 0:
    return
  if not np.all(np.isfinite(te)):
    raise ValueError("t_eval must be finite")
  d = np.diff(te)
  if te.size > 1 and not (np.all(d > 0) or np.all(d < 0)):
    raise ValueError("t_eval must be strictly increasing (or strictly decreasing for backward "
                     "integration)")
  span = _concrete(t_span)
  if span is not None and span.size:
    # scipy refuses t_eval outside t_span; with per-trajectory spans a point inside some span
    # and outside others is NaN for the others (documented), but one inside none is a mistake.
    lo, hi = span.min(axis=1), span.max(axis=1)
    inside = (te[:, None] >= lo[None, :]) & (te[:, None] <= hi[None, :])
    outside = te[~inside.any(axis=1)]
    if outside.size:
      raise ValueError(f"t_eval has values outside t_span ({outside[:3].tolist()}"
                       f"{' ...' if outside.size > 3 else ''} outside every trajectory's span), "
                       "as scipy refuses; under jit they give NaN")
  if span is not None and span.size and te.size > 1:
    moving = span[:, 1] != span[:, 0]  # t0 == t1: no direction to agree with
    forward = span[:, 1] > span[:, 0]
    if np.any(forward[moving] != (d[0] > 0)):
      raise ValueError("t_eval must be ordered in the direction of integration of every "
                       "trajectory (t_span)")


def _traced_t_eval_check(t_eval, t_span):
  """(N,) bool: trajectories whose t_eval is invalid (non-finite, not strictly monotonic, or
  ordered against their direction of integration), when t_eval or t_span is traced; else None."""
  if t_eval.shape[0] == 0 or (_concrete(t_eval) is not None and _concrete(t_span) is not None):
    return None
  bad = ~jnp.all(jnp.isfinite(t_eval))
  moving = t_span[:, 1] != t_span[:, 0]
  if t_eval.shape[0] > 1:
    d = jnp.diff(t_eval)
    bad = bad | ~(jnp.all(d > 0) | jnp.all(d < 0))
    return bad | (moving & ((t_span[:, 1] > t_span[:, 0]) != (d[0] > 0)))
  return jnp.broadcast_to(bad, (t_span.shape[0],))


def _tolerance(value, what, n):
  try:
    v = np.asarray(value, dtype=np.float64)
  except (TypeError, ValueError, jax.errors.TracerArrayConversionError,
          jax.errors.ConcretizationTypeError):
    raise TypeError(f"{what} must be a static float or array of floats (not traced)") from None
  if v.ndim > 1 or (v.ndim == 1 and v.shape[0] != n):
    raise ValueError(f"{what} must be a scalar or of shape (d,) = ({n},); got shape {v.shape}")
  if not np.all(np.isfinite(v)) or np.any(v <= 0):
    raise ValueError(f"{what} must be finite and > 0; got {value!r}")
  return tuple(np.broadcast_to(v, (n,)).tolist())


def _positive(value, what, allow_inf=False):
  try:
    v = float(value)
  except (TypeError, jax.errors.ConcretizationTypeError):
    raise TypeError(f"{what} must be a static float") from None
  if not v > 0 or (math.isinf(v) and not allow_inf) or math.isnan(v):
    raise ValueError(f"{what} must be > 0 and finite; got {value!r}")
  return v


DENSE_ROWS = 8  # jaxext/kernels/dop853.h kDense + 1: F[0..6], then y_old


def _result_shapes(count, n, m, n_events, slots, dtype, dense_steps=0):
  """n: the state size, or the augmented one (state and sensitivities) with sensitivities."""
  i32 = np.dtype(np.int32)
  return ((count, m, n), dtype), ((count,), dtype), ((count, n), dtype), ((count, 4), i32), \
      ((count, n_events, slots), dtype), ((count, n_events, slots, n), dtype), \
      ((count, n_events), i32), ((count, dense_steps + 1 if dense_steps else 0), dtype), \
      ((count, dense_steps, DENSE_ROWS, n), dtype)


def _augmented_size(n, p, sensitivities):
  return n + n * (n + p) if sensitivities else n


def _check_attributes(n, user, model, rtol, atol, first_step, max_step, max_steps, events,
                      event_slots):
  """dop853_p's static parameters, as dop853 makes them: a TypeError naming the first that is
  malformed (the primitive is public; the kernels index with these)."""
  def floats(v):
    return isinstance(v, tuple) and all(isinstance(x, float) for x in v)

  for what, v in (("rtol", rtol), ("atol", atol)):
    if not floats(v) or len(v) != n or not all(math.isfinite(x) and x > 0 for x in v):
      raise TypeError(f"dop853_p: {what} must be a tuple of d = {n} finite floats > 0; got {v!r}")
  if user is None and (not floats(model) or not model):
    raise TypeError(f"dop853_p: model must be a non-empty tuple of floats "
                    f"(jaxext.ode.models.Model.constants()); got {model!r}")
  if not isinstance(first_step, float) or not (first_step >= 0 and math.isfinite(first_step)):
    raise TypeError(f"dop853_p: first_step must be a finite float >= 0 (0: automatic); got "
                    f"{first_step!r}")
  if not isinstance(max_step, float) or not max_step > 0:
    raise TypeError(f"dop853_p: max_step must be a float > 0 (inf: unbounded); got {max_step!r}")
  if not static_int(max_steps) or not 1 <= max_steps <= _MAX_STEPS_LIMIT:
    raise TypeError(f"dop853_p: max_steps must be an int in [1, {_MAX_STEPS_LIMIT}]; got "
                    f"{max_steps!r}")
  if not static_int(event_slots) or event_slots < (1 if events else 0):
    raise TypeError(f"dop853_p: event_slots must be an int >= 1 (0 without events); got "
                    f"{event_slots!r}")
  if not isinstance(events, tuple) or len(events) > MAX_EVENTS:
    raise TypeError(f"dop853_p: events must be a tuple of at most {MAX_EVENTS}; got {events!r}")
  for i, e in enumerate(events):
    ok = (isinstance(e, tuple) and len(e) == 5 and all(static_int(e[k]) for k in (0, 1, 3, 4))
          and isinstance(e[2], float) and e[0] in (0, 1) and e[3] in (-1, 0, 1) and e[4] >= 0)
    if ok and e[0] == 0 and (n < 3 or not math.isfinite(e[2])):
      ok = False
    if ok and e[0] == 1 and (user is None or i >= len(user.events) or user.events[i].fn is None):
      ok = False
    if not ok:
      raise TypeError(f"dop853_p: events[{i}] must be (kind 0 (radius, d >= 3, a finite radius) "
                      "or 1 (a function of user), 0, radius, direction -1/0/1, max count >= 0); "
                      f"got {e!r}")


def _abstract_eval(y0, params, t_span, t_eval, *, user, model, rtol, atol, first_step, max_step,
                   max_steps, events, event_slots, sensitivities, dense_steps=0, **_):
  if y0.ndim != 2 or not kernel_float(y0.dtype):
    raise TypeError(f"dop853_p: y0 must be (N, d) float32 or float64; got {y0.dtype}{list(y0.shape)}")
  count, n = y0.shape
  _check_attributes(n, user, model, rtol, atol, first_step, max_step, max_steps, events,
                    event_slots)
  for x, what in ((params, "params"), (t_span, "t_span"), (t_eval, "t_eval")):
    if x.dtype != y0.dtype:
      raise TypeError(f"dop853_p: {what} has dtype {x.dtype}, y0 {y0.dtype}")
  if params.ndim != 2 or params.shape[0] != count or t_span.shape != (count, 2) or \
      t_eval.ndim != 1:
    raise TypeError("dop853_p: operand shapes disagree")
  if not static_int(dense_steps) or not 0 <= dense_steps <= _MAX_STEPS_LIMIT:
    raise TypeError(f"dop853_p: dense_steps must be an int in [0, {_MAX_STEPS_LIMIT}]; got "
                    f"{dense_steps!r}")
  n_out = _augmented_size(n, params.shape[1], sensitivities)
  return tuple(jax.core.ShapedArray(s, d) for s, d in
               _result_shapes(count, n_out, t_eval.shape[0], len(events), event_slots, y0.dtype,
                              dense_steps))


dop853_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(dop853_p)


# CUDA kernels for user functions (jaxext/cuda/ode_user_kernels.h): state components, and the
# largest state with its sensitivities.
_CUDA_MAX_STATE = 64
_CUDA_MAX_AUGMENTED = 256


def _lowering(ctx, y0, params, t_span, t_eval, *, platform, user, name, model, rtol, atol,
              first_step, max_step, max_steps, events, event_slots, sensitivities,
              dense_steps=0):
  count, n = y0.type.shape
  p = params.type.shape[1]
  dtype = ctx.avals_in[0].dtype
  if platform != "cpu":  # CUDA: one thread per trajectory
    if user is None and sensitivities and p > 2:
      raise NotImplementedError("jaxext.ode.dop853: derivatives of the built-in models on CUDA "
                                "take at most 2 parameter columns")
    if user is not None and user.rhs is not None:
      if n > _CUDA_MAX_STATE:
        raise NotImplementedError(f"jaxext.ode.dop853 '{name}': on CUDA, states of at most "
                                  f"{_CUDA_MAX_STATE} components; got {n}")
      if sensitivities and n + n * (n + p) > _CUDA_MAX_AUGMENTED:
        raise NotImplementedError(
            f"jaxext.ode.dop853 '{name}': derivatives on CUDA integrate n + n (n + p) <= "
            f"{_CUDA_MAX_AUGMENTED} components; got n = {n}, p = {p}")
  _ffi.require(platform, "jaxext.ode.dop853")
  ids = dict(rhs_id=0, jac_id=0, event_ids=[0] * len(events), device_code="")
  if user is not None:
    ids = _user_attrs(user, "cpu" if platform == "cpu" else "cuda", name, dtype, n, p,
                      sensitivities)
  n_events = len(events)
  col = lambda i, dt: np.asarray([e[i] for e in events] or [0], dt)
  attrs = dict(
      rhs_id=np.int64(ids["rhs_id"]), name=name, model=np.asarray(model, np.float64),
      rtol=np.asarray(rtol, np.float64), atol=np.asarray(atol, np.float64),
      first_step=np.float64(first_step), max_step=np.float64(max_step),
      max_steps=np.int64(max_steps), n_events=np.int64(n_events),
      event_kinds=col(0, np.int64), event_ids=np.asarray(ids["event_ids"] or [0], np.int64),
      event_consts=col(2, np.float64), event_directions=col(3, np.int64),
      event_terminal=col(4, np.int64), jac_id=np.int64(ids["jac_id"]),
      sensitivities=np.int64(sensitivities), dense_steps=np.int64(dense_steps),
      device_code=ids["device_code"])

  def result_types(y0, params, t_span, t_eval):
    n_out = _augmented_size(y0.shape[1], params.shape[1], sensitivities)
    return tuple(jax.ShapeDtypeStruct(s, d) for s, d in _result_shapes(
        y0.shape[0], n_out, t_eval.shape[0], n_events, event_slots, y0.dtype, dense_steps))

  # On CUDA the kept steps are written trajectory-minor (one thread per trajectory: a warp's
  # threads then write neighbouring addresses); XLA transposes where a consumer needs otherwise.
  layouts = None
  if platform != "cpu" and dense_steps:
    layouts = [None] * 7 + [(1, 0), (1, 2, 3, 0)]
  return _sharding.lower(
      ctx, (y0, params, t_span, t_eval),
      _sharding.ffi_per_shard("jaxext_dop853", result_types, output_layouts=layouts, **attrs),
      *dop853_p.factors(*ctx.avals_in))


# Trajectories are independent: split along them, everything else stays whole.
_sharding.def_factors(dop853_p, lambda *avals, **_: (
    [("traj", None), ("traj", None), ("traj", None), (None,)],
    [("traj", None, None), ("traj",), ("traj", None), ("traj", None), ("traj", None, None),
     ("traj", None, None, None), ("traj", None), ("traj", None), ("traj", None, None, None)]))


compat.register_lowering(dop853_p, functools.partial(_lowering, platform="cpu"), "cpu",
                         partitioned=True)
compat.register_lowering(dop853_p, functools.partial(_lowering, platform="CUDA"), "cuda",
                         partitioned=True)


def _batch(args, dims, **params):
  """vmap: the mapped axis joins the trajectory axis (one call); a mapped t_eval runs one call per
  batch element."""
  size = compat.batch_size(args, dims)
  y0, p, span = (compat.batch_axis_to_front(x, d, size) for x, d in zip(args[:3], dims[:3]))
  te = args[3]
  if compat.is_mapped(dims[3]):
    te = compat.batch_axis_to_front(te, dims[3], size)
    outs = jax.lax.map(lambda a: tuple(dop853_p.bind(*a, **params)), (y0, p, span, te))
    return list(outs), [0] * len(outs)
  count = y0.shape[1]
  flat = lambda x: x.reshape((size * count,) + x.shape[2:])
  outs = dop853_p.bind(flat(y0), flat(p), flat(span), te, **params)
  return [o.reshape((size, count) + o.shape[1:]) for o in outs], [0] * len(outs)


compat.register_batching(dop853_p, _batch)


def _jvp(primals, tangents, *, sensitivities, user, events, **params):
  """Forward sensitivities: the kernel integrates S = d y / d (y0, p) alongside the state (the
  variational equations dS/dt = df/dy S + [0 | df/dp], S(t0) = [I | 0]) on the state's own steps,
  and the tangents are S applied to (dy0, dp): linear in them, so reverse mode follows."""
  if sensitivities:
    raise NotImplementedError("jaxext.ode.dop853: second derivatives are not available")
  y0, p, span, te = primals
  dy0, dp, dspan, dte = tangents
  with_span = not compat.is_zero_tangent(dspan)
  with_te = not compat.is_zero_tangent(dte)
  if events and user is not None:
    for e in user.events:
      if e.fn is not None and e.gradient is None:
        raise ValueError(e.derivative_error or
                         f"jaxext.ode.dop853: derivatives through the event '{e.name}' need its "
                         "gradient: define it with @jaxext.ode.event(gradient=...)")
  if user is not None and user.rhs is not None and user.rhs.jacobian is None:
    raise ValueError(user.rhs.derivative_error or
                     f"jaxext.ode.dop853: derivatives need the Jacobian of the right-hand side "
                     f"'{params['name']}': define it with @jaxext.ode.rhs(jacobian=...)")
  model = params["model"]
  dy0 = compat.instantiate_zeros(dy0)
  if with_span:
    # Starting later by dt0 from the same y0 is, to first order, starting at t0 from
    # y0 - f(t0, y0) dt0: dy/dt0 = -S_y0 f(t0, y0) (non-autonomous systems too), so t0's tangent
    # joins y0's and reaches every output (events included) through the sensitivities.
    dspan = compat.instantiate_zeros(dspan)
    dy0 = dy0 - _rhs_at(user, model, span[:, 0], y0, p) * dspan[:, :1]
  outs = dop853_p.bind(y0, p, span, te, sensitivities=True, user=user, events=events, **params)
  ys_aug, t_final, y_final_aug, stats, t_events, y_events_aug, counts, dense_t, dense_aug = outs
  n, cols = y0.shape[1], y0.shape[1] + p.shape[1]
  ys, y_final = ys_aug[..., :n], y_final_aug[..., :n]
  s_ys = ys_aug[..., n:].reshape(ys.shape + (cols,))
  s_final = y_final_aug[..., n:].reshape(y_final.shape + (cols,))
  # Rows never reached (NaN) have no sensitivity: zero, so that a masked NaN row does not turn the
  # whole gradient into NaN (NaN x 0 in the transpose).
  s_ys = jnp.where(jnp.isfinite(ys)[..., None], s_ys, 0)
  s_final = jnp.where(jnp.isfinite(y_final)[..., None], s_final, 0)
  dz = jnp.concatenate([compat.instantiate_zeros(dy0), compat.instantiate_zeros(dp)], axis=1)
  d_ys = jnp.einsum("ntij,nj->nti", s_ys, dz)
  d_final = jnp.einsum("nij,nj->ni", s_final, dz)
  y_events = y_events_aug[..., :n]
  d_t_final, d_t_events, d_y_events = (jnp.zeros_like(t_final), jnp.zeros_like(t_events),
                                       jnp.zeros_like(y_events))
  if events:
    d_t_events, d_y_events, d_t_final, d_final = _event_tangents(
        events, user, model, p, dz, t_events, y_events_aug, t_final, y_final_aug,
        stats[:, 0], counts, d_final)
  if with_span:
    # t1 moves the end of the trajectories that reached it (not those an event or a failure
    # stopped): y_final by f(t1, y_final) dt1, t_final by dt1.
    reached = (stats[:, 0] == Status.SUCCESS) & jnp.all(jnp.isfinite(y_final), axis=1)
    f1 = _rhs_at(user, model, jnp.where(reached, t_final, jnp.nan), y_final, p, reached)
    d_final = d_final + jnp.where(reached[:, None], f1 * dspan[:, 1:], 0)
    d_t_final = d_t_final + jnp.where(reached, dspan[:, 1], 0)
  if with_te and te.shape[0]:
    # ys[:, j] = y(t_eval[j]): moves by f(t_eval[j], ys[:, j]) dt_eval[j] where it was reached.
    count, m = ys.shape[0], ys.shape[1]
    rows_t = jnp.broadcast_to(te[None, :], (count, m))
    ok = jnp.all(jnp.isfinite(ys), axis=-1)
    f_te = _rhs_at(user, model, jnp.where(ok, rows_t, jnp.nan).reshape(-1),
                   ys.reshape(count * m, n),
                   jnp.broadcast_to(p[:, None, :], (count, m, p.shape[1])).reshape(count * m, -1),
                   ok.reshape(-1)).reshape(ys.shape)
    d_ys = d_ys + jnp.where(ok[..., None], f_te * dte[None, :, None], 0)
  float0 = lambda x: np.zeros(x.shape, jax.dtypes.float0)
  # The dense output of the augmented state holds the sensitivities' interpolants too (the same
  # steps and stages): its tangent is theirs applied to dz; the step boundaries do not move.
  dense_f = dense_aug[..., :n]
  s_dense = dense_aug[..., n:].reshape(dense_f.shape + (cols,))
  s_dense = jnp.where(jnp.isfinite(dense_f)[..., None], s_dense, 0)
  d_dense_f = jnp.einsum("nkrij,nj->nkri", s_dense, dz)
  primal_out = (ys, t_final, y_final, stats, t_events, y_events, counts, dense_t, dense_f)
  tangent_out = (d_ys, d_t_final, d_final, float0(stats), d_t_events, d_y_events, float0(counts),
                 jnp.zeros_like(dense_t), d_dense_f)
  return primal_out, tangent_out


def _rhs_at(user, model, t, y, p, valid=None):
  """f(t, y, p) on rows (t (M,), y (M, d), p (M, q)) as a primal coefficient of the tangents:
  the built-in model's formulas in jax.numpy, or the Python right-hand side (Numba-compiled, on
  the rows' platform: jaxext/ode/_rows.py). Rows where `valid` is False (or t is NaN) give 0."""
  count = y.shape[0]
  if valid is None:
    valid = jnp.all(jnp.isfinite(y), axis=1) & jnp.isfinite(t)
  if user is None or user.rhs is None:
    # A stand-in state on unused rows (|r| twice the body's radius, r . v nonzero) keeps the
    # built-in model's formulas finite there.
    stand_in = jnp.asarray([2 * float(model[1]), 0, 0, 1, 1, 0], y.dtype)
    f = models.rhs_from_constants(model, jnp.where(valid[:, None], y, stand_in), p)
  else:
    from jaxext.ode import _rows
    f = _rows.rhs(user.rhs.fn, user.rhs.name, jnp.where(valid, t, jnp.nan),
                  jnp.where(valid[:, None], y, 0), p, boundscheck=user.rhs.boundscheck)
  return jnp.where(valid[:, None] & (count > 0), f, 0)


def _event_tangents(events, user, model, p, dz, t_events, y_events_aug, t_final, y_final_aug,
                    status, counts, d_final):
  """Tangents of the event times and states, and of t_final / y_final where a terminal event
  stopped the trajectory. At a root of g, g(t_e, y(t_e; z), p) = 0 gives

      dt_e = -(g_y . S dz + g_p . dp) / (g_t + g_y . f),   dy_e = S dz + f dt_e

  (S = dy/dz from the variational equations, f the right-hand side at the event): infinite where
  the trajectory grazes the event surface, g_t + g_y . f = 0. g's gradient is known for built-in
  events (g = |r| - R: g_y = (r/|r|, 0)); a Python event brings its own; f is the built-in model's
  (models.rhs_from_constants) or the Python right-hand side's (Numba, jaxext/ode/_rows.py)."""
  count, n_events, slots = t_events.shape
  cols = dz.shape[1]
  n = y_final_aug.shape[-1] // (1 + cols)  # the augmented state is n + n * cols
  dtype = t_events.dtype

  # Rows: every event slot (N, E, K), then y_final once per event (N, E); flattened to M rows.
  # (Explicit sizes throughout: reshape's -1 divides by zero when there are no trajectories.)
  n_aug = y_final_aug.shape[-1]
  rows_t = jnp.concatenate([t_events.reshape(count, n_events * slots),
                            jnp.broadcast_to(t_final[:, None], (count, n_events))], axis=1)
  rows_y = jnp.concatenate([y_events_aug.reshape(count, n_events * slots, n_aug),
                            jnp.broadcast_to(y_final_aug[:, None], (count, n_events, n_aug))],
                           axis=1)
  # The stopping event of each trajectory stopped by one: the terminal event whose count reached
  # its terminal count (the integrator stops at the first occurrence that does so).
  max_count = np.asarray([e[4] for e in events])
  stopper = (max_count > 0) & (counts >= max_count)  # (N, E)
  stopped = (status == Status.EVENT) & stopper.any(1)
  stopper = stopper & (jnp.cumsum(stopper, axis=1) == 1)
  # Used rows: filled event slots (a finite time), and each stopped trajectory's stopping event.
  y, s = rows_y[..., :n], rows_y[..., n:].reshape(rows_y.shape[:-1] + (n, cols))
  valid = jnp.concatenate([jnp.ones((count, n_events * slots), bool), stopper & stopped[:, None]],
                          axis=1) & jnp.isfinite(rows_t) & jnp.isfinite(y).all(-1)
  s = jnp.where(valid[..., None, None], s, 0)
  sdz = jnp.einsum("nmij,nj->nmi", s, dz)
  p_rows = jnp.broadcast_to(p[:, None, :], rows_t.shape + p.shape[1:])
  event_of_row = np.concatenate([np.repeat(np.arange(n_events), slots), np.arange(n_events)])
  flat = lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])
  unflat = lambda x: x.reshape(rows_t.shape + x.shape[1:])
  t_nan = jnp.where(valid, rows_t, jnp.nan)

  # f at every row (0 on unused ones).
  f = unflat(_rhs_at(user, model, flat(t_nan), flat(y), flat(p_rows), flat(valid)))

  # g's gradient at every row, event by event.
  g_t = jnp.zeros(rows_t.shape, dtype)
  g_y = jnp.zeros(y.shape, dtype)
  g_p = jnp.zeros(p_rows.shape, dtype)
  for e, (kind, *_rest) in enumerate(events):
    mine = event_of_row == e
    if kind == 0:  # built-in: g = |r| - R
      r = y[..., :3]
      norm = jnp.sqrt(jnp.sum(r * r, -1, keepdims=True))
      unit = jnp.where(valid[..., None] & (norm > 0), r / jnp.where(norm > 0, norm, 1), 0)
      gy_e = jnp.concatenate([unit, jnp.zeros(y.shape[:-1] + (n - 3,), dtype)], -1)
      g_y = jnp.where(mine[None, :, None], gy_e, g_y)
    else:
      from jaxext.ode import _rows
      ev = user.events[e]
      idx = np.flatnonzero(mine)
      gt_e, gy_e, gp_e = _rows.event_gradient(
          ev.gradient, ev.name, flat(t_nan[:, idx]), flat(y[:, idx]), flat(p_rows[:, idx]),
          boundscheck=ev.boundscheck)
      g_t = g_t.at[:, idx].set(gt_e.reshape(count, idx.size))
      g_y = g_y.at[:, idx].set(gy_e.reshape(count, idx.size, n))
      g_p = g_p.at[:, idx].set(gp_e.reshape(count, idx.size, p.shape[1]))

  # Coefficients are primal values: masked to finite numbers on unused rows, so that neither the
  # tangents nor their transposes see a NaN there.
  f = jnp.where(valid[..., None], f, 0)
  den = g_t + jnp.sum(g_y * f, -1)
  den = jnp.where(valid, den, 1)
  num = jnp.sum(g_y * sdz, -1) + jnp.einsum("nmq,nq->nm", g_p, dz[:, n:])
  dt = jnp.where(valid, -num / den, 0)
  dy = jnp.where(valid[..., None], sdz + f * dt[..., None], 0)

  k = n_events * slots
  d_t_events = dt[:, :k].reshape(t_events.shape)
  d_y_events = dy[:, :k].reshape(t_events.shape + (n,))
  d_t_final = jnp.sum(dt[:, k:], axis=1)  # at most one stopping event per trajectory
  d_final = jnp.where(stopped[:, None], jnp.sum(dy[:, k:], axis=1), d_final)
  return d_t_events, d_y_events, d_t_final, d_final


compat.register_jvp(dop853_p, _jvp)
