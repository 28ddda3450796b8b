"""jaxext.equivariant.e3nn_ops against e3nn-jax 0.21.0 itself: the path-separated tensor product
(irreps, layout and numbers of e3nn.tensor_product, with and without regrouping, every filter and
irrep normalisation, inputs with unsorted and repeated irreps, l up to 7), its derivatives (to
third order), the fused product-and-scatter against e3nn's scatter_sum of the weighted product,
and the errors."""

import os
import sys

import e3nn_jax as e3nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

from jaxext.equivariant import e3nn_ops  # noqa: E402


def _array(irreps, rows, seed):
  irreps = e3nn.Irreps(irreps)
  return e3nn.IrrepsArray(irreps, np.random.default_rng(seed).normal(size=(rows, irreps.dim)))


def _sh(irreps, rows, seed):
  v = e3nn.IrrepsArray("1o", np.random.default_rng(seed).normal(size=(rows, 3)))
  return e3nn.spherical_harmonics(irreps, v, normalize=True)


CASES = [
    ("4x0e+4x1o+4x2e", "0e+1o+2e+3o", None),
    ("4x0e+4x1o+4x2e", "0e+1o+2e+3o", "0e+1o+2e"),
    ("3x1o+2x0e+3x1o+1x2e", "0e+1o+2e", ["0e", "1o", "2e", "3o"]),  # unsorted, repeated
    ("2x3o+1x0e", "0e+2e+4e", "1o+3o+5o"),
    ("1x7e+2x4o", "0e+1o+7o", None),  # l up to 7 (and outputs up to 14)
]


@pytest.mark.parametrize("ix, iy, filt", CASES)
@pytest.mark.parametrize("regroup", [True, False])
@pytest.mark.parametrize("norm", ["component", "norm", "none"])
def test_tensor_product_equals_e3nn(ix, iy, filt, regroup, norm):
  x, y = _array(ix, 6, 1), _sh(iy, 6, 2)
  got = e3nn_ops.tensor_product(x, y, filter_ir_out=filt, irrep_normalization=norm,
                                regroup_output=regroup)
  want = e3nn.tensor_product(x, y, filter_ir_out=filt, irrep_normalization=norm,
                             regroup_output=regroup)
  assert isinstance(got, e3nn.IrrepsArray)
  assert got.irreps == want.irreps, (got.irreps, want.irreps)
  np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)


@pytest.mark.parametrize("ix, iy, filt, regroup", [
    ("2x0e+0x1o+3x1o", "0e+1o", None, False),     # a zero-multiplicity x term
    ("2x0e+3x1o", "0e+0x1o+2e", None, False),       # a zero-multiplicity y term
    ("2x0e+3x1o", "0e+1o", "5e", True),             # nothing passes the filter
    ("2x0e+3x1o", "0e+1o", e3nn.Irrep("1o"), True),  # a bare Irrep
    ("2x0e+3x1o", "0e+1o", [(0, 1), (1, -1)], True),  # (l, parity) pairs
])
def test_edge_cases_equal_e3nn(ix, iy, filt, regroup):
  x = _array(ix, 3, 20)
  y = e3nn.IrrepsArray(iy, np.random.default_rng(21).normal(size=(3, e3nn.Irreps(iy).dim)))
  got = e3nn_ops.tensor_product(x, y, filter_ir_out=filt, regroup_output=regroup)
  want = e3nn.tensor_product(x, y, filter_ir_out=filt, regroup_output=regroup)
  assert got.irreps == want.irreps and got.shape == want.shape
  np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)


