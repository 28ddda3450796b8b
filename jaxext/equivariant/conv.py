"""The fused equivariant convolution: m_j = sum over edges i -> j of TP(x_i, Y_ij; W_ij).

No E x dim message array is ever made: the kernel (jaxext/cpu/conv_cpu.cc) walks each receiver's
edges in a fixed order, gathering sender features and adding the tensor product of
jaxext/kernels/tp.h straight into the receiver's row: deterministic, no atomics. As for
tensor_product, one primitive `conv_p` has four modes (the result is x, the edge harmonics y, the
edge weights w, or out) that are each other's JVPs and transposes: node results (out by receiver,
x's cotangent by sender) add their edges in sorted order, edge results are per edge. A node's run
of more than TASK_EDGES edges (a hub; jax-md's padding node) is cut into tasks run side by side,
whose sums are added in a fixed order (jaxext/kernels/conv_tasks.h): the same bits on every run,
for any number of threads.
"""

from __future__ import annotations

import functools
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
from jaxext._validation import float_operand, int32_indices, integer_operand, static_count
from jaxext.equivariant import _e3nn, _irreps
from jaxext.equivariant._e3nn import IrrepsArray, IrrepsLike
from jaxext.equivariant.tensor_product import (OUT, W, X, Y, _inputs, _spec, check_one_dtype,
                                               check_reachable, checked_spec, ffi_attrs,
                                               register_trilinear_rules, unwrap_operands,
                                               weight_scale)
from jaxext.equivariant.tensor_product import composite_jvp as _composite_jvp
from jaxext.equivariant.tensor_product import lin_transpose_rule, tangent_jvp
from jaxext.equivariant.tensor_product import present as _present

__all__ = ["conv", "conv_p"]

conv_p = compat.Primitive("jaxext_conv")
# conv()'s own primitive: the same op, bound only on graphs conv() built itself (consistent by
# construction: two stable sorts and their ranges), so that its CUDA lowering skips the graph
# check the public conv_p needs (a few O(E) kernels per mode and call). Not exported: bound
# directly, a CUDA kernel would read the graph as given.
# Out-of-range node ids still give NaN (the ranges then do not cover the edges: the kernel's
# own check).
_conv_built_p = compat.Primitive("jaxext_conv_built")
_NODE_SLOTS = (X, OUT)


@overload
def conv(x: jax.Array, edge_sh: jax.Array, edge_weights: ArrayLike, senders: ArrayLike,
         receivers: ArrayLike, num_nodes: int, irreps_x: IrrepsLike | None = None,
         irreps_sh: IrrepsLike | None = None, irreps_out: IrrepsLike | None = None, *,
         irrep_normalization: str | None = None, path_normalization: str | float | None = None,
         gradient_normalization: str | float | None = None,
         edge_weights_kernel: ArrayLike | None = None) -> jax.Array: ...
@overload
def conv(x: jax.Array | IrrepsArray, edge_sh: jax.Array | IrrepsArray, edge_weights: ArrayLike,
         senders: ArrayLike, receivers: ArrayLike, num_nodes: int,
         irreps_x: IrrepsLike | None = None, irreps_sh: IrrepsLike | None = None,
         irreps_out: IrrepsLike | None = None, *, irrep_normalization: str | None = None,
         path_normalization: str | float | None = None,
         gradient_normalization: str | float | None = None,
         edge_weights_kernel: ArrayLike | None = None) -> IrrepsArray: ...
