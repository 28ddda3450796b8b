"""jaxext.equivariant.flax.MessagePassing against the same layer computed by e3nn-jax alone
(backend="e3nn": e3nn's harmonics, tensor_product and scatter_sum) from the same parameters:
values in float64 and float32, energies and forces of a small potential built on it, parameter
gradients, derivatives to second order (check_grads), jit and vmap, the cutoff, and the errors."""

import os
import sys

import pytest

pytest.importorskip("flax", reason="flax has no wheels for this Python (tensorstore: cp315)")

import e3nn_jax as e3nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxext.equivariant.flax import MessagePassing  # noqa: E402


def _graph(nodes, edges, seed, box=3.0):
  rng = np.random.default_rng(seed)
  pos = rng.uniform(0, box, size=(nodes, 3))
  snd = rng.integers(0, nodes, edges)
  rcv = (snd + rng.integers(1, nodes, edges)) % nodes  # no self-edges
  return pos, snd.astype(np.int32), rcv.astype(np.int32)


def _features(irreps, nodes, seed, dtype=np.float64):
  irreps = e3nn.Irreps(irreps)
  x = np.random.default_rng(seed).normal(size=(nodes, irreps.dim)).astype(dtype)
  return e3nn.IrrepsArray(irreps, jnp.asarray(x))


CASES = [
    # irreps_x, irreps_out, sh_lmax, linear
    ("8x0e+8x1o", "16x0e+16x1o+16x2e", 2, True),
    ("4x0e+4x1o+4x2e", "8x0e+8x1o+8x2e+8x3o", 3, True),
    ("6x0e+2x1e", "4x0o+4x1o+4x1e", 1, True),  # odd scalars, pseudovectors
    ("5x0e+3x1o+2x2e", "0e+1o+2e", 2, False),  # the product itself, every path its channels
]


def _layers(irreps_out, sh_lmax, linear, **kw):
  args = dict(irreps_out=irreps_out, sh_lmax=sh_lmax, cutoff=2.5, avg_num_neighbors=6.0,
              linear=linear, radial_hidden=(16, 16))
  args.update(kw)
  return MessagePassing(**args), MessagePassing(backend="e3nn", **args)


@pytest.fixture(params=["component", "norm", "none"])
def irrep_normalization(request):
  """e3nn_jax.config's irrep normalisation for the test (both backends read it)."""
  saved = e3nn.config("irrep_normalization")
  e3nn.config("irrep_normalization", request.param)
  yield request.param
  e3nn.config("irrep_normalization", saved)


@pytest.mark.parametrize("irreps_x,irreps_out,sh_lmax,linear", CASES)
def test_equal_to_e3nn_float64(irreps_x, irreps_out, sh_lmax, linear, irrep_normalization):
  pos, snd, rcv = _graph(40, 400, 1)
  vec = pos[rcv] - pos[snd]
  x = _features(irreps_x, 40, 2)
  ours, ref = _layers(irreps_out, sh_lmax, linear)
  params = ours.init(jax.random.PRNGKey(3), x, vec, snd, rcv)
  a = jax.jit(ours.apply)(params, x, vec, snd, rcv)
  b = jax.jit(ref.apply)(params, x, vec, snd, rcv)
  assert a.irreps == b.irreps
  if linear:
    assert a.irreps == e3nn.Irreps(irreps_out)
  assert a.dtype == jnp.float64
  scale = float(jnp.max(jnp.abs(b.array)))
  assert scale > 0.1  # a layer that outputs ~0 would compare trivially
  np.testing.assert_allclose(a.array, b.array, rtol=0, atol=1e-13 * scale)