def test_broadcasting_dtypes_and_config():
  """Leading axes broadcast; float32 stays float32 (and as accurate as e3nn-jax's float32),
  bfloat16 stays bfloat16; unset options follow e3nn_jax.config."""
  x, y = _array("2x0e+2x1o", 5, 22), _sh("0e+1o+2e", 5, 23)
  xb = e3nn.IrrepsArray(x.irreps, x.array.reshape(5, 1, -1))
  got = e3nn_ops.tensor_product(xb, y)
  want = e3nn.tensor_product(xb, y)
  assert got.shape == want.shape == (5, 5, want.irreps.dim)
  np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)
  x32, y32 = (e3nn.IrrepsArray(a.irreps, a.array.astype(np.float32)) for a in (x, y))
  ref = np.asarray(e3nn.tensor_product(x, y).array)
  got32 = e3nn_ops.tensor_product(x32, y32)
  assert got32.dtype == jnp.float32
  err = np.abs(np.asarray(got32.array, np.float64) - ref).max()
  err_e3nn = np.abs(np.asarray(e3nn.tensor_product(x32, y32).array, np.float64) - ref).max()
  assert err <= 3 * err_e3nn + 1e-6, (err, err_e3nn)
  xbf = e3nn.IrrepsArray(x.irreps, x.array.astype(jnp.bfloat16))
  assert e3nn_ops.tensor_product(xbf, e3nn.IrrepsArray(y.irreps, y.array.astype(jnp.bfloat16))
                                 ).dtype == jnp.bfloat16
  saved = e3nn.config("irrep_normalization")
  try:
    e3nn.config("irrep_normalization", "norm")
    np.testing.assert_allclose(np.asarray(e3nn_ops.tensor_product(x, y).array),
                               np.asarray(e3nn.tensor_product(x, y).array), atol=1e-12)
  finally:
    e3nn.config("irrep_normalization", saved)


def test_derivatives_equal_e3nn_and_to_third_order():
  x, y = _array("2x0e+2x1o+1x2e", 4, 3), _sh("0e+1o+2e", 4, 4)
  filt = "0e+1o+2e"

  def loss(f):
    return lambda a, b: jnp.sum(jnp.sin(f(e3nn.IrrepsArray(x.irreps, a),
                                          e3nn.IrrepsArray(y.irreps, b),
                                          filter_ir_out=filt).array))

  ours = jax.grad(loss(e3nn_ops.tensor_product), argnums=(0, 1))(x.array, y.array)
  ref = jax.grad(loss(e3nn.tensor_product), argnums=(0, 1))(x.array, y.array)
  for a, b in zip(ours, ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-12)
  check_grads(loss(e3nn_ops.tensor_product), (x.array, y.array), order=3, modes=("fwd", "rev"),
              atol=1e-6, rtol=1e-6)


@pytest.fixture(params=["component", "norm", "none"])
def irrep_normalization(request):
  """e3nn_jax.config's irrep normalisation for the test's duration (e3nn-jax's own calls and
  ours read it)."""
  saved = e3nn.config("irrep_normalization")
  e3nn.config("irrep_normalization", request.param)
  yield request.param
  e3nn.config("irrep_normalization", saved)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ix, regroup", [("3x0e+3x1o+2x2e", True), ("2x1o+3x0e+2x1o", True),
                                         ("2x1o+3x0e+2x1o", False)])
