"""The channelwise ("uvu") tensor product of MACE/NequIP, e3nn-jax's conventions.

    out = tensor_product(x, y, weights, "64x0e+64x1o", "0e+1o+2e", "64x0e+64x1o+64x2e")

For every x irrep (mul x l1), y irrep (1 x l2, multiplicity 1) and output irrep (mul x l3) with
|l1 - l2| <= l3 <= l1 + l2 and matching parity there is a path, in the order (x term, y term,
output term); channel u of the path's output block gets

    sqrt((2 l3 + 1) / P) * w[path, u] * sum_ij C[i, j, k] x[u, i] y[j]

with C e3nn's real Clebsch-Gordan coefficients (jaxext/equivariant/_cg.py) and P the number of
paths into that output term: e3nn-jax's legacy FunctionalTensorProduct with "uvu" instructions,
component irrep normalisation, element path normalisation and path gradient normalisation (its
defaults). Weights: per row, the paths' blocks of `mul` channel weights, in path order.

One primitive `tp_p` computes the product and its three derivatives ("modes": the result is x,
y, w or out, the other three slots are inputs; jaxext/kernels/tp.h): the JVP of any mode is a sum
of the same mode on the tangents, and the transpose of any mode with respect to one input is the
mode of that input, so derivatives of every order are these four kernels. The product's own JVP
(mode out) is bound as one tangent primitive, whose transpose asks for every cotangent at once,
so that CUDA can make the y and w cotangents in one kernel (below); its value is that sum.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import os
from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand, static_int
from jaxext.equivariant import _cg, _e3nn, _irreps
from jaxext.equivariant._e3nn import IrrepsArray, IrrepsLike

__all__ = ["tensor_product", "tp_p", "paths"]

X, Y, W, OUT = 0, 1, 2, 3
_SLOTS = ("x", "y", "weights", "out")

tp_p = compat.Primitive("jaxext_tensor_product")


@dataclasses.dataclass(frozen=True)
class _Spec:
  """Everything static about one (irreps_x, irreps_y, irreps_out) triple."""
  dims: tuple[int, int, int, int]        # sizes of the x, y, w, out slots
  paths: tuple[tuple[int, ...], ...]     # per path: the 10 tp::Path fields
  x_terms: tuple[tuple[int, int, int], ...]    # per x irrep: offset, multiplicity, 2l+1
  out_terms: tuple[tuple[int, int, int], ...]  # the same for out
  cg: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # i, j, k, value


def _offsets(terms):
  out, pos = [], 0
  for mul, l, _ in terms:
    out.append(pos)
    pos += mul * (2 * l + 1)
  return out


@functools.lru_cache(maxsize=128)
def _spec(tx, ty, to, explicit=None) -> _Spec:
  """`explicit`: the paths as (x term, y term, output term) triples, instead of every coupling
  (the path-separated product of jaxext.equivariant.e3nn_ops: one path per output term)."""
  ox, oy, oo = _offsets(tx), _offsets(ty), _offsets(to)
  if explicit is None:
    raw = _path_triples(tx, ty, to)
  else:
    raw = list(explicit)
    for path in raw:
      if not (isinstance(path, tuple) and len(path) == 3 and all(static_int(i) for i in path)
              and 0 <= path[0] < len(tx) and 0 <= path[1] < len(ty) and 0 <= path[2] < len(to)):
        raise ValueError(f"explicit paths: (x term, y term, output term) index triples; got "
                         f"{path!r}")
      (m1, l1, p1), (_, l2, p2), (mo, l3, p3) = tx[path[0]], ty[path[1]], to[path[2]]
      if not (m1 == mo and p1 * p2 == p3 and abs(l1 - l2) <= l3 <= l1 + l2):
        raise ValueError(f"explicit paths: {path} does not couple")
  if any(ty[i2][0] != 1 for _, i2, _ in raw):
    raise ValueError("every y term a path reads must have multiplicity 1")
  count: dict[int, int] = {}
  for _, _, io in raw:
    count[io] = count.get(io, 0) + 1
  paths: list = []
  ci: list = []
  cj: list = []
  ck: list = []
  cv: list = []
  w_off = 0
  for i1, i2, io in raw:
    (m1, l1, _), (_, l2, _), (_, l3, _) = tx[i1], ty[i2], to[io]
    c = _cg.clebsch_gordan(l1, l2, l3) * math.sqrt((2 * l3 + 1) / count[io])
    i, j, k = np.nonzero(c)
    begin = len(cv)
    ci.extend(i.tolist())
    cj.extend(j.tolist())
    ck.extend(k.tolist())
    cv.extend(c[i, j, k].tolist())
    paths.append((ox[i1], oy[i2], w_off, oo[io], m1, 2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1, begin,
                  len(cv)))
    w_off += m1
  dims = (_irreps.dim(tx), _irreps.dim(ty), w_off, _irreps.dim(to))
  cg = (np.asarray(ci, np.int64), np.asarray(cj, np.int64), np.asarray(ck, np.int64),
        np.asarray(cv, np.float64))
  terms = lambda ts, offs: tuple((o, m, 2 * l + 1) for o, (m, l, _) in zip(offs, ts))
  return _Spec(dims=dims, paths=tuple(paths), x_terms=terms(tx, ox), out_terms=terms(to, oo),
               cg=cg)


def check_reachable(tx, ty, to, what: str) -> None:
  """Raises if an output irrep could be coupled from x and y but never with x's multiplicity
  (a likely typo: uvu keeps the channels of x, so that output would silently stay zero)."""
  for mo, l3, p3 in to:
    couples = [m1 for m1, l1, p1 in tx for _, l2, p2 in ty
               if p1 * p2 == p3 and abs(l1 - l2) <= l3 <= l1 + l2]
    if couples and mo not in couples and mo > 0:
      raise ValueError(f"{what}: {mo}x{l3}{'e' if p3 == 1 else 'o'} is coupled only from x irreps "
                       f"of multiplicity {sorted(set(couples))}; the channelwise product keeps x's "
                       "multiplicity")


def _exponent(value, name):
  """e3nn-jax's reading of a path or gradient normalisation: "element" 0, "path" 1, or a float."""
  if isinstance(value, str):
    if value not in ("element", "path"):
      raise ValueError(f"{name} must be 'element', 'path' or a finite float; got {value!r}")
    return {"element": 0.0, "path": 1.0}[value]
  if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or \
      not np.isfinite(float(value)):
    raise ValueError(f"{name} must be 'element', 'path' or a finite float; got {value!r}")
  return float(value)


