"""e3nn-jax's functions, on jaxext's kernels: the idiom of NequIP/MACE-style potentials::

    from jaxext.equivariant import e3nn_ops
    sh = e3nn_ops.spherical_harmonics([0, 1, 2, 3], vectors, True)
    messages = e3nn_ops.tensor_product(x[senders], sh, filter_ir_out=irreps)   # as e3nn.tensor_product
    nodes = e3nn_ops.tensor_product_conv(x, sh, senders, receivers, n,
                                         weights=w, filter_ir_out=irreps)     # fused, no E x dim

Each function takes and returns e3nn_jax.IrrepsArrays with e3nn-jax's meaning, layout and
numbers (tests/equivariant_test.py compares them with e3nn-jax): `tensor_product` keeps every
path as its own channels (no weights, no sum over paths), sorts the output's irreps and, with
`regroup_output`, merges equal ones, exactly as `e3nn.tensor_product`. The second input's
multiplicities must be 1 (spherical harmonics), which is what the kernels compute; for anything
else call e3nn-jax itself. e3nn_jax is imported only when these functions run.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext._validation import (float_operand, float_result_dtype, int32_indices, integer_operand,
                                static_count)
from jaxext.equivariant import _e3nn, _irreps
from jaxext.equivariant._e3nn import Irreps, IrrepsArray, IrrepsLike
from jaxext.equivariant.conv import bind_built, edge_graph
from jaxext.equivariant.gather import gather
from jaxext.equivariant.segment import segment_sum
from jaxext.equivariant.spherical_harmonics import spherical_harmonics as _sh
from jaxext.equivariant.tensor_product import OUT, _spec, tp_p

__all__ = ["scatter_sum", "spherical_harmonics", "tensor_product", "tensor_product_conv"]


def spherical_harmonics(irreps_out: IrrepsLike | int | Sequence[int], input: IrrepsArray,
                        normalize: bool, normalization: str | None = None, *,
                        algorithm: Any = None) -> IrrepsArray:
  """`e3nn.spherical_harmonics(irreps_out, input, normalize, normalization)`. `algorithm` (how
  e3nn-jax evaluates them) is accepted and has no effect: jaxext's kernel computes them."""
  del algorithm
  return _sh(irreps_out, input, normalize=normalize, normalization=normalization)


_SCATTER_MODES = (None, "promise_in_bounds", "drop", "fill", "clip")