def conv(x, edge_sh, edge_weights, senders, receivers, num_nodes, irreps_x=None,
         irreps_sh=None, irreps_out=None, *, irrep_normalization=None,
         path_normalization=None, gradient_normalization=None, edge_weights_kernel=None):
  """Messages TP(x[senders], edge_sh, edge_weights) summed at `receivers`, fused.

  Args:
    x: (num_senders, dim(irreps_x)) node features.
    edge_sh: (E, dim(irreps_sh)) per-edge harmonics (multiplicities 1), edge_weights: (E, number
      of weights of the product) per-edge path-and-channel weights (see tensor_product). x and
      edge_sh may be e3nn_jax.IrrepsArrays: their irreps stand in for irreps_x / irreps_sh (and
      must equal them where those are given too).
    senders, receivers: (E,) integer node indices (any integer dtype), in any order (sorted
      inside, stably); an index outside [0, num_senders) or [0, num_nodes) raises when the
      computation runs (on CUDA, where a kernel cannot raise, the whole result is NaN).
    num_nodes: static number of output nodes (or a symbolic size, e.g. x.shape[0] under a
      shape-polymorphic jax.export).
    irreps_x, irreps_sh, irreps_out: irreps strings or e3nn_jax.Irreps; irreps_out is required.
    irrep_normalization, path_normalization, gradient_normalization: as tensor_product's.
    edge_weights_kernel: None, or (k, number of weights): the weights are then
      `edge_weights @ edge_weights_kernel`, edge_weights being (E, k) (a radial network's last
      hidden layer, whose last layer has no bias). The CPU kernel makes each receiver's weights as
      it goes, so that no (E, number of weights) array is written or read in the forward pass;
      differentiated, the cotangents (x, edge_sh, edge_weights and the kernel) come from one
      walk over each sender's edges that makes them the same way; other platforms make the
      array with a matrix product.

  Returns:
    (num_nodes, dim(irreps_out)), equal to
    segment_sum(tensor_product(x[senders], edge_sh, edge_weights, ...), receivers, num_nodes);
    an IrrepsArray of irreps_out (in the inputs' class) when x or edge_sh is one.
  """
  like, (x, tx), (edge_sh, ty), edge_weights, to = unwrap_operands(
      (x, "x", irreps_x, "irreps_x"), (edge_sh, "edge_sh", irreps_sh, "irreps_sh"),
      edge_weights, "edge_weights", irreps_out)
  if any(m != 1 for m, _, _ in ty):
    raise ValueError(f"irreps_sh: every multiplicity must be 1; got {_irreps.to_string(ty)!r}")
  check_reachable(tx, ty, to, "irreps_out")
  spec = _spec(tx, ty, to)
  x = float_operand(x, "x")
  y = float_operand(edge_sh, "edge_sh")
  w = float_operand(edge_weights, "edge_weights")
  kernel = None
  if edge_weights_kernel is not None:
    kernel = float_operand(edge_weights_kernel, "edge_weights_kernel")
    if kernel.ndim != 2 or kernel.shape[1] != spec.dims[W]:
      raise ValueError(f"edge_weights_kernel must have shape (k, {spec.dims[W]}) for these "
                       f"irreps; got {kernel.shape}")
    if w.ndim != 2 or w.shape[1] != kernel.shape[0]:
      raise ValueError(f"edge_weights must have shape (rows, {kernel.shape[0]}) (edge_weights_"
                       f"kernel's rows); got {w.shape}")
  for arr, name, d in ((x, "x", spec.dims[X]), (y, "edge_sh", spec.dims[Y]),
                       (w, "edge_weights", spec.dims[W] if kernel is None else w.shape[-1])):
    if arr.ndim != 2 or arr.shape[1] != d:
      raise ValueError(f"{name} must have shape (rows, {d}) for these irreps; got {arr.shape}")
  e = y.shape[0]
  if w.shape[0] != e:
    raise ValueError(f"edge_weights has {w.shape[0]} rows, edge_sh {e}")
  num_nodes = static_count(num_nodes, "num_nodes")
  graph = edge_graph(senders, receivers, e, x.shape[0], num_nodes)
  dtype = jnp.result_type(x, y, w, *([] if kernel is None else [kernel]))
  scale = weight_scale(tx, ty, to, irrep_normalization, path_normalization,
                       gradient_normalization)
  if scale is not None:  # (the kernel's columns: the same weights scaled)
    if kernel is None:
      w = w * jnp.asarray(scale, dtype)
    else:
      kernel = kernel * jnp.asarray(scale, dtype)
  out = bind_built(x.astype(dtype), y.astype(dtype), w.astype(dtype),
                   None if kernel is None else kernel.astype(dtype), graph, (tx, ty, to))
  return _e3nn.wrap(like, to, out)


def bind_built(x, y, w, kernel, graph, key):
  """The result of a graph conv() built (or tensor_product_conv): the weights w, or w @ kernel
  (factored) when kernel is not None."""
  x, y, w = _sharding.whole(x, y, w)
  if kernel is None:
    return _conv_built_p.bind(x, y, w, *graph, mode=OUT, key=key)
  (kernel,) = _sharding.whole(kernel)
  return _conv_factored_p.bind(x, y, w, kernel, *graph, key=key)


