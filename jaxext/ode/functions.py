"""User functions of jaxext.ode: right-hand sides and event functions written in Python.

    @jaxext.ode.rhs
    def pendulum(t, y, p, dydt):           # y, p, dydt: 1-D arrays; write dydt in place
        dydt[0] = y[1]
        dydt[1] = -p[0] * math.sin(y[0])

    @jaxext.ode.event(terminal=True, direction=-1)
    def hits_zero(t, y, p):                # a float whose sign changes mark the event
        return y[0]

Derivatives of the solution through a Python event need the event's gradient:

    def crossing_gradient(t, y, p, dgdy, dgdp):  # write dg/dy, dg/dp (zeroed before the call)
        dgdy[0] = 1.0
        return 0.0                                # and return dg/dt

    @jaxext.ode.event(direction=-1, gradient=crossing_gradient)
    def crossing(t, y, p):
        return y[0]

They are compiled by Numba (the bridge of jaxext.numba_kernel) into native functions the integrator
calls directly, with no Python in the loop: they must be Numba-compatible (nopython mode). A plain
function is accepted too (compiled the same way); an event function may carry scipy's attributes
`terminal` and `direction` instead of using the decorator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, overload

import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Rhs:
  """A right-hand side `fn(t, y, p, dydt)` (see the module docstring), optionally with its
  Jacobian `jacobian(t, y, p, dfdy, dfdp)` filling df/dy (d, d) and df/dp (d, p): derivatives of
  the solution (jax.jvp, jax.grad) integrate the variational equations with it."""
  fn: Callable
  name: str
  jacobian: Callable | None = None
  boundscheck: bool = False
  # Why a jax.numpy right-hand side has no Jacobian (jax could not differentiate it): the error
  # derivatives then raise. Plain integrations do not need it.
  derivative_error: str | None = None


@overload
def rhs(fn: Callable[..., Any], *, name: str | None = None, jacobian: Callable | None = None,
        boundscheck: bool = False) -> Rhs: ...
@overload
def rhs(fn: None = None, *, name: str | None = None, jacobian: Callable | None = None,
        boundscheck: bool = False) -> Callable[[Callable[..., Any]], Rhs]: ...
def rhs(fn: Callable[..., Any] | None = None, *, name: str | None = None,
        jacobian: Callable | None = None,
        boundscheck: bool = False) -> Rhs | Callable[[Callable[..., Any]], Rhs]:
  """Decorator: a Numba right-hand side `fn(t, y, p, dydt)` for `jaxext.ode.dop853`.

  Used as `@ode.rhs` or `@ode.rhs(jacobian=..., boundscheck=...)`. `fn` writes dy/dt into `dydt`
  and returns nothing; `y` and `p` are read-only (writing them fails to compile). A right-hand
  side written with jax.numpy, `rhs(t, y, args) -> dy/dt`, needs no decorator: pass it to dop853
  as it is (its Jacobians come from jax).

  Args:
    fn: the function (when called directly rather than as a decorator).
    name: for error messages (default: the function's name).
    jacobian: `jacobian(t, y, p, dfdy, dfdp)` writing df/dy into dfdy (d, d) and df/dp into dfdp
      (d, p); needed for derivatives of the solution.
    boundscheck: compile `fn` and `jacobian` with Numba's bounds checking (on the CPU only:
      numba-cuda has none): an index out of range (p[3] with 1 parameter, dfdy[5] with d = 2)
      then fails the call with an error naming the function ("raised an exception"), instead of
      reading or writing past the array (the default, as in Numba: no checks, full speed).
      `NUMBA_BOUNDSCHECK=0/1` overrides it, as it does Numba's own.

  Returns:
    An `Rhs` (or, without `fn`, the decorator making one). Needs `jaxext[numba]` when dop853
    compiles it; runs on the CPU and, compiled by numba-cuda, on CUDA.

  Raises:
    TypeError: `fn` or `jacobian` is not a function.
  """
  if jacobian is not None and not callable(jacobian):
    raise TypeError(f"jaxext.ode.rhs: jacobian must be a function; got {type(jacobian).__name__}")

  def wrap(f: Callable[..., Any]) -> Rhs:
    if not callable(f):
      raise TypeError(f"jaxext.ode.rhs decorates a function; got {type(f).__name__}")
    return Rhs(fn=f, name=name or str(getattr(f, "__name__", "rhs")), jacobian=jacobian,
               boundscheck=bool(boundscheck))
  return wrap if fn is None else wrap(fn)


@dataclasses.dataclass(frozen=True, eq=False)
class Event:
  """An event g(t, y, p) = 0, as scipy's solve_ivp defines them (made by `event`).

  A built-in event (`radius` set, `fn` None) is g = norm(y[0:3]) - radius, evaluated in C++ (see
  `jaxext.ode.models.altitude_event`); it needs no Numba, and its gradient is known.

  Attributes:
    fn: the event function, or None for a built-in event.
    terminal: False (record every occurrence), True (stop at the first) or an int k >= 1 (stop at
      the k-th occurrence), as in scipy.
    direction: 0 (any sign change), 1 (g goes from negative to positive), -1 (positive to
      negative).
    radius: the built-in event's radius, else None.
    name: for error messages.
    gradient: None, or `gradient(t, y, p, dgdy, dgdp) -> dg/dt` writing dg/dy into dgdy (d,) and
      dg/dp into dgdp (p,) (both zeroed before the call) and returning dg/dt (0.0 for an event
      that does not depend on t). Derivatives of the solution through a Numba event need it: the
      event time moves by dt = -(dg/dy . dy + dg/dp . dp) / (dg/dt + dg/dy . f).
    boundscheck: compile with Numba's bounds checking (see `rhs`).
  """
  fn: Callable | None
  terminal: bool | int = False
  direction: int = 0
  radius: float | None = None
  name: str = "event"
  gradient: Callable | None = None
  boundscheck: bool = False
  derivative_error: str | None = None  # as Rhs's, for a jax.numpy event

  def __post_init__(self):
    if (self.fn is None) == (self.radius is None):
      raise ValueError("an Event has either a function or a built-in radius")
    if self.gradient is not None and (self.fn is None or not callable(self.gradient)):
      raise ValueError("an Event's gradient must be a function, and only a Python event takes "
                       "one (built-in events know theirs)")
    if self.direction not in (-1, 0, 1):
      raise ValueError(f"event direction must be -1, 0 or 1; got {self.direction!r}")
    t = self.terminal
    if not (isinstance(t, (bool, np.bool_)) or t is None):
      ok = isinstance(t, (int, np.integer, float, np.floating)) and t >= 0 and float(t) == int(t)
      if not ok:
        raise ValueError(f"event terminal must be a bool or an integer count >= 0; got {t!r}")

  @property
  def max_count(self) -> int:
    """Occurrences after which integration stops (0: never)."""
    if isinstance(self.terminal, (bool, np.bool_)):
      return int(bool(self.terminal))
    if not self.terminal:
      return 0
    return int(self.terminal)


@overload
def event(fn: Callable[..., Any], *, terminal: bool | int = False, direction: int = 0,
          name: str | None = None, gradient: Callable | None = None,
          boundscheck: bool = False) -> Event: ...
@overload
def event(fn: None = None, *, terminal: bool | int = False, direction: int = 0,
          name: str | None = None, gradient: Callable | None = None,
          boundscheck: bool = False) -> Callable[[Callable[..., Any]], Event]: ...
def event(fn: Callable[..., Any] | None = None, *, terminal: bool | int = False,
          direction: int = 0, name: str | None = None, gradient: Callable | None = None,
          boundscheck: bool = False) -> Event | Callable[[Callable[..., Any]], Event]:
  """Decorator: an event function for `jaxext.ode.dop853`, with scipy's `terminal` and `direction`.

  Used as `@ode.event(terminal=True, direction=-1)`. With a jax.numpy right-hand side the event is
  jax.numpy too, `g(t, y, args) -> scalar` (its gradient from jax); with a Numba right-hand side
  (or a built-in model) it is a Numba function `g(t, y, p) -> float`. A plain callable with
  `terminal` and `direction` attributes (scipy's convention) works as well.

  Args:
    fn: the function (when called directly rather than as a decorator).
    terminal: False (record every occurrence), True (stop at the first) or an int k >= 1 (stop at
      the k-th occurrence).
    direction: 0 (any sign change), 1 (g rising through zero), -1 (g falling through zero).
    name: for error messages (default: the function's name).
    gradient: for a Numba event, `gradient(t, y, p, dgdy, dgdp) -> dg/dt` (see `Event`); needed
      for derivatives of the solution through the event.
    boundscheck: Numba's bounds checking for `fn` and `gradient` (on the CPU; see `rhs`).

  Returns:
    An `Event` (or, without `fn`, the decorator making one).

  Raises:
    TypeError: `fn` or `gradient` is not a function.
    ValueError: `direction` is not -1, 0 or 1.
  """
  if gradient is not None and not callable(gradient):
    raise TypeError(f"jaxext.ode.event: gradient must be a function; "
                    f"got {type(gradient).__name__}")

  def wrap(f: Callable[..., Any]) -> Event:
    if not callable(f):
      raise TypeError(f"jaxext.ode.event decorates a function; got {type(f).__name__}")
    return Event(fn=f, terminal=terminal, direction=direction,
                 name=name or str(getattr(f, "__name__", "event")), gradient=gradient,
                 boundscheck=bool(boundscheck))
  return wrap if fn is None else wrap(fn)


def as_event(e, index: int) -> Event:
  """An Event from what the user passed as events[index] (an Event, or scipy-style callable)."""
  if isinstance(e, Event):
    return e
  if callable(e):
    try:
      return Event(fn=e, terminal=getattr(e, "terminal", False),
                   direction=int(np.sign(getattr(e, "direction", 0))),  # scipy: its sign
                   name=getattr(e, "__name__", f"event {index}"),
                   gradient=getattr(e, "gradient", None))
    except ValueError as err:
      raise ValueError(f"events[{index}]: {err}") from None
  raise TypeError(f"events[{index}] must be a jaxext.ode.Event or a function g(t, y, p); "
                  f"got {type(e).__name__}")