def scatter_sum(data: IrrepsArray | jax.Array, *, dst: ArrayLike | None = None,
                nel: ArrayLike | None = None, output_size: int | None = None,
                map_back: bool = False, mode: str | None = "promise_in_bounds"
                ) -> IrrepsArray | jax.Array:
  """`e3nn.scatter_sum(data, dst=..., nel=..., output_size=..., map_back=..., mode=...)`, summed
  deterministically by jaxext's ordered segment sum (the same bits on every run).

  The arguments and results are e3nn-jax's: `output[dst[i]] += data[i]` with dst of shape
  data.shape[:dst.ndim], or `output[i] = sum(data[sum(nel[:i]):sum(nel[:i + 1])])`; map_back
  gives each input position its sum. Ids are read as e3nn-jax's `.at[dst].add` reads them: a
  negative id counts from the end, one outside [-output_size, output_size) is dropped (mode
  "clip": moved to the nearest end). The dtype stays the data's (bfloat16 and float16 are summed
  in float32)."""
  if (dst is None) == (nel is None):
    raise ValueError("scatter_sum needs exactly one of dst and nel")
  if mode not in _SCATTER_MODES:
    raise ValueError(f"mode must be one of {_SCATTER_MODES[1:]}; got {mode!r}")
  like = _e3nn.first_irreps_array(data)
  raw, terms = _e3nn.unwrap(data, "data")
  array = float_operand(raw, "data")
  want = float_result_dtype(raw)
  if nel is not None:
    if output_size is not None:
      raise ValueError("output_size must not be given with nel (its length is the output's)")
    nel = integer_operand(nel, "nel")
    if nel.ndim != 1 or array.ndim < 1:
      raise ValueError(f"nel must be 1-D and data have rows; got nel {nel.shape}, data "
                       f"{array.shape}")
    size: int | None = nel.shape[0]
    ids = jnp.repeat(jnp.arange(size, dtype=jnp.int32), nel, total_repeat_length=array.shape[0])
  else:
    ids = integer_operand(dst, "dst")
    if ids.shape != array.shape[:ids.ndim] or ids.ndim == 0:
      raise ValueError(f"dst must have shape data.shape[:dst.ndim] (at least one axis); got dst "
                       f"{ids.shape}, data {array.shape}")
    ids = int32_indices(ids)  # (id arithmetic below in int32 whatever dst's integer dtype)
    size = output_size
  if map_back:
    if output_size is not None:
      raise ValueError("output_size must not be given with map_back")
    # e3nn-jax's: each id replaced by its rank among the distinct ids, one output per input
    flat = ids.reshape(-1)
    size = flat.shape[0]
    if size:
      distinct = jnp.unique(flat, size=size, fill_value=jnp.max(flat))
      ids = jnp.searchsorted(distinct, flat).astype(jnp.int32).reshape(ids.shape)
  elif size is None:
    raise ValueError("output_size must be given (unless nel is, or map_back)")
  size = static_count(size, "output_size")
  ids = jnp.where(ids < 0, ids + size, ids)
  if mode == "clip":
    ids = jnp.clip(ids, 0, jnp.maximum(size - 1, 0))
  rows = array.reshape((math.prod(ids.shape),) + array.shape[ids.ndim:])
  out = segment_sum(rows, ids.reshape(-1), size)
  if map_back:
    out = gather(out, ids.reshape(-1)).reshape(ids.shape + out.shape[1:])
  return _e3nn.wrap(like, terms, out.astype(want))


def _order(terms):
  """e3nn-jax's Irrep order: by l, then the parity (-1)^l first."""
  return lambda t: (terms[t][1], -terms[t][2] * (-1) ** terms[t][1])


def _sort_terms(terms):
  """The stable sort e3nn's Irreps.sort() makes: (sorted terms, their original indices)."""
  idx = sorted(range(len(terms)), key=lambda t: (_order(terms)(t), t))
  return tuple(terms[t] for t in idx), idx


def _simplify(terms):
  out = []
  for mul, l, p in terms:
    if out and out[-1][1:] == (l, p):
      out[-1] = (out[-1][0] + mul, l, p)
    elif mul > 0:
      out.append((mul, l, p))
  return tuple(out)


def _regroup(array, terms):
  """An array of `terms` in e3nn's regrouped order (sorted, equal irreps merged): a column
  permutation (none when already sorted)."""
  sorted_terms, idx = _sort_terms(terms)
  if list(idx) != list(range(len(terms))):
    offsets = np.cumsum([0] + [m * (2 * l + 1) for m, l, _ in terms])
    cols = np.concatenate([np.arange(offsets[t], offsets[t + 1]) for t in idx] or
                          [np.zeros(0, np.int64)])
    array = jnp.take(array, jnp.asarray(cols, np.int32), axis=-1)
  return array, _simplify(sorted_terms)


def _filter(filter_ir_out):
  """e3nn-jax's filter_ir_out: irreps (a string, an Irreps), an Irrep, or a list of "1o"-like
  strings, Irrep objects or (l, parity) pairs, whose (l, parity) pairs are kept; None keeps
  everything."""
  if filter_ir_out is None:
    return None
  if isinstance(filter_ir_out, str) or (hasattr(filter_ir_out, "l") and
                                        hasattr(filter_ir_out, "p")):
    items = [filter_ir_out]
  else:
    items = list(filter_ir_out)
  keep = set()
  for item in items:
    if hasattr(item, "l") and hasattr(item, "p"):
      keep.add((int(item.l), int(item.p)))
    elif hasattr(item, "ir"):
      keep.add((int(item.ir.l), int(item.ir.p)))
    elif (isinstance(item, tuple) and len(item) == 2 and
          all(isinstance(v, (int, np.integer)) for v in item) and item[1] in (-1, 1)):
      keep.add((int(item[0]), int(item[1])))
    else:
      keep.update((l, p) for _, l, p in _irreps.parse(item, "filter_ir_out"))
  return keep