def test_equal_to_e3nn_float32():
  pos, snd, rcv = _graph(40, 400, 4)
  vec = jnp.asarray(pos[rcv] - pos[snd], jnp.float32)
  x = _features("8x0e+8x1o", 40, 5, np.float32)
  ours, ref = _layers("16x0e+16x1o+16x2e", 2, True)
  params = ours.init(jax.random.PRNGKey(6), x, vec, snd, rcv)
  assert jax.tree.leaves(params)[0].dtype == jnp.float32
  a = jax.jit(ours.apply)(params, x, vec, snd, rcv)
  # the reference in float64 from the same float32 parameters and inputs
  up = lambda t: jax.tree.map(lambda v: v.astype(jnp.float64), t)
  b = ref.apply(up(params), up(x), vec.astype(jnp.float64), snd, rcv)
  assert a.dtype == jnp.float32
  scale = float(jnp.max(jnp.abs(b.array)))
  np.testing.assert_allclose(a.array, b.array, rtol=0, atol=2e-5 * scale)


class _Potential:
  """A two-layer potential: species embedding -> MessagePassing -> MessagePassing -> energy as
  the sum of each node's scalars; forces = -dE/dpositions."""

  def __init__(self, backend):
    import flax.linen as nn

    class Model(nn.Module):
      @nn.compact
      def __call__(self, species, pos, snd, rcv):
        x = e3nn.IrrepsArray("4x0e", nn.Embed(3, 4, param_dtype=jnp.float64)(species))
        vec = pos[rcv] - pos[snd]
        for i, irreps in enumerate(["20x0e+8x1o+4x2e", "8x0e"]):
          h = MessagePassing(irreps, sh_lmax=2, cutoff=2.5, avg_num_neighbors=6.0,
                             radial_hidden=(16,), backend=backend, name=f"mp{i}")(x, vec, snd, rcv)
          x = e3nn.gate(h) if i == 0 else h
        return jnp.sum(x.array)

    self.model = Model()

  def energy_forces(self, params, species, pos, snd, rcv):
    e, g = jax.value_and_grad(self.model.apply, argnums=2)(params, species, pos, snd, rcv)
    return e, -g


def test_energy_forces_and_training_gradient():
  pos, snd, rcv = _graph(30, 300, 7)
  species = jnp.asarray(np.random.default_rng(8).integers(0, 3, 30))
  ours, ref = _Potential("jaxext"), _Potential("e3nn")
  params = ours.model.init(jax.random.PRNGKey(9), species, pos, snd, rcv)
  ea, fa = jax.jit(ours.energy_forces)(params, species, pos, snd, rcv)
  eb, fb = jax.jit(ref.energy_forces)(params, species, pos, snd, rcv)
  assert abs(float(eb)) > 1e-3 and float(jnp.max(jnp.abs(fb))) > 1e-3
  np.testing.assert_allclose(ea, eb, rtol=1e-12)
  np.testing.assert_allclose(fa, fb, rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(fb))))
  # forces sum to zero (translation invariance) in both
  np.testing.assert_allclose(jnp.sum(fa, axis=0), 0.0, atol=1e-11)

  # a force-matching loss's parameter gradient, as training takes it
  target = jnp.asarray(np.random.default_rng(10).normal(size=(30, 3)))

  def loss(model, p):
    e, f = model.energy_forces(p, species, pos, snd, rcv)
    return e ** 2 + jnp.sum((f - target) ** 2)
  ga = jax.jit(jax.grad(lambda p: loss(ours, p)))(params)
  gb = jax.jit(jax.grad(lambda p: loss(ref, p)))(params)
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(ga), jax.tree.leaves(gb)):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-11 * max(1.0, float(jnp.max(jnp.abs(b)))),
                               err_msg=jax.tree_util.keystr(path))


