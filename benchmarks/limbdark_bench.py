"""Limb-darkened occultation benchmark: jaxext against jaxoplanet (pure JAX) and batman (C, OpenMP).

All implementations evaluate the same quadratic-law fluxes at the same points (r = 0.1, b spread
over [0, 1.2], so ~90% of the points are in transit; and a sorted light curve) in one run. Prints
ns per point (best of interleaved rounds of several runs, after compilation), the ratio to jaxext, and each implementation's worst absolute
error against a 30-digit reference (mpmath quadrature, tests/limbdark_test.py's method) on a
subsample that includes the contact points and b = r.
"""

import argparse
import functools
import importlib.machinery
import importlib.util
import os
import platform
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from tests.limbdark_reference import relative_flux  # noqa: E402

U1, U2, R = 0.4, 0.26, 0.1


def reference(b, r, *u):
  """Relative flux at 30 digits (tests/limbdark_reference.py: independent of every implementation)."""
  return relative_flux(b, r, u)


def accuracy_table(batman):
  """Worst absolute error over every regime, for several radii and two laws."""
  from jaxoplanet.core.limb_dark import light_curve
  laws = {"quadratic": (U1, U2), "quartic": (0.3, 0.2, -0.1, 0.05)}
  print(f"\nworst |error| against the reference, per radius ratio (b over all regimes):")
  print(f"{'law':10s} {'r':>6s} {'jaxext':>10s} {'jaxoplanet':>11s} {'batman':>10s}")
  rng = np.random.default_rng(1)
  for law, u in laws.items():
    for r in (0.01, 0.1, 0.3, 0.7, 2.0):
      lo, hi = max(0.0, r - 1.0), 1.0 + r
      b = np.concatenate([[0.0, r, abs(1 - r), abs(1 - r) + 1e-9, 1.0, 1 + r - 1e-9],
                          rng.uniform(lo, hi, 24)])
      want = np.array([reference(x, r, *u) for x in b])
      ua = jnp.array(u)
      e_jx = np.max(np.abs(np.asarray(jaxext.limb_dark_flux(b, r, ua)) - want))
      e_jo = np.max(np.abs(np.asarray(light_curve(ua, jnp.asarray(b), r)) + 1 - want))
      e_bm = (np.max(np.abs(batman._quadratic_ld(b, r, u[0], u[1], 1) - want))
              if batman is not None and len(u) == 2 else float("nan"))
      print(f"{law:10s} {r:6.2f} {e_jx:10.1e} {e_jo:11.1e} {e_bm:10.1e}")


def load_batman(path):
  loader = importlib.machinery.ExtensionFileLoader("_quadratic_ld", path)
  spec = importlib.util.spec_from_file_location("_quadratic_ld", path, loader=loader)
  module = importlib.util.module_from_spec(spec)
  loader.exec_module(module)
  return module