def _irreps_only(x) -> bool:
  """An irreps string or an e3nn_jax.Irreps (e3nn-jax's irreps-only forms), not an array."""
  return not _e3nn.is_irreps_array(x) and (
      isinstance(x, str) or (type(x).__name__ == "Irreps" and _irreps._e3nn_items(x) is not None))


def _irreps_like(a, b, text: str):
  """`text` as an e3nn_jax.Irreps (the class of whichever of a, b is one; e3nn_jax's own for two
  strings), as e3nn-jax returns its irreps-only results."""
  for x in (a, b):
    if not isinstance(x, str):
      return type(x)(text)
  module = sys.modules.get("e3nn_jax")
  return module.Irreps(text) if module is not None else text


def _product_irreps(irreps1, irreps2, filter_ir_out, regroup_output):
  """The irreps of e3nn.tensor_product of two irreps: every (term, term, l3) path its own term,
  sorted, merged when regroup_output."""
  t1, t2 = (_irreps.parse(i, name) for i, name in ((irreps1, "input1"), (irreps2, "input2")))
  if regroup_output:
    t1, t2 = (_simplify(_sort_terms(t)[0]) for t in (t1, t2))
  keep = _filter(filter_ir_out)
  out = tuple((m1 * m2, l3, p1 * p2) for m1, l1, p1 in t1 for m2, l2, p2 in t2
              for l3 in range(abs(l1 - l2), l1 + l2 + 1)
              if keep is None or (l3, p1 * p2) in keep)
  out = _sort_terms(out)[0]
  return _simplify(out) if regroup_output else out


def _plan(tx, ty, filter_ir_out, irrep_normalization):
  """The separated product's output terms (sorted as e3nn sorts them: one term per path), the
  explicit paths into them, and the per-weight factor giving e3nn's normalisation."""
  if any(m > 1 for m, _, _ in ty):
    raise ValueError(f"input2: every multiplicity must be 0 or 1 (spherical harmonics; after "
                     f"regrouping, when regroup_output, it is {_irreps.to_string(ty)!r}); for "
                     "anything else use e3nn_jax.tensor_product")
  keep = _filter(filter_ir_out)
  norm = irrep_normalization if irrep_normalization is not None else _e3nn.config(
      "irrep_normalization", "component")
  if norm not in ("component", "norm", "none"):
    raise ValueError(f"irrep_normalization must be 'component', 'norm' or 'none'; got {norm!r}")
  raw = []  # (x term, y term, output irrep) in e3nn's loop order
  for i1, (m1, l1, p1) in enumerate(tx):
    for i2, (m2, l2, p2) in enumerate(ty):
      for l3 in range(abs(l1 - l2), l1 + l2 + 1):
        if keep is None or (l3, p1 * p2) in keep:
          raw.append((i1, i2, (m1 * m2, l3, p1 * p2)))
  to, order = _sort_terms(tuple(r[2] for r in raw))
  # A path per output term, but none from a y term of multiplicity 0 (its outputs stay 0x).
  paths = tuple((raw[t][0], raw[t][1], io) for io, t in enumerate(order)
                if ty[raw[t][1]][0] == 1)
  scale = []
  for i1, i2, io in paths:
    (m1, l1, _), (_, l2, _), (_, l3, _) = tx[i1], ty[i2], to[io]
    factor = {"component": 1.0, "norm": np.sqrt((2 * l1 + 1) * (2 * l2 + 1) / (2 * l3 + 1)),
              "none": 1.0 / np.sqrt(2 * l3 + 1)}[norm]  # the kernel's own: sqrt(2 l3 + 1)
    scale.extend([factor] * m1)
  return to, paths, np.asarray(scale, np.float64)