def test_check_grads_second_order():
  pos, snd, rcv = _graph(12, 60, 11)
  vec = jnp.asarray(pos[rcv] - pos[snd])
  x = _features("3x0e+2x1o", 12, 12)
  layer = MessagePassing("4x0e+4x1o+2x2e", sh_lmax=2, cutoff=2.5, avg_num_neighbors=5.0,
                         radial_hidden=(8,))
  params = layer.init(jax.random.PRNGKey(13), x, vec, snd, rcv)

  def f(p, xa, v):
    return layer.apply(p, e3nn.IrrepsArray(x.irreps, xa), v, snd, rcv).array
  # eps 1e-5: at the default 1e-4 the finite differences of both backends miss by 2e-6
  check_grads(f, (params, x.array, vec), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6,
              eps=1e-5)
  # and the exact second derivatives against e3nn-jax's (a Hessian-vector product in the edge
  # vectors of a loss)
  ref = MessagePassing("4x0e+4x1o+2x2e", sh_lmax=2, cutoff=2.5, avg_num_neighbors=5.0,
                       radial_hidden=(8,), backend="e3nn")
  t = jnp.asarray(np.random.default_rng(14).normal(size=vec.shape))

  def hvp(lay):
    loss = lambda v: jnp.sum(lay.apply(params, x, v, snd, rcv).array ** 2)
    return jax.jvp(jax.grad(loss), (vec,), (t,))[1]
  a, b = hvp(layer), hvp(ref)
  assert float(jnp.max(jnp.abs(b))) > 1e-2
  np.testing.assert_allclose(a, b, rtol=0, atol=1e-11 * float(jnp.max(jnp.abs(b))))


@pytest.mark.parametrize("radial_hidden", [(), (12,), (16, 10)])
@pytest.mark.parametrize("normalization", ["element", "path"])
def test_factored_radial_mlp_same_parameters_values_and_gradients(radial_hidden, normalization):
  """The jaxext backend folds the radial MLP's last layer into the fused kernel (weights =
  hidden @ kernel): its parameters are e3nn.flax.MultiLayerPerceptron's (names, shapes and values,
  whichever backend initialises), and its values and gradients (parameters, positions) equal the
  e3nn backend's at every depth, under either gradient normalisation."""
  pos, snd, rcv = _graph(30, 300, 22, box=4.0)  # some edges beyond the cutoff
  x = _features("6x0e+3x1o+2x2e", 30, 23)
  ours, ref = _layers("8x0e+8x1o+4x2e", 2, True, radial_hidden=radial_hidden)
  old = e3nn.config("gradient_normalization")
  e3nn.config("gradient_normalization", normalization)
  try:
    p_ours = ours.init(jax.random.PRNGKey(24), x, pos[rcv] - pos[snd], snd, rcv)
    p_ref = ref.init(jax.random.PRNGKey(24), x, pos[rcv] - pos[snd], snd, rcv)
    assert jax.tree.structure(p_ours) == jax.tree.structure(p_ref)
    for a, b in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_ref)):
      np.testing.assert_array_equal(a, b)
    assert len(p_ours["params"]["radial"]) == len(radial_hidden) + 1

    def loss(layer, params, pos):
      out = layer.apply(params, x, pos[rcv] - pos[snd], snd, rcv).array
      return jnp.sum(jnp.sin(out))
    a = jax.jit(jax.value_and_grad(lambda p, r: loss(ours, p, r), argnums=(0, 1)))(p_ours, pos)
    b = jax.jit(jax.value_and_grad(lambda p, r: loss(ref, p, r), argnums=(0, 1)))(p_ours, pos)
  finally:
    e3nn.config("gradient_normalization", old)
  for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    scale = float(np.max(np.abs(v)))
    assert scale > 1e-3
    np.testing.assert_allclose(u, v, rtol=0, atol=1e-12 * scale)


def test_vmap_over_feature_batches():
  pos, snd, rcv = _graph(20, 120, 14)
  vec = jnp.asarray(pos[rcv] - pos[snd])
  xs = jnp.asarray(np.random.default_rng(15).normal(size=(3, 20, 16)))
  layer = MessagePassing("8x0e+8x1o", sh_lmax=2, cutoff=2.5, avg_num_neighbors=5.0)
  params = layer.init(jax.random.PRNGKey(16), e3nn.IrrepsArray("4x0e+4x1o", xs[0]), vec, snd, rcv)
  f = lambda xa: layer.apply(params, e3nn.IrrepsArray("4x0e+4x1o", xa), vec, snd, rcv).array
  batched = jax.jit(jax.vmap(f))(xs)
  for i in range(3):
    np.testing.assert_allclose(batched[i], f(xs[i]), rtol=0, atol=1e-13)