def unwrap_operands(x, y, weights, weights_name, irreps_out):
  """The arrays and irreps of a product's operands (tensor_product, conv): x and y as
  (value, name, irreps argument, its name), either value possibly an e3nn_jax.IrrepsArray whose
  irreps stand in for (or must equal) the argument; returns (the first IrrepsArray or None,
  (x, x terms), (y, y terms), weights, output terms)."""
  like = _e3nn.first_irreps_array(x[0], y[0])
  out = []
  for value, name, irreps, irreps_name in (x, y):
    array, terms = _e3nn.unwrap(value, name, irreps, irreps_name)
    if terms is None:
      raise TypeError(f"{irreps_name} is required (or pass {name} as an e3nn_jax.IrrepsArray)")
    out.append((array, terms))
  if irreps_out is None:
    raise TypeError("irreps_out is required")
  weights, _ = _e3nn.unwrap(weights, weights_name)
  return like, out[0], out[1], weights, _irreps.parse(irreps_out, "irreps_out")


def weight_scale(tx, ty, to, irrep_normalization=None, path_normalization=None,
                 gradient_normalization=None):
  """Per weight, the factor that turns the kernels' normalisation (e3nn-jax's defaults:
  component, element, path) into the one asked for, as e3nn-jax's legacy FunctionalTensorProduct
  computes it; None when it is 1 everywhere. Unset options follow e3nn_jax.config when e3nn_jax
  is imported, else e3nn-jax's defaults.

  With y of multiplicity 1 and unit variances every path's variance is 1, so the path
  normalisation (which weighs paths by their variance) leaves each of the P paths into an output
  irrep its 1/P; the irrep normalisation sets alpha = 2l3+1 ("component"), (2l1+1)(2l2+1)
  ("norm") or 1 ("none"), divided by P; the gradient normalisation g puts sqrt(alpha)^g in the
  product and leaves sqrt(alpha)^(1-g) to the weights' initial scale (the caller's)."""
  irrep = irrep_normalization if irrep_normalization is not None else _e3nn.config(
      "irrep_normalization", "component")
  if irrep not in ("component", "norm", "none"):
    raise ValueError(f"irrep_normalization must be 'component', 'norm' or 'none'; got {irrep!r}")
  _exponent(path_normalization if path_normalization is not None else _e3nn.config(
      "path_normalization", "element"), "path_normalization")
  g = _exponent(gradient_normalization if gradient_normalization is not None else _e3nn.config(
      "gradient_normalization", "path"), "gradient_normalization")
  ps = _path_triples(tx, ty, to)
  count = {}
  for _, _, io in ps:
    count[io] = count.get(io, 0) + 1
  scale = []
  for i1, i2, io in ps:
    (m1, l1, _), (_, l2, _), (_, l3, _) = tx[i1], ty[i2], to[io]
    alpha = {"component": 2 * l3 + 1, "norm": (2 * l1 + 1) * (2 * l2 + 1), "none": 1}[irrep]
    alpha /= count[io]
    scale.extend([math.sqrt(alpha) ** g / math.sqrt((2 * l3 + 1) / count[io])] * m1)
  scale = np.asarray(scale, np.float64)
  return None if np.all(scale == 1.0) else scale


