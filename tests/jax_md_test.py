"""jax-md 0.2.29's NequIP energy model, as shipped and routed through jaxext
(jaxext.equivariant.jax_md): the same parameter tree at initialisation, and with the same
parameters equal energies, forces and training gradients (float64), on a periodic system; the
context manager's scope; and jaxext's kernels actually in the traced model."""

import sys

import pytest

pytest.importorskip("jax_md", reason="jax-md's dependencies have no CPython 3.15 wheels")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax_md import energy, space  # noqa: E402
from jax_md._nn import nequip as jax_md_nequip  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxext.equivariant import jax_md as jaxext_jax_md  # noqa: E402


def _system(n, density=0.05, seed=0):
  """n atoms on a jittered cubic lattice in a periodic box (no close contacts), two species."""
  box = (n / density) ** (1 / 3)
  k = int(np.ceil(n ** (1 / 3)))
  a = box / k
  grid = np.stack(np.meshgrid(*[np.arange(k)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
  rng = np.random.default_rng(seed)
  pos = (grid + 0.5) * a + rng.uniform(-0.15, 0.15, size=(n, 3)) * a
  return jnp.asarray(box), jnp.asarray(pos % box), rng.integers(0, 2, n)


def _model(n, layers=2, seed=0, hidden=None, sh=None):
  box, pos, species = _system(n, seed=seed)
  displacement, _ = space.periodic(box)
  cfg = energy.nequip.default_config()  # 128x0e+64x1e+4x2e, harmonics 0e+1e+2e, cutoff 5
  cfg.n_elements = 2
  cfg.shift, cfg.scale = 0.0, 1.0  # default_config() has neither
  cfg.graph_net_steps = layers
  if hidden:
    cfg.hidden_irreps = hidden
  if sh:
    cfg.sh_irreps = sh
  atoms = jax.nn.one_hot(species, 2, dtype=jnp.float64)
  neighbor_fn, init_fn, energy_fn = energy.nequip_neighbor_list(displacement, box, cfg,
                                                                atoms=atoms)
  nbrs = neighbor_fn.allocate(pos)
  assert int(np.sum(np.asarray(nbrs.idx[0]) < n)) > 10 * n  # a real neighbourhood
  return pos, nbrs, init_fn, energy_fn


def _jaxpr(energy_fn, *args):
  """The jaxpr of a fresh function (a new cache key for jit) calling energy_fn."""
  return str(jax.make_jaxpr(lambda *a: energy_fn(*a))(*args))


def _results(energy_fn, params, pos, nbrs):
  e, g = jax.jit(jax.value_and_grad(energy_fn, argnums=1))(params, pos, nbrs)

  def loss(p):  # an energy + force matching loss, as training takes it (second order in pos)
    e, g = jax.value_and_grad(energy_fn, argnums=1)(p, pos, nbrs)
    return e ** 2 / pos.shape[0] + jnp.mean(g ** 2)
  return e, -g, jax.jit(jax.grad(loss))(params)


@pytest.mark.parametrize("n,layers,hidden,sh", [
    (64, 2, None, None),  # jax-md's default configuration (128x0e+64x1e+4x2e; 0e+1e+2e)
    # unsorted hidden irreps (the second layer's input is unsorted too: scalars, then the gated
    # terms in this order) and odd harmonics: paths whose order differs from a regrouped input's
    (64, 2, "16x0e+4x2e+8x1o+8x1e", "1x0e+1x1o+1x2e"),
])
def test_same_parameters_same_energies_forces_and_training_gradients(n, layers, hidden, sh):
  pos, nbrs, init_fn, energy_fn = _model(n, layers, hidden=hidden, sh=sh)
  params = init_fn(jax.random.PRNGKey(0), pos, nbrs)
  # jax-md as shipped, first (a function traced inside the block would keep jaxext's kernels in
  # jit's cache), then routed: each traces its own function
  assert "jaxext" not in _jaxpr(energy_fn, params, pos, nbrs)
  e0, f0, g0 = _results(energy_fn, params, pos, nbrs)
  with jaxext_jax_md.nequip():
    routed_params = init_fn(jax.random.PRNGKey(0), pos, nbrs)
    # the energy alone runs the fused kernel that makes the radial MLP's last layer itself
    assert "jaxext_conv_factored" in _jaxpr(energy_fn, params, pos, nbrs)
    # forces: the cotangents in one walk by sender, no (edges x weights) array
    forces = jax.jit(jax.grad(lambda r: energy_fn(params, r, nbrs))).lower(pos).as_text()
    assert "@jaxext_conv_factored_bwd(" in forces
    e_alone = jax.jit(lambda *a: energy_fn(*a))(params, pos, nbrs)
    e1, f1, g1 = _results(energy_fn, params, pos, nbrs)
  np.testing.assert_allclose(e_alone, e0, rtol=1e-12)
  # the parameter trees are the same (names, shapes, initial values): interchangeable
  assert jax.tree_util.tree_structure(routed_params) == jax.tree_util.tree_structure(params)
  for a, b in zip(jax.tree.leaves(routed_params), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, b)
  assert abs(float(e0)) > 1e-3 and float(jnp.max(jnp.abs(f0))) > 1e-4
  np.testing.assert_allclose(e1, e0, rtol=1e-12)
  np.testing.assert_allclose(f1, f0, rtol=0, atol=1e-10 * float(jnp.max(jnp.abs(f0))))
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g1), jax.tree.leaves(g0)):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * max(1e-3, float(jnp.max(jnp.abs(b)))),
                               err_msg=jax.tree_util.keystr(path))