def _inputs(input1, input2, regroup_output):
  like = _e3nn.first_irreps_array(input1, input2)
  if not (_e3nn.is_irreps_array(input1) and _e3nn.is_irreps_array(input2)):
    raise TypeError("input1 and input2 must be e3nn_jax.IrrepsArrays (their irreps define the "
                    "product)")
  x, tx = _e3nn.unwrap(input1, "input1")
  y, ty = _e3nn.unwrap(input2, "input2")
  x, y = float_operand(x, "input1"), float_operand(y, "input2")  # (kernel dtypes)
  if regroup_output:
    x, tx = _regroup(x, tx)
    y, ty = _regroup(y, ty)
  return like, x, tx, y, ty


def _result_dtype(*raw):
  """e3nn-jax's result dtype for these inputs (IrrepsArrays by their arrays)."""
  return float_result_dtype(*(r.array if _e3nn.is_irreps_array(r) else r for r in raw))


def tensor_product(input1: IrrepsArray, input2: IrrepsArray, *,
                   filter_ir_out: IrrepsLike | Sequence[Any] | None = None,
                   irrep_normalization: str | None = None,
                   regroup_output: bool = True) -> IrrepsArray | Irreps:
  """`e3nn.tensor_product(input1, input2, filter_ir_out=..., irrep_normalization=...,
  regroup_output=...)`: every path into its own output channels (mul1 of them), output irreps
  sorted and (regroup_output) merged, as e3nn-jax lays them out. input2's multiplicities must
  be 1 (or 0); leading axes broadcast; the result's dtype is e3nn-jax's (bfloat16 and float16
  computed in float32).

  Returns:
    an IrrepsArray (the inputs' class); given two e3nn_jax.Irreps instead, the Irreps of that
    result (any multiplicities), as e3nn-jax's irreps-only form."""
  if _irreps_only(input1) and _irreps_only(input2):
    return _irreps_like(input1, input2, _irreps.to_string(
        _product_irreps(input1, input2, filter_ir_out, regroup_output)))
  like, x, tx, y, ty = _inputs(input1, input2, regroup_output)
  to, paths, scale = _plan(tx, ty, filter_ir_out, irrep_normalization)
  want = _result_dtype(input1, input2)
  dtype = jnp.result_type(x, y)
  lead = jnp.broadcast_shapes(x.shape[:-1], y.shape[:-1])
  rows = math.prod(lead)  # (symbolic under a shape-polymorphic jax.export)
  flat = lambda a: jnp.broadcast_to(a.astype(dtype), lead + a.shape[-1:]).reshape(
      rows, a.shape[-1])
  w = jnp.broadcast_to(jnp.asarray(scale, dtype), (rows, scale.size))
  out = tp_p.bind(flat(x), flat(y), w, mode=OUT, key=(tx, ty, to, paths))
  out = out.reshape(lead + (_spec(tx, ty, to, paths).dims[OUT],)).astype(want)
  return _e3nn.wrap(like, _simplify(to) if regroup_output else to, out)