def _path_triples(tx, ty, to):
  return [(i1, i2, io) for i1, (m1, l1, p1) in enumerate(tx) for i2, (_, l2, p2) in enumerate(ty)
          for io, (mo, l3, p3) in enumerate(to)
          if m1 == mo and p1 * p2 == p3 and abs(l1 - l2) <= l3 <= l1 + l2]


def paths(irreps_x: IrrepsLike, irreps_y: IrrepsLike,
          irreps_out: IrrepsLike) -> list[tuple[int, int, int]]:
  """The (x term, y term, output term) index triples of the product's paths, in weight order."""
  tx, ty, to = (_irreps.parse(i, n) for i, n in ((irreps_x, "irreps_x"), (irreps_y, "irreps_y"),
                                                    (irreps_out, "irreps_out")))
  return _path_triples(tx, ty, to)


@overload
def tensor_product(x: jax.Array, y: jax.Array, weights: ArrayLike,
                   irreps_x: IrrepsLike | None = None, irreps_y: IrrepsLike | None = None,
                   irreps_out: IrrepsLike | None = None, *,
                   irrep_normalization: str | None = None,
                   path_normalization: str | float | None = None,
                   gradient_normalization: str | float | None = None) -> jax.Array: ...
@overload
def tensor_product(x: jax.Array | IrrepsArray, y: jax.Array | IrrepsArray, weights: ArrayLike,
                   irreps_x: IrrepsLike | None = None, irreps_y: IrrepsLike | None = None,
                   irreps_out: IrrepsLike | None = None, *,
                   irrep_normalization: str | None = None,
                   path_normalization: str | float | None = None,
                   gradient_normalization: str | float | None = None) -> IrrepsArray: ...