def edge_graph(senders, receivers, num_edges: int, num_senders: int, num_nodes: int):
  """The six graph operands of conv's primitives (see _graph) for `num_edges` edges from
  `senders` to `receivers`, or a TypeError / ValueError naming them.

  Ids that are data rather than tracers (NumPy arrays, lists, jax arrays closed over by a jitted
  function) are sorted here with NumPy, once: the graph enters the computation as constants.
  Sorting constants in the computation would have XLA fold the sorts while compiling (seconds,
  with a warning, at 1e5 edges). Traced ids are sorted in the computation."""
  ids = []
  for raw, name in ((senders, "senders"), (receivers, "receivers")):
    arr = integer_operand(raw, name)
    if arr.shape != (num_edges,):
      raise ValueError(f"{name} must have shape ({num_edges},) (one per edge); got {arr.shape}")
    ids.append(arr)
  ids = _sharding.whole(*ids)
  symbolic = jax.export.is_symbolic_dim(num_senders) or jax.export.is_symbolic_dim(num_nodes)
  if symbolic or any(compat.is_traced(raw) or
                     (isinstance(raw, jax.Array) and not raw.is_fully_addressable)
                     for raw in (senders, receivers)):
    # (so are constant ids for node counts known only as the computation runs: a
    # shape-polymorphic jax.export)
    snd, rcv = int32_indices(ids[0]), int32_indices(ids[1])
    return _graph(snd, rcv, num_senders, num_nodes)
  snd, rcv = (int32_indices(np.asarray(raw)) for raw in (senders, receivers))
  return (snd, rcv) + _numpy_order(rcv, num_nodes) + _numpy_order(snd, num_senders)


def _numpy_order(ids, n):
  """_graph's order and ranges of int32 `ids` into [0, n), in NumPy."""
  counts = np.bincount(ids[(ids >= 0) & (ids < n)], minlength=n)
  ranges = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
  return np.argsort(ids, kind="stable").astype(np.int32), ranges


def _graph(snd, rcv, num_senders, num_nodes):
  """senders, receivers, edges by receiver with ranges, edges by sender with ranges (int32).

  The ranges are the running sums of each node's edge count (an integer scatter-add: exact, so
  deterministic): a few kernels on a GPU, where searchsorted's loop of ~log2(E) steps took most
  of the convolution's time. An id outside [0, n) (int32_indices puts every bad one there) is
  counted nowhere, so the last range falls short of the edges: the handlers' out-of-range test.
  """
  def order(ids, n):
    return jnp.argsort(ids, stable=True).astype(jnp.int32), run_ranges(ids, n)
  return (snd, rcv) + order(rcv, num_nodes) + order(snd, num_senders)


def run_ranges(ids, n):
  """The running counts (n + 1 int32 entries, from 0) of the int32 `ids` in [0, n): where each
  node's run starts in an order sorted by id, were the ids outside [0, n) left out. An integer
  scatter-add and a cumsum: exact, so deterministic."""
  inside = jnp.where((ids >= 0) & (ids < n), ids, n)
  counts = jnp.zeros(n, jnp.int32).at[inside].add(1, mode="drop")
  return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts, dtype=jnp.int32)])


def _rows(mode, graph_avals, slot):
  e = graph_avals[0].shape[0]
  return {X: graph_avals[5].shape[0] - 1, Y: e, W: e, OUT: graph_avals[3].shape[0] - 1}[slot]


def _check_graph(prim, graph):
  """A TypeError naming `prim` unless `graph` is the six graph operands of conv's primitives
  (1-D int32; the ranges one entry longer than their nodes, so never empty)."""
  if len(graph) != 6 or any(g.ndim != 1 or g.dtype != np.int32 for g in graph):
    raise TypeError(f"{prim}: the graph is six 1-D int32 arrays (senders, receivers, edges by "
                    "receiver and its ranges, edges by sender and its ranges); got "
                    f"{[f'{g.dtype}{list(g.shape)}' for g in graph]}")
  if graph[3].shape[0] < 1 or graph[5].shape[0] < 1:
    raise TypeError(f"{prim}: the range arrays need at least one entry (nodes + 1)")


