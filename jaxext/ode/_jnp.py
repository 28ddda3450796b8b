"""Right-hand sides and events written in jax.numpy, compiled to native code for the integrator.

    def lorenz(t, y, args):                    # diffrax's convention: one trajectory,
      sigma, rho, beta = args                  # y of shape (d,), args any pytree
      return jnp.array([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1], y[0] * y[1] - beta * y[2]])

jax traces the function once per (shapes, dtypes) into a jaxpr; jaxext/ode/_jaxpr_numba.py writes
the jaxpr out as scalar Python that Numba compiles into the same native entry points a Numba
right-hand side gets (jaxext/ode/_native.py): the integrator calls machine code, with no Python and
no XLA dispatch per step. The derivatives the integrator needs come from jax, from the same
function: the Jacobians df/dy and df/dp (jax.jacfwd) for the variational equations, and an event's
gradient (jax.grad) for derivatives through events. Nothing is written by hand.

`args` is flattened into the parameter rows the integrator passes to its functions: each leaf
raveled and stored in the integration's dtype, one row per trajectory (shared leaves repeated in
every row). Inside the function each leaf has its own dtype again (an integer leaf exactly for
|values| < 2**24 in float32 and 2**53 in float64; a float64 leaf of a float32 integration carries
float32's precision), and a Python float takes the integration's dtype (jax's weak typing).
"""

from __future__ import annotations

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from jaxext.ode import _jaxpr_numba
from jaxext.ode import functions