def tensor_product(x, y, weights, irreps_x=None, irreps_y=None, irreps_out=None, *,
                   irrep_normalization=None, path_normalization=None,
                   gradient_normalization=None):
  """The channelwise tensor product (see the module docstring), per row.

  Args:
    x: (..., dim(irreps_x)); y: (..., dim(irreps_y)), every y multiplicity 1 (e.g. spherical
      harmonics); weights: (..., number of weights) = sum over paths of the x multiplicity.
      Leading axes broadcast together. x and y may be e3nn_jax.IrrepsArrays: their irreps then
      stand in for irreps_x / irreps_y (and must equal them where those are given too).
    irreps_x, irreps_y, irreps_out: irreps strings ("64x0e+64x1o+64x2e") or e3nn_jax.Irreps;
      irreps_out is required.
    irrep_normalization ("component", "norm", "none"), path_normalization ("element", "path" or
      a float), gradient_normalization ("element", "path" or a float): e3nn-jax's
      options of the same names, with the same results; unset, e3nn_jax.config's (when e3nn_jax
      is imported) or e3nn-jax's defaults (component, element, path).

  Returns:
    (..., dim(irreps_out)); output irreps without a path are zero. An IrrepsArray of irreps_out
    (in the inputs' class) when x or y is one.
  """
  like, (x, tx), (y, ty), weights, to = unwrap_operands(
      (x, "x", irreps_x, "irreps_x"), (y, "y", irreps_y, "irreps_y"), weights, "weights",
      irreps_out)
  if any(m != 1 for m, _, _ in ty):
    raise ValueError(f"irreps_y: every multiplicity must be 1 (one weight per path and channel); "
                     f"got {_irreps.to_string(ty)!r}")
  check_reachable(tx, ty, to, "irreps_out")
  spec = _spec(tx, ty, to)
  x = float_operand(x, "x")
  y = float_operand(y, "y")
  weights = float_operand(weights, "weights")
  for arr, name, d in ((x, "x", spec.dims[X]), (y, "y", spec.dims[Y]),
                       (weights, "weights", spec.dims[W])):
    if arr.ndim < 1 or arr.shape[-1] != d:
      raise ValueError(f"{name} must have a last axis of {d} for these irreps; got shape "
                       f"{arr.shape}")
  dtype = jnp.result_type(x, y, weights)
  try:
    lead = jnp.broadcast_shapes(x.shape[:-1], y.shape[:-1], weights.shape[:-1])
  except ValueError as err:
    raise ValueError(f"x, y and weights have leading shapes {x.shape[:-1]}, {y.shape[:-1]}, "
                     f"{weights.shape[:-1]} that do not broadcast") from err
  scale = weight_scale(tx, ty, to, irrep_normalization, path_normalization,
                       gradient_normalization)
  if scale is not None:
    weights = weights * jnp.asarray(scale, dtype)
  rows = math.prod(lead)  # (symbolic under a shape-polymorphic jax.export)
  flat = lambda a: jnp.broadcast_to(a.astype(dtype), lead + a.shape[-1:]).reshape(
      rows, a.shape[-1])
  out = tp_p.bind(flat(x), flat(y), flat(weights), mode=OUT, key=(tx, ty, to))
  return _e3nn.wrap(like, to, out.reshape(lead + (spec.dims[OUT],)))


def _inputs(mode):
  return [s for s in range(4) if s != mode]


def ffi_attrs(spec: _Spec, mode: int) -> dict:
  """The FFI attributes shared by jaxext_tensor_product and jaxext_conv (see tp_cpu.h)."""
  ci, cj, ck, cv = spec.cg
  pad_i = lambda v: v if v.size else np.zeros(1, np.int64)
  # an empty irreps list gets one empty block (offset 0, multiplicity 0, size 0)
  terms = lambda ts: np.asarray(ts or ((0, 0, 0),), np.int64).reshape(-1)
  return dict(mode=np.int64(mode), dims=np.asarray(spec.dims, np.int64),
              paths=pad_i(np.asarray(spec.paths, np.int64).reshape(-1)),
              cg_i=pad_i(ci), cg_j=pad_i(cj), cg_k=pad_i(ck),
              cg_v=cv if cv.size else np.zeros(1, np.float64),
              n_paths=np.int64(len(spec.paths)), n_entries=np.int64(cv.size),
              x_terms=terms(spec.x_terms), out_terms=terms(spec.out_terms))