def _abstract_eval(a, b, c, *graph, mode, key):
  spec = checked_spec("conv_p", mode, key)
  _check_graph("conv_p", graph)
  check_one_dtype("conv_p", a, b, c)
  for arr, s in zip((a, b, c), _inputs(mode)):
    if arr.shape != (_rows(mode, graph, s), spec.dims[s]):
      raise TypeError(f"conv_p: operand of slot {s} has shape {arr.shape}")
  return jax.core.ShapedArray((_rows(mode, graph, mode), spec.dims[mode]), a.dtype)


for _prim in (conv_p, _conv_built_p):
  _prim.def_abstract_eval(_abstract_eval)
  _eager.def_jit_impl(_prim)


def graph_is_consistent(snd, rcv, by_recv, recv_ranges, by_send, send_ranges):
  """What the CPU handler checks before it indexes (conv_cpu.cc), in jax.numpy: every sender and
  receiver in range, each order a permutation of the edges that lists every node's edges (and
  only those) in that node's range, the ranges running from 0 to the number of edges."""
  e = snd.shape[0]
  n_recv, n_send = recv_ranges.shape[0] - 1, send_ranges.shape[0] - 1
  ok = jnp.all((snd >= 0) & (snd < n_send)) & jnp.all((rcv >= 0) & (rcv < n_recv))
  for order, ranges, ids in ((by_recv, recv_ranges, rcv), (by_send, send_ranges, snd)):
    ok &= (ranges[0] == 0) & (ranges[-1] == e) & jnp.all(ranges[1:] >= ranges[:-1])
    valid = (order >= 0) & (order < e)
    edge = jnp.where(valid, order, 0)
    # The node whose range holds each position: searchsorted(ranges, position, "right") - 1,
    # as the running count of range starts at or before it (a scatter-add and a cumsum instead
    # of searchsorted's ~log2(nodes) dependent steps; equal wherever the ranges are monotonic,
    # which the line above requires).
    starts = jnp.zeros(e + 1, jnp.int32).at[jnp.clip(ranges, 0, e)].add(1)
    node = jnp.cumsum(starts, dtype=jnp.int32)[:e] - 1
    ok &= jnp.all(valid) & jnp.all(ids[edge] == node)
    ok &= jnp.all(jnp.zeros(e, jnp.int32).at[edge].add(1) == 1)
  return ok


# Edges per task of the CUDA kernels (jaxext/kernels/conv_tasks.h's kTaskEdges, which the CPU
# handler uses): a node run longer than this is cut into pieces run side by side.
TASK_EDGES = 128


def node_tasks(ranges, task_edges=TASK_EDGES):
  """conv_tasks.h's running task counts (nodes + 1, int32, from 0) of a node order's ranges: one
  task per run of at most task_edges edges (an empty one included), else one per task_edges."""
  runs = ranges[1:] - ranges[:-1]
  count = jnp.where(runs <= task_edges, 1, (runs - 1) // task_edges + 1)  # no int32 overflow
  return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(count, dtype=jnp.int32)])