def test_tensor_product_conv_equals_e3nn_scatter(weighted, ix, regroup, irrep_normalization):
  """Fused: scatter_sum(tensor_product(x[senders], sh) * weights, dst=receivers), as e3nn-jax
  computes it, jitted, and its gradients in x, the harmonics and the weights; unsorted x with
  repeated irreps, regrouped or not; under each irrep normalisation (under "none" e3nn-jax's
  `* weights` scales each copy of degree l by 1 / sqrt(2 l + 1))."""
  nodes, edges = 9, 50
  rng = np.random.default_rng(5)
  x = _array(ix, nodes, 6)
  sh = _sh("0e+1o+2e+3o", edges, 7)
  snd, rcv = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
  filt = "0e+1o+2e"
  n_out = e3nn.tensor_product(x[snd], sh, filter_ir_out=filt,
                              regroup_output=regroup).irreps.num_irreps
  w = rng.normal(size=(edges, n_out)) if weighted else None

  def ref(xa, sha, wa):
    m = e3nn.tensor_product(e3nn.IrrepsArray(x.irreps, xa)[snd], e3nn.IrrepsArray(sh.irreps, sha),
                            filter_ir_out=filt, regroup_output=regroup)
    if wa is not None:
      m = m * wa
    return e3nn.scatter_sum(m, dst=rcv, output_size=nodes)

  def ours(xa, sha, wa):
    return e3nn_ops.tensor_product_conv(e3nn.IrrepsArray(x.irreps, xa),
                                        e3nn.IrrepsArray(sh.irreps, sha), snd, rcv, nodes,
                                        weights=wa, filter_ir_out=filt, regroup_output=regroup)

  got, want = jax.jit(ours)(x.array, sh.array, w), ref(x.array, sh.array, w)
  assert got.irreps == want.irreps
  np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)
  argnums = (0, 1, 2) if weighted else (0, 1)
  loss = lambda f: lambda *a: jnp.sum(f(*a).array ** 2)
  g = jax.grad(loss(ours), argnums=argnums)(x.array, sh.array, w)
  g_ref = jax.grad(loss(ref), argnums=argnums)(x.array, sh.array, w)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-11)
  np.testing.assert_allclose(
      np.asarray(e3nn_ops.scatter_sum(e3nn.tensor_product(x[snd], sh, filter_ir_out=filt,
                                                          regroup_output=regroup),
                                      dst=rcv, output_size=nodes).array),
      np.asarray(ours(x.array, sh.array, None).array), atol=1e-12)
  if weighted:  # one weight per edge, broadcast over the output's irreps
    np.testing.assert_allclose(np.asarray(ours(x.array, sh.array, w[:, :1]).array),
                               np.asarray(ref(x.array, sh.array, w[:, :1]).array), atol=1e-12)
    # weights as a radial network's last layer, weights = hidden @ kernel: made by the kernel
    hidden, kernel = rng.normal(size=(edges, 5)), rng.normal(size=(5, n_out))
    factored = lambda xa, sha, ha, ka: e3nn_ops.tensor_product_conv(
        e3nn.IrrepsArray(x.irreps, xa), e3nn.IrrepsArray(sh.irreps, sha), snd, rcv, nodes,
        weights=ha, weights_kernel=ka, filter_ir_out=filt, regroup_output=regroup)
    got = jax.jit(factored)(x.array, sh.array, hidden, kernel)
    want = ref(x.array, sh.array, hidden @ kernel)
    assert got.irreps == want.irreps
    np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)
    g = jax.grad(loss(factored), argnums=(0, 1, 2, 3))(x.array, sh.array, hidden, kernel)
    g_ref = jax.grad(loss(lambda a, b, c, d: ref(a, b, c @ d)), argnums=(0, 1, 2, 3))(
        x.array, sh.array, hidden, kernel)
    for a, b in zip(g, g_ref):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-10)


SCATTER_CASES = [
    dict(dst=np.array([0, -1, 1, 5, -6, 2, 2, 0, -3, 4, 7, -9]), output_size=6),  # wrap, drop
    dict(dst=np.arange(12) % 4, output_size=4),
    dict(dst=np.array([-8, 9, 0, 1, 4, 4, -1, 3, 2, 6, -5, 0]), output_size=5, mode="clip"),
    dict(dst=np.array([-8, 9, 0, 1, 4, 4, -1, 3, 2, 6, -5, 0]), output_size=5, mode="drop"),
    dict(nel=np.array([3, 0, 4, 5])),
    dict(nel=np.array([3, 0, 4, 2])),  # fewer than the rows
    dict(nel=np.array([3, 0, 4, 5]), map_back=True),
    dict(dst=np.array([70, 7, 7, 140, 0, 70, 203, 0, 7, 14, 14, 70]), map_back=True),
    dict(dst=np.zeros(12, np.int64), output_size=0),
]