def checked_spec(prim: str, mode, key) -> _Spec:
  """The spec of a bound primitive's (mode, key), or a TypeError naming what is malformed (for
  tp_p and conv_p bound directly: the public functions always pass well-formed ones)."""
  if not static_int(mode) or mode not in (X, Y, W, OUT):
    raise TypeError(f"{prim}: mode must be 0 (x), 1 (y), 2 (weights) or 3 (out); got {mode!r}")
  if not isinstance(key, tuple) or len(key) not in (3, 4):
    raise TypeError(f"{prim}: key must be the parsed (irreps_x, irreps_y, irreps_out) and "
                    f"optionally explicit paths; got {key!r}")
  for terms, what in zip(key[:3], ("irreps_x", "irreps_y", "irreps_out")):
    try:
      ok = isinstance(terms, tuple) and _irreps.parse(terms, what) == terms
    except (TypeError, ValueError):
      ok = False
    if not ok:
      raise TypeError(f"{prim}: key's {what} must be a tuple of (multiplicity >= 0, l >= 0, "
                      f"parity +-1) int triples; got {terms!r}")
  if len(key) == 4 and not isinstance(key[3], tuple):
    raise TypeError(f"{prim}: key's explicit paths must be a tuple; got {key[3]!r}")
  try:
    return _spec(*key)
  except ValueError as err:
    raise TypeError(f"{prim}: {err}") from None


def check_one_dtype(prim: str, *operands) -> None:
  """A TypeError unless the floating operands of a bound product share one dtype: the handlers
  read every operand in the result's (the first operand's) dtype."""
  dtypes = {np.dtype(a.dtype) for a in operands}
  if len(dtypes) != 1:
    raise TypeError(f"{prim}: the feature operands must share one dtype; got "
                    f"{[str(np.dtype(a.dtype)) for a in operands]}")


def _abstract_eval(a, b, c, *, mode, key):
  spec = checked_spec("tp_p", mode, key)
  check_one_dtype("tp_p", a, b, c)
  for arr, s in zip((a, b, c), _inputs(mode)):
    if arr.ndim != 2 or arr.shape[1] != spec.dims[s] or arr.shape[0] != a.shape[0]:
      raise TypeError(f"tp_p: operand for {_SLOTS[s]} has shape {arr.shape}")
  return jax.core.ShapedArray((a.shape[0], spec.dims[mode]), a.dtype)


tp_p.def_abstract_eval(_abstract_eval)


_eager.def_jit_impl(tp_p)


def _lowering(ctx, a, b, c, *, mode, key, platform):
  _ffi.require(platform, "jaxext.equivariant.tensor_product")
  spec = _spec(*key)
  attrs = ffi_attrs(spec, mode)

  def result_types(a, b, c):
    return (jax.ShapeDtypeStruct((a.shape[0], spec.dims[mode]), a.dtype),)

  return _sharding.lower(ctx, (a, b, c),
                         _sharding.ffi_per_shard("jaxext_tensor_product", result_types, **attrs),
                         *tp_p.factors(*ctx.avals_in))


_ROWS = ("rows", None)  # the products' operands and results split along their rows
_sharding.def_factors(tp_p, lambda *avals, **_: ([_ROWS] * 3, [_ROWS]))


compat.register_lowering(tp_p, functools.partial(_lowering, platform="cpu"), "cpu",
                         partitioned=True)
compat.register_lowering(tp_p, functools.partial(_lowering, platform="CUDA"), "cuda",
                         partitioned=True)


def register_trilinear_rules(prim):
  """JVP and transpose of a four-mode primitive (tp_p, conv_p): trilinear in its first three
  operands (the slots other than `mode`, in slot order); any further operands (conv's graph) are
  constants. The JVP is the same mode on each tangent in turn; the transpose with respect to one
  operand is the mode of that operand's slot, the cotangent standing in the result's slot.
  Returns the JVP rule (for a primitive that replaces it in some modes)."""

  def jvp(primals, tangents, *, mode, key):
    data, rest = primals[:3], primals[3:]
    out = prim.bind(*primals, mode=mode, key=key)
    total = None
    for q, t in enumerate(tangents[:3]):
      if compat.is_zero_tangent(t):
        continue
      args = list(data)
      args[q] = t
      term = prim.bind(*args, *rest, mode=mode, key=key)
      total = term if total is None else total + term
    if total is None:
      total = jnp.zeros_like(out)
    return out, total

  def transpose(ct, *args, mode, key):
    data, rest = args[:3], args[3:]
    undefined = [q for q, v in enumerate(data) if compat.is_undefined_primal(v)]
    if len(undefined) != 1 or any(compat.is_undefined_primal(v) for v in rest):
      raise NotImplementedError(f"{prim.name} is linear in each of its feature operands "
                                "separately, not jointly")
    (q,) = undefined
    slot_q = _inputs(mode)[q]
    values = {s: v for s, v in zip(_inputs(mode), data)}
    values[mode] = compat.instantiate_zeros(ct)
    cts = [None] * len(args)
    cts[q] = prim.bind(*(values[s] for s in _inputs(slot_q)), *rest, mode=slot_q, key=key)
    return cts

  compat.register_jvp(prim, jvp)
  compat.register_transpose(prim, transpose)
  return jvp


