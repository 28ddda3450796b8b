"""A jaxpr written out as straight-line scalar Python that Numba compiles (CPU and numba-cuda).

jaxext.ode's right-hand sides, events and their derivatives may be written in jax.numpy. jax traces
them once per shapes and dtypes; this module turns the jaxpr into a Python function of scalars

    def rhs(t, y, p, dydt):
        v0 = y[0]
        v1 = y[1]
        v2 = (v0 * v1)
        v3 = math.sin(v2)
        dydt[0] = v3
        ...

with every array of the jaxpr split into its elements (the arrays of a right-hand side are small)
and every operation into one expression per element: no allocation, no loop, nothing for Numba to
infer but floats, and the same source compiles for the CPU (the Numba bridge, jaxext/ode/_native.py)
and for CUDA (numba-cuda, jaxext/ode/_native_cuda.py).

Constants are folded while writing: a value the jaxpr computes from constants only (iota, an
identity basis, literals) is evaluated by jax itself at translation time, and per element the
identities x * 1, x + 0 and x * 0 = 0, 0 / x = 0 are applied. Derivative jaxprs (jax.jacfwd of a
right-hand side) are mostly products with the zeros and ones of a basis; folding leaves the sparse
Jacobian a user would write by hand. Where IEEE arithmetic would differ: x * 0 and 0 / x give +0
where IEEE gives -0 (x negative) or NaN (x infinite or NaN, or 0 / 0). In values that only
matters to functions of the sign of a zero (atan2, copysign, 1 / x) or after the state has gone
non-finite (the integration then stops with status NON_FINITE); in a Jacobian, an entry jax
computes as inf * 0 = NaN at a singular point of the function (cbrt'(0) = inf) is 0 here.

Supported primitives are those `_RULES` lists (arithmetic, comparisons, select, the transcendental
functions, integer_pow/pow, casts, data movement with static indices, dot_general, reductions,
cumulative sums, nested jit and custom_jvp/custom_vjp (their primal computation)); on complex
values those `_COMPLEX_RULES` lists, each complex value written as a pair of reals (`_C`).
Anything else raises `Unsupported` naming the primitive and the line of user code that made it.
"""

from __future__ import annotations

import functools
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from jaxext import _jax_compat as compat

# Scalar statements in one generated function: beyond this, arrays are too large to be written out
# element by element (and Numba's compile time grows with the statements).
MAX_STATEMENTS = 50_000


class Unsupported(TypeError):
  """The function uses an operation (or an operand) the translation does not support."""


_DTYPES = frozenset(np.dtype(d) for d in (np.float32, np.float64, np.int8, np.int16, np.int32,
                                          np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                                          np.bool_, np.complex64, np.complex128))


_NARROW_INTS = frozenset(np.dtype(d) for d in (np.int8, np.int16, np.int32, np.uint8, np.uint16,
                                               np.uint32))


class _Writer:
  """Collects the statements of one function; atoms are variable names (str) or NumPy scalars."""

  def __init__(self, where: str):
    self.lines: list[str] = []
    self.count = 0
    self.where = where
    self.eqn = None  # the equation being written, for error messages
    self.negated: dict[str, str] = {}  # name -> the name it negates (no double negation)
    self.outer: list = []  # the calls (nested jit, ...) whose bodies are being written

  def fail(self, what: str):
    # An equation inside a jax.numpy function's own jit has no user line: the call's has.
    line = ""
    for eqn in [self.eqn] + self.outer[::-1]:
      line = compat.source_line(eqn)
      if line:
        break
    raise Unsupported(f"{self.where}: {what}{line}")

  def let(self, expr: str, dtype=None) -> str:
    """A new variable holding `expr`; with `dtype` a narrow integer, cast back to it (Numba
    computes integer arithmetic in 64 bits)."""
    if dtype is not None and np.dtype(dtype) in _NARROW_INTS:
      expr = _cast_text(expr, dtype)
    name = f"v{self.count}"
    self.count += 1
    if self.count > MAX_STATEMENTS:
      self.fail(f"more than {MAX_STATEMENTS} scalar operations: jaxext.ode writes a jax.numpy "
                "function out element by element, for small arrays (states, parameters, small "
                "matrices); larger work belongs in a built-in model or a Numba function")
    self.lines.append(f"{name} = {expr}")
    return name


def _suffix(dtype) -> str:
  """The helper variant of a floating operation: _f32 or _f64 (CUDA's libdevice has one per
  precision; on the CPU both are NumPy's scalar functions)."""
  return "_f32" if np.dtype(dtype) == np.float32 else "_f64"


class _C:
  """A complex atom: its real and imaginary parts, each a real atom (complex values are written
  out as pairs of reals; Numba and numba-cuda see only floats)."""
  __slots__ = ("re", "im")

  def __init__(self, re, im):
    self.re, self.im = re, im


def _is_const(a) -> bool:
  if isinstance(a, _C):
    return _is_const(a.re) and _is_const(a.im)
  return not isinstance(a, str)


def _as_number(a):
  """A constant atom as a NumPy scalar (complex ones rebuilt)."""
  if isinstance(a, _C):
    return complex(a.re) + 1j * complex(a.im)
  return a


def text(a) -> str:
  """Source text of an atom."""
  if isinstance(a, str):
    return a
  dt = a.dtype
  if dt == np.bool_:
    return "True" if a else "False"
  if dt.kind == "f":
    v = float(a)
    if math.isnan(v):
      s = "math.nan"
    elif math.isinf(v):
      s = "math.inf" if v > 0 else "(-math.inf)"
    else:
      s = repr(v) if v >= 0 and not (v == 0 and math.copysign(1, v) < 0) else f"({v!r})"
    return s if dt == np.float64 else f"np.{dt.name}({s})"
  v = int(a)
  s = repr(v) if v >= 0 else f"({v})"
  return s if dt == np.int64 else f"np.{dt.name}({s})"


def _const(value, dtype):
  with np.errstate(all="ignore"):
    c = np.asarray(value).astype(dtype)[()]
  if c.dtype.kind == "c":  # complex constants are pairs of real ones
    real = np.finfo(c.dtype).dtype
    return _C(c.real.astype(real)[()], c.imag.astype(real)[()])
  return c


def _equals(a, v) -> bool:
  return _is_const(a) and not isinstance(a, _C) and a.dtype != np.bool_ and a == v


def _cast_text(expr: str, dtype) -> str:
  dt = np.dtype(dtype)
  if dt == np.bool_:
    return f"({expr} != 0)"
  return f"np.{dt.name}({expr})"


# --- elementwise operations -------------------------------------------------------------------

def _fmt(template):
  return lambda *xs: template.format(*xs)


# primitive name -> (source template over the operands' text, NumPy fold or None)
_UNARY = {
    "neg": ("(-{0})", np.negative),
    "sin": ("math.sin({0})", None), "cos": ("math.cos({0})", None), "tan": ("math.tan({0})", None),
    "asin": ("math.asin({0})", None), "acos": ("math.acos({0})", None),
    "atan": ("math.atan({0})", None), "sinh": ("math.sinh({0})", None),
    "cosh": ("math.cosh({0})", None), "tanh": ("math.tanh({0})", None),
    "asinh": ("math.asinh({0})", None), "acosh": ("math.acosh({0})", None),
    "atanh": ("math.atanh({0})", None), "exp": ("math.exp({0})", None),
    "log": ("math.log({0})", None), "log1p": ("math.log1p({0})", None),
    "expm1": ("math.expm1({0})", None), "sqrt": ("math.sqrt({0})", np.sqrt),
    "erf": ("math.erf({0})", None), "erfc": ("math.erfc({0})", None),
    "lgamma": ("math.lgamma({0})", None),
    "abs": ("abs({0})", np.abs), "floor": ("_floor{s}({0})", np.floor),
    "ceil": ("_ceil{s}({0})", np.ceil), "cbrt": ("_cbrt{s}({0})", None),
    "is_finite": ("math.isfinite({0})", np.isfinite),
    "not": ("(not {0})", np.logical_not), "square": ("({0} * {0})", np.square),  # (ints: ~)
    "log2": ("math.log2({0})", None), "log10": ("math.log10({0})", None),
    "copy": ("{0}", None), "copy_p": ("{0}", None), "stop_gradient": ("{0}", None),
    "optimization_barrier": ("{0}", None),
}