@pytest.mark.parametrize("case", range(len(SCATTER_CASES)))
def test_scatter_sum_is_e3nns(case):
  """e3nn_ops.scatter_sum: e3nn.scatter_sum's arguments and results (dst with negative ids
  counting from the end and the rest dropped or clipped by mode, nel, map_back), jitted, with
  gradients."""
  kw = SCATTER_CASES[case]
  d = _array("2x0e+1o", 12, 40)
  want = e3nn.scatter_sum(d, **kw)
  for got in (e3nn_ops.scatter_sum(d, **kw), jax.jit(lambda a: e3nn_ops.scatter_sum(a, **kw))(d)):
    assert got.irreps == want.irreps and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got.array), np.asarray(want.array))
  loss = lambda f, **kw: lambda a: jnp.sum(f(e3nn.IrrepsArray(d.irreps, a), **kw).array ** 2)
  g = jax.grad(loss(e3nn_ops.scatter_sum, **kw))(d.array)
  if kw.get("output_size") == 0:  # (e3nn-jax's own gradient fails to trace there)
    np.testing.assert_array_equal(g, 0)
    return
  # A dropped row's gradient is 0: e3nn-jax's default mode ("promise_in_bounds") clamps it in
  # the gradient's gather instead (its forward pass drops the row); its "drop" mode does not.
  ref_kw = kw if kw.get("mode") == "clip" else dict(kw, mode="drop")
  np.testing.assert_allclose(g, jax.grad(loss(e3nn.scatter_sum, **ref_kw))(d.array), rtol=1e-14)


def test_scatter_sum_dst_axes_dtypes_and_errors():
  rng = np.random.default_rng(41)
  data, dst = rng.normal(size=(3, 4, 5)), rng.integers(0, 3, (3, 4))  # dst over two axes
  np.testing.assert_array_equal(e3nn_ops.scatter_sum(data, dst=dst, output_size=3),
                                e3nn.scatter_sum(data, dst=dst, output_size=3))
  for dtype in (jnp.bfloat16, jnp.float16, jnp.float32):
    x = jnp.asarray(data[0, :, 0], dtype)
    assert e3nn_ops.scatter_sum(x, dst=np.arange(4) % 2, output_size=2).dtype == dtype
  d = _array("0e", 4, 42)
  for kw, err, match in (
      (dict(), ValueError, "exactly one of dst and nel"),
      (dict(dst=[0, 1, 0, 1], nel=[2, 2]), ValueError, "exactly one of dst and nel"),
      (dict(dst=[0, 1, 0]), ValueError, "dst must have shape"),
      (dict(dst=[0, 1, 0, 1]), ValueError, "output_size must be given"),
      (dict(dst=[0, 1, 0, 1], output_size=2.5), TypeError, "output_size must be a static int"),
      (dict(nel=[2, 2], output_size=2), ValueError, "output_size must not be given with nel"),
      (dict(dst=[0, 1, 0, 1], output_size=2, map_back=True), ValueError, "with map_back"),
      (dict(dst=[0, 1, 0, 1], output_size=2, mode="wrap"), ValueError, "mode must be"),
      (dict(dst=[0.0, 1, 0, 1], output_size=2), TypeError, "dst must be integers")):
    with pytest.raises(err, match=match):
      e3nn_ops.scatter_sum(d, **kw)