_trilinear_jvp = register_trilinear_rules(tp_p)


def _rows_batch(prim, args, dims, **params):
  """A batch of row-wise operands (every operand (rows, width)): the batch folded into the
  rows, one call."""
  size = compat.batch_size(args, dims)
  moved = [compat.batch_axis_to_front(a, d, size) for a, d in zip(args, dims)]
  rows = moved[0].shape[1]
  flat = [m.reshape((size * rows,) + m.shape[2:]) for m in moved]
  out = prim.bind(*flat, **params)
  unfold = lambda o: o.reshape((size, rows) + o.shape[1:])
  if prim.multiple_results:
    return [unfold(o) for o in out], [0] * len(out)
  return unfold(out), 0


compat.register_batching(tp_p, functools.partial(_rows_batch, tp_p))


def present(values, which):
  """`values` (one per True in `which`) spread over `which`'s positions (None elsewhere)."""
  it = iter(values)
  return [next(it) if here else None for here in which]


def composite_jvp(fn, n_float):
  """A JVP rule: the JVP of `fn` (a composition of differentiable primitives) in its first
  n_float operands (n_float(params) when a function of the parameters), the rest (a graph)
  constant."""
  def rule(primals, tangents, **params):
    k = n_float(params) if callable(n_float) else n_float
    floats, rest = primals[:k], primals[k:]
    ts = [compat.instantiate_zeros(t) for t in tangents[:k]]
    return jax.jvp(lambda *f: fn(*f, *rest, **params), tuple(floats), tuple(ts))
  return rule


def tangent_jvp(bind, lin_prim, primals, tangents, n, key):
  """The JVP of a result whose first n operands are its floats (the rest constants: a graph):
  the primal (`bind` of all operands) and `lin_prim` of the floats, the tangents present (`which`
  their flags) and the constants."""
  floats, rest = primals[:n], primals[n:]
  which = tuple(not compat.is_zero_tangent(t) for t in tangents[:n])
  out = bind(*primals)
  if not any(which):
    return out, jnp.zeros_like(out)
  here = [t for t, p in zip(tangents[:n], which) if p]
  return out, lin_prim.bind(*floats, *here, *rest, which=which, key=key)


def lin_transpose_rule(bwd_prim, name):
  """The transpose of a tangent primitive (operands: the floats, the tangents present, the
  constants): `bwd_prim` of the floats, the cotangent and the constants, asked for the tangents
  being transposed."""
  def transpose(ct, *args, which, key):
    n, m = len(which), sum(which)
    floats, tangents, rest = args[:n], args[n:n + m], args[n + m:]
    if any(compat.is_undefined_primal(v) for v in (*floats, *rest)):
      raise NotImplementedError(f"{name} is linear in its tangents only")
    if compat.is_zero_tangent(ct):
      return [None] * len(args)
    need = tuple(t is not None and compat.is_undefined_primal(t)
                 for t in present(tangents, which))
    cts = [None] * n
    if any(need):
      cts = present(bwd_prim.bind(*floats, ct, *rest, which=need, key=key), need)
    return [None] * n + [c for c, here in zip(cts, which) if here] + [None] * len(rest)
  return transpose