def tensor_product_conv(x: IrrepsArray, sh: IrrepsArray, senders: ArrayLike,
                        receivers: ArrayLike, num_nodes: int, *, weights: ArrayLike | None = None,
                        filter_ir_out: IrrepsLike | Sequence[Any] | None = None,
                        irrep_normalization: str | None = None,
                        regroup_output: bool = True,
                        weights_kernel: ArrayLike | None = None) -> IrrepsArray:
  """Fused `scatter_sum(tensor_product(x[senders], sh, ...) * weights, dst=receivers,
  output_size=num_nodes)` with e3nn-jax's meaning of each piece: no E x dim array.

  Args:
    x: IrrepsArray (num_senders, dim); sh: IrrepsArray (E, dim), multiplicities 1.
    senders, receivers: (E,) integer node ids (out of range: as jaxext.equivariant.conv).
    num_nodes: static number of output nodes (or a symbolic size, e.g. x.shape[0] under a
      shape-polymorphic jax.export).
    weights: None, or broadcastable to (E, num_irreps of the product's output): one scalar per
      output irrep copy and edge, in the output's order: what `IrrepsArray * weights`
      multiplies in e3nn-jax, under each irrep normalisation (with e3nn_jax.config's
      irrep_normalization "none", e3nn-jax's multiplication by a weight per copy scales a copy
      of degree l by 1 / sqrt(2 l + 1) too, and so does this).
    filter_ir_out, irrep_normalization, regroup_output: as tensor_product.
    weights_kernel: None, or (k, num_irreps of the product's output): the weights are then
      `weights @ weights_kernel`, weights being (E, k), a radial network's last hidden layer (its
      last layer without bias), made per receiver by the CPU kernel (jaxext.equivariant.conv's
      edge_weights_kernel): no (E, num_irreps) array in the forward pass or in its gradients.
  """
  num_nodes = static_count(num_nodes, "num_nodes")
  like, xa, tx, y, ty = _inputs(x, sh, regroup_output)
  to, paths, scale = _plan(tx, ty, filter_ir_out, irrep_normalization)
  if xa.ndim != 2 or y.ndim != 2:
    raise ValueError(f"x and sh must be 2-D (rows, dim); got {xa.shape} and {y.shape}")
  e = y.shape[0]
  dtype = jnp.result_type(xa, y)
  want = _result_dtype(x, sh)
  per_irrep = weights_kernel is not None or (
      weights is not None and np.ndim(weights) > 0 and np.shape(weights)[-1] == scale.size)
  if per_irrep and _e3nn.config("irrep_normalization", "component") == "none":
    # e3nn-jax's IrrepsArray * weights with a weight per irrep copy: an element-wise tensor
    # product with scalars, unnormalised under e3nn_jax.config's "none" (the multiplication
    # reads the config, whatever the product's own irrep_normalization; one weight per edge
    # multiplies plainly)
    scale = scale / np.sqrt(np.concatenate(
        [np.full(tx[i1][0], 2 * to[io][1] + 1.0) for i1, _, io in paths] or [np.zeros(0)]))
  kernel = None
  if weights_kernel is not None:
    if weights is None:
      raise TypeError("weights_kernel needs weights (the hidden layer it multiplies)")
    w = float_operand(weights, "weights")
    kernel = float_operand(weights_kernel, "weights_kernel")
    want = _result_dtype(x, sh, w, kernel)
    if kernel.ndim != 2 or kernel.shape[1] != scale.size:
      raise ValueError(f"weights_kernel must have shape (k, {scale.size}) (k, irreps of the "
                       f"output); got {kernel.shape}")
    if w.shape != (e, kernel.shape[0]):
      raise ValueError(f"weights must have shape ({e}, {kernel.shape[0]}) (edges, weights_kernel's "
                       f"rows); got {w.shape}")
    dtype = jnp.result_type(dtype, w, kernel)
    kernel = kernel.astype(dtype) * jnp.asarray(scale, dtype)
  elif weights is None:
    w = jnp.broadcast_to(jnp.asarray(scale, dtype), (e, scale.size))
  else:
    want = _result_dtype(x, sh, weights)
    w = float_operand(weights, "weights")
    try:
      w = jnp.broadcast_to(w, (e, scale.size))
    except ValueError:
      raise ValueError(f"weights must broadcast to ({e}, {scale.size}) (edges, irreps of the "
                       f"output); got {w.shape}") from None
    dtype = jnp.result_type(dtype, w)
    w = w.astype(dtype) * jnp.asarray(scale, dtype)
  graph = edge_graph(senders, receivers, e, xa.shape[0], num_nodes)
  out = bind_built(xa.astype(dtype), y.astype(dtype), w.astype(dtype), kernel, graph,
                   (tx, ty, to, paths))
  return _e3nn.wrap(like, _simplify(to) if regroup_output else to, out.astype(want))