def _lowering(ctx, *args, mode, key, platform, checked):
  _ffi.require(platform, "jaxext.equivariant.conv")
  spec = _spec(*key)
  aval = ctx.avals_out[0]
  out = jax.ShapeDtypeStruct(aval.shape, aval.dtype)
  attrs = ffi_attrs(spec, mode)
  if platform == "cpu":  # the CPU handler checks the graph and raises, and cuts the runs itself
    call = jax.ffi.ffi_call("jaxext_conv", out)
    return compat.lower_fun(lambda *xs: (call(*xs, **attrs),), multiple_results=True)(ctx, *args)
  # CUDA: the node rows' tasks, and the partial rows of the cut runs' pieces (at most
  # edges // TASK_EDGES: each extra piece has TASK_EDGES edges), a second result dropped here.
  edges = ctx.avals_in[3].shape[0]  # senders
  partial_rows = edges // TASK_EDGES if mode in _NODE_SLOTS else 0
  call = jax.ffi.ffi_call("jaxext_conv", (out, jax.ShapeDtypeStruct((partial_rows, aval.shape[1]),
                                                                      aval.dtype)))

  def cuda(a, b, c, snd, rcv, by_recv, recv_ranges, by_send, send_ranges):
    if checked:
      # A kernel cannot raise, and the CUDA kernel trusts the graph: an inconsistent one (conv_p
      # bound directly; conv() always makes consistent ones) takes the kernel's NaN path, which
      # reads nothing but the ranges' ends and the tasks' (first and last), by a receiver range
      # not starting at 0.
      ok = graph_is_consistent(snd, rcv, by_recv, recv_ranges, by_send, send_ranges)
      recv_ranges = recv_ranges.at[0].set(jnp.where(ok, recv_ranges[0], 1))
    else:
      snd, rcv, by_recv, recv_ranges, by_send, send_ranges = _walked_graph(
          (snd, rcv, by_recv, recv_ranges, by_send, send_ranges), mode)
    # (the edge rows of y's and w's cotangents have no tasks: one entry the handler ignores)
    tasks = (node_tasks(send_ranges if mode == X else recv_ranges) if mode in _NODE_SLOTS
             else jnp.zeros(1, jnp.int32))
    result, _ = call(a, b, c, snd, rcv, by_recv, recv_ranges, by_send, send_ranges, tasks,
                     task_edges=np.int64(TASK_EDGES), **attrs)
    return (result,)

  return compat.lower_fun(cuda, multiple_results=True)(ctx, *args)


def _walked_graph(graph, mode):
  """The graph operands of a CUDA call in `mode` on a trusted graph (conv()'s), the node order
  it does not walk replaced (both orders for the edge rows of y's and w's cotangents).

  The CUDA kernels walk the receivers' order for the result's node rows (OUT), the senders' for
  x's cotangent (X), neither for edge rows. Of an order they do not walk they read only its
  ranges' first and last entries (GraphBad: 0 and E iff every id of that side is in range). In
  its place go the edges in their own order (a valid permutation, should a kernel ever walk it)
  and ranges holding only those two entries (0 and the count of ids in range): no sort behind
  them, so XLA drops a sort nobody else reads. A program that never differentiates conv()'s node
  features (one layer's forces and weight gradients, any forward pass) sorts by receiver alone;
  a model of several layers differentiated for forces still sorts by sender too (every layer
  after the first differentiates its node features), once for all layers on one graph.
  JAXEXT_CONV_GRAPH=whole, read as a function is lowered, passes both orders whole (A/B timing:
  tools/gpu_checks.py)."""
  if os.environ.get("JAXEXT_CONV_GRAPH") == "whole":
    return tuple(graph)
  snd, rcv, by_recv, recv_ranges, by_send, send_ranges = graph
  edges = jax.lax.iota(jnp.int32, snd.shape[0])
  if mode != OUT:
    by_recv, recv_ranges = edges, _range_ends(rcv, recv_ranges.shape[0] - 1)
  if mode != X:
    by_send, send_ranges = edges, _range_ends(snd, send_ranges.shape[0] - 1)
  return snd, rcv, by_recv, recv_ranges, by_send, send_ranges


def _range_ends(ids, n):
  """n + 1 int32 entries whose first and last are run_ranges(ids, n)'s (0 and the count of ids
  in [0, n)), the rest 0: all the CUDA kernels read of the ranges of an order they do not walk."""
  inside = jnp.sum((ids >= 0) & (ids < n), dtype=jnp.int32)
  return jnp.concatenate([jnp.zeros(n, jnp.int32), inside[None]])


def _batch(prim, args, dims, **params):
  """A batch of graphs (same sizes): one call per graph (jax.lax.map)."""
  size = compat.batch_size(args, dims)
  moved = [compat.batch_axis_to_front(a, d, size) for a, d in zip(args, dims)]
  out = jax.lax.map(lambda xs: prim.bind(*xs, **params), tuple(moved))
  return (list(out), [0] * len(out)) if prim.multiple_results else (out, 0)


_trilinear_jvps = {}
for _prim, _checked in ((conv_p, True), (_conv_built_p, False)):
  for _platform, _name in (("cpu", "cpu"), ("CUDA", "cuda")):
    compat.register_lowering(
        _prim, functools.partial(_lowering, platform=_platform, checked=_checked), _name)
  # derivatives bind the same primitive (conv()'s stay trusted); conv()'s result (below) its own
  _trilinear_jvps[_prim] = register_trilinear_rules(_prim)
  compat.register_batching(_prim, functools.partial(_batch, _prim))