# The product's own derivatives (tp_p in mode OUT, as tensor_product() binds it), as conv()'s:
# the JVP is the primal and _tp_lin_p (linear in the tangents present, together), whose transpose
# is _tp_bwd_p, every cotangent asked for from one primitive, so that a platform can make some
# together: CUDA the y and w cotangents in one kernel (jaxext_tensor_product_edge_cts: both read
# each row's x and result cotangent; a layer's weights and edge harmonics, or positions, are
# differentiated together). Elsewhere, and for the derivatives of the two, their compositions:
# tp_p in each mode, in the order the trilinear rules use (the same values). `which`, one flag per
# float (x, y, w): the tangents present (lin) or the cotangents asked for (bwd). The derivative
# modes (X, Y, W) keep the trilinear rules.
_tp_lin_p = compat.Primitive("jaxext_tensor_product_lin")
_tp_bwd_p = compat.Primitive("jaxext_tensor_product_bwd")
_tp_bwd_p.multiple_results = True
# Bound only by _tp_bwd_p's CUDA lowering: the y and w cotangents of (x, y, w, ct) in one call.
_tp_edge_cts_p = compat.Primitive("jaxext_tensor_product_edge_cts")
_tp_edge_cts_p.multiple_results = True


def _check_which(prim, which):
  if not (isinstance(which, tuple) and len(which) == 3 and
          all(isinstance(f, bool) for f in which) and any(which)):
    raise TypeError(f"{prim}: which must be a tuple of 3 bools (x, y, w), at least one true; "
                    f"got {which!r}")


def _check_rows(prim, spec, arrays, slots):
  check_one_dtype(prim, *arrays)
  for arr, s in zip(arrays, slots):
    if arr.ndim != 2 or arr.shape[1] != spec.dims[s] or arr.shape[0] != arrays[0].shape[0]:
      raise TypeError(f"{prim}: operand for {_SLOTS[s]} has shape {arr.shape}")


def _lin_composite(*args, which, key):
  """The result's tangent: x, y, w, then the tangents present (`which`), in slot order."""
  floats, tangents = list(args[:3]), present(args[3:], which)
  terms = []
  for q, t in enumerate(tangents):
    if t is not None:
      ops = list(floats)
      ops[q] = t
      terms.append(tp_p.bind(*ops, mode=OUT, key=key))
  return functools.reduce(operator.add, terms)


def _bwd_composite(x, y, w, ct, *, which, key, edge_cts=None):
  """The cotangents asked for (`which`) of x, y, w from the result's cotangent ct, each the mode
  of its slot. edge_cts: None, or a function (x, y, w, ct) -> (y's, w's cotangents) used where
  both are needed (a lowering's fused call)."""
  values = {X: x, Y: y, W: w, OUT: ct}
  mode_of = lambda s: tp_p.bind(*(values[t] for t in _inputs(s)), mode=s, key=key)
  got = {}
  if which[Y] and which[W] and edge_cts is not None:
    got[Y], got[W] = edge_cts(x, y, w, ct)
  return [got[s] if s in got else mode_of(s) for s in (X, Y, W) if which[s]]


def _lin_abstract_eval(*args, which, key):
  _check_which("tp_lin_p", which)
  spec = checked_spec("tp_lin_p", OUT, key)
  floats, tangents = args[:3], args[3:]
  if len(tangents) != sum(which):
    raise TypeError(f"tp_lin_p: {sum(which)} tangents expected; got {len(tangents)}")
  _check_rows("tp_lin_p", spec, floats, (X, Y, W))
  for t, p in zip(present(tangents, which), floats):
    if t is not None and (t.shape != p.shape or t.dtype != p.dtype):
      raise TypeError(f"tp_lin_p: a tangent {t.dtype}{list(t.shape)} differs from its primal "
                      f"{p.dtype}{list(p.shape)}")
  return jax.core.ShapedArray((floats[0].shape[0], spec.dims[OUT]), floats[0].dtype)


def _bwd_abstract_eval(x, y, w, ct, *, which, key):
  _check_which("tp_bwd_p", which)
  spec = checked_spec("tp_bwd_p", OUT, key)
  _check_rows("tp_bwd_p", spec, (x, y, w, ct), (X, Y, W, OUT))
  return [jax.core.ShapedArray(p.shape, p.dtype) for p, want in zip((x, y, w), which) if want]