_BINARY = {
    "add": ("({0} + {1})", np.add), "add_any": ("({0} + {1})", np.add),
    "sub": ("({0} - {1})", np.subtract), "mul": ("({0} * {1})", np.multiply),
    "atan2": ("math.atan2({0}, {1})", None), "pow": ("({0} ** {1})", None),
    "rem": ("_fmod{s}({0}, {1})", np.fmod), "nextafter": ("_nextafter{s}({0}, {1})", None),
    "eq": ("({0} == {1})", np.equal), "ne": ("({0} != {1})", np.not_equal),
    "lt": ("({0} < {1})", np.less), "le": ("({0} <= {1})", np.less_equal),
    "gt": ("({0} > {1})", np.greater), "ge": ("({0} >= {1})", np.greater_equal),
    # NaN-propagating, as XLA's: a NaN in either operand gives NaN.
    "max": (None, None),  # _minmax
    "min": (None, None),
}

_LOGICAL = {"and": ("&", np.bitwise_and), "or": ("|", np.bitwise_or),
            "xor": ("^", np.bitwise_xor)}


def _minmax(w, kind, a, b, dtype):
  """XLA's max/min: NaN if either is NaN, and max(0.0, -0.0) = 0.0, min(0.0, -0.0) = -0.0."""
  dtype = np.dtype(dtype)
  if _is_const(a) and _is_const(b):
    pick_a = (a > b if kind == "max" else a < b) or a != a or (
        a == b and dtype.kind == "f" and (np.signbit(a) == (kind == "min")))
    return _const(a if pick_a else b, dtype)
  ta, tb = text(a), text(b)
  cmp = ">" if kind == "max" else "<"
  if dtype.kind != "f":
    return w.let(f"_where({ta} {cmp} {tb}, {ta}, {tb})", dtype)
  sign = ">" if kind == "max" else "<"
  return w.let(f"_where(({ta} {cmp} {tb}) | ({ta} != {ta}) | (({ta} == {tb}) & "
               f"(math.copysign(1.0, {ta}) {sign} 0.0)), {ta}, {tb})")


def _elementwise(w, eqn, ins, scalar):
  """Applies `scalar(atoms...) -> atom` to every element (operands broadcast: jaxprs pass scalar
  literals to elementwise operations on arrays)."""
  shape = eqn.outvars[0].aval.shape
  arrays = [np.broadcast_to(a, shape) for a in ins]
  out = np.empty(shape, object)
  for idx in np.ndindex(*shape):
    out[idx] = scalar(*(a[idx] for a in arrays))
  return [out]


_IDENTITIES = frozenset({"copy", "copy_p", "stop_gradient", "optimization_barrier"})


def _unary_rule(name):
  template, fold = _UNARY[name]

  def rule(w, eqn, x):
    dtype = eqn.outvars[0].aval.dtype
    if name in _IDENTITIES:
      return [x]

    def one(a):
      if _is_const(a) and fold is not None and not (name == "not" and a.dtype != np.bool_):
        with np.errstate(all="ignore"):
          return _const(fold(a), dtype)
      if name == "neg" and not _is_const(a) and a in w.negated:
        return w.negated[a]
      if name == "not" and np.dtype(dtype) != np.bool_:  # bitwise on integers
        return (_const(np.invert(a), dtype) if _is_const(a) else w.let(f"(~{text(a)})", dtype))
      out = w.let(template.format(text(a), s=_suffix(dtype)), dtype)
      if name == "neg":
        w.negated[out] = a
      return out
    return _elementwise(w, eqn, [x], one)
  return rule


def _binary_rule(name):
  template, fold = _BINARY[name]

  def rule(w, eqn, x, y):
    dtype = eqn.outvars[0].aval.dtype
    zero, one_ = _const(0, dtype), _const(1, dtype)
    floating = np.dtype(dtype).kind == "f"

    def one(a, b):
      if name in ("max", "min"):
        return _minmax(w, name, a, b, dtype)
      if _is_const(a) and _is_const(b) and fold is not None:
        with np.errstate(all="ignore"):
          return _const(fold(a, b), dtype)
      if name in ("add", "add_any"):
        if _equals(a, 0):
          return b
        if _equals(b, 0):
          return a
      elif name == "sub":
        if _equals(b, 0):
          return a
      elif name == "mul":
        if _equals(a, 0) or _equals(b, 0):
          return zero
        if _equals(a, 1):
          return b
        if _equals(b, 1):
          return a
        if floating and _equals(a, -1):
          return _negate(w, b, dtype)
        if floating and _equals(b, -1):
          return _negate(w, a, dtype)
      if name == "pow" and floating:  # r2 ** 1.5 and r2 ** -1.5: gravity's r^3 and 1 / r^3
        helper = next((h for e, h in _POWERS.items() if _equals(b, e)), None)
        if helper is not None:
          return w.let(f"{helper}{_suffix(dtype)}({text(a)})", dtype)
      if name == "rem" and not floating:  # C's remainder (truncating), as XLA's
        return w.let(f"({text(a)} - {text(b)} * _idiv({text(a)}, {text(b)}))", dtype)
      return w.let(template.format(text(a), text(b), s=_suffix(dtype)), dtype)
    return _elementwise(w, eqn, [x, y], one)
  return rule


def _negate(w, a, dtype):
  if _is_const(a):
    return _const(-a, dtype)
  if a in w.negated:
    return w.negated[a]
  out = w.let(f"(-{a})", dtype)
  w.negated[out] = a
  return out


def _div(w, eqn, x, y):
  dtype = np.dtype(eqn.outvars[0].aval.dtype)
  floating = dtype.kind == "f"

  def one(a, b):
    if _is_const(a) and _is_const(b) and floating:
      with np.errstate(all="ignore"):
        return _const(np.divide(a, b), dtype)
    if _equals(b, 1):
      return a
    if floating and _equals(a, 0) and not _is_const(b):
      return _const(0, dtype)
    if floating:
      return w.let(f"({text(a)} / {text(b)})")
    # Integer division truncates toward zero (C, XLA), where Python's // floors.
    return w.let(f"_idiv({text(a)}, {text(b)})", dtype)
  return _elementwise(w, eqn, [x, y], one)


def _logical_rule(name):
  op, fold = _LOGICAL[name]

  def rule(w, eqn, x, y):
    dtype = eqn.outvars[0].aval.dtype

    def one(a, b):
      if _is_const(a) and _is_const(b):
        return _const(fold(a, b), dtype)
      return w.let(f"({text(a)} {op} {text(b)})", dtype)
    return _elementwise(w, eqn, [x, y], one)
  return rule


def _integer_pow(w, eqn, x):
  k = int(eqn.params["y"])
  dtype = eqn.outvars[0].aval.dtype

  def one(a):
    if _is_const(a):
      with np.errstate(all="ignore"):
        return _const(np.power(a.astype(np.float64) if np.dtype(dtype).kind == "f" else a,
                               k) if k >= 0 else 1 / np.power(a.astype(np.float64), -k), dtype)
    if k == 0:
      return _const(1, dtype)
    # Repeated squaring, as XLA expands integer_pow.
    acc, base, e = None, a, abs(k)
    while e:
      if e & 1:
        acc = base if acc is None else w.let(f"({text(acc)} * {text(base)})", dtype)
      e >>= 1
      if e:
        base = w.let(f"({text(base)} * {text(base)})", dtype)
    if k < 0:
      return w.let(f"({text(_const(1, dtype))} / {text(acc)})", dtype)
    return acc
  return _elementwise(w, eqn, [x], one)


def _simple_unary(template_fn):
  def rule(w, eqn, x):
    dtype = eqn.outvars[0].aval.dtype
    return _elementwise(w, eqn, [x], lambda a: w.let(template_fn(text(a), dtype)))
  return rule


def _sign(a, dtype):
  dt = np.dtype(dtype)
  one, zero = text(_const(1, dt)), text(_const(0, dt))
  if dt.kind == "f":  # sign(NaN) = NaN, sign(-0.0) = -0.0
    return f"_where({a} > {zero}, {one}, _where({a} < {zero}, (-{one}), {a}))"
  return f"_where({a} > {zero}, {one}, _where({a} < {zero}, (-{one}), {zero}))"