def is_numba_form(fn) -> bool:
  """True for a Numba-style right-hand side `fn(t, y, p, dydt)` (four positional parameters, or a
  Numba dispatcher); False for the jax.numpy form `fn(t, y, args) -> dydt`."""
  if isinstance(fn, functions.Rhs):
    return True
  if type(fn).__module__.startswith("numba"):
    return True
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):
    return False
  positional = [p for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  required = [p for p in positional if p.default is p.empty]
  return len(required) == 4 or (len(positional) == 4 and len(required) >= 3 and
                                not any(p.kind == p.VAR_POSITIONAL
                                        for p in sig.parameters.values()))


def on_complex_state(fn, d: int, kind: str):
  """`fn(t, y, args)` of a complex state y (d,), as a function of [re(y), im(y)] (2 d,): a
  right-hand side's complex dy/dt split the same way; an event's value must be real."""
  def real_form(t, y, args):
    out = fn(t, jax.lax.complex(y[:d], y[d:]), args)
    if kind == "event":
      if jnp.iscomplexobj(out):
        raise TypeError(f"the event '{getattr(fn, '__name__', 'event')}' of a complex state "
                        "must return a real number (e.g. jnp.real(...) or jnp.abs(...))")
      return out
    out = jnp.asarray(out)
    if out.shape != (d,):
      raise ValueError(f"the right-hand side '{getattr(fn, '__name__', 'rhs')}' must return "
                       f"dy/dt of shape ({d},) (as y); got shape {out.shape}")
    return jnp.concatenate([jnp.real(out), jnp.imag(out)]) if jnp.iscomplexobj(out) else \
        jnp.concatenate([out, jnp.zeros_like(out)])
  real_form.__name__ = getattr(fn, "__name__", kind)
  return real_form


@dataclasses.dataclass(frozen=True)
class ArgsLayout:
  """Where each leaf of `args` sits in a parameter row."""
  treedef: object
  shapes: tuple
  dtypes: tuple
  offsets: tuple
  size: int

  def unflatten(self, row):
    """The args pytree from one parameter row (traced)."""
    leaves = []
    for shape, dtype, offset in zip(self.shapes, self.dtypes, self.offsets):
      n = int(np.prod(shape, dtype=np.int64))
      leaf = row[offset:offset + n].reshape(shape)
      if np.dtype(dtype).kind == "c":  # stored as real parts, then imaginary parts
        leaf = jax.lax.complex(leaf, row[offset + n:offset + 2 * n].reshape(shape))
      if np.dtype(dtype) != leaf.dtype:
        leaf = leaf.astype(dtype)
      leaves.append(leaf)
    return jax.tree_util.tree_unflatten(self.treedef, leaves)


class _Axes(tuple):
  """The axes of the leaves under one leaf of args_axes (a tuple subclass: not a pytree node of
  the user's, unlike a list or tuple they may use)."""


def _axes_for(args, args_axes):
  """One axis (0 or None) per leaf of args, from a vmap-style prefix tree."""
  if args_axes is None or isinstance(args_axes, int):
    return [args_axes] * len(jax.tree_util.tree_leaves(args))
  try:
    expanded = jax.tree_util.tree_map(
        lambda axis, sub: _Axes([axis] * len(jax.tree_util.tree_leaves(sub))), args_axes, args,
        is_leaf=lambda x: x is None)
  except ValueError as err:
    raise ValueError(f"args_axes must be 0, None or a tree prefix of args with 0/None leaves "
                     f"(as jax.vmap's in_axes): {err}") from None
  return [a for group in jax.tree_util.tree_leaves(expanded, is_leaf=lambda x: isinstance(x, _Axes))
          for a in group]


def layout(args, args_axes, count: int, dtype):
  """(ArgsLayout, params): the parameter rows (count, P) of `args` in the integration's dtype."""
  leaves, treedef = jax.tree_util.tree_flatten(args)
  axes = _axes_for(args, args_axes)
  shapes, dtypes, offsets, columns = [], [], [], []
  offset = 0
  for k, (leaf, axis) in enumerate(zip(leaves, axes)):
    path = f"args leaf {k}"
    if axis not in (0, None):
      raise ValueError(f"args_axes: {path} has axis {axis!r}; only 0 (one row per trajectory) "
                       "or None (shared) are supported")
    try:
      x = jnp.asarray(leaf)
    except TypeError:
      raise TypeError(f"args: {path} is a {type(leaf).__name__}, not an array; args is a pytree "
                      "of arrays (static values belong in the function, e.g. a closure)") from None
    if not (jnp.issubdtype(x.dtype, jnp.inexact) or jnp.issubdtype(x.dtype, jnp.integer) or
            x.dtype == jnp.bool_):
      raise TypeError(f"args: {path} has dtype {x.dtype}; supported: floating, complex, "
                      "integer, bool")
    if axis == 0:
      if x.ndim == 0 or x.shape[0] != count:
        raise ValueError(f"args: {path} is batched over trajectories (args_axes 0), so its "
                         f"leading axis must be N = {count}; got shape {x.shape}")
      shape = x.shape[1:]
      rows = x.reshape(count, -1)
    else:
      shape = x.shape
      rows = jnp.broadcast_to(x.reshape(1, -1), (count, x.size))
    if jnp.iscomplexobj(rows):
      rows = jnp.concatenate([jnp.real(rows), jnp.imag(rows)], axis=1)
    shapes.append(tuple(shape))
    # A Python float is weakly typed in jax (it takes the other operand's precision): it enters
    # the function in the integration's dtype, so that a float32 state stays float32.
    weak_float = isinstance(leaf, float) or (x.dtype.kind == "f" and getattr(x, "weak_type", False))
    weak_complex = isinstance(leaf, complex)
    dtypes.append(np.dtype(dtype) if weak_float else
                  (np.result_type(dtype, np.complex64) if weak_complex else np.dtype(x.dtype)))
    offsets.append(offset)
    offset += rows.shape[1]
    columns.append(rows.astype(dtype))
  params = (jnp.concatenate(columns, axis=1) if columns else jnp.zeros((count, 0), dtype))
  return ArgsLayout(treedef, tuple(shapes), tuple(dtypes), tuple(offsets), offset), params


def _trace(fn, avals, where):
  try:
    return jax.make_jaxpr(fn)(*avals)
  except Exception as err:
    if not isinstance(err, _jaxpr_numba.Unsupported):
      err.add_note(f"(raised while jax traced {where[len('jaxext.ode.dop853: '):]}: the function "
                   "runs once on abstract values; branch with jnp.where, not Python's if)")
    raise


def _name(fn, default):
  return getattr(fn, "__name__", default)


def _translate(closed, *, name, where, inputs, outputs):
  source = _jaxpr_numba.write_function(closed, name=name, where=where, inputs=inputs,
                                       outputs=outputs)
  return _jaxpr_numba.function(source, name)


def _identifier(text):
  s = "".join(c if c.isalnum() or c == "_" else "_" for c in text)
  return s if s and not s[0].isdigit() else f"f_{s}"


def _signature(args_layout: ArgsLayout, n: int, dtype):
  """What every generated function takes, t, y (n,) and a parameter row: their abstract values
  for tracing, and their (name, shape) for the translation."""
  avals = (jax.ShapeDtypeStruct((), dtype), jax.ShapeDtypeStruct((n,), dtype),
           jax.ShapeDtypeStruct((args_layout.size,), dtype))
  return avals, [("t", ()), ("y", (n,)), ("p", (args_layout.size,))]


def rhs(fn, args_layout: ArgsLayout, n: int, dtype) -> functions.Rhs:
  """A Numba-compilable Rhs (and Jacobian) written from the jax.numpy function fn(t, y, args)."""
  name = _name(fn, "rhs")
  where = f"jaxext.ode.dop853: the right-hand side '{name}'"
  dtype = np.dtype(dtype)

  def flat(t, y, row):
    out = fn(t, y, args_layout.unflatten(row))
    try:
      out = jnp.asarray(out)
    except TypeError:
      raise TypeError(f"{where} must return dy/dt as an array of shape ({n},); got "
                      f"{type(out).__name__}") from None
    if out.shape != (n,):
      raise ValueError(f"{where} must return dy/dt of shape ({n},) (as y); got shape "
                       f"{out.shape}")
    if jnp.issubdtype(out.dtype, jnp.complexfloating):
      raise TypeError(f"{where} returned complex values; the state is real")
    return out.astype(dtype)

  avals, inputs = _signature(args_layout, n, dtype)
  base = _identifier(name)
  fn_py = _translate(_trace(flat, avals, where), name=f"{base}__jaxext_rhs", where=where,
                     inputs=inputs, outputs=["dydt"])
  jac_where = f"{where} (its Jacobian, by jax.jacfwd)"
  jac_py, error = _derivative(lambda: _translate(
      _trace(jax.jacfwd(flat, argnums=(1, 2)), avals, jac_where),
      name=f"{base}__jaxext_jacobian", where=jac_where, inputs=inputs, outputs=["dfdy", "dfdp"]),
      f"{where}: derivatives of the solution need its Jacobian, which jax could not compute")
  return functions.Rhs(fn=fn_py, name=name, jacobian=jac_py, derivative_error=error)


def _derivative(make, what):
  """(function, None), or (None, the error derivatives will raise) when jax cannot differentiate
  the user's function (a primitive without a JVP rule, or one the translation lacks): the
  integration itself does not need it."""
  try:
    return make(), None
  except Exception as err:  # noqa: BLE001 - reported when a derivative is asked for
    return None, f"{what}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def event(e: functions.Event, index: int, args_layout: ArgsLayout, n: int, dtype
          ) -> functions.Event:
  """The Event with its jax.numpy function g(t, y, args) -> scalar written for Numba, and its
  gradient from jax.grad."""
  if e.fn is None:
    return e
  if e.gradient is not None:
    raise ValueError(f"events[{index}] '{e.name}': a jax.numpy event's gradient comes from jax; "
                     "remove gradient=")
  g = e.fn
  where = f"jaxext.ode.dop853: the event '{e.name}' (events[{index}])"
  dtype = np.dtype(dtype)

  def flat(t, y, row):
    out = g(t, y, args_layout.unflatten(row))
    try:
      out = jnp.asarray(out)
    except TypeError:
      raise TypeError(f"{where} must return a scalar; got {type(out).__name__}") from None
    if out.size != 1:
      raise ValueError(f"{where} must return a scalar; got shape {out.shape}")
    if not jnp.issubdtype(out.dtype, jnp.floating) and not jnp.issubdtype(out.dtype,
                                                                         jnp.integer):
      raise TypeError(f"{where} must return a real number; got dtype {out.dtype}")
    return out.reshape(()).astype(dtype)

  avals, inputs = _signature(args_layout, n, dtype)
  base = _identifier(e.name)
  fn_py = _translate(_trace(flat, avals, where), name=f"{base}__jaxext_event", where=where,
                     inputs=inputs, outputs=[None])
  grad_where = f"{where} (its gradient, by jax.grad)"
  grad_py, error = _derivative(lambda: _translate(
      _trace(jax.grad(flat, argnums=(0, 1, 2)), avals, grad_where),
      name=f"{base}__jaxext_event_gradient", where=grad_where, inputs=inputs,
      outputs=[None, "dgdy", "dgdp"]),
      f"{where}: derivatives through it need its gradient, which jax could not compute")
  return dataclasses.replace(e, fn=fn_py, gradient=grad_py, derivative_error=error)