def test_spherical_harmonics_signature_is_e3nns():
  """The degrees as e3nn-jax reads them (ints, irreps strings, Irreps, lists of strings, Irrep
  and MulIrrep objects, (mul, irrep) pairs), `algorithm` accepted, the vectors' dtype kept."""
  v = e3nn.IrrepsArray("1o", np.random.default_rng(8).normal(size=(5, 3)))
  for args in ((2, v, True), ([0, 1, 3], v, False), ("0e+1o+2e", v, True, "norm"),
               (["0e", "1o", "2e"], v, True), ([e3nn.Irrep("0e"), e3nn.Irrep("3o")], v, True),
               (e3nn.Irreps("2x1o")[0], v, True), ([(1, (0, 1)), (2, "1o")], v, False),
               (e3nn.Irreps("0e+1o"), v, True, "integral")):
    got, want = e3nn_ops.spherical_harmonics(*args), e3nn.spherical_harmonics(*args)
    assert got.irreps == want.irreps
    np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)
  got = e3nn_ops.spherical_harmonics(2, v, True, algorithm=("recursive", "dense", "custom_vjp"))
  np.testing.assert_allclose(got.array, e3nn.spherical_harmonics(2, v, True).array, atol=1e-12)
  for dtype in (jnp.bfloat16, jnp.float16, jnp.float32):
    low = e3nn.IrrepsArray("1o", v.array.astype(dtype))
    got, want = e3nn_ops.spherical_harmonics(3, low, True), e3nn.spherical_harmonics(3, low, True)
    assert got.dtype == want.dtype == dtype
    # computed in float32 (a few of its units in the last place), rounded once to the dtype:
    # that close to the float64 values of the same (rounded) vectors, and no further from them
    # than e3nn-jax's own
    exact = np.asarray(e3nn.spherical_harmonics(
        3, e3nn.IrrepsArray("1o", low.array.astype(np.float64)), True).array)
    ours, theirs = (np.abs(np.asarray(a.array, np.float64) - exact) for a in (got, want))
    ulp = float(jnp.finfo(dtype).eps) + 8 * float(jnp.finfo(jnp.float32).eps)
    assert np.all(ours <= ulp * np.maximum(np.abs(exact), 1)), ours.max()  # (values are O(1))
    assert ours.max() <= theirs.max() + 1e-7, (ours.max(), theirs.max())


def test_tensor_product_of_irreps_is_e3nns():
  """Two Irreps in, their product's Irreps out (any multiplicities), as e3nn-jax's."""
  for a, b, f in (("2x0e+1o", "0e+1o", "0e+1o"), ("1o+2x0e+1o", "2x0e+1o+2e", None),
                  ("3x1e", "2x1o", ["0e", "1o", "2o"]), ("2x1o+3x0e", "0e+1o", "")):
    for regroup in (True, False):
      got = e3nn_ops.tensor_product(e3nn.Irreps(a), e3nn.Irreps(b), filter_ir_out=f,
                                    regroup_output=regroup)
      want = e3nn.tensor_product(e3nn.Irreps(a), e3nn.Irreps(b), filter_ir_out=f,
                                 regroup_output=regroup)
      assert isinstance(got, e3nn.Irreps) and got == want, (a, b, f, regroup, got, want)


def test_errors_name_the_argument():
  x, y = _array("2x0e+2x1o", 3, 9), _array("2x0e", 3, 10)
  with pytest.raises(ValueError, match="input2"):
    e3nn_ops.tensor_product(x, y)  # multiplicity 2 in the second input
  with pytest.raises(TypeError, match="IrrepsArray"):
    e3nn_ops.tensor_product(x.array, _sh("0e+1o", 3, 11))
  with pytest.raises(ValueError, match="irrep_normalization"):
    e3nn_ops.tensor_product(x, _sh("0e+1o", 3, 11), irrep_normalization="unit")
  sh = _sh("0e+1o", 3, 12)
  with pytest.raises(ValueError, match="weights"):
    e3nn_ops.tensor_product_conv(x, sh, [0, 1, 2], [0, 1, 2], 3, weights=np.ones((3, 2)))
  with pytest.raises(TypeError, match="weights_kernel needs weights"):
    e3nn_ops.tensor_product_conv(x, sh, [0, 1, 2], [0, 1, 2], 3, weights_kernel=np.ones((2, 4)))
  n_out = e3nn.tensor_product(x, sh).irreps.num_irreps
  with pytest.raises(ValueError, match="weights_kernel must have shape"):
    e3nn_ops.tensor_product_conv(x, sh, [0, 1, 2], [0, 1, 2], 3, weights=np.ones((3, 2)),
                                 weights_kernel=np.ones((2, n_out + 1)))
  with pytest.raises(ValueError, match=r"weights must have shape \(3, 2\)"):
    e3nn_ops.tensor_product_conv(x, sh, [0, 1, 2], [0, 1, 2], 3, weights=np.ones((3, 3)),
                                 weights_kernel=np.ones((2, n_out)))
  with pytest.raises(TypeError, match="num_nodes"):
    e3nn_ops.tensor_product_conv(x, sh, [0, 1, 2], [0, 1, 2], 2.5)
  with pytest.raises(ValueError, match="num_nodes"):
    e3nn_ops.tensor_product_conv(x, sh, [0, 1, 2], [0, 1, 2], -1)
  with pytest.raises(ValueError, match="regroup"):  # "1o+1o" regroups to 2x1o
    e3nn_ops.tensor_product(x, e3nn.IrrepsArray("1o+1o", np.ones((3, 6))))