def _round(w, eqn, x):
  dtype = eqn.outvars[0].aval.dtype
  method = int(getattr(eqn.params.get("rounding_method", 0), "value",
                       eqn.params.get("rounding_method", 0)))
  if method == 1:  # to nearest even
    return _elementwise(w, eqn, [x], lambda a: w.let(f"_rint{_suffix(dtype)}({text(a)})"))
  half, one = text(_const(0.5, dtype)), text(_const(1, dtype))

  # Away from zero (trunc(x + copysign(0.5, x)) would misround 0.49999999999999994).
  def one_(a):
    fl = w.let(f"_floor{_suffix(dtype)}(abs({text(a)}))")
    return w.let(f"math.copysign(_where(abs({text(a)}) - {fl} >= {half}, {fl} + {one}, {fl}), "
                 f"{text(a)})")
  return _elementwise(w, eqn, [x], one_)


def _one_minus_square(a, dtype):
  return f"({text(_const(1, dtype))} - {a} * {a})"


def _logistic(a, dtype):
  one = text(_const(1, dtype))
  return f"({one} / ({one} + math.exp(-{a})))"


def _rsqrt(a, dtype):
  return f"({text(_const(1, dtype))} / math.sqrt({a}))"


def _exp2(a, dtype):
  return f"({text(_const(2, dtype))} ** {a})"


def _log_b(base):
  def template(a, dtype):
    return f"(math.log({a}) / {text(_const(math.log(base), dtype))})"
  return template


def _convert(w, eqn, x):
  dtype = np.dtype(eqn.params["new_dtype"])
  src = np.dtype(eqn.invars[0].aval.dtype)

  def one(a):
    if _is_const(a):
      return _const(a, dtype)
    if src == dtype:
      return a
    if dtype == np.bool_:
      return w.let(f"({a} != 0)")
    if src.kind == "f" and dtype.kind in "iu":
      # XLA saturates out-of-range values and gives 0 for NaN (a bare cast is undefined there).
      info = np.iinfo(dtype)
      lo, hi = text(_const(info.min, dtype)), text(_const(info.max, dtype))
      lo_f, hi_f = text(_const(float(info.min), src)), text(_const(float(info.max), src))
      zero = text(_const(0, dtype))
      return w.let(f"_where({a} != {a}, {zero}, _where({a} >= {hi_f}, {hi}, _where({a} <= "
                   f"{lo_f}, {lo}, {_cast_text(a, dtype)})))", dtype)
    return w.let(_cast_text(a, dtype), dtype)
  return _elementwise(w, eqn, [x], one)


def _select_n(w, eqn, pred, *cases):
  shape = eqn.outvars[0].aval.shape
  pred = np.broadcast_to(pred, shape)
  cases = [np.broadcast_to(c, shape) for c in cases]
  bool_pred = np.dtype(eqn.invars[0].aval.dtype) == np.bool_
  out = np.empty(shape, object)
  for idx in np.ndindex(*shape):
    p, cs = pred[idx], [c[idx] for c in cases]
    if _is_const(p):
      out[idx] = cs[int(p)]
    elif all(_is_const(c) for c in cs) and len({(c.item(), np.signbit(c)) if c.dtype.kind == "f"
                                                else c.item() for c in cs}) == 1:
      out[idx] = cs[0]
    elif cs[0] is cs[1] and len(cs) == 2:
      out[idx] = cs[0]
    elif bool_pred:
      out[idx] = w.let(f"_where({p}, {text(cs[1])}, {text(cs[0])})")
    else:
      expr = text(cs[-1])
      for k in range(len(cs) - 2, -1, -1):
        expr = f"_where({p} == {k}, {text(cs[k])}, {expr})"
      out[idx] = w.let(expr)
  return [out]


def _clamp(w, eqn, lo, x, hi):
  shape = eqn.outvars[0].aval.shape
  dtype = eqn.outvars[0].aval.dtype
  lo, x, hi = (np.broadcast_to(a, shape) for a in (lo, x, hi))
  out = np.empty(shape, object)
  for idx in np.ndindex(*shape):
    # XLA's clamp is min(max(x, lo), hi) with its NaN-propagating max and min.
    out[idx] = _minmax(w, "min", _minmax(w, "max", x[idx], lo[idx], dtype), hi[idx], dtype)
  return [out]


# --- reductions and contractions -------------------------------------------------------------

def _sum(w, terms, dtype):
  terms = [t for t in terms if not _equals(t, 0)]
  if not terms:
    return _const(0, dtype)
  consts = [t for t in terms if _is_const(t)]
  names = [t for t in terms if not _is_const(t)]
  if not names:
    acc = consts[0]
    for c in consts[1:]:
      acc = _const(acc + c, dtype)
    return acc
  expr = " + ".join(text(t) for t in terms)
  return terms[0] if len(terms) == 1 else w.let(f"({expr})", dtype)


def _product(w, a, b, dtype):
  if _is_const(a) and _is_const(b):
    return _const(a * b, dtype)
  if _equals(a, 0) or _equals(b, 0):
    return _const(0, dtype)
  if _equals(a, 1):
    return b
  if _equals(b, 1):
    return a
  return w.let(f"({text(a)} * {text(b)})", dtype)


def _reduction_rows(eqn, x):
  """x with the reduced axes (eqn's `axes`) moved last and flattened: row idx holds the terms
  of result idx."""
  axes = tuple(int(a) for a in eqn.params["axes"])
  if not x.ndim:
    return x.reshape(1)
  keep = [d for d in range(x.ndim) if d not in axes]
  return np.transpose(x, keep + list(axes)).reshape(tuple(x.shape[d] for d in keep) + (-1,))


def _reduce(kind):
  def rule(w, eqn, x):
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    moved = _reduction_rows(eqn, x)
    out = np.empty(eqn.outvars[0].aval.shape, object)
    for idx in np.ndindex(*out.shape):
      terms = list(moved[idx])
      if kind == "sum":
        out[idx] = _sum(w, terms, dtype)
        continue
      if kind == "prod":
        acc = _const(1, dtype)
        for t in terms:
          acc = _product(w, acc, t, dtype)
        out[idx] = acc
        continue
      if not terms:  # the identity of max/min/and/or
        ident = {"max": -np.inf if dtype.kind == "f" else (True if dtype == np.bool_ else 0),
                 "min": np.inf, "and": True, "or": False}[kind]
        if kind in ("max", "min") and dtype.kind != "f":
          info = np.iinfo(dtype) if dtype != np.bool_ else None
          ident = (info.min if kind == "max" else info.max) if info else (kind == "min")
        out[idx] = _const(ident, dtype)
        continue
      acc = terms[0]
      for t in terms[1:]:
        if kind in ("max", "min"):
          acc = _minmax(w, kind, acc, t, dtype)
        else:
          op = {"and": "&", "or": "|"}[kind]
          acc = w.let(f"({text(acc)} {op} {text(t)})")
      out[idx] = acc
    return [out]
  return rule


def _argminmax(kind):
  def rule(w, eqn, x):
    axis = int(eqn.params["axes"][0])
    index_dtype = np.dtype(eqn.params["index_dtype"])
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(eqn.outvars[0].aval.shape, object)
    cmp = ">" if kind == "max" else "<"
    for idx in np.ndindex(*out.shape):
      terms = list(moved[idx])
      best, where = terms[0], _const(0, index_dtype)
      for k, t in enumerate(terms[1:], start=1):
        # The first extreme; NaN counts as the extreme (jax's rule).
        take = w.let(f"((({text(t)} {cmp} {text(best)}) | ({text(t)} != {text(t)})) & "
                     f"({text(best)} == {text(best)}))")
        best = w.let(f"_where({take}, {text(t)}, {text(best)})")
        where = w.let(f"_where({take}, {text(_const(k, index_dtype))}, {text(where)})")
      out[idx] = where
    return [out]
  return rule


def _cumulative(kind):
  def rule(w, eqn, x):
    axis, reverse = int(eqn.params["axis"]), bool(eqn.params["reverse"])
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape, object)
    for idx in np.ndindex(*moved.shape[:-1]):
      order = range(moved.shape[-1])
      order = list(order)[::-1] if reverse else list(order)
      acc = None
      for k in order:
        t = moved[idx + (k,)]
        if acc is None:
          acc = t
        elif kind == "sum":
          acc = _sum(w, [acc, t], dtype)
        elif kind == "prod":
          acc = _product(w, acc, t, dtype)
        else:
          acc = _minmax(w, kind, acc, t, dtype)
        out[idx + (k,)] = acc
    return [np.moveaxis(out, -1, axis)]
  return rule


