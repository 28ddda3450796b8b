"""Weak scaling over host devices: jaxext.kepler and jaxext.limb_dark_flux with the same work per
device on 1, 2 and 4 devices, sharded (each device computes its shard) against the same call on
replicated inputs (what an op that the partitioner cannot split costs: every device computes
everything), measured in one run.

    tools/bazel run //benchmarks:sharding [-- --n 2000000 --rounds 5]

Each device count runs in its own process (XLA_FLAGS=--xla_force_host_platform_device_count=D
must be set before jax starts). Host "devices" share this machine's cores: on a machine with C
cores, scaling beyond C devices cannot be expected; the figure of merit is time per element.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time


def child(devices: int, n: int, rounds: int) -> dict:
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  jax.config.update("jax_enable_x64", True)
  import jaxext
  assert len(jax.devices()) == devices
  mesh = Mesh(np.array(jax.devices()), ("x",))
  split, whole = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
  rng = np.random.default_rng(0)
  total = n * devices
  m = rng.uniform(-10, 10, total)
  e = rng.uniform(0, 0.9, total)
  b = rng.uniform(0, 1.2, total)
  u = np.array([0.4, 0.26])
  cases = {
      "kepler": (lambda m, e: jaxext.kepler(m, e)[0], (m, e)),
      "limb_dark_flux": (lambda b: jaxext.limb_dark_flux(b, 0.1, u), (b,)),
  }
  out = {}
  for name, (fn, args) in cases.items():
    arms = {
        "sharded": (jax.jit(fn, out_shardings=split), [jax.device_put(a, split) for a in args]),
        "replicated": (jax.jit(fn, out_shardings=whole), [jax.device_put(a, whole) for a in args]),
    }
    for f, a in arms.values():
      jax.block_until_ready(f(*a))
    best = {k: float("inf") for k in arms}
    for _ in range(rounds):  # interleaved rounds
      for k, (f, a) in arms.items():
        t = time.perf_counter()
        jax.block_until_ready(f(*a))
        best[k] = min(best[k], time.perf_counter() - t)
    out[name] = {k: v / total * 1e9 for k, v in best.items()}  # ns per element of the whole
  return out


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--n", type=int, default=2_000_000, help="elements per device")
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--devices", type=int, nargs="*", default=[1, 2, 4])
  p.add_argument("--child", type=int, default=0)
  args = p.parse_args()
  if args.child:
    print(json.dumps(child(args.child, args.n, args.rounds)))
    return
  print(f"machine: {platform.machine()}, {os.cpu_count()} cores; {args.n:.0e} float64 elements "
        "per device; ns per element of the whole array (best of interleaved rounds)")
  results = {}
  for d in args.devices:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                        + f" --xla_force_host_platform_device_count={d}").strip()
    res = subprocess.run([sys.executable, __file__, "--child", str(d), "--n", str(args.n),
                          "--rounds", str(args.rounds)], env=env, capture_output=True, text=True)
    if res.returncode != 0:
      raise SystemExit(res.stderr)
    results[d] = json.loads(res.stdout.strip().splitlines()[-1])
  for op in ("kepler", "limb_dark_flux"):
    print(f"\n{op}:")
    print(f"  {'devices':>7} {'sharded ns/elem':>16} {'replicated ns/elem':>19} "
          f"{'sharded speedup':>16}")
    base = results[args.devices[0]][op]["sharded"]
    for d in args.devices:
      r = results[d][op]
      print(f"  {d:>7} {r['sharded']:>16.2f} {r['replicated']:>19.2f} {base / r['sharded']:>15.2f}x")


if __name__ == "__main__":
  main()