def test_the_route_applies_inside_the_block_only():
  pos, nbrs, init_fn, energy_fn = _model(64, 1)
  params = init_fn(jax.random.PRNGKey(0), pos, nbrs)
  text = lambda: _jaxpr(energy_fn, params, pos, nbrs)
  with jaxext_jax_md.nequip():
    inside = text()
    assert jax_md_nequip.NequIPConvolution is jaxext_jax_md.NequIPConvolution
  outside = text()
  assert "jaxext_conv" in inside and "jaxext_sph" in inside
  assert "jaxext" not in outside
  assert jax_md_nequip.NequIPConvolution is not jaxext_jax_md.NequIPConvolution
  jaxext_jax_md.install()
  try:
    assert "jaxext_conv" in text()
    with jaxext_jax_md.nequip():
      pass
    assert "jaxext_conv" in text()  # the block restores what was installed before it
  finally:
    jaxext_jax_md.uninstall()
  assert "jaxext" not in text()


def test_routed_model_exported_for_cpu_and_cuda():
  # The routed potential serialized with jax.export for both platforms, as for deployment into an
  # MD engine: the same energy and forces when run back. (jax-md's NeighborList holds a type
  # jax.export cannot serialize, so the exported function takes the neighbour indices.)
  import jaxext  # noqa: PLC0415
  pos, nbrs, init_fn, energy_fn = _model(64, 2)
  params = init_fn(jax.random.PRNGKey(0), pos, nbrs)
  with jaxext_jax_md.nequip():
    energy_and_grad = jax.jit(jax.value_and_grad(
        lambda p, x, idx: energy_fn(p, x, nbrs.set(idx=idx)), argnums=1))
    want = energy_and_grad(params, pos, nbrs.idx)
    exported = jax.export.export(energy_and_grad, platforms=("cpu", "cuda"),
                                 disabled_checks=jaxext.disabled_checks())(params, pos, nbrs.idx)
  text = exported.mlir_module()
  assert "custom_call @jaxext_conv(" in text and "custom_call @jaxext_conv_edge_cts(" in text
  got = jax.export.deserialize(exported.serialize()).call(params, pos, nbrs.idx)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-14)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14 * np.max(np.abs(want[1])))


if __name__ == "__main__":
  sys.exit(pytest.main([__file__, "-q"] + sys.argv[1:]))
