"""jax-md 0.2.29's NequIP potential as shipped (e3nn-jax) against the same model routed through
jaxext (jaxext.equivariant.jax_md.nequip()), same parameters: energy, energy + forces, and a
training step.

    tools/bazel run //benchmarks:nequip -- [--atoms 3000] [--layers 5] [--rounds 3]
        [--arms e3nn,jaxext] [--dtype float64] [--jobs energy,energy+forces[,train]]

The system: `--atoms` atoms on a jittered cubic lattice in a periodic box at 0.07 atoms per cubic
angstrom (~34 neighbours within jax-md's default 5 A cutoff), two species; jax-md's default
configuration (128x0e+64x1e+4x2e features, harmonics to l = 2) with `--layers` interaction layers.
Each arm runs in its own process (so that peak memory is its own), the order alternating per round:
it compiles the jobs (energy, energy + forces, and with `--jobs ...,train` a training step: the
parameter gradients of a loss matching energies and forces, second order in the positions),
reports XLA's temporary buffer sizes and its checksums, then times each job (best of `--calls`
calls after a warm-up, 2 by default), and its peak resident memory after the parameters'
initialisation. The parent prints each arm's best and median over the rounds and the ratios
e3nn / jaxext, and checks that energies agree (1e-10 relative), forces (1e-10 of their largest)
and the training step's loss and parameter gradients (1e-10 of each gradient's norm; float32:
1e-4). Timings: wall clock around a blocking call; the machine's load is printed.
At 3000 atoms e3nn-jax's energy + forces needs ~19 GB of memory.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

ARMS = ("e3nn", "jaxext")
JOBS = "energy,energy+forces"


def _reset_peak_rss():
  """Resets the process's peak resident size (Linux: clear_refs 5); False where it cannot."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def _peak_rss_gib(reset):
  """Peak resident size in GiB: since the reset (VmHWM), else since the process started."""
  if reset:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 2 ** 20
  import resource
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def make_system(atoms, layers, dtype):
  """jax-md's NequIP on `atoms` atoms (see the module's docstring), its parameters in `dtype`:
  (energy_fn, params, pos, nbrs, edges)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax_md import energy, space

  dtype = jnp.dtype(dtype)
  n = atoms
  box = (n / 0.07) ** (1 / 3)
  k = int(np.ceil(n ** (1 / 3)))
  a = box / k
  grid = np.stack(np.meshgrid(*[np.arange(k)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
  rng = np.random.default_rng(0)
  pos = jnp.asarray(((grid + 0.5) * a + rng.uniform(-0.15, 0.15, size=(n, 3)) * a) % box, dtype)
  species = rng.integers(0, 2, n)
  displacement, _ = space.periodic(box)
  cfg = energy.nequip.default_config()
  cfg.n_elements, cfg.shift, cfg.scale, cfg.graph_net_steps = 2, 0.0, 1.0, layers
  neighbor_fn, init_fn, energy_fn = energy.nequip_neighbor_list(
      displacement, box, cfg, atoms=jax.nn.one_hot(species, 2, dtype=dtype))
  nbrs = neighbor_fn.allocate(pos)
  params = init_fn(jax.random.PRNGKey(0), pos, nbrs)
  params = jax.tree.map(lambda v: v.astype(dtype) if jnp.issubdtype(v.dtype, jnp.floating) else v,
                        params)
  edges = int(np.sum(np.asarray(nbrs.idx[0]) < n))
  return energy_fn, params, pos, nbrs, edges


def child(args):
  """One arm in this process: prints RESULT {json} (times, XLA temporaries, energy, forces)."""
  import jax
  if args.dtype == "float64":
    jax.config.update("jax_enable_x64", True)
  import jax.numpy as jnp
  import numpy as np

  from jaxext.equivariant import jax_md as jaxext_jax_md

  energy_fn, params, pos, nbrs, edges = make_system(args.atoms, args.layers, args.dtype)
  # Peak memory from here on: jax-md's initialisation (eager e3nn-jax over the whole system,
  # ~14 GB at 3000 atoms) is the same for both arms and not the model's.
  reset = _reset_peak_rss()

  def train(p, r, nb):
    """A training step's loss and parameter gradients, energies and forces matched (second
    order in the positions): against zero targets, which costs what any targets cost."""
    def loss(p):
      e, g = jax.value_and_grad(energy_fn, argnums=1)(p, r, nb)
      return e ** 2 / len(r) + jnp.sum(g ** 2) / g.size
    return jax.value_and_grad(loss)(p)

  every = {"energy": lambda p, r, nb: energy_fn(p, r, nb),
           "energy+forces": jax.value_and_grad(lambda p, r, nb: energy_fn(p, r, nb), argnums=1),
           "train": train}
  jobs = {name: every[name] for name in args.jobs.split(",")}
  route = jaxext_jax_md.nequip() if args.child == "jaxext" else contextlib.nullcontext()
  out = dict(arm=args.child, edges=edges, times={}, temp_gib={}, compile_s={})
  with route:
    for name, fn in jobs.items():
      t = time.perf_counter()
      exe = jax.jit(fn).lower(params, pos, nbrs).compile()
      out["compile_s"][name] = time.perf_counter() - t
      out["temp_gib"][name] = exe.memory_analysis().temp_size_in_bytes / 2 ** 30
      res = jax.block_until_ready(exe(params, pos, nbrs))  # warm-up
      best = float("inf")
      for _ in range(args.calls):
        t = time.perf_counter()
        jax.block_until_ready(exe(params, pos, nbrs))
        best = min(best, time.perf_counter() - t)
      out["times"][name] = best
      if name == "energy+forces":
        out["energy"] = float(res[0])
        out["forces"] = np.asarray(res[1], np.float64).tolist()
      if name == "train":  # the loss, and each parameter's gradient by two projections
        leaves = [np.asarray(g, np.float64).ravel() for g in jax.tree.leaves(res[1])]
        probe = np.random.default_rng(1)
        out["loss"] = float(res[0])
        out["grads"] = [[float(np.linalg.norm(g)), float(probe.normal(size=g.size) @ g)]
                        for g in leaves]
  out["peak_rss_gib"] = _peak_rss_gib(reset)
  stats = pos.devices().pop().memory_stats() or {}  # GPUs: the allocator's peak (from the start)
  if "peak_bytes_in_use" in stats:
    out["device_peak_gib"] = stats["peak_bytes_in_use"] / 2 ** 30
  print("RESULT " + json.dumps(out))


def run_arm(arm, atoms, layers, dtype, calls, env=None, jobs=JOBS):
  """One arm in a process of its own (child): (its RESULT dict, None), or (None, the end of its
  output) where it failed."""
  cmd = [sys.executable, os.path.abspath(__file__), "--child", arm, "--atoms", str(atoms),
         "--layers", str(layers), "--dtype", dtype, "--calls", str(calls), "--jobs", jobs]
  run = subprocess.run(cmd, capture_output=True, text=True, env=env)
  line = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
  if run.returncode or not line:
    return None, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}".strip()
  return json.loads(line[0][len("RESULT "):]), None


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--atoms", type=int, default=3000)
  p.add_argument("--layers", type=int, default=5)
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--arms", default=",".join(ARMS))
  p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
  p.add_argument("--calls", type=int, default=2, help="timed calls per job (best of them)")
  p.add_argument("--jobs", default=JOBS,
                 help="comma-separated, of energy, energy+forces (which every run needs: the "
                      "arms' agreement) and train (a training step's gradients, energies and "
                      "forces matched; e3nn-jax needs ~15 GB at 1000 atoms)")
  p.add_argument("--child", choices=ARMS, help=argparse.SUPPRESS)
  args = p.parse_args()
  jobs = args.jobs.split(",")
  if "energy+forces" not in jobs or not set(jobs) <= {"energy", "energy+forces", "train"}:
    p.error(f"--jobs: energy+forces and any of energy, train; got {args.jobs!r}")
  if args.child:
    return child(args)
  import numpy as np
  arms = args.arms.split(",")
  print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
        f"{args.atoms} atoms, {args.layers} layers, {args.dtype}, {args.rounds} rounds")
  results = {arm: [] for arm in arms}
  for r in range(args.rounds):
    for arm in (arms if r % 2 == 0 else arms[::-1]):
      res, failure = run_arm(arm, args.atoms, args.layers, args.dtype, args.calls,
                             jobs=args.jobs)
      if res is None:
        sys.exit(f"{arm} failed:\n{failure}")
      results[arm].append(res)
      print(f"round {r + 1}: {arm}: " + ", ".join(
          f"{k} {v:.3f} s" for k, v in res["times"].items()) +
          f"; peak RSS {res['peak_rss_gib']:.1f} GiB; load {os.getloadavg()[0]:.2f}")
  first = results[arms[0]][0]
  print(f"edges: {first['edges']} ({first['edges'] / args.atoms:.1f} per atom)")
  print("| arm | job | best | median | XLA temp | compile |")
  print("|---|---|---:|---:|---:|---:|")
  best = {}
  for arm in arms:
    for job in first["times"]:
      ts = [res["times"][job] for res in results[arm]]
      best[arm, job] = min(ts)
      r0 = results[arm][0]
      print(f"| {arm} | {job} | {min(ts):.3f} s | {statistics.median(ts):.3f} s | "
            f"{r0['temp_gib'][job]:.2f} GiB | {r0['compile_s'][job]:.1f} s |")
  if len(arms) == 2:
    a, b = arms
    for job in first["times"]:
      print(f"{job}: {a} / {b} = {best[a, job] / best[b, job]:.2f}")
    ra, rb = results[a][0], results[b][0]
    fa, fb = np.asarray(ra["forces"]), np.asarray(rb["forces"])
    de = abs(ra["energy"] - rb["energy"]) / abs(ra["energy"])
    df = float(np.max(np.abs(fa - fb)) / np.max(np.abs(fa)))
    tol = 1e-10 if args.dtype == "float64" else 1e-4
    print(f"agreement: energy {de:.1e} relative, forces {df:.1e} of the largest")
    bad = de > tol or df > tol
    if "grads" in ra:
      dl = abs(ra["loss"] - rb["loss"]) / abs(ra["loss"])
      floor = 1e-6 * max(ga[0] for ga in ra["grads"])  # (a gradient ~0 in both arms)
      dg = max(float(np.max(np.abs(np.subtract(ga, gb)))) / max(ga[0], floor, 1e-300)
               for ga, gb in zip(ra["grads"], rb["grads"]))
      print(f"training: loss {dl:.1e} relative, parameter gradients {dg:.1e} of their norms")
      bad |= dl > tol or dg > tol
    if bad:
      sys.exit("the arms disagree")


if __name__ == "__main__":
  main()
