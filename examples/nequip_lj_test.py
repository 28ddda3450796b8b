"""The NequIP-like example: training lowers the loss, forces are -grad E (finite differences) and
rotate with the cluster (equivariance through the kernels), energies are rotation invariant, the
Lennard-Jones reference forces are its energy's gradient, and the forces and training gradients
contain no scatter-add. (The fused convolution itself is checked
against e3nn-jax's unfused pieces in tests/equivariant_test.py.)"""

import re

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from examples import nequip_lj as ex  # noqa: E402


def test_training_lowers_the_loss():
  params, losses = ex.train(steps=40, clusters=16, seed=1)
  assert losses[-1] < 0.5 * losses[0], losses[::8]
  assert all(np.isfinite(losses))


def test_forces_rotate_and_energy_is_invariant():
  params = ex.init_params(2)
  pos, _, _ = ex.make_data(1, 2)
  rng = np.random.default_rng(3)
  q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
  q *= np.sign(np.linalg.det(q))
  e1, e2 = ex.energy(params, pos[0]), ex.energy(params, pos[0] @ q.T)
  assert float(e1) == float(jnp.asarray(e2)) or abs(float(e1) - float(e2)) < 1e-12 * abs(float(e1))
  f1 = np.asarray(ex.forces(params, pos[0]))
  f2 = np.asarray(ex.forces(params, pos[0] @ q.T))
  np.testing.assert_allclose(f2, f1 @ q.T, atol=1e-12)
  # forces are -dE/dx: a finite difference along one coordinate
  h = 1e-5
  d = np.zeros_like(pos[0])
  d[3, 1] = h
  fd = -(ex.energy(params, pos[0] + d) - ex.energy(params, pos[0] - d)) / (2 * h)
  assert abs(float(fd) - f1[3, 1]) < 1e-6 * max(1.0, abs(f1[3, 1]))


def test_lj_reference_forces():
  pos, e, f = ex.make_data(2, 4)
  h = 1e-6
  for atom, axis in ((0, 0), (5, 2)):
    d = np.zeros_like(pos[0])
    d[atom, axis] = h
    fd = -(ex.lj_energy_forces(pos[0] + d)[0] - ex.lj_energy_forces(pos[0] - d)[0]) / (2 * h)
    assert abs(fd - f[0, atom, axis]) < 1e-6 * max(1.0, abs(fd))


def test_main_runs():
  assert ex.main(["--steps", "10", "--clusters", "8"]) == 0


def _scatter_types(hlo):
  """The element types of every scatter's combiner in a StableHLO module's text."""
  return re.findall(r'"stablehlo\.scatter"\(.*?\^bb0\(%\w+: tensor<(\w+)>', hlo, flags=re.S)


def test_forces_and_training_gradients_have_no_scatter_add():
  """The model gathers with eq.gather: neither the forces nor the training gradient (forces
  differentiated again) contain a floating-point scatter-add, whose order varies on GPUs.
  (conv's graph counts each node's edges by an integer scatter-add: exact in any order.)"""
  params = ex.init_params(2)
  pos, e_ref, f_ref = ex.make_data(2, 2)
  forces = jax.jit(ex.forces).lower(params, pos[0]).as_text()
  grads = jax.jit(jax.grad(ex.loss)).lower(params, pos, e_ref, f_ref).as_text()
  for hlo in (forces, grads):
    types = _scatter_types(hlo)
    assert hlo.count('"stablehlo.scatter"(') == len(types), "a scatter whose type was not read"
    assert all(t.startswith(("i", "ui")) for t in types), types
    assert "jaxext_segment_sum" in hlo
  # The check sees a floating-point scatter-add where there is one.
  x_scatter = jax.jit(lambda x, i: jnp.zeros(4).at[i].add(x)).lower(
      jnp.ones(3), jnp.array([0, 1, 1])).as_text()
  assert _scatter_types(x_scatter) == ["f64"]  # x64 is on here
