"""jaxext.equivariant.flax.MessagePassing (backend "jaxext") against the same layer computed by
e3nn-jax alone (backend "e3nn"), same parameters: forward, and forward + backward (the gradient
of a loss with respect to the parameters and the edge vectors, as training with forces takes it).

    tools/bazel run //benchmarks:message_passing -- [--nodes 2000] [--dtype float64] [--rounds 5]

The graph: `--nodes` points uniformly in a periodic box at 0.07 per cubic angstrom, every pair
within 5 A an edge (~37 per node); node features and the output 32x0e+32x1o+32x2e, harmonics to
l = 2, the layer's default radial network (8 Bessel functions, hidden layers 64, 64). Both arms
are compiled first, then timed in interleaved rounds (best of 3 calls per round); prints each
arm's best and median, XLA's temporary memory and the ratios e3nn / jaxext, and checks that the
two agree (1e-11 of the largest value in float64, 1e-4 in float32).
"""

import argparse
import statistics
import time


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--nodes", type=int, default=2000)
  p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
  p.add_argument("--rounds", type=int, default=5)
  args = p.parse_args()

  import jax
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  import e3nn_jax as e3nn
  import jax.numpy as jnp
  import numpy as np

  from jaxext.equivariant.flax import MessagePassing

  dtype = jnp.dtype(args.dtype)
  n = args.nodes
  box = (n / 0.07) ** (1 / 3)
  rng = np.random.default_rng(0)
  pos = rng.uniform(0, box, size=(n, 3))
  senders, receivers, vectors = [], [], []
  for i in range(0, n, 256):  # pairs within 5 A (minimum image), a block of rows at a time
    d = pos[None, :, :] - pos[i:i + 256, None, :]
    d -= box * np.round(d / box)
    r = np.linalg.norm(d, axis=-1)
    a, b = np.nonzero((r < 5.0) & (r > 0))
    senders.append(a + i)
    receivers.append(b)
    vectors.append(d[a, b])
  snd, rcv = np.concatenate(senders), np.concatenate(receivers)
  vec = jnp.asarray(np.concatenate(vectors), dtype)
  irreps = "32x0e+32x1o+32x2e"
  x = e3nn.IrrepsArray(irreps, jnp.asarray(rng.normal(size=(n, e3nn.Irreps(irreps).dim)), dtype))
  print(f"{n} nodes, {len(snd)} edges ({len(snd) / n:.1f} per node), {irreps}, {args.dtype}, "
        f"{args.rounds} rounds")

  arms = {}
  params = None
  for backend in ("jaxext", "e3nn"):
    layer = MessagePassing(irreps, sh_lmax=2, cutoff=5.0, avg_num_neighbors=len(snd) / n,
                           backend=backend)
    if params is None:
      params = layer.init(jax.random.PRNGKey(0), x, vec, snd, rcv)
    fwd = lambda p, v, layer=layer: layer.apply(p, x, v, snd, rcv).array
    both = jax.value_and_grad(lambda p, v, fwd=fwd: jnp.sum(fwd(p, v) ** 2), argnums=(0, 1))
    arms[backend] = {job: jax.jit(fn).lower(params, vec).compile()
                     for job, fn in (("forward", fwd), ("forward + backward", both))}
  outs = {b: jax.tree.map(np.asarray, exe["forward + backward"](params, vec))
          for b, exe in arms.items()}
  for b in arms:
    for job, exe in arms[b].items():
      jax.block_until_ready(exe(params, vec))  # warm-up

  times = {(b, job): [] for b in arms for job in arms[b]}
  for r in range(args.rounds):
    for b in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
      for job, exe in arms[b].items():
        best = float("inf")
        for _ in range(3):
          t = time.perf_counter()
          jax.block_until_ready(exe(params, vec))
          best = min(best, time.perf_counter() - t)
        times[b, job].append(best)
  print("| arm | job | best | median | XLA temp |")
  print("|---|---|---:|---:|---:|")
  for (b, job), ts in times.items():
    temp = arms[b][job].memory_analysis().temp_size_in_bytes / 2 ** 20
    print(f"| {b} | {job} | {min(ts) * 1e3:.1f} ms | {statistics.median(ts) * 1e3:.1f} ms | "
          f"{temp:.0f} MiB |")
  for job in ("forward", "forward + backward"):
    print(f"{job}: e3nn / jaxext = {min(times['e3nn', job]) / min(times['jaxext', job]):.2f}")
  tol = 1e-11 if args.dtype == "float64" else 1e-4
  worst = 0.0
  for a, b in zip(jax.tree.leaves(outs["jaxext"]), jax.tree.leaves(outs["e3nn"])):
    worst = max(worst, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)))
  print(f"agreement: value and gradients within {worst:.1e} of the largest")
  if worst > tol:
    raise SystemExit("the arms disagree")


if __name__ == "__main__":
  main()