def _contractions(eqn, x, y):
  """(result index, x's terms, y's terms) of each element of dot_general's result: batch and
  free axes moved first, the contracted ones flattened last."""
  (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
  lc, rc, lb, rb = (tuple(int(d) for d in v) for v in (lc, rc, lb, rb))
  lf = [d for d in range(x.ndim) if d not in lc and d not in lb]
  rf = [d for d in range(y.ndim) if d not in rc and d not in rb]
  nb, nlf = len(lb), len(lf)
  k = int(np.prod([x.shape[d] for d in lc], dtype=np.int64))
  xs = np.transpose(x, list(lb) + lf + list(lc))
  ys = np.transpose(y, list(rb) + rf + list(rc))
  xs = xs.reshape(xs.shape[:nb + nlf] + (k,))
  ys = ys.reshape(ys.shape[:nb + len(rf)] + (k,))
  for idx in np.ndindex(*eqn.outvars[0].aval.shape):
    b, i, j = idx[:nb], idx[nb:nb + nlf], idx[nb + nlf:]
    yield idx, xs[b + i], ys[b + j]


def _dot_general(w, eqn, x, y):
  dtype = np.dtype(eqn.outvars[0].aval.dtype)
  x_dtype, y_dtype = (np.dtype(v.aval.dtype) for v in eqn.invars)
  out = np.empty(eqn.outvars[0].aval.shape, object)
  for idx, xv, yv in _contractions(eqn, x, y):
    terms = []
    for a, c in zip(xv, yv):
      if _equals(a, 0) or _equals(c, 0):
        continue
      terms.append(_product(w, _convert_atom(w, a, x_dtype, dtype),
                            _convert_atom(w, c, y_dtype, dtype), dtype))
    out[idx] = _sum(w, terms, dtype)
  return [out]


def _convert_atom(w, a, src, dtype):
  if _is_const(a):
    return _const(a, dtype)
  return a if src == dtype else w.let(_cast_text(a, dtype))


# --- data movement ---------------------------------------------------------------------------

def _broadcast_in_dim(w, eqn, x, *dyn):
  shape = tuple(eqn.params["shape"])
  dims = tuple(int(d) for d in eqn.params["broadcast_dimensions"])
  expanded = [1] * len(shape)
  for src, dst in enumerate(dims):
    expanded[dst] = x.shape[src]
  return [np.broadcast_to(x.reshape(expanded), shape)]


def _reshape(w, eqn, x, *dyn):
  if eqn.params.get("dimensions") not in (None, ()):
    x = np.transpose(x, eqn.params["dimensions"])
  return [x.reshape(eqn.outvars[0].aval.shape)]


def _squeeze(w, eqn, x):
  return [x.reshape(eqn.outvars[0].aval.shape)]


def _transpose(w, eqn, x):
  return [np.transpose(x, eqn.params["permutation"])]


def _rev(w, eqn, x):
  return [np.flip(x, tuple(eqn.params["dimensions"]))]


def _slice(w, eqn, x):
  start, limit = eqn.params["start_indices"], eqn.params["limit_indices"]
  strides = eqn.params.get("strides") or (1,) * len(start)
  return [x[tuple(slice(int(a), int(b), int(s)) for a, b, s in zip(start, limit, strides))]]


def _concatenate(w, eqn, *xs):
  return [np.concatenate(xs, axis=int(eqn.params["dimension"]))]


def _split(w, eqn, x):
  axis = int(eqn.params["axis"])
  bounds = np.cumsum([int(s) for s in eqn.params["sizes"]])[:-1]
  return list(np.split(x, bounds, axis=axis))


def _pad(w, eqn, x, value):
  out = x
  for axis, (lo, hi, interior) in enumerate(eqn.params["padding_config"]):
    lo, hi, interior = int(lo), int(hi), int(interior)
    moved = np.moveaxis(out, axis, 0)
    n = moved.shape[0]
    size = n + max(n - 1, 0) * interior
    grown = np.empty((size,) + moved.shape[1:], object)
    grown[...] = value[()]
    grown[::interior + 1] = moved
    left = np.empty((max(lo, 0),) + moved.shape[1:], object)
    left[...] = value[()]
    right = np.empty((max(hi, 0),) + moved.shape[1:], object)
    right[...] = value[()]
    full = np.concatenate([left, grown, right])
    full = full[max(-lo, 0):full.shape[0] - max(-hi, 0)]
    out = np.moveaxis(full, 0, axis)
  return [out]


def _const_indices(w, arrays, what):
  values = []
  for a in arrays:
    if not all(_is_const(v) for v in a.flat):
      w.fail(f"{what} with indices computed from the state or parameters (only static indices "
             "are supported: literals, Python ints, NumPy arrays)")
    values.append(np.asarray([v for v in a.flat], dtype=np.int64).reshape(a.shape))
  return values


def _dynamic_slice(w, eqn, x, *indices):
  idx = [int(v) for v in _const_indices(w, indices, "a dynamic slice")]
  sizes = eqn.params["slice_sizes"]
  starts = [min(max(i, 0), d - s) for i, d, s in zip(idx, x.shape, sizes)]
  return [x[tuple(slice(a, a + int(s)) for a, s in zip(starts, sizes))]]


def _dynamic_update_slice(w, eqn, x, update, *indices):
  idx = [int(v) for v in _const_indices(w, indices, "a dynamic update")]
  starts = [min(max(i, 0), d - s) for i, d, s in zip(idx, x.shape, update.shape)]
  out = x.copy()
  out[tuple(slice(a, a + s) for a, s in zip(starts, update.shape))] = update
  return [out]


def _iota(shape):
  """1-based int32 positions: a 0 or negative value read back marks a fill."""
  return jnp.arange(1, int(np.prod(shape, dtype=np.int64)) + 1, dtype=jnp.int32).reshape(shape)


def _gather(w, eqn, x, indices):
  (idx,) = _const_indices(w, [indices], "indexing (a gather)")
  p = eqn.params
  with compat.evaluating_now(), jax.ensure_compile_time_eval():
    where = np.asarray(jax.lax.gather(
        _iota(x.shape), jnp.asarray(idx, eqn.invars[1].aval.dtype), p["dimension_numbers"],
        p["slice_sizes"], indices_are_sorted=p["indices_are_sorted"],
        unique_indices=p["unique_indices"], mode=p["mode"], fill_value=0))
  dtype = np.dtype(eqn.outvars[0].aval.dtype)
  fill = eqn.params.get("fill_value")
  if fill is None:
    fill = np.nan if dtype.kind in "fc" else (np.iinfo(dtype).min if dtype.kind in "iu" else True)
  flat = x.reshape(-1)
  out = np.empty(where.shape, object)
  for k, v in np.ndenumerate(where):
    out[k] = flat[v - 1] if v > 0 else _const(fill, dtype)
  return [out]


def _scatter(kind):
  def rule(w, eqn, x, indices, updates):
    (idx,) = _const_indices(w, [indices], "an indexed update (a scatter)")
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    m = updates.size
    p = eqn.params
    with compat.evaluating_now(), jax.ensure_compile_time_eval():
      onehots = jnp.eye(m, dtype=jnp.int32).reshape((m,) + updates.shape)
      zeros = jnp.zeros(x.shape, jnp.int32)
      hits = np.asarray(jax.vmap(lambda u: jax.lax.scatter_add(
          zeros, jnp.asarray(idx, eqn.invars[1].aval.dtype), u, p["dimension_numbers"],
          indices_are_sorted=p["indices_are_sorted"], unique_indices=p["unique_indices"],
          mode=p["mode"]))(onehots)).reshape(m, -1)
    out = x.reshape(-1).copy()
    flat_updates = updates.reshape(-1)
    # `scatter` with an update computation (x.at[i].apply(f)) combines old and new values by it;
    # the others' combination is their name.
    update = p.get("update_jaxpr") if kind == "set" else None
    if update is not None:
      u_jaxpr, u_consts = _closed(update)
      u_consts = list(p.get("update_consts", ())) or u_consts
    for i in range(m):
      for j in np.flatnonzero(hits[i]):
        u = flat_updates[i]
        if update is not None:
          args = [np.asarray(out[j], dtype=object).reshape(()),
                  np.asarray(u, dtype=object).reshape(())][:len(u_jaxpr.invars)]
          w.outer.append(eqn)
          out[j] = _run(w, u_jaxpr, u_consts, args)[0][()]
          w.outer.pop()
          w.eqn = eqn
        elif kind == "set":
          out[j] = u
        elif kind == "add" and dtype.kind == "c":
          real = _real_dtype(dtype)
          (p, q), (r, s_) = _parts(out[j], real), _parts(u, real)
          out[j] = _C(_sum(w, [p, r], real), _sum(w, [q, s_], real))
        elif kind == "add":
          out[j] = _sum(w, [out[j], u], dtype)
        elif kind == "mul":
          out[j] = _product(w, out[j], u, dtype)
        else:
          out[j] = _minmax(w, kind, out[j], u, dtype)
    return [out.reshape(x.shape)]
  return rule


def _stack(w, eqn, *xs):
  return [np.stack(xs, axis=int(eqn.params["axis"]))]


def _tile(w, eqn, x):
  return [np.tile(x, tuple(int(r) for r in eqn.params["reps"]))]


def _polynomial(w, eqn, x, *coeffs):
  """Horner's rule, highest degree first (coeffs are a_0 ... a_N)."""
  dtype = eqn.outvars[0].aval.dtype

  def one(a, *cs):
    acc = cs[-1]
    for c in cs[-2::-1]:
      acc = _sum(w, [_product(w, acc, a, dtype), c], dtype)
    return acc
  return _elementwise(w, eqn, [x, *coeffs], one)


def _bitcast(w, eqn, x):
  dtype = np.dtype(eqn.params["new_dtype"])
  src = np.dtype(eqn.invars[0].aval.dtype)
  if x.ndim and x.shape != tuple(eqn.outvars[0].aval.shape) or src.itemsize != dtype.itemsize:
    w.fail("a bitcast between types of different sizes")

  def one(a):
    if _is_const(a):
      return np.asarray(a).view(dtype)[()]
    return w.let(f"_bitcast({_cast_text(a, src)}, np.{dtype.name})")
  return _elementwise(w, eqn, [x], one)


def _unstack(w, eqn, x):
  axis = int(eqn.params["axis"])
  return [np.take(x, k, axis=axis) for k in range(x.shape[axis])]


# --- the table --------------------------------------------------------------------------------

_RULES = {}
for _n in _UNARY:
  _RULES[_n] = _unary_rule(_n)
for _n in _BINARY:
  _RULES[_n] = _binary_rule(_n)
for _n in _LOGICAL:
  _RULES[_n] = _logical_rule(_n)
_RULES.update({
    "div": _div, "integer_pow": _integer_pow, "convert_element_type": _convert,
    "select_n": _select_n, "clamp": _clamp, "round": _round,
    "sign": _simple_unary(_sign), "logistic": _simple_unary(_logistic),
    "rsqrt": _simple_unary(_rsqrt), "exp2": _simple_unary(_exp2),
    "one_minus_square": _simple_unary(_one_minus_square), "stack": _stack, "tile": _tile,
    "polynomial": _polynomial, "bitcast_convert_type": _bitcast,
    "reduce_sum": _reduce("sum"), "reduce_prod": _reduce("prod"), "reduce_max": _reduce("max"),
    "reduce_min": _reduce("min"), "reduce_and": _reduce("and"), "reduce_or": _reduce("or"),
    "argmax": _argminmax("max"), "argmin": _argminmax("min"),
    "cumsum": _cumulative("sum"), "cumprod": _cumulative("prod"),
    "cummax": _cumulative("max"), "cummin": _cumulative("min"),
    "dot_general": _dot_general, "broadcast_in_dim": _broadcast_in_dim, "reshape": _reshape,
    "squeeze": _squeeze, "transpose": _transpose, "rev": _rev, "slice": _slice,
    "concatenate": _concatenate, "split": _split, "pad": _pad, "unstack": _unstack,
    "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
    "gather": _gather, "scatter": _scatter("set"), "scatter-add": _scatter("add"),
    "scatter_add": _scatter("add"), "scatter-mul": _scatter("mul"),
    "scatter_mul": _scatter("mul"), "scatter-min": _scatter("min"),
    "scatter_min": _scatter("min"), "scatter-max": _scatter("max"),
    "scatter_max": _scatter("max"),
})

# Calls whose body is a jaxpr to inline: nested jit, custom derivatives (their primal), remat.
_CALL_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_CALLS = frozenset({"pjit", "jit", "closed_call", "core_call", "custom_jvp_call",
                    "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "remat2",
                    "checkpoint"})

# Results computed by jax at translation time when every operand is a constant.
_NO_FOLD = _IDENTITIES

# Operations that stay the same on jax's side when folding: first-order, deterministic.
_FOLDABLE = frozenset(_RULES) - {"scatter", "scatter-add", "scatter_add", "scatter-mul",
                                 "scatter_mul", "scatter-min", "scatter_min", "scatter-max",
                                 "scatter_max", "gather"} | {"iota"}


# --- complex values, as pairs of reals ---------------------------------------------------------

# Operations that only move elements: the same for complex atoms.
_STRUCTURAL = frozenset({"broadcast_in_dim", "reshape", "squeeze", "transpose", "rev", "slice",
                         "concatenate", "split", "stack", "unstack", "tile", "dynamic_slice",
                         "dynamic_update_slice", "copy", "copy_p", "stop_gradient",
                         "optimization_barrier", "pad", "gather", "scatter", "scatter-add",
                         "scatter_add"})


def _real_dtype(dtype):
  dtype = np.dtype(dtype)
  return np.finfo(dtype).dtype if dtype.kind == "c" else dtype


def _parts(a, real):
  if isinstance(a, _C):
    return a.re, a.im
  if isinstance(a, np.generic) and a.dtype.kind == "c":
    return _const(a.real, real), _const(a.imag, real)
  return a, _const(0, real)


def _rsub(w, a, b, real):
  if _is_const(a) and _is_const(b):
    return _const(a - b, real)
  if _equals(b, 0):
    return a
  return w.let(f"({text(a)} - {text(b)})", real)


def _rdiv(w, a, b, real):
  if _is_const(a) and _is_const(b):
    with np.errstate(all="ignore"):
      return _const(np.divide(a, b), real)
  if _equals(b, 1):
    return a
  return w.let(f"({text(a)} / {text(b)})", real)


def _rcall(w, fn, *xs):
  return w.let(f"{fn}({', '.join(text(x) for x in xs)})")


def _cmul(w, x, y, real):
  (a, b), (c, d) = _parts(x, real), _parts(y, real)
  return _C(_rsub(w, _product(w, a, c, real), _product(w, b, d, real), real),
            _sum(w, [_product(w, a, d, real), _product(w, b, c, real)], real))


def _cdiv(w, x, y, real):
  """Smith's algorithm (as XLA divides): no overflow or underflow of c^2 + d^2."""
  (a, b), (c, d) = _parts(x, real), _parts(y, real)
  if _equals(d, 0):  # by a real number
    return _C(_rdiv(w, a, c, real), _rdiv(w, b, c, real))
  # |c| >= |d|: r = d / c, den = c + d r; else r = c / d, den = c r + d (both written, one
  # selected: the other's division by a zero is never used).
  big_c = w.let(f"(abs({text(c)}) >= abs({text(d)}))")
  r1 = _rdiv(w, d, c, real)
  den1 = _sum(w, [c, _product(w, d, r1, real)], real)
  re1 = _rdiv(w, _sum(w, [a, _product(w, b, r1, real)], real), den1, real)
  im1 = _rdiv(w, _rsub(w, b, _product(w, a, r1, real), real), den1, real)
  r2 = _rdiv(w, c, d, real)
  den2 = _sum(w, [_product(w, c, r2, real), d], real)
  re2 = _rdiv(w, _sum(w, [_product(w, a, r2, real), b], real), den2, real)
  im2 = _rdiv(w, _rsub(w, _product(w, b, r2, real), a, real), den2, real)
  return _C(w.let(f"_where({big_c}, {text(re1)}, {text(re2)})"),
            w.let(f"_where({big_c}, {text(im1)}, {text(im2)})"))


def _complex_elementwise(fn):
  def rule(w, eqn, *xs):
    out_dtype = np.dtype(eqn.outvars[0].aval.dtype)
    real = _real_dtype(max((np.dtype(v.aval.dtype) for v in eqn.invars),
                           key=lambda d: d.kind == "c"))
    return _elementwise(w, eqn, list(xs), lambda *atoms: fn(w, real, out_dtype, *atoms))
  return rule


def _c_exp(w, real, _, z):
  a, b = _parts(z, real)
  e = _rcall(w, "math.exp", a)
  return _C(_product(w, e, _rcall(w, "math.cos", b), real),
            _product(w, e, _rcall(w, "math.sin", b), real))


def _c_sin(w, real, _, z):
  a, b = _parts(z, real)
  return _C(_product(w, _rcall(w, "math.sin", a), _rcall(w, "math.cosh", b), real),
            _product(w, _rcall(w, "math.cos", a), _rcall(w, "math.sinh", b), real))


def _c_cos(w, real, _, z):
  a, b = _parts(z, real)
  return _C(_product(w, _rcall(w, "math.cos", a), _rcall(w, "math.cosh", b), real),
            _negate(w, _product(w, _rcall(w, "math.sin", a), _rcall(w, "math.sinh", b), real),
                    real))


def _c_log(w, real, _, z):
  a, b = _parts(z, real)
  return _C(_rcall(w, "math.log", _rcall(w, "math.hypot", a, b)), _rcall(w, "math.atan2", b, a))


def _c_sqrt(w, real, _, z):
  """The principal root without cancellation: t = sqrt((|a| + |z|) / 2); for a >= 0 it is
  t + i b / (2 t), else |b| / (2 t) + i copysign(t, b)."""
  a, b = _parts(z, real)
  half, two = _const(0.5, real), _const(2, real)
  t = _rcall(w, "math.sqrt", _product(w, _sum(w, [w.let(f"abs({text(a)})"),
                                                   _rcall(w, "math.hypot", a, b)], real),
                                      half, real))
  small = _rdiv(w, b, _product(w, two, t, real), real)  # b / (2 t)
  zero = text(_const(0, real))
  pos = w.let(f"({text(a)} >= {zero})")
  re = w.let(f"_where({pos}, {text(t)}, abs({text(small)}))")
  im = w.let(f"_where({pos}, {text(small)}, math.copysign({text(t)}, {text(b)}))")
  # sqrt(0) = 0 (t = 0 makes b / (2 t) a NaN there).
  is_zero = w.let(f"(({text(a)} == {zero}) & ({text(b)} == {zero}))")
  return _C(w.let(f"_where({is_zero}, {zero}, {re})"),
            w.let(f"_where({is_zero}, {text(b)}, {im})"))


def _c_integer_pow(w, eqn, x):
  k = int(eqn.params["y"])
  real = _real_dtype(eqn.outvars[0].aval.dtype)

  def one(z):
    if k == 0:
      return _C(_const(1, real), _const(0, real))
    acc, base, e = None, z, abs(k)
    while e:
      if e & 1:
        acc = base if acc is None else _cmul(w, acc, base, real)
      e >>= 1
      if e:
        base = _cmul(w, base, base, real)
    return _cdiv(w, _C(_const(1, real), _const(0, real)), acc, real) if k < 0 else acc
  return _elementwise(w, eqn, [x], one)


def _c_convert(w, eqn, x):
  dtype = np.dtype(eqn.params["new_dtype"])
  src = np.dtype(eqn.invars[0].aval.dtype)
  real = _real_dtype(dtype)

  def cast(a, to):
    if _is_const(a):
      return _const(a, to)
    return a if np.dtype(_real_dtype(src) if src.kind == "c" else src) == to else \
        w.let(_cast_text(a, to), to)

  def one(z):
    if src.kind == "c" and dtype.kind == "c":
      return _C(cast(z.re, real), cast(z.im, real))
    if src.kind == "c":  # to a real type: the real part (jax warns)
      return cast(z.re, dtype)
    return _C(cast(z, real), _const(0, real))
  return _elementwise(w, eqn, [x], one)


def _c_select_n(w, eqn, pred, *cases):
  shape = eqn.outvars[0].aval.shape
  real = _real_dtype(eqn.outvars[0].aval.dtype)
  boolean = np.dtype(eqn.invars[0].aval.dtype) == np.bool_
  pred = np.broadcast_to(pred, shape)
  cases = [np.broadcast_to(c, shape) for c in cases]
  out = np.empty(shape, object)
  for idx in np.ndindex(*shape):
    p, cs = pred[idx], [_parts(c[idx], real) for c in cases]
    if _is_const(p):
      out[idx] = _C(*cs[int(p)])
      continue
    parts = []
    for k in range(2):  # real, then imaginary
      if boolean:
        parts.append(w.let(f"_where({p}, {text(cs[1][k])}, {text(cs[0][k])})"))
        continue
      expr = text(cs[-1][k])
      for j in range(len(cs) - 2, -1, -1):
        expr = f"_where({p} == {j}, {text(cs[j][k])}, {expr})"
      parts.append(w.let(expr))
    out[idx] = _C(*parts)
  return [out]


def _c_dot_general(w, eqn, x, y):
  real = _real_dtype(eqn.outvars[0].aval.dtype)
  out = np.empty(eqn.outvars[0].aval.shape, object)
  for idx, xv, yv in _contractions(eqn, x, y):
    terms = [_cmul(w, a, c, real) for a, c in zip(xv, yv)]
    out[idx] = _C(_sum(w, [t.re for t in terms], real), _sum(w, [t.im for t in terms], real))
  return [out]


def _c_reduce_sum(w, eqn, x):
  real = _real_dtype(eqn.outvars[0].aval.dtype)
  moved = _reduction_rows(eqn, x)
  out = np.empty(eqn.outvars[0].aval.shape, object)
  for idx in np.ndindex(*out.shape):
    parts = [_parts(z, real) for z in moved[idx]]
    out[idx] = _C(_sum(w, [p[0] for p in parts], real), _sum(w, [p[1] for p in parts], real))
  return [out]


def _c_compare(op):
  def fn(w, real, out_dtype, x, y):
    (a, b), (c, d) = _parts(x, real), _parts(y, real)
    if op == "eq":
      return w.let(f"(({text(a)} == {text(c)}) & ({text(b)} == {text(d)}))")
    return w.let(f"(({text(a)} != {text(c)}) | ({text(b)} != {text(d)}))")
  return fn


_COMPLEX_NAMED = {"exp": _c_exp, "sin": _c_sin, "cos": _c_cos, "log": _c_log, "sqrt": _c_sqrt}
_COMPLEX_RULES = {name: _complex_elementwise(fn) for name, fn in _COMPLEX_NAMED.items()}
_COMPLEX_RULES.update({
    "complex": _complex_elementwise(lambda w, real, _, a, b: _C(a, b)),
    "real": _complex_elementwise(lambda w, real, _, z: _parts(z, real)[0]),
    "imag": _complex_elementwise(lambda w, real, _, z: _parts(z, real)[1]),
    "conj": _complex_elementwise(
        lambda w, real, _, z: _C(_parts(z, real)[0], _negate(w, _parts(z, real)[1], real))),
    "neg": _complex_elementwise(
        lambda w, real, _, z: _C(*(_negate(w, p, real) for p in _parts(z, real)))),
    "add": _complex_elementwise(lambda w, real, _, x, y: _C(
        *(_sum(w, [p, q], real) for p, q in zip(_parts(x, real), _parts(y, real))))),
    "sub": _complex_elementwise(lambda w, real, _, x, y: _C(
        *(_rsub(w, p, q, real) for p, q in zip(_parts(x, real), _parts(y, real))))),
    "mul": _complex_elementwise(lambda w, real, _, x, y: _cmul(w, x, y, real)),
    "div": _complex_elementwise(lambda w, real, _, x, y: _cdiv(w, x, y, real)),
    "abs": _complex_elementwise(
        lambda w, real, _, z: _rcall(w, "math.hypot", *_parts(z, real))),
    "square": _complex_elementwise(lambda w, real, _, z: _cmul(w, z, z, real)),
    "eq": _complex_elementwise(_c_compare("eq")),
    "ne": _complex_elementwise(_c_compare("ne")),
    "integer_pow": _c_integer_pow, "convert_element_type": _c_convert,
    "select_n": _c_select_n, "dot_general": _c_dot_general, "reduce_sum": _c_reduce_sum,
})
_COMPLEX_RULES["add_any"] = _COMPLEX_RULES["add"]


def _fold_eqn(eqn, ins):
  # Computed here and now, on constants, whatever trace the caller is under (an eager shard_map's
  # would otherwise take the bind and run it per device).
  with compat.evaluating_now(), jax.ensure_compile_time_eval():
    args = [jnp.asarray(np.asarray([_as_number(v) for v in a.flat],
                                   dtype=v_.aval.dtype).reshape(a.shape))
            for a, v_ in zip(ins, eqn.invars)]
    outs = eqn.primitive.bind(*args, **eqn.params)
  outs = outs if eqn.primitive.multiple_results else [outs]
  return [_constant_array(np.asarray(o)) for o in outs]


def _closed(jaxpr_like):
  """(jaxpr, consts) of a ClosedJaxpr or an open Jaxpr."""
  if hasattr(jaxpr_like, "jaxpr") and hasattr(jaxpr_like, "consts"):
    return jaxpr_like.jaxpr, list(jaxpr_like.consts)
  return jaxpr_like, []


def _constant_array(value):
  value = np.asarray(value)
  if value.dtype not in _DTYPES:
    raise Unsupported(f"a constant of dtype {value.dtype} (supported: float32, float64, "
                      "integers, bool)")
  arr = np.empty(value.shape, object)
  real = np.finfo(value.dtype).dtype if value.dtype.kind == "c" else None
  for k, v in np.ndenumerate(value):
    arr[k] = _C(_const(v.real, real), _const(v.imag, real)) if real is not None else v
  return arr


def _run(w, jaxpr, consts, args):
  env = {}

  def read(v):
    if isinstance(v, Literal):
      return _constant_array(np.asarray(v.val, dtype=v.aval.dtype))
    return env[v]

  for v, c in zip(jaxpr.constvars, consts):
    if isinstance(c, jax.core.Tracer):
      w.fail("the function closes over a traced value (of an enclosing jax.jit, grad or vmap); "
             "pass it through args= instead, which also lets derivatives reach it")
    env[v] = _constant_array(c)
  for v, a in zip(jaxpr.invars, args):
    env[v] = a
  for eqn in jaxpr.eqns:
    w.eqn = eqn
    name = eqn.primitive.name
    ins = [read(v) for v in eqn.invars]
    complex_values = False
    for v in list(eqn.invars) + list(eqn.outvars):
      dt = np.dtype(v.aval.dtype) if hasattr(v.aval, "dtype") else None
      if dt is None or dt not in _DTYPES:
        w.fail(f"the operation '{name}' on a value of type {v.aval} (supported: float32, "
               "float64, complex64, complex128, integers, bool)")
      complex_values = complex_values or dt.kind == "c"
    if name in _CALLS:
      key = next((k for k in _CALL_PARAMS if k in eqn.params), None)
      if key is None:
        w.fail(f"the call '{name}' (no body found)")
      inner, inner_consts = _closed(eqn.params[key])
      n_consts = int(eqn.params.get("num_consts", 0)) if name.startswith("custom_vjp") else 0
      w.outer.append(eqn)
      outs = _run(w, inner, inner_consts, ins[n_consts:] if n_consts and
                  len(inner.invars) == len(ins) - n_consts else ins)
      w.outer.pop()
      w.eqn = eqn
    elif name == "iota" or (name in _FOLDABLE and name not in _NO_FOLD and ins and all(
        _is_const(v) for a in ins for v in a.flat)):
      outs = _fold_eqn(eqn, ins)
    elif complex_values and name not in _STRUCTURAL:
      if name not in _COMPLEX_RULES:
        w.fail(f"the operation '{name}' on complex values (supported on them: arithmetic, "
               f"{', '.join(sorted(_COMPLEX_NAMED))}, select, data movement, dot products and "
               "sums)")
      outs = _COMPLEX_RULES[name](w, eqn, *ins)
    elif name in _RULES:
      outs = _RULES[name](w, eqn, *ins)
    else:
      w.fail(f"the operation '{name}' is not supported in a jax.numpy right-hand side or "
             "event (supported: arithmetic, comparisons, where/select, the transcendental "
             "functions, powers, casts, indexing and slicing with static indices, "
             "concatenation, reshapes, dot products and reductions over small arrays, nested "
             "jit, custom_jvp/custom_vjp functions); write this part as a Numba right-hand side")
    for v, o in zip(eqn.outvars, outs):
      if type(v).__name__ == "DropVar":
        continue
      o = np.asarray(o, dtype=object) if not isinstance(o, np.ndarray) else o
      if o.shape != tuple(v.aval.shape):
        o = np.broadcast_to(o, v.aval.shape)
      env[v] = o
  return [read(v) for v in jaxpr.outvars]


def write_function(closed_jaxpr, *, name: str, where: str, inputs, outputs) -> str:
  """Source of `def name(...)` computing the jaxpr on scalars.

  inputs: one (parameter name, shape) per jaxpr input: a scalar parameter is used as is, an
    array's elements are read as `name[i]` (flat index; the arrays are 1-D or flattened).
  outputs: one per jaxpr output: a parameter name (the array, flat, written as `name[i]`; 2-D
    arrays are written `name[i, j]`) or None for the function's return value (a scalar).
  The parameter list is the inputs' names, then the written outputs' names.
  """
  jaxpr, consts = _closed(closed_jaxpr)
  w = _Writer(where)
  args = []
  for (pname, shape), v in zip(inputs, jaxpr.invars):
    shape = tuple(shape)
    arr = np.empty(shape, object)
    if not shape:
      arr[()] = pname
    else:
      for k, idx in enumerate(np.ndindex(*shape)):
        arr[idx] = w.let(f"{pname}[{k}]")
    args.append(arr)
  results = _run(w, jaxpr, consts, args)
  w.eqn = None
  body = list(w.lines)
  returned = None
  for out, r, v in zip(outputs, results, jaxpr.outvars):
    dtype = np.dtype(v.aval.dtype)
    if out is None:
      returned = text(r[()])
      continue
    for idx in np.ndindex(*r.shape):
      target = ", ".join(str(i) for i in idx)
      body.append(f"{out}[{target}] = {text(r[idx])}")
  params = [p for p, _ in inputs] + [o for o in outputs if o is not None]
  lines = [f"def {name}({', '.join(params)}):"]
  lines += ["    " + b for b in body]
  lines.append(f"    return {returned}" if returned is not None else "    return None")
  return "\n".join(lines) + "\n"


def _idiv(a, b):  # pragma: no cover - compiled by Numba inside the generated code
  """XLA's integer division: truncation toward zero; x / 0 is -1 (all bits set)."""
  if b == 0:
    return a - a - 1
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


_LIBDEVICE = ("floor", "ceil", "rint", "cbrt", "fmod", "nextafter")
_POWERS = {1.5: "_pow3half", -1.5: "_powm3half"}  # literal exponent -> helper (without pow)
_HELPERS = ("_idiv", "_bitcast", "_where") + tuple(
    f"{f}{s}" for f in (*_POWERS.values(), *(f"_{f}" for f in _LIBDEVICE))
    for s in ("_f32", "_f64"))
# Where _pow3half_dd's double-double arithmetic holds (2^-600 .. 2^600).
_DD_LO, _DD_HI = 2.0 ** -600, 2.0 ** 600


def _veltkamp_split(a):  # pragma: no cover - compiled by Numba inside the generated code
  """a = hi + lo with hi holding a's upper 26 bits (Veltkamp's split; no overflow for |a| <
  2^996)."""
  c = 134217729.0 * a  # 2^27 + 1
  hi = c - (c - a)
  return hi, a - hi


def _pow3half_dd(x):  # pragma: no cover - compiled by Numba inside the generated code
  """x^1.5 = p + t in double-double (2^-104 relative), for 2^-600 <= x <= 2^600 (where no split
  overflows nor partial product underflows): with s the rounded root, sqrt(x) = s + r / 2s to
  2^-105 relative, where r = x - s^2 is exact (Dekker's products: s^2 = hi + lo exactly, and
  x - hi is exact since hi is within an ulp of x); x sqrt(x) = p + e + x r / 2s, where x s = p + e
  exactly and x / s = s to an ulp (so that the correction, 2^-53 of p, is x r / 2s = r s / 2 to
  2^-105 of p)."""
  s = math.sqrt(x)
  sh, sl = _veltkamp_split(s)
  xh, xl = _veltkamp_split(x)
  hi = s * s
  lo = ((sh * sh - hi) + 2.0 * (sh * sl)) + sl * sl
  r = (x - hi) - lo
  p = x * s
  e = ((xh * sh - p) + xh * sl + xl * sh) + xl * sl
  return p, e + 0.5 * (r * s)


def _pow3half_f64(x):  # pragma: no cover - compiled by Numba inside the generated code
  """x ** 1.5 for float64 without libm's pow, which Numba calls once per value (72% of an
  Arenstorf right-hand side's time in the integrator's lanes): x sqrt(x) in double-double
  (_pow3half_dd), correctly rounded but for results within ~2^-100 relative of a tie (libm's
  pow: up to 0.69 ulp measured). Outside [2^-600, 2^600], and for zero, negative, infinite and
  NaN values: pow itself."""
  if not (_DD_LO <= x <= _DD_HI):
    return x ** 1.5
  p, t = _pow3half_dd(x)
  return p + t


def _powm3half_f64(x):  # pragma: no cover - compiled by Numba inside the generated code
  """x ** -1.5 for float64 the same way: 1 / (p + t) from q = 1 / p (rounded) and the residual
  1 - q (p + t) = (1 - h) - l - q t, where q p = h + l exactly and 1 - h is exact (h is within an
  ulp of 1); correctly rounded but near ties. Outside [2^-600, 2^600] etc.: pow itself."""
  if not (_DD_LO <= x <= _DD_HI):
    return x ** -1.5
  p, t = _pow3half_dd(x)
  q = 1.0 / p
  qh, ql = _veltkamp_split(q)
  ph, pl = _veltkamp_split(p)
  h = q * p
  low = ((qh * ph - h) + qh * pl + ql * ph) + ql * pl
  return q + q * (((1.0 - h) - low) - q * t)


def _pow3half_f32(x):  # pragma: no cover - compiled by Numba inside the generated code
  """x ** 1.5 for float32: x sqrt(x) in float64 (within an ulp of float64), rounded once to
  float32 (correctly rounded unless the float64 value lies within an ulp of a float32 tie)."""
  d = np.float64(x)
  return np.float32(d * math.sqrt(d)) if d >= 0.0 else x ** np.float32(1.5)


def _powm3half_f32(x):  # pragma: no cover - compiled by Numba inside the generated code
  """x ** -1.5 for float32: 1 / (x sqrt(x)) in float64, rounded once to float32 (x = 0: inf, as
  pow)."""
  d = np.float64(x)
  return np.float32(1.0 / (d * math.sqrt(d))) if d >= 0.0 else x ** np.float32(-1.5)


def _bitcast_codegen(target):
  def codegen(context, builder, signature, args):
    return builder.bitcast(args[0], context.get_value_type(target))
  return codegen


@functools.cache
def _numba_helpers() -> dict:
  """What the generated source calls beside math and np, for the CPU (Numba)."""
  import numba  # noqa: PLC0415
  import numba.extending  # noqa: PLC0415

  @numba.extending.intrinsic
  def _bitcast(typingctx, x, to):
    """The bits of scalar x as the type `to` (a NumPy scalar type of the same size)."""
    target = getattr(to, "instance_type", None)
    if target is None or not isinstance(x, numba.types.Number):
      return None
    return target(x, to), _bitcast_codegen(target)

  @numba.extending.intrinsic
  def _where(typingctx, cond, a, b):
    """cond ? a : b without a branch (an LLVM select): straight-line code keeps Numba's compile
    time linear in the statements (its SSA passes grow with the basic blocks)."""
    if not isinstance(cond, (numba.types.Boolean, numba.types.Integer)):
      return None
    out = typingctx.unify_types(a, b)
    if out is None:
      return None

    def codegen(context, builder, signature, args):
      c, x, y = args
      c = context.cast(builder, c, signature.args[0], numba.types.boolean)
      x = context.cast(builder, x, signature.args[1], out)
      y = context.cast(builder, y, signature.args[2], out)
      return builder.select(c, x, y)
    return out(cond, a, b), codegen

  helpers = {"_idiv": numba.njit(error_model="numpy")(_idiv), "_bitcast": _bitcast,
             "_where": _where}
  env = {"math": math, "np": np, "_DD_LO": _DD_LO, "_DD_HI": _DD_HI}
  env["_veltkamp_split"] = numba.njit(error_model="numpy")(_veltkamp_split)
  env["_pow3half_dd"] = numba.njit(error_model="numpy")(
      types.FunctionType(_pow3half_dd.__code__, env, "_pow3half_dd"))
  for power in (_pow3half_f64, _powm3half_f64, _pow3half_f32, _powm3half_f32):
    helpers[power.__name__] = numba.njit(error_model="numpy")(
        types.FunctionType(power.__code__, env, power.__name__))
  for f in _LIBDEVICE:
    helpers[f"_{f}_f32"] = helpers[f"_{f}_f64"] = getattr(np, f)
  return helpers


@functools.cache
def _cuda_helpers() -> dict:
  """The same for numba-cuda: libdevice's functions per precision, a conditional expression for
  the select (nvcc's optimiser makes it one), numba-cuda's own intrinsic for the bitcast."""
  from numba import cuda  # noqa: PLC0415
  from numba.cuda import libdevice  # noqa: PLC0415
  from numba.cuda.extending import intrinsic  # noqa: PLC0415

  @intrinsic
  def _bitcast(typingctx, x, to):
    target = getattr(to, "instance_type", None)
    if target is None:
      return None
    return target(x, to), _bitcast_codegen(target)

  def _where(c, a, b):  # pragma: no cover - compiled by numba-cuda
    return a if c else b

  # x ** +-1.5 on a GPU: libdevice's pow (its own accuracy; no libm call to avoid there).
  def _pow3half_f64(x):  # pragma: no cover - compiled by numba-cuda
    return x ** 1.5

  def _powm3half_f64(x):  # pragma: no cover
    return x ** -1.5

  def _pow3half_f32(x):  # pragma: no cover
    return x ** np.float32(1.5)

  def _powm3half_f32(x):  # pragma: no cover
    return x ** np.float32(-1.5)

  helpers = {"_idiv": cuda.jit(device=True)(_idiv), "_bitcast": _bitcast,
             "_where": cuda.jit(device=True)(_where)}
  for power in (_pow3half_f64, _powm3half_f64, _pow3half_f32, _powm3half_f32):
    helpers[power.__name__] = cuda.jit(device=True)(power)
  for f in _LIBDEVICE:
    helpers[f"_{f}_f64"] = getattr(libdevice, f)
    helpers[f"_{f}_f32"] = getattr(libdevice, f + "f")
  return helpers


def _namespace(source: str, helpers: dict) -> dict:
  namespace = {"math": math, "np": np}
  if any(f"{h}(" in source for h in _HELPERS):
    namespace.update(helpers)
  return namespace


@functools.lru_cache(maxsize=256)
def _compiled_source(source: str, name: str, filename: str):
  import linecache  # noqa: PLC0415
  namespace = _namespace(source, _numba_helpers())
  linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
  exec(compile(source, filename, "exec"), namespace)  # noqa: S102 (our own generated source)
  fn = namespace[name]
  # IEEE arithmetic as jax's: x / 0 is inf or NaN, not Numba's default ZeroDivisionError.
  fn.numba_options = {"error_model": "numpy"}
  # For numba-cuda: the same code with the helpers bound to their CUDA implementations.
  fn.for_cuda = functools.cache(lambda: _for_cuda(fn, source))
  return fn


def _for_cuda(fn, source):
  g = types.FunctionType(fn.__code__, _namespace(source, _cuda_helpers()), fn.__name__)
  g.__qualname__ = fn.__qualname__
  return g


def function(source: str, name: str):
  """The Python function `source` defines (one per source text: re-translating a function gives
  the same object)."""
  import hashlib  # noqa: PLC0415
  digest = hashlib.sha256(source.encode()).hexdigest()[:16]
  return _compiled_source(source, name, f"<jaxext.ode {name} {digest}>")