def _edge_cts_abstract_eval(x, y, w, ct, *, key):
  spec = checked_spec("tp_edge_cts_p", Y, key)
  _check_rows("tp_edge_cts_p", spec, (x, y, w, ct), (X, Y, W, OUT))
  return [jax.core.ShapedArray(y.shape, y.dtype), jax.core.ShapedArray(w.shape, w.dtype)]


def _edge_cts_lowering(ctx, x, y, w, ct, *, key):
  def result_types(x, y, w, ct):
    return (jax.ShapeDtypeStruct(y.shape, y.dtype), jax.ShapeDtypeStruct(w.shape, w.dtype))

  return _sharding.lower(ctx, (x, y, w, ct),
                         _sharding.ffi_per_shard("jaxext_tensor_product_edge_cts", result_types,
                                                 **ffi_attrs(_spec(*key), Y)),
                         *_tp_edge_cts_p.factors(*ctx.avals_in))


_sharding.def_factors(_tp_edge_cts_p, lambda *avals, **_: ([_ROWS] * 4, [_ROWS] * 2))


def _lin_lowering(ctx, *args, which, key):
  # Evaluated only in forward-mode differentiation (reverse mode transposes it unevaluated).
  return compat.lower_fun(lambda *xs: (_lin_composite(*xs, which=which, key=key),),
                          multiple_results=True)(ctx, *args)


def _bwd_lowering(ctx, *args, which, key, platform):
  edge_cts = None
  # JAXEXT_TP_EDGE_CTS=separate, read as a function is lowered: each mode's own call instead
  # (A/B comparisons in one process: tools/gpu_checks.py).
  if (platform == "cuda" and
      _ffi.has_target("CUDA", "jaxext_tensor_product_edge_cts") and
      os.environ.get("JAXEXT_TP_EDGE_CTS") != "separate"):
    edge_cts = lambda *xs: _tp_edge_cts_p.bind(*xs, key=key)
  return compat.lower_fun(
      lambda *xs: _bwd_composite(*xs, which=which, key=key, edge_cts=edge_cts),
      multiple_results=True)(ctx, *args)


def _result_jvp(primals, tangents, *, mode, key):
  """tp_p's JVP: in mode OUT the primal and _tp_lin_p, in the other modes trilinear."""
  if mode != OUT:
    return _trilinear_jvp(primals, tangents, mode=mode, key=key)
  return tangent_jvp(lambda *p: tp_p.bind(*p, mode=OUT, key=key), _tp_lin_p, primals, tangents,
                     3, key)


_tp_lin_p.def_abstract_eval(_lin_abstract_eval)
_tp_bwd_p.def_abstract_eval(_bwd_abstract_eval)
_tp_edge_cts_p.def_abstract_eval(_edge_cts_abstract_eval)
# The tangent and the cotangents are rows as the operands are (typed so under explicit sharding:
# a cotangent's type must be its operand's).
_sharding.def_factors(_tp_lin_p, lambda *avals, **_: ([_ROWS] * len(avals), [_ROWS]))
_sharding.def_factors(_tp_bwd_p, lambda *avals, which, **_: ([_ROWS] * len(avals),
                                                             [_ROWS] * sum(map(bool, which))))
for _prim in (_tp_lin_p, _tp_bwd_p):
  _eager.def_jit_impl(_prim)
  compat.register_batching(_prim, functools.partial(_rows_batch, _prim))
# (partitioned: their compositions lower tp_p, which partitions its rows under jit sharding)
for _name in ("cpu", "cuda"):
  compat.register_lowering(_tp_lin_p, _lin_lowering, _name, partitioned=True)
  compat.register_lowering(_tp_bwd_p, functools.partial(_bwd_lowering, platform=_name), _name,
                           partitioned=True)
compat.register_lowering(_tp_edge_cts_p, _edge_cts_lowering, "cuda", partitioned=True)
compat.register_jvp(tp_p, _result_jvp)
compat.register_jvp(_tp_lin_p, composite_jvp(_lin_composite, lambda p: 3 + sum(p["which"])))
compat.register_jvp(_tp_bwd_p, composite_jvp(_bwd_composite, 4))
compat.register_transpose(_tp_lin_p, lin_transpose_rule(_tp_bwd_p, "tp_lin_p"))