def best_time(f, repeats):
  f()
  best = np.inf
  for _ in range(repeats):
    t0 = time.perf_counter()
    f()
    best = min(best, time.perf_counter() - t0)
  return best


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--n", type=int, default=1_000_000)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--ref-points", type=int, default=300)
  parser.add_argument("--batman", help="path to batman's _quadratic_ld extension")
  parser.add_argument("--no-accuracy-table", action="store_true")
  parser.add_argument("--single-core", action="store_true",
                      help="(internal) pin to one core and time jaxext only")
  args = parser.parse_args()

  if args.single_core:
    print(jaxext_time(args), flush=True)
    return

  rng = np.random.default_rng(0)
  b = rng.uniform(0.0, 1.2, args.n)
  u = jnp.array([U1, U2])
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"jax {jax.__version__}, backend {jax.default_backend()}; {args.n} points, r = {R}")

  # Reference subsample: random points plus every special configuration.
  special = np.array([0.0, R, 1 - R, 1 - R + 1e-12, 1 - R - 1e-12, 1.0, 1 + R, 1 + R - 1e-12,
                      R + 1e-9])
  idx = rng.choice(args.n, args.ref_points, replace=False)
  b_ref = np.concatenate([b[idx], special])
  print(f"computing the 30-digit reference at {len(b_ref)} points ...", flush=True)
  want = np.array([reference(x, R, U1, U2) for x in b_ref])
  bat = load_batman(args.batman) if args.batman else None

  # Every timed case as (table, name, thunk, error). Timings are interleaved: `--rounds` rounds,
  # each timing every case (best of --repeats); the table keeps each case's best round, so drift
  # in the machine's speed (a shared VM) does not favour whichever case ran at a quiet moment.
  bj = jnp.asarray(b)
  x = np.linspace(-3.0, 3.0, args.n)  # a light curve: sorted b(t), 35% in transit
  b_lc = np.sqrt(0.09 + x * x)
  blc = jnp.asarray(b_lc)
  cases = []
  jx = jax.jit(lambda bb: jaxext.limb_dark_flux(bb, R, u))
  cases.append(("random", "jaxext (XLA CPU pool, all cores)", lambda: jax.block_until_ready(jx(bj)),
                np.max(np.abs(np.asarray(jx(jnp.asarray(b_ref))) - want))))
  jg = jax.jit(jax.value_and_grad(lambda bb, uu: jnp.sum(jaxext.limb_dark_flux(bb, R, uu)),
                                  argnums=(0, 1)))
  cases.append(("random", "jaxext value + grad (b, u)", lambda: jax.block_until_ready(jg(bj, u)),
                None))
  b32 = jnp.asarray(b, jnp.float32)
  u32 = u.astype(jnp.float32)
  jx32 = jax.jit(lambda bb: jaxext.limb_dark_flux(bb, np.float32(R), u32))
  cases.append(("random", "jaxext float32", lambda: jax.block_until_ready(jx32(b32)),
                np.max(np.abs(np.asarray(jx32(jnp.asarray(b_ref, jnp.float32)), np.float64) - want))))
  cases.append(("lc", "jaxext", lambda: jax.block_until_ready(jx(blc)), None))
  try:
    from jaxoplanet.core.limb_dark import light_curve
    jo = jax.jit(lambda bb: light_curve(u, bb, R) + 1.0)
    cases.append(("random", "jaxoplanet 0.2.0 (pure JAX)", lambda: jax.block_until_ready(jo(bj)),
                  np.max(np.abs(np.asarray(jo(jnp.asarray(b_ref))) - want))))
    jog = jax.jit(jax.value_and_grad(lambda bb, uu: jnp.sum(light_curve(uu, bb, R)),
                                     argnums=(0, 1)))
    cases.append(("random", "jaxoplanet value + grad (b, u)",
                  lambda: jax.block_until_ready(jog(bj, u)), None))
    cases.append(("lc", "jaxoplanet", lambda: jax.block_until_ready(jo(blc)), None))
  except ImportError as e:
    print(f"jaxoplanet not available: {e}")
  if bat is not None:
    err = np.max(np.abs(bat._quadratic_ld(b_ref, R, U1, U2, 1) - want))
    for threads in (1, 2):
      plural = "s" if threads > 1 else ""
      cases.append(("random", f"batman 2.5.2 (C, {threads} thread{plural})",
                    functools.partial(bat._quadratic_ld, b, R, U1, U2, threads), err))
      cases.append(("lc", f"batman, {threads} thread{plural}",
                    functools.partial(bat._quadratic_ld, b_lc, R, U1, U2, threads), None))
  best = [np.inf] * len(cases)
  for _ in range(args.rounds):
    for i, case in enumerate(cases):
      best[i] = min(best[i], best_time(case[2], args.repeats))
  rows = [(c[1], t, c[3]) for c, t in zip(cases, best) if c[0] == "random"]
  lc_rows = [(c[1], t) for c, t in zip(cases, best) if c[0] == "lc"]
  t1 = single_core_time(args)
  if t1 is not None:
    rows.insert(1, ("jaxext (1 core)", t1, rows[0][2]))

  base = rows[0][1]
  print(f"\n{'implementation':36s} {'ns/point':>10s} {'vs jaxext':>10s} {'max |error|':>12s}")
  for name, t, err in rows:
    ns = t / args.n * 1e9
    e = "" if err is None else f"{err:12.1e}"
    print(f"{name:36s} {ns:10.2f} {t / base:9.2f}x {e}")
  print(f"\nlight curve (sorted b, 35% in transit): ns/point")
  for name, t in lc_rows:
    print(f"{name:36s} {t / args.n * 1e9:10.2f} {t / lc_rows[0][1]:9.2f}x")
  if not args.no_accuracy_table:
    accuracy_table(bat)


def jaxext_time(args):
  rng = np.random.default_rng(0)
  bj = jnp.asarray(rng.uniform(0.0, 1.2, args.n))
  u = jnp.array([U1, U2])
  jx = jax.jit(lambda bb: jaxext.limb_dark_flux(bb, R, u))
  return best_time(lambda: jax.block_until_ready(jx(bj)), args.repeats)


def single_core_time(args):
  """jaxext pinned to one core, in a child process (XLA sizes its pool at start-up)."""
  if not hasattr(os, "sched_setaffinity"):
    return None
  cmd = [sys.executable, os.path.abspath(__file__), "--single-core", "--n", str(args.n),
         "--repeats", str(args.repeats)]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
  if proc.returncode != 0:
    print(proc.stderr[-2000:])
    return None
  return float(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
  main()