# conv()'s derivatives. conv()'s result is _conv_built_p in mode OUT (weights w), or
# _conv_factored_p (factored weights w = h @ kernel, h (E, k) a radial network's last hidden
# layer): its floats are (x, y, w) or (x, y, h, kernel). The CPU handler of the factored result
# (jaxext_conv_factored) makes each receiver's weights as it adds its edges, so that the forward
# pass never writes an E x weights array (at 3000 atoms of jax-md's NequIP, 816 MB per layer in
# float64, the largest array of its forward pass).
# The result's JVP is the primal and _conv_lin_p (linear in the tangents of the floats present),
# whose transpose is _conv_bwd_p: every cotangent asked for, from one primitive, so that a
# platform can make them together. The CPU makes the factored weights' cotangents in one walk
# over the edges by sender (jaxext_conv_factored_bwd; no E x weights array either); CUDA the
# edge harmonics' and weights' cotangents in one kernel (jaxext_conv_edge_cts: both read each
# edge's sender and receiver rows). Elsewhere, and for the derivatives of the two helpers, their
# compositions: w made by a matrix product, then the four-mode primitive in each mode. Bound only
# on graphs conv() built (trusted as _conv_built_p). `which`, one flag per float: the tangents
# present (lin) or the cotangents asked for (bwd); its length (3 or 4) says which weights.
_conv_factored_p = compat.Primitive("jaxext_conv_factored")
_conv_lin_p = compat.Primitive("jaxext_conv_lin")
_conv_bwd_p = compat.Primitive("jaxext_conv_bwd")
_conv_bwd_p.multiple_results = True
_GRAPH_OPERANDS = 6


def _made(h, kernel):
  return jnp.matmul(h, kernel, precision=jax.lax.Precision.HIGHEST)


def _weights(floats):
  """The weights w of conv's floats (x, y, w) or (x, y, h, kernel)."""
  return floats[2] if len(floats) == 3 else _made(*floats[2:])


def _floats_count(prim, which):
  """How many floats a `which` describes (3 or 4), or a TypeError naming `prim`."""
  if not isinstance(which, tuple) or len(which) not in (3, 4):
    raise TypeError(f"{prim}: which must be a tuple of 3 (x, y, w) or 4 (x, y, h, kernel) "
                    f"flags; got {which!r}")
  return len(which)


def _check_floats(prim, floats, graph, key):
  """conv's floats against the graph and irreps: their spec."""
  spec = checked_spec(prim, OUT, key)
  _check_graph(prim, graph)
  check_one_dtype(prim, *floats)
  e = graph[0].shape[0]
  x, y, h = floats[:3]
  weights_ok = (h.shape == (e, spec.dims[W]) if len(floats) == 3 else
                h.ndim == 2 and h.shape[0] == e and floats[3].shape == (h.shape[1], spec.dims[W]))
  if (x.shape != (graph[5].shape[0] - 1, spec.dims[X]) or y.shape != (e, spec.dims[Y]) or
      not weights_ok):
    raise TypeError(f"{prim}: operand shapes {', '.join(str(f.shape) for f in floats)} "
                    "disagree with the graph and irreps")
  return spec


def _factored_abstract_eval(x, y, h, kernel, *graph, key):
  spec = _check_floats("conv_factored_p", (x, y, h, kernel), graph, key)
  return jax.core.ShapedArray((graph[3].shape[0] - 1, spec.dims[OUT]), x.dtype)


def _factored_composite(x, y, h, kernel, *graph, key):
  return _conv_built_p.bind(x, y, _made(h, kernel), *graph, mode=OUT, key=key)