def test_graph_closed_over_is_sorted_once_not_in_the_computation():
  """senders/receivers as NumPy arrays closed over by a jitted apply: the layer's graph is sorted
  by NumPy while tracing (XLA folded the sorts of constants while compiling: 3 s at 73k edges);
  the same numbers as with the ids passed as arguments."""
  pos, snd, rcv = _graph(20, 120, 18)
  vec = jnp.asarray(pos[rcv] - pos[snd])
  x = _features("4x0e+4x1o", 20, 19)
  layer = MessagePassing("8x0e+8x1o", sh_lmax=2, cutoff=2.5, avg_num_neighbors=5.0)
  params = layer.init(jax.random.PRNGKey(20), x, vec, snd, rcv)
  closed = jax.jit(lambda p, x: layer.apply(p, x, vec, snd, rcv).array)
  as_args = jax.jit(lambda p, x, s, r: layer.apply(p, x, vec, s, r).array)
  assert "sort" not in closed.lower(params, x).as_text()
  assert "sort" in as_args.lower(params, x, snd, rcv).as_text()
  np.testing.assert_array_equal(closed(params, x), as_args(params, x, snd, rcv))


def test_cutoff_and_zero_length_edges():
  pos, snd, rcv = _graph(25, 200, 17, box=5.0)
  vec = pos[rcv] - pos[snd]
  length = np.linalg.norm(vec, axis=1)
  assert (length >= 2.5).any() and (length < 2.5).any()
  x = _features("4x0e+4x1o", 25, 18)
  layer = MessagePassing("8x0e+8x1o", sh_lmax=2, cutoff=2.5, avg_num_neighbors=5.0)
  params = layer.init(jax.random.PRNGKey(19), x, vec, snd, rcv)
  full = layer.apply(params, x, vec, snd, rcv)
  near = length < 2.5
  kept = layer.apply(params, x, vec[near], snd[near], rcv[near])
  np.testing.assert_allclose(full.array, kept.array, rtol=0, atol=1e-13)
  # a zero-length edge (an atom with itself) carries no message and no NaN, in values or forces
  vz = vec.copy()
  vz[0] = 0.0
  out = layer.apply(params, x, vz, snd, rcv)
  assert np.isfinite(np.asarray(out.array)).all()
  g = jax.grad(lambda v: jnp.sum(layer.apply(params, x, v, snd, rcv).array ** 2))(jnp.asarray(vz))
  assert np.isfinite(np.asarray(g)).all()
  np.testing.assert_array_equal(g[0], 0.0)


def test_errors_name_the_argument():
  pos, snd, rcv = _graph(10, 30, 20)
  vec = pos[rcv] - pos[snd]
  x = _features("4x0e", 10, 21)
  layer = MessagePassing("4x0e+4x1o", sh_lmax=1)
  key = jax.random.PRNGKey(0)
  with pytest.raises(TypeError, match="node_features must be an e3nn.IrrepsArray"):
    layer.init(key, x.array, vec, snd, rcv)
  with pytest.raises(ValueError, match=r"vectors must have shape \(num_edges, 3\)"):
    layer.init(key, x, vec[:, :2], snd, rcv)
  with pytest.raises(ValueError, match=r"senders must be integers of shape \(30,\)"):
    layer.init(key, x, vec, snd[:5], rcv)
  with pytest.raises(ValueError, match="receivers must be integers"):
    layer.init(key, x, vec, snd, rcv.astype(np.float64))
  with pytest.raises(ValueError, match="no coupling path"):
    MessagePassing("4x3o", sh_lmax=1).init(key, x, vec, snd, rcv)
  with pytest.raises(ValueError, match="backend must be"):
    MessagePassing("4x0e", backend="torch").init(key, x, vec, snd, rcv)
  with pytest.raises(ValueError, match="cutoff must be positive"):
    MessagePassing("4x0e", cutoff=0.0).init(key, x, vec, snd, rcv)


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-q"] + sys.argv[1:]))