def test_callers_irreps_arrays_keep_no_values_of_our_traces():
  """e3nn-jax computes an IrrepsArray's `chunks` on first reading and keeps them on the object:
  our ops never read them, so an IrrepsArray closed over by a jitted function (or made in a jit
  and used in a scan) is as usable afterwards as with e3nn-jax's own functions (an
  UnexpectedTracerError before)."""
  import jaxext.equivariant as eq
  uses = {
      "scatter_sum": lambda a: e3nn_ops.scatter_sum(a, dst=jnp.array([0, 1, 1, 0]),
                                                    output_size=2).array,
      "tensor_product": lambda a: e3nn_ops.tensor_product(a, a).array,
      "tensor_product_conv": lambda a: e3nn_ops.tensor_product_conv(
          a, a, jnp.array([0, 1, 2, 3]), jnp.array([1, 2, 3, 0]), 4).array,
      "gather": lambda a: eq.gather(a, jnp.array([0, 1])).array,
      "segment_sum": lambda a: eq.segment_sum(a, jnp.array([0, 1, 1, 0]), 2).array,
  }
  for name, use in uses.items():
    a = e3nn.IrrepsArray("0e+1o", jnp.ones((4, 4)))
    jax.jit(lambda s: use(a) * s)(2.0)
    np.testing.assert_allclose(e3nn.tensor_product(a, a).array, e3nn.tensor_product(
        e3nn.IrrepsArray("0e+1o", jnp.ones((4, 4))), e3nn.IrrepsArray("0e+1o", jnp.ones((4, 4))))
        .array, err_msg=name)
  v = e3nn.IrrepsArray("1o", jnp.ones((4, 3)))
  jax.jit(lambda s: e3nn_ops.spherical_harmonics(2, v, True).array * s)(2.0)
  np.testing.assert_array_equal(v.chunks[0], jnp.ones((4, 1, 3)))

  snd, rcv = jnp.array([0, 1, 2, 2]), jnp.array([1, 2, 0, 1])
  vec = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))

  def model(harmonics, conv):
    @jax.jit
    def run(x, vec):  # harmonics made once, used by every layer of a scan and after it
      sh = harmonics([0, 1], e3nn.IrrepsArray("1o", vec), True)
      layer = lambda h, _: (conv(e3nn.IrrepsArray("2x0e", h), sh).filter("0e").array[:, :2],
                            None)
      h, _ = jax.lax.scan(layer, x, None, length=2)
      return h.sum() + sh.filter("1o").array.sum() + e3nn.norm(sh).array.sum()
    return run(jnp.ones((3, 2)), vec)

  ref = model(e3nn.spherical_harmonics, lambda h, sh: e3nn.scatter_sum(
      e3nn.tensor_product(h[snd], sh), dst=rcv, output_size=3))
  ours = model(e3nn_ops.spherical_harmonics,
               lambda h, sh: e3nn_ops.tensor_product_conv(h, sh, snd, rcv, 3))
  np.testing.assert_allclose(ours, ref, rtol=1e-13)