def _lin_composite(*args, which, key):
  """The result's tangent: the floats, the tangents present (`which`) in order, the graph."""
  n = len(which)
  floats, rest = args[:n], args[n:]
  tangents, graph = _present(rest[:sum(which)], which), rest[sum(which):]
  x, y = floats[:2]
  w = _weights(floats)
  tx, ty = tangents[:2]
  if n == 3:
    tws = [tangents[2]] if tangents[2] is not None else []
  else:
    (h, kernel), (th, tk) = floats[2:], tangents[2:]
    tws = (([_made(th, kernel)] if th is not None else []) +
           ([_made(h, tk)] if tk is not None else []))
  terms = (([(tx, y, w)] if tx is not None else []) + ([(x, ty, w)] if ty is not None else []) +
           ([(x, y, functools.reduce(operator.add, tws))] if tws else []))
  zero = jnp.zeros((graph[3].shape[0] - 1, _spec(*key).dims[OUT]), x.dtype)
  return functools.reduce(operator.add, (_conv_built_p.bind(*ops, *graph, mode=OUT, key=key)
                                         for ops in terms), zero)


def _bwd_composite(*args, which, key, edge_cts=None):
  """The cotangents asked for (`which`) of the floats, from the result's cotangent (the operand
  after them). edge_cts: None, or a function (x, y, w, ct, *graph) -> (y's, w's cotangents)
  used where both are needed (a lowering's fused call; not differentiable)."""
  n = len(which)
  floats, ct, graph = args[:n], args[n], args[n + 1:]
  x, y = floats[:2]
  w = _weights(floats)
  out = []
  if which[0]:
    out.append(_conv_built_p.bind(y, w, ct, *graph, mode=X, key=key))
  want_w = any(which[2:])
  if which[1] and want_w and edge_cts is not None:
    dy, dw = edge_cts(x, y, w, ct, *graph)
  else:
    dy = _conv_built_p.bind(x, w, ct, *graph, mode=Y, key=key) if which[1] else None
    dw = _conv_built_p.bind(x, y, ct, *graph, mode=W, key=key) if want_w else None
  if which[1]:
    out.append(dy)
  if n == 3:
    if which[2]:
      out.append(dw)
  else:
    h, kernel = floats[2:]
    if which[2]:
      out.append(_made(dw, kernel.T))
    if which[3]:
      out.append(_made(h.T, dw))
  return out


def _lin_abstract_eval(*args, which, key):
  n = _floats_count("conv_lin_p", which)
  floats, rest = args[:n], args[n:]
  graph = rest[sum(which):]
  spec = _check_floats("conv_lin_p", floats, graph, key)
  for t, p in zip(_present(rest[:sum(which)], which), floats):
    if t is not None and (t.shape != p.shape or t.dtype != p.dtype):
      raise TypeError(f"conv_lin_p: a tangent {t.dtype}{list(t.shape)} differs from its "
                      f"primal {p.dtype}{list(p.shape)}")
  return jax.core.ShapedArray((graph[3].shape[0] - 1, spec.dims[OUT]), floats[0].dtype)


def _bwd_abstract_eval(*args, which, key):
  n = _floats_count("conv_bwd_p", which)
  floats, ct, graph = args[:n], args[n], args[n + 1:]
  spec = _check_floats("conv_bwd_p", floats, graph, key)
  if ct.shape != (graph[3].shape[0] - 1, spec.dims[OUT]) or ct.dtype != floats[0].dtype:
    raise TypeError(f"conv_bwd_p: the result's cotangent is {ct.dtype}{list(ct.shape)}")
  return [jax.core.ShapedArray(p.shape, p.dtype) for p, want in zip(floats, which) if want]


def _cpu_handler(name):
  return _ffi.has_target("cpu", name)


def _factored_lowering(ctx, *args, key, platform):
  if platform != "cpu" or not _cpu_handler("jaxext_conv_factored"):
    return compat.lower_fun(lambda *xs: (_factored_composite(*xs, key=key),),
                            multiple_results=True)(ctx, *args)
  aval = ctx.avals_out[0]
  call = jax.ffi.ffi_call("jaxext_conv_factored", jax.ShapeDtypeStruct(aval.shape, aval.dtype))
  attrs = ffi_attrs(_spec(*key), OUT)
  return compat.lower_fun(lambda *xs: (call(*xs, **attrs),), multiple_results=True)(ctx, *args)


def _lin_lowering(ctx, *args, which, key):
  # Evaluated only in forward-mode differentiation (reverse mode transposes it unevaluated).
  return compat.lower_fun(lambda *xs: (_lin_composite(*xs, which=which, key=key),),
                          multiple_results=True)(ctx, *args)


