"""jaxext's CUDA paths, run on the CPU by the emulation (tests/cuda_emu; this process has
JAXEXT_CUDA_EMULATION set by its BUILD target): the contracts that differ from the CPU's by design
(bad indices give NaN: a kernel cannot raise), and the Kepler, limb-darkening and transit kernels
against independent references. The equivariant ops' numbers are equivariant_cuda_emu_test's."""

import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from jaxext import _ffi  # noqa: E402
from jaxext import equivariant as eq  # noqa: E402
from jaxext.equivariant import _irreps  # noqa: E402

from tests import limbdark_reference  # noqa: E402

IRREPS = ("8x0e+8x1o+4x2e", "0e+1o+2e", "8x0e+8x1o+8x2e")


def _custom_calls(text):
  return [line for line in text.splitlines() if "stablehlo.custom_call" in line]


def test_this_process_runs_the_cuda_paths():
  # Without the emulation every other test here would check the CPU's handlers: fail instead.
  assert os.environ.get("JAXEXT_CUDA_EMULATION")
  registered = _ffi.register_all()
  assert set(registered) == {"CUDA"}, registered
  assert {"jaxext_conv", "jaxext_tensor_product", "jaxext_sph", "jaxext_segment_sum",
          "jaxext_kepler_f64", "jaxext_limbdark_f64", "jaxext_transit_f64"} <= set(
              registered["CUDA"])
  # conv lowers as on CUDA: ten operands (the tasks last), the tasks' size as an attribute, and a
  # second result (the cut runs' partial rows).
  x, y, w, snd, rcv = _conv_inputs(10, 50, 1)
  text = jax.jit(lambda a, b, c, s, r: eq.conv(a, b, c, s, r, 10, *IRREPS)).lower(
      x, y, w, snd, rcv).as_text()
  calls = [c for c in _custom_calls(text) if "@jaxext_conv(" in c]
  assert len(calls) == 1 and "task_edges = 128" in calls[0], calls
  assert calls[0].split("@jaxext_conv(")[1].split(")")[0].count("%") == 10
  kepler_text = jax.jit(jaxext.kepler).lower(jnp.ones(3), jnp.ones(3) * 0.1).as_text()
  assert any("@jaxext_kepler_f64" in c for c in _custom_calls(kepler_text))


def _conv_inputs(nodes, edges, seed, dtype=np.float64):
  ix, iy, io = IRREPS
  rng = np.random.default_rng(seed)
  snd = rng.integers(0, nodes, edges).astype(np.int32)
  rcv = rng.integers(0, nodes, edges).astype(np.int32)
  x = rng.normal(size=(nodes, 8 + 24 + 20)).astype(dtype)
  y = np.asarray(eq.spherical_harmonics(iy, rng.normal(size=(edges, 3)))).astype(dtype)
  nw = sum(int(ix.split("+")[i1].split("x")[0]) for i1, _, _ in eq.paths(ix, iy, io))
  w = rng.normal(size=(edges, nw)).astype(dtype)
  return x, y, w, snd, rcv


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv_bad_node_ids_give_nan_under_jit(dtype, monkeypatch):
  # A receiver or sender out of range: the CPU raises; on CUDA every result element is NaN, in
  # the forward pass and in every cotangent (x's by sender, y's and w's by edge).
  x, y, w, snd, rcv = _conv_inputs(20, 300, 2, dtype)
  conv = jax.jit(lambda a, b, c, s, r: eq.conv(a, b, c, s, r, 20, *IRREPS))
  good = np.asarray(conv(x, y, w, snd, rcv))
  assert np.isfinite(good).all()
  for bad_snd, bad_rcv in ((snd, np.where(np.arange(300) == 7, 20, rcv)),
                           (np.where(np.arange(300) == 9, -1, snd), rcv)):
    out = np.asarray(conv(x, y, w, bad_snd, bad_rcv))
    assert np.isnan(out).all()
    # every call alone and together (each gets only the node order it walks: the other's
    # range ends must still catch a bad id), and the y and w modes' own calls
    for argnums in ((0, 1, 2), (0,), (1,), (2,), (1, 2)):
      grads = jax.jit(jax.grad(lambda a, b, c: jnp.sum(conv(a, b, c, bad_snd, bad_rcv)),
                               argnums=argnums))(x, y, w)
      for g in grads:
        assert np.isnan(np.asarray(g)).all(), argnums
    monkeypatch.setenv("JAXEXT_CONV_EDGE_CTS", "separate")
    apart = jax.jit(jax.grad(lambda b, c: jnp.sum(conv(x, b, c, bad_snd, bad_rcv)),
                             argnums=(0, 1))).lower(y, w)
    monkeypatch.delenv("JAXEXT_CONV_EDGE_CTS")
    assert "@jaxext_conv_edge_cts(" not in apart.as_text()
    for g in apart.compile()(y, w):
      assert np.isnan(np.asarray(g)).all()