def test_review_edge_cases():
  """A review's cases: 1-D IrrepsArrays and vmap (never iterated as irreps), no per-row work for
  many rows, irreps strings, the "none" rescale read from the config only, lists, zero-width
  data, narrow integer ids, traced ids."""
  rng = np.random.default_rng(50)
  x1, y1 = _array("2x0e+1o", 1, 51)[0], _sh("0e+1o", 1, 52)[0]  # 1-D
  np.testing.assert_allclose(e3nn_ops.tensor_product(x1, y1).array,
                             e3nn.tensor_product(x1, y1).array, atol=1e-12)
  xs, ys = _array("2x0e+1o", 6, 53), _sh("0e+1o", 6, 54)
  np.testing.assert_allclose(jax.vmap(lambda a, b: e3nn_ops.tensor_product(a, b).array)(xs, ys),
                             e3nn.tensor_product(xs, ys).array, atol=1e-12)
  big = _array("2x0e+1o", 1000, 55)
  assert len(jax.make_jaxpr(lambda a: e3nn_ops.tensor_product(a, ys[0]).array)(big).eqns) < 30
  got = e3nn_ops.tensor_product("1o", "1o+2e")
  assert isinstance(got, e3nn.Irreps) and got == e3nn.tensor_product("1o", "1o+2e")

  # tensor_product(..., irrep_normalization=X) * weights: the multiplication reads the config
  x, sh = _array("2x0e+2x1o+1x2e", 5, 56), _sh("0e+1o+2e", 30, 57)
  snd, rcv = rng.integers(0, 5, 30), rng.integers(0, 5, 30)
  for config, given in (("component", "none"), ("none", "component"), ("none", "none")):
    saved = e3nn.config("irrep_normalization")
    e3nn.config("irrep_normalization", config)
    try:
      m = e3nn.tensor_product(x[snd], sh, irrep_normalization=given)
      w = rng.normal(size=(30, m.irreps.num_irreps))
      want = e3nn.scatter_sum(m * w, dst=rcv, output_size=5)
      got = e3nn_ops.tensor_product_conv(x, sh, snd, rcv, 5, weights=w, irrep_normalization=given)
      np.testing.assert_allclose(got.array, want.array, atol=1e-12, err_msg=f"{config} {given}")
    finally:
      e3nn.config("irrep_normalization", saved)

  from jaxext.equivariant import spherical_harmonics as eq_sh
  np.testing.assert_allclose(eq_sh(2, [[1.0, 2.0, 3.0]]), eq_sh(2, np.array([[1.0, 2.0, 3.0]])))
  np.testing.assert_array_equal(e3nn_ops.scatter_sum([[1.0], [2.0]], dst=[1, 1], output_size=2),
                                [[0.0], [3.0]])
  empty = e3nn_ops.scatter_sum(jnp.zeros((5, 0)), dst=jnp.arange(5), output_size=5)
  assert empty.shape == (5, 0)

  d = rng.normal(size=(600, 2))
  nel = np.full(300, 2, np.uint8)  # 300 segments: their ids overflow uint8
  np.testing.assert_array_equal(e3nn_ops.scatter_sum(d, nel=nel), e3nn.scatter_sum(d, nel=nel))
  dst = rng.integers(0, 256, 600).astype(np.uint8)
  for kw in (dict(output_size=300, mode="clip"), dict(output_size=200, mode="clip"),
             dict(map_back=True)):
    np.testing.assert_array_equal(e3nn_ops.scatter_sum(d, dst=dst, **kw),
                                  e3nn.scatter_sum(d, dst=dst, **kw), err_msg=str(kw))
  signed = dst.astype(np.int16) - 128  # 256 distinct int8 ids
  np.testing.assert_array_equal(
      e3nn_ops.scatter_sum(d, dst=signed.astype(np.int8), map_back=True),
      e3nn.scatter_sum(d, dst=signed.astype(np.int8), map_back=True))
  for kw in SCATTER_CASES:  # the ids traced (jit arguments)
    ids = {k: v for k, v in kw.items() if k in ("dst", "nel")}
    rest = {k: v for k, v in kw.items() if k not in ids}
    got = jax.jit(lambda a, ids: e3nn_ops.scatter_sum(a, **ids, **rest))(d[:12], ids)
    np.testing.assert_array_equal(got, e3nn.scatter_sum(d[:12], **kw), err_msg=str(kw))


if __name__ == "__main__":
  sys.exit(pytest.main([os.path.abspath(__file__), "-q"]))

