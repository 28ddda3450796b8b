"""A NequIP-like interatomic potential on jaxext.equivariant, trained on Lennard-Jones clusters.

    tools/bazel run //examples:nequip_lj [-- --steps 200 --clusters 64]

Data: clusters of 8 atoms (perturbed compact arrangements) with energies and forces of the
Lennard-Jones potential (epsilon = sigma = 1). Model: atoms start with the same 8 scalar channels;
edges join atoms closer than the cutoff; per edge the spherical harmonics "0e+1o+2e" of the bond
and a radial network (Gaussian basis -> MLP) that gives the tensor-product weights; two fused
equivariant convolutions (`jaxext.equivariant.conv`: "8x0e" -> "8x0e+8x1o+8x2e" -> "8x0e") and a
linear read-out of the scalars, summed over atoms, give the energy. Forces are -dE/dpositions by
`jax.grad` (through the convolution kernels and `jaxext.equivariant.gather`'s deterministic
transpose), and training on energies and forces differentiates the forces again (second
derivatives through the kernels). Adam, written out in jnp.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxext import equivariant as eq

ATOMS = 8
CUTOFF = 2.5
IRREPS_SH = "0e+1o+2e"
IRREPS_0 = "8x0e"
IRREPS_1 = "8x0e+8x1o+8x2e"
IRREPS_2 = "8x0e"
BASIS = 8


def lj_energy_forces(pos):
  """Lennard-Jones energy (4 (r^-12 - r^-6) over pairs) and forces of one cluster, NumPy."""
  d = pos[:, None, :] - pos[None, :, :]
  r2 = np.sum(d * d, -1) + np.eye(len(pos))
  inv6 = r2 ** -3
  e = 4 * (inv6 * inv6 - inv6)
  np.fill_diagonal(e, 0.0)
  coef = 24 * (2 * inv6 * inv6 - inv6) / r2
  np.fill_diagonal(coef, 0.0)
  return 0.5 * e.sum(), np.sum(coef[:, :, None] * d, axis=1)


def make_data(count: int, seed: int = 0):
  """Perturbed clusters: positions (count, ATOMS, 3), energies (count,), forces (count, ATOMS, 3)."""
  rng = np.random.default_rng(seed)
  grid = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], float) * 1.12
  pos = grid[None] + rng.normal(scale=0.07, size=(count, ATOMS, 3))
  ef = [lj_energy_forces(p) for p in pos]
  return pos, np.array([e for e, _ in ef]), np.stack([f for _, f in ef])


def edges():
  """Every ordered pair of distinct atoms (a cutoff smoothly removes the far ones)."""
  s, r = np.nonzero(~np.eye(ATOMS, dtype=bool))
  return s.astype(np.int32), r.astype(np.int32)


SENDERS, RECEIVERS = edges()
N_W1 = sum(8 for _ in eq.paths(IRREPS_0, IRREPS_SH, IRREPS_1))
N_W2 = sum(8 for _ in eq.paths(IRREPS_1, IRREPS_SH, IRREPS_2))


def init_params(seed: int = 0):
  rng = np.random.default_rng(seed)
  g = lambda *shape: jnp.asarray(rng.normal(size=shape) / np.sqrt(shape[0]))
  return {"r1": g(BASIS, 16), "r1o": g(16, N_W1), "r2": g(BASIS, 16), "r2o": g(16, N_W2),
          "out": g(8, 1), "shift": jnp.zeros(())}


def radial(params, which, r):
  centers = jnp.linspace(0.8, CUTOFF, BASIS)
  basis = jnp.exp(-((r[:, None] - centers) ** 2) / 0.1)
  envelope = jnp.where(r < CUTOFF, (1 - (r / CUTOFF) ** 2) ** 2, 0.0)[:, None]
  hidden = jax.nn.silu(basis @ params[which])
  return envelope * (hidden @ params[which + "o"])


def energy(params, pos):
  """The model's energy of one cluster (positions (ATOMS, 3))."""
  # eq.gather rather than pos[RECEIVERS]: the same rows, but the forces (its transpose) and the
  # training gradients contain no XLA scatter-add, so they are bitwise reproducible on GPUs too.
  vec = eq.gather(pos, RECEIVERS) - eq.gather(pos, SENDERS)
  r = jnp.sqrt(jnp.sum(vec * vec, -1))
  y = eq.spherical_harmonics(IRREPS_SH, vec)
  h0 = jnp.ones((ATOMS, 8), pos.dtype)
  h1 = eq.conv(h0, y, radial(params, "r1", r), SENDERS, RECEIVERS, ATOMS, IRREPS_0, IRREPS_SH,
               IRREPS_1) / np.sqrt(ATOMS)
  h2 = eq.conv(h1, y, radial(params, "r2", r), SENDERS, RECEIVERS, ATOMS, IRREPS_1, IRREPS_SH,
               IRREPS_2) / np.sqrt(ATOMS)
  return jnp.sum(jax.nn.silu(h2) @ params["out"]) + ATOMS * params["shift"]


def forces(params, pos):
  return -jax.grad(energy, argnums=1)(params, pos)


def loss(params, pos, e_ref, f_ref):
  e = jax.vmap(energy, in_axes=(None, 0))(params, pos)
  f = jax.vmap(forces, in_axes=(None, 0))(params, pos)
  return jnp.mean((e - e_ref) ** 2) / ATOMS + jnp.mean((f - f_ref) ** 2)


def train(steps: int, clusters: int, seed: int = 0, lr: float = 2e-2):
  """Adam on energies and forces; returns (params, losses)."""
  pos, e_ref, f_ref = make_data(clusters, seed)
  params = init_params(seed)
  params["shift"] = jnp.asarray(np.mean(e_ref) / ATOMS)
  m = jax.tree.map(jnp.zeros_like, params)
  v = jax.tree.map(jnp.zeros_like, params)

  @jax.jit
  def step(params, m, v, k):
    value, grads = jax.value_and_grad(loss)(params, pos, e_ref, f_ref)
    m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
    v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
    corr = jnp.sqrt(1 - 0.999 ** k) / (1 - 0.9 ** k)
    params = jax.tree.map(lambda p, a, b: p - lr * corr * a / (jnp.sqrt(b) + 1e-8), params, m, v)
    return params, m, v, value

  losses = []
  for k in range(1, steps + 1):
    params, m, v, value = step(params, m, v, float(k))
    losses.append(float(value))
  return params, losses


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--steps", type=int, default=200)
  p.add_argument("--clusters", type=int, default=64)
  p.add_argument("--seed", type=int, default=0)
  args = p.parse_args(argv)
  jax.config.update("jax_enable_x64", True)
  t0 = time.perf_counter()
  params, losses = train(args.steps, args.clusters, args.seed)
  elapsed = time.perf_counter() - t0
  for k in sorted({0, args.steps // 4, args.steps // 2, 3 * args.steps // 4, args.steps - 1}):
    print(f"step {k + 1:5d}: loss (energy/atom^2 + force^2) {losses[k]:.4g}")
  pos, e_ref, f_ref = make_data(8, args.seed + 1)  # unseen clusters
  f = np.asarray(jax.vmap(forces, in_axes=(None, 0))(params, pos))
  err = np.sqrt(np.mean((f - f_ref) ** 2)) / np.sqrt(np.mean(f_ref ** 2))
  print(f"{args.steps} steps on {args.clusters} clusters in {elapsed:.1f} s (compilation "
        f"included); relative force error on 8 new clusters: {err:.3f}")
  return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
  sys.exit(main())