def _edge_cts(x, y, w, ct, *graph, key):
  """The CUDA handler's y and w cotangents in one call (jaxext_conv_edge_cts)."""
  call = jax.ffi.ffi_call("jaxext_conv_edge_cts", (jax.ShapeDtypeStruct(y.shape, y.dtype),
                                                   jax.ShapeDtypeStruct(w.shape, w.dtype)))
  return call(x, y, w, ct, *_walked_graph(graph, Y), **ffi_attrs(_spec(*key), Y))


def _bwd_lowering(ctx, *args, which, key, platform):
  if platform == "cpu" and len(which) == 4 and _cpu_handler("jaxext_conv_factored_bwd"):
    # Four results always; those not asked for are empty (the handler skips them).
    shapes = [jax.ShapeDtypeStruct(p.shape if want else (0,) + p.shape[1:], p.dtype)
              for p, want in zip(ctx.avals_in[:4], which)]
    call = jax.ffi.ffi_call("jaxext_conv_factored_bwd", shapes)
    attrs = ffi_attrs(_spec(*key), OUT)

    def run(*xs):
      return [r for r, want in zip(call(*xs, **attrs), which) if want]
    return compat.lower_fun(run, multiple_results=True)(ctx, *args)
  edge_cts = None
  # JAXEXT_CONV_EDGE_CTS=separate, read as a function is lowered: each mode's own call instead
  # (A/B comparisons in one process: tools/gpu_checks.py).
  if (platform == "cuda" and _ffi.has_target("CUDA", "jaxext_conv_edge_cts") and
      os.environ.get("JAXEXT_CONV_EDGE_CTS") != "separate"):
    edge_cts = functools.partial(_edge_cts, key=key)
  return compat.lower_fun(
      lambda *xs: _bwd_composite(*xs, which=which, key=key, edge_cts=edge_cts),
      multiple_results=True)(ctx, *args)


def _result_jvp(bind, primals, tangents, key):
  """The JVP of conv()'s result (`bind` of its floats and graph): the primal and _conv_lin_p."""
  return tangent_jvp(bind, _conv_lin_p, primals, tangents, len(primals) - _GRAPH_OPERANDS, key)


def _factored_jvp(primals, tangents, *, key):
  return _result_jvp(lambda *p: _conv_factored_p.bind(*p, key=key), primals, tangents, key)


def _built_jvp(primals, tangents, *, mode, key):
  """conv()'s own primitive: its result (mode OUT) through _conv_lin_p, the other modes (its
  derivatives) trilinear."""
  if mode != OUT:
    return _trilinear_jvps[_conv_built_p](primals, tangents, mode=mode, key=key)
  return _result_jvp(lambda *p: _conv_built_p.bind(*p, mode=OUT, key=key), primals, tangents,
                     key)


_conv_factored_p.def_abstract_eval(_factored_abstract_eval)
_conv_lin_p.def_abstract_eval(_lin_abstract_eval)
_conv_bwd_p.def_abstract_eval(_bwd_abstract_eval)
for _prim in (_conv_factored_p, _conv_lin_p, _conv_bwd_p):
  _eager.def_jit_impl(_prim)
for _platform, _name in (("cpu", "cpu"), ("CUDA", "cuda")):
  compat.register_lowering(_conv_factored_p,
                           functools.partial(_factored_lowering, platform=_name), _name)
  compat.register_lowering(_conv_lin_p, _lin_lowering, _name)
  compat.register_lowering(_conv_bwd_p, functools.partial(_bwd_lowering, platform=_name), _name)
compat.register_jvp(_conv_built_p, _built_jvp)
compat.register_jvp(_conv_factored_p, _factored_jvp)
compat.register_jvp(_conv_lin_p,
                    _composite_jvp(_lin_composite, lambda p: len(p["which"]) + sum(p["which"])))
compat.register_jvp(_conv_bwd_p, _composite_jvp(_bwd_composite, lambda p: len(p["which"]) + 1))
compat.register_transpose(_conv_lin_p, lin_transpose_rule(_conv_bwd_p, "conv_lin_p"))
for _prim in (_conv_factored_p, _conv_lin_p, _conv_bwd_p):
  compat.register_batching(_prim, functools.partial(_batch, _prim))