# The edge cotangents' tests (conv's and the product's): both dtypes, and irreps for the per-path
# kernel, the same past a warp's 32 lanes (2l+1 = 7, fewer than 8 warps in a block), and l = 4
# (the generic kernel's two launches).
def _edge_cts_cases(test):
  irreps = pytest.mark.parametrize("irreps", [
      IRREPS,
      ("40x0e+40x1o+33x3o", "0e+1o+2e+3o", "40x0e+40x1o+40x2e+40x3o"),
      ("3x0e+2x4e", "0e+1o+4e", "2x0e+3x4e+2x3o"),
  ], ids=["per-path", "per-path-wide", "generic"])
  return pytest.mark.parametrize("dtype", [np.float64, np.float32])(irreps(test))


@_edge_cts_cases
def test_conv_edge_cotangents_in_one_call_equal_each_mode_alone(dtype, irreps, monkeypatch):
  # Differentiated, conv()'s harmonics' and weights' cotangents come from one call
  # (jaxext_conv_edge_cts: with the per-path tables one warp per edge makes both; with l = 4,
  # the generic kernel's two launches). They must be the bits of the y and w modes bound alone
  # (the same sums in the same order), and x's cotangent that of its own mode.
  conv_module = sys.modules["jaxext.equivariant.conv"]
  from jaxext.equivariant import _irreps
  ix, iy, io = irreps
  dims = [sum(m * (2 * l + 1) for m, l, _ in _irreps.parse(i)) for i in irreps]
  nodes, edges = 30, 400
  rng = np.random.default_rng(11)
  snd = rng.integers(0, nodes, edges).astype(np.int32)
  rcv = rng.integers(0, nodes, edges).astype(np.int32)
  x = rng.normal(size=(nodes, dims[0])).astype(dtype)
  y = np.asarray(eq.spherical_harmonics(iy, rng.normal(size=(edges, 3)))).astype(dtype)
  nw = sum(_irreps.parse(ix)[i1][0] for i1, _, _ in eq.paths(ix, iy, io))
  w = rng.normal(size=(edges, nw)).astype(dtype)
  ct = rng.normal(size=(nodes, dims[2])).astype(dtype)
  f = lambda a, b, c: jnp.sum(ct * eq.conv(a, b, c, snd, rcv, nodes, ix, iy, io))
  grad = jax.jit(jax.grad(f, argnums=(0, 1, 2)))
  text = grad.lower(x, y, w).as_text()
  assert sum("@jaxext_conv_edge_cts(" in c for c in _custom_calls(text)) == 1, text
  gx, gy, gw = (np.asarray(g) for g in grad(x, y, w))
  key = tuple(_irreps.parse(i) for i in irreps)
  graph = conv_module._graph(jnp.asarray(snd), jnp.asarray(rcv), nodes, nodes)
  alone = jax.jit(lambda a, b, c, mode: conv_module._conv_built_p.bind(
      a, b, c, *graph, mode=mode, key=key), static_argnums=3)
  np.testing.assert_array_equal(gy, alone(x, w, ct, 1))
  np.testing.assert_array_equal(gw, alone(x, y, ct, 2))
  np.testing.assert_array_equal(gx, alone(y, w, ct, 0))
  assert np.abs(gy).max() > 1e-3 and np.abs(gw).max() > 1e-3
  # JAXEXT_CONV_EDGE_CTS=separate (for A/B timing): each mode's own call, the same bits
  monkeypatch.setenv("JAXEXT_CONV_EDGE_CTS", "separate")
  apart = jax.jit(jax.grad(lambda a, b, c: f(a, b, c), argnums=(0, 1, 2)))
  assert "@jaxext_conv_edge_cts(" not in apart.lower(x, y, w).as_text()
  for got, want in zip(apart(x, y, w), (gx, gy, gw)):
    np.testing.assert_array_equal(np.asarray(got), want)
  monkeypatch.delenv("JAXEXT_CONV_EDGE_CTS")
  # factored weights (w = h @ kernel): the same call, then w's cotangent through the kernel
  h = rng.normal(size=(edges, 6)).astype(dtype)
  kernel = (rng.normal(size=(6, nw)) / 3).astype(dtype)
  ff = lambda b, c, d: jnp.sum(ct * eq.conv(x, b, c, snd, rcv, nodes, ix, iy, io,
                                            edge_weights_kernel=d))
  fgrad = jax.jit(jax.grad(ff, argnums=(0, 1, 2)))
  assert "@jaxext_conv_edge_cts(" in fgrad.lower(y, h, kernel).as_text()
  fy, fh, fk = (np.asarray(g, np.float64) for g in fgrad(y, h, kernel))
  w64 = h.astype(np.float64) @ kernel.astype(np.float64)
  ry = np.asarray(alone(x.astype(np.float64), w64, ct.astype(np.float64), 1))
  rw = np.asarray(alone(x.astype(np.float64), y.astype(np.float64), ct.astype(np.float64), 2))
  tol = 1e-12 if dtype == np.float64 else 2e-5
  for got, want in ((fy, ry), (fh, rw @ kernel.T.astype(np.float64)),
                    (fk, h.T.astype(np.float64) @ rw)):
    np.testing.assert_allclose(got, want, atol=tol * np.abs(want).max())


@_edge_cts_cases
def test_product_edge_cotangents_in_one_call_equal_each_mode_alone(dtype, irreps, monkeypatch):
  # tensor_product() differentiated for y and w (an unfused layer's edge harmonics and weights):
  # one call (jaxext_tensor_product_edge_cts) makes both cotangents; they must be the bits of
  # the y and w modes bound alone, and x's cotangent that of its own mode; one call for a
  # batch (vmap) too. (e3nn_ops' path-separated product has constant weights: y's mode alone.)
  ix, iy, io = irreps
  dims = [_irreps.dim(_irreps.parse(i)) for i in irreps]
  rows = 300
  rng = np.random.default_rng(12)
  x = rng.normal(size=(rows, dims[0])).astype(dtype)
  y = np.asarray(eq.spherical_harmonics(iy, rng.normal(size=(rows, 3)))).astype(dtype)
  nw = sum(_irreps.parse(ix)[i1][0] for i1, _, _ in eq.paths(ix, iy, io))
  w = rng.normal(size=(rows, nw)).astype(dtype)
  ct = rng.normal(size=(rows, dims[2])).astype(dtype)
  f = lambda a, b, c: jnp.sum(ct * eq.tensor_product(a, b, c, ix, iy, io))
  calls = lambda fn, *args: sum("@jaxext_tensor_product_edge_cts(" in c
                                for c in _custom_calls(fn.lower(*args).as_text()))
  key = tuple(_irreps.parse(i) for i in irreps)
  alone = jax.jit(lambda a, b, c, mode: eq.tp_p.bind(a, b, c, mode=mode, key=key),
                  static_argnums=3)
  want = {0: np.asarray(alone(y, w, ct, 0)), 1: np.asarray(alone(x, w, ct, 1)),
          2: np.asarray(alone(x, y, ct, 2))}
  assert np.abs(want[1]).max() > 1e-3 and np.abs(want[2]).max() > 1e-3
  for argnums, n_calls in (((0, 1, 2), 1), ((1, 2), 1), ((1,), 0), ((2,), 0), ((0, 2), 0)):
    grad = jax.jit(jax.grad(f, argnums=argnums))
    assert calls(grad, x, y, w) == n_calls, argnums
    for a, g in zip(argnums, grad(x, y, w)):
      np.testing.assert_array_equal(np.asarray(g), want[a])
  # JAXEXT_TP_EDGE_CTS=separate (for A/B timing): each mode's own call, the same bits
  monkeypatch.setenv("JAXEXT_TP_EDGE_CTS", "separate")
  apart = jax.jit(jax.grad(f, argnums=(1, 2)))
  assert calls(apart, x, y, w) == 0
  for a, g in zip((1, 2), apart(x, y, w)):
    np.testing.assert_array_equal(np.asarray(g), want[a])
  monkeypatch.delenv("JAXEXT_TP_EDGE_CTS")
  # vmap over a batch of products: one call for the batch, each member's bits
  split = lambda a: a.reshape((3, rows // 3) + a.shape[1:])
  fb = lambda a, b, c, d: jnp.sum(d * eq.tensor_product(a, b, c, ix, iy, io))
  batched = jax.jit(jax.vmap(jax.grad(fb, argnums=(1, 2))))
  assert calls(batched, split(x), split(y), split(w), split(ct)) == 1
  for a, g in zip((1, 2), batched(split(x), split(y), split(w), split(ct))):
    np.testing.assert_array_equal(np.asarray(g).reshape(want[a].shape), want[a])


def _sorts(compiled_text):
  """Sort instructions in XLA's CPU program text (a GPU's may be CUB's custom calls instead)."""
  return len(re.findall(r"[)}\]] sort\(", compiled_text))


def test_conv_sorts_only_the_orders_its_kernels_walk(monkeypatch):
  # The result's node rows walk the edges by receiver, x's cotangent by sender, the edge rows of
  # y's and w's cotangents neither. A call reads only the ends of an order it does not walk
  # (conv._walked_graph), so XLA drops that order's sort: a layer whose node features are not
  # differentiated (forces and weight gradients of a MACE-like layer) sorts once, not twice; a
  # model of several layers differentiated for forces still sorts by sender (its later layers
  # differentiate their node features), once for all of them.
  conv_module = sys.modules["jaxext.equivariant.conv"]
  x, y, w, snd, rcv = _conv_inputs(10, 50, 3)
  ct = np.random.default_rng(4).normal(size=(10, 8 + 24 + 40))
  conv = lambda a, b, c, s, r: eq.conv(a, b, c, s, r, 10, *IRREPS)
  square = lambda a, b, c, s, r: jnp.sum(conv(a, b, c, s, r) ** 2)
  linear = lambda a, b, c, s, r: jnp.sum(ct * conv(a, b, c, s, r))
  cases = {"forward: by receiver": (conv, 1),
           "forces and weights: the forward's sort": (
               jax.value_and_grad(square, argnums=(1, 2)), 1),
           "edge rows alone: no forward, no sort": (jax.grad(linear, argnums=(1, 2)), 0),
           "x's cotangent: by sender": (jax.grad(linear, argnums=0), 1),
           "everything: both": (jax.value_and_grad(square, argnums=(0, 1, 2)), 2),
           # XLA's common subexpressions
           "two layers' forward on one graph share its sort": (
               lambda a, b, c, s, r: conv(conv(a, b, c, s, r)[:, :52], b, c, s, r), 1)}
  for name, (fn, sorts) in cases.items():
    compiled = jax.jit(fn).lower(x, y, w, snd, rcv).compile()
    assert _sorts(compiled.as_text()) == sorts, name
  # factored weights (w = h @ kernel): the same calls
  h, kernel = np.ones((50, 4)), np.ones((4, w.shape[1])) / 7
  factored = lambda a, b, c, s, r: jnp.sum(eq.conv(a, y, b, s, r, 10, *IRREPS,
                                                   edge_weights_kernel=c) ** 2)
  for argnums, sorts in (((1, 2), 1), ((0, 1, 2), 2)):
    compiled = jax.jit(jax.grad(factored, argnums=argnums)).lower(x, h, kernel, snd, rcv).compile()
    assert _sorts(compiled.as_text()) == sorts, argnums
  # JAXEXT_CONV_GRAPH=whole (A/B timing) passes both orders whole: two sorts, the same bits
  monkeypatch.setenv("JAXEXT_CONV_GRAPH", "whole")
  whole = jax.jit(jax.value_and_grad(square, argnums=(1, 2))).lower(x, y, w, snd, rcv).compile()
  monkeypatch.delenv("JAXEXT_CONV_GRAPH")
  assert _sorts(whole.as_text()) == 2
  walked = jax.jit(jax.value_and_grad(square, argnums=(1, 2)))
  for got, want in zip(jax.tree.leaves(walked(x, y, w, snd, rcv)),
                       jax.tree.leaves(whole(x, y, w, snd, rcv))):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  # the same numbers as with every order real (the graph check of the exported conv_p reads
  # both orders whole: the control that the count sees sorts that are there)
  key = tuple(_irreps.parse(i) for i in IRREPS)
  full = lambda a, b, c, s, r: conv_module.conv_p.bind(
      a, b, c, *conv_module._graph(s, r, 10, 10), mode=conv_module.OUT, key=key)
  compiled = jax.jit(full).lower(x, y, w, snd, rcv).compile()
  assert _sorts(compiled.as_text()) == 2
  np.testing.assert_array_equal(np.asarray(compiled(x, y, w, snd, rcv)),
                                np.asarray(jax.jit(conv)(x, y, w, snd, rcv)))
  g = jax.jit(jax.grad(square, argnums=(0, 1, 2)))(x, y, w, snd, rcv)
  g_full = jax.grad(lambda a, b, c: jnp.sum(full(a, b, c, snd, rcv) ** 2), argnums=(0, 1, 2))
  for got, want in zip(g, jax.jit(g_full)(x, y, w)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13, atol=1e-13)


def test_exported_conv_p_gives_nan_for_inconsistent_graph_operands():
  # conv_p is public: graph operands that do not describe senders/receivers take the CUDA
  # lowering's check, which makes every element NaN (the CPU handler raises instead); operands
  # of the wrong sizes are the handler's to refuse, on CUDA too.
  import importlib
  cm = importlib.import_module("jaxext.equivariant.conv")
  from jaxext.equivariant import _irreps
  x, y, w, snd, rcv = _conv_inputs(12, 40, 3)
  key = tuple(_irreps.parse(i) for i in IRREPS)
  graph = [np.asarray(g) for g in cm._graph(jnp.asarray(snd), jnp.asarray(rcv), 12, 12)]
  bind = jax.jit(lambda *g: eq.conv_p.bind(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w), *g,
                                           mode=cm.OUT, key=key))
  ref = np.asarray(eq.conv(x, y, w, snd, rcv, 12, *IRREPS))
  np.testing.assert_array_equal(np.asarray(bind(*graph)), ref)
  for slot in (2, 4):
    bad = [g.copy() for g in graph]
    bad[slot][3] = 10**6  # an edge that does not exist
    assert np.isnan(np.asarray(bind(*bad))).all()
    bad = [g.copy() for g in graph]
    bad[slot + 1][2] = bad[slot + 1][1] - 1  # decreasing ranges
    assert np.isnan(np.asarray(bind(*bad))).all()
  short = [g.copy() for g in graph]
  short[1] = short[1][:-1]
  with pytest.raises(Exception, match="jaxext equivariant.conv"):
    jax.block_until_ready(bind(*short))


def test_segment_sum_drops_out_of_range_ids_and_gives_nan_for_unsorted_ones():
  data = np.arange(12.0).reshape(6, 2)
  ids = np.array([0, 0, 1, 3, 3, 4], np.int32)
  np.testing.assert_array_equal(np.asarray(eq.segment_sum(data, ids, 5, indices_are_sorted=True)),
                                [[2, 4], [4, 5], [0, 0], [14, 16], [10, 11]])
  # ids outside [0, 4) are dropped, sorted or not (as jax.ops.segment_sum)
  for sorted_ids in (True, False):
    out = eq.segment_sum(data, np.array([-1, 0, 1, 3, 3, 4], np.int32), 4,
                         indices_are_sorted=sorted_ids)
    np.testing.assert_array_equal(np.asarray(out), [[2, 3], [4, 5], [0, 0], [14, 16]])
  unsorted = np.array([0, 3, 1, 0, 3, 4], np.int32)
  out = np.asarray(jax.jit(lambda d, i: eq.segment_sum(d, i, 5, indices_are_sorted=True))(
      data, unsorted))
  assert np.isnan(out).all()


def _pieces_sum(rows, task_rows=128):
  """The CUDA segment sum's documented order, in NumPy: pieces of task_rows rows, each summed in
  row order (cumsum is sequential), then the pieces' sums in order."""
  if len(rows) == 0:
    return np.zeros(rows.shape[1:], rows.dtype)
  sums = [np.cumsum(rows[i:i + task_rows], axis=0)[-1] for i in range(0, len(rows), task_rows)]
  return np.cumsum(np.stack(sums), axis=0)[-1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segment_sum_cuts_long_segments_into_pieces_joined_in_order(dtype):
  # Segments of 0, 1, 127, 128, 129, 256, 257 and 1500 rows and a padding segment (jax-md's: a
  # fifth of the rows on one id), rows before and after them with ids out of range, values
  # over many magnitudes (so that any other order of addition changes the bits).
  counts = [0, 1, 127, 128, 129, 256, 257, 1500, 900]
  n = len(counts)
  ids = np.concatenate([[-3, -1], np.repeat(np.arange(n), counts), [n, n + 4]]).astype(np.int32)
  rng = np.random.default_rng(41)
  data = (rng.normal(size=(ids.size, 3, 2)) * 10.0 ** rng.uniform(-6, 6, (ids.size, 1, 1)))
  data = data.astype(dtype)
  want = np.stack([_pieces_sum(data[ids == s]) for s in range(n)])
  for got in (eq.segment_sum(data, ids, n, indices_are_sorted=True),
              jax.jit(lambda d, i: eq.segment_sum(d, i, n, indices_are_sorted=True))(data, ids)):
    np.testing.assert_array_equal(np.asarray(got), want)
  # the same rows shuffled: the lowering's stable sort keeps each segment's rows in their order
  # in the shuffled data
  perm = rng.permutation(ids.size)
  np.testing.assert_array_equal(
      np.asarray(eq.segment_sum(data[perm], ids[perm], n)),
      np.stack([_pieces_sum(data[perm][ids[perm] == s]) for s in range(n)]))
  # ... which is the sum to the dtype's rounding (long double, np.add.at: independent)
  exact = np.zeros((n, 3, 2), np.longdouble)
  inside = (ids >= 0) & (ids < n)
  np.add.at(exact, ids[inside], data[inside].astype(np.longdouble))
  scale = np.abs(data).max()
  np.testing.assert_allclose(want, exact.astype(np.float64), rtol=0,
                             atol=scale * np.finfo(dtype).eps * 64)
  # The lowering: four operands (data, ids, the segments' ranges and tasks), the task size, and
  # the pieces' partial rows (rows // 128 of them) as a third result.
  text = jax.jit(lambda d, i: eq.segment_sum(d, i, n, indices_are_sorted=True)).lower(
      data, ids).as_text()
  calls = [c for c in _custom_calls(text) if "@jaxext_segment_sum(" in c]
  assert len(calls) == 1 and "task_rows = 128" in calls[0], calls
  assert calls[0].split("@jaxext_segment_sum(")[1].split(")")[0].count("%") == 4
  assert f"tensor<{ids.size // 128}x3x2x" in calls[0], calls
  # Unsorted ids promised sorted: NaN everywhere, the cut segments included.
  bad = ids.copy()
  bad[[10, 2000]] = bad[[2000, 10]]
  out = np.asarray(eq.segment_sum(data, bad, n, indices_are_sorted=True))
  assert np.isnan(out).all()


def test_segment_sum_with_a_padding_segment_differentiates_through_gather():
  # gather's transpose is this sum (unsorted ids: sorted by the lowering), at every order.
  rng = np.random.default_rng(42)
  idx = np.concatenate([rng.integers(0, 30, 400), np.full(700, 30)])
  idx = rng.permutation(idx).astype(np.int32)
  x = rng.normal(size=(31, 4))
  w = rng.normal(size=(idx.size, 4))
  got = jax.grad(lambda a: jnp.sum(w * eq.gather(a, idx)))(x)
  want = np.zeros_like(x)
  np.add.at(want, idx, w)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
  check_grads(lambda a: eq.segment_sum(a, idx, 31) ** 2, (w,), order=2, modes=("fwd", "rev"))


def test_segment_sum_tasks_that_are_not_the_lowerings_give_nan():
  # The handler bound with row ranges or task counts other than the lowering's (only a direct
  # ffi_call can): NaN everywhere, nothing read or written out of bounds (ends and middles
  # checked: pieces past the rows, past the partial rows, before row 0, a segment with no task,
  # ranges running backwards, counts made for another task size).
  from jaxext.equivariant import segment as segment_module
  conv_module = sys.modules["jaxext.equivariant.conv"]
  ids = np.repeat(np.arange(3), [10, 300, 20]).astype(np.int32)
  data = np.ones((ids.size, 2))
  out = jax.ShapeDtypeStruct((3, 2), np.float64)
  flag = jax.ShapeDtypeStruct((1,), np.int32)

  def call(ranges, tasks, task_rows=128, partial_rows=ids.size // 128):
    partial = jax.ShapeDtypeStruct((partial_rows, 2), np.float64)
    return np.asarray(jax.ffi.ffi_call("jaxext_segment_sum", (out, flag, partial))(
        data, ids, jnp.asarray(ranges, jnp.int32), jnp.asarray(tasks, jnp.int32),
        task_rows=np.int64(task_rows))[0])

  ranges = segment_module.sorted_ranges(jnp.asarray(ids), 3)
  tasks = conv_module.node_tasks(ranges)
  np.testing.assert_array_equal(np.asarray(ranges), [0, 10, 310, 330])
  np.testing.assert_array_equal(np.asarray(tasks), [0, 1, 4, 5])
  np.testing.assert_array_equal(call(ranges, tasks), [[10, 10], [300, 300], [20, 20]])
  bad = [
      (ranges, conv_module.node_tasks(ranges, 8), 8, 2),    # more pieces than partial rows
      (ranges, conv_module.node_tasks(ranges, 8), 128, 64),  # counts for another size
      ([0, 10, 310, 335], tasks, 128, 2),                     # rows past the end
      ([0, 10, 310, 330], [0, 1, 2, 5], 128, 2),              # a piece past the rows
      ([0, 10, 310, 330], [0, 5, 5, 5], 128, 2),              # partial row 2 of 2, rows before 0
      ([0, 10, 310, 330], [0, 0, 3, 4], 128, 2),              # a segment with no task
      ([0, 10**6, 310, 330], tasks, 128, 2),                  # ranges running backwards
  ]
  for r, t, k, p in bad:
    assert np.isnan(call(r, t, k, p)).all(), (r, t, k, p)


def test_kepler_against_newton_in_float64_and_float32():
  rng = np.random.default_rng(4)
  m = np.concatenate([rng.uniform(-20, 20, 2000), [0.0, np.pi, -np.pi, 2 * np.pi, 1e-300]])
  e = np.concatenate([rng.uniform(0, 0.999, 2000), [0.0, 0.5, 0.999999, 0.3, 0.9]])
  # Newton's method in float64 from E = M + e sin M, iterated to convergence (independent).
  big = np.mod(m, 2 * np.pi)
  big_e = big + e * np.sin(big)
  for _ in range(100):
    big_e = big_e - (big_e - e * np.sin(big_e) - big) / (1 - e * np.cos(big_e))
  np.testing.assert_allclose(big_e - e * np.sin(big_e), big, atol=1e-13)
  s, c = jax.jit(jaxext.kepler)(m, e)
  np.testing.assert_allclose(np.asarray(s), np.sin(big_e), atol=1e-12)
  np.testing.assert_allclose(np.asarray(c), np.cos(big_e), atol=1e-12)
  # float32: M = 20 is known to ~1e-6 (its rounding), so sin E to a few times that
  s, c = jax.jit(jaxext.kepler)(m.astype(np.float32), e.astype(np.float32))
  assert s.dtype == np.float32
  np.testing.assert_allclose(np.asarray(s, np.float64), np.sin(big_e), atol=2e-5)
  np.testing.assert_allclose(np.asarray(c, np.float64), np.cos(big_e), atol=2e-5)
  s, c = jaxext.kepler(np.array([1.0, 1.0, np.nan]), np.array([1.0, -0.1, 0.5]))
  assert np.isnan(np.asarray(s)).all() and np.isnan(np.asarray(c)).all()


def test_limb_darkening_against_mpmath_and_its_derivatives():
  rng = np.random.default_rng(5)
  b = np.concatenate([rng.uniform(0, 1.5, 24), [0.0, 0.1, 0.9, 1.0, 1.1, 0.5, 2.0]])
  r = np.concatenate([rng.uniform(0.01, 0.3, 24), [0.1, 0.1, 0.1, 0.1, 0.1, 1.5, 0.5]])
  for u in ([0.4, 0.26], [0.1, 0.2, 0.05, 0.02]):
    want = np.array([limbdark_reference.relative_flux(bi, ri, u, dps=25) for bi, ri in zip(b, r)])
    got = np.asarray(jax.jit(jaxext.limb_dark_flux)(b, r, np.asarray(u)))
    np.testing.assert_allclose(got, want, atol=1e-12)
    got32 = np.asarray(jaxext.limb_dark_flux(b.astype(np.float32), r.astype(np.float32),
                                             np.asarray(u, np.float32)))
    np.testing.assert_allclose(got32, want, atol=2e-6)
  # the gradient and Hessian kernels against finite differences of the value kernel, at points
  # away from the contacts (b = 1 -+ r), where the second derivative jumps
  flux = lambda bb, rr, uu: jaxext.limb_dark_flux(bb, rr, uu)
  check_grads(flux, (np.array([0.05, 0.3, 0.6, 1.0, 1.02, 0.2]),
                     np.array([0.1, 0.1, 0.2, 0.1, 0.1, 0.5]), np.array([0.4, 0.26])),
              order=2, modes=["fwd", "rev"], atol=1e-6, rtol=1e-6)


def test_transit_light_curve_against_the_sky_separation_and_mpmath():
  # A circular orbit: the planet's sky separation is elementary; the flux at each point is the
  # mpmath reference's (no exposure time: one point each).
  t = np.linspace(-0.12, 0.12, 25)
  period, t0, a, r, impact, u = 3.0, 0.01, 9.0, 0.1, 0.3, [0.4, 0.26]
  got = np.asarray(jax.jit(lambda tt: jaxext.transit_light_curve(
      tt, period=period, t0=t0, a=a, r=r, u=jnp.asarray(u), impact=impact))(t))
  phase = 2 * np.pi * (t - t0) / period
  cos_i = impact / a
  x, yy = a * np.sin(phase), a * np.cos(phase) * cos_i
  sep = np.hypot(x, yy)
  want = np.array([limbdark_reference.relative_flux(s, r, u, dps=25) for s in sep])
  np.testing.assert_allclose(got, want, atol=1e-10)
  assert got.min() < 0.99  # the transit is in the window
  # the derivative kernels (linearised and transposed) against finite differences, inside the
  # transit (its contacts, where derivatives jump, are 0.045 and 0.056 from t0)
  inside = t0 + np.linspace(-0.035, 0.035, 9)
  curve = lambda p, rr, tt0: jaxext.transit_light_curve(
      inside, period=p, t0=tt0, a=a, r=rr, u=jnp.asarray(u), impact=impact, texp=0.01,
      oversample=3)
  # (steps of 1e-6: the truncation error of 1e-4's was 1e-5 of the period's derivative)
  check_grads(curve, (period, r, t0), order=1, modes=["fwd", "rev"], eps=1e-6, atol=1e-7,
              rtol=1e-7)


def test_segment_sum_lowers_for_cuda_with_symbolic_sizes():
  # gather's transpose sums into x's rows, a symbolic count under a shape-polymorphic export; the
  # CUDA lowering sizes its ranges, tasks and partial rows from such counts.
  rows, edges = jax.export.symbolic_shape("n, e")
  x = jax.ShapeDtypeStruct((rows, 4), np.float64)
  idx = jax.ShapeDtypeStruct((edges,), np.int32)
  grad = jax.grad(lambda a, i: jnp.sum(jnp.sin(eq.gather(a, i))))
  exported = jax.export.export(
      jax.jit(grad), platforms=("cuda",),
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("jaxext_segment_sum")])(x, idx)
  text = exported.mlir_module()
  assert "@jaxext_segment_sum(" in text and "task_rows = 128" in text
