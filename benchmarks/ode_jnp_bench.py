"""Right-hand sides in jax.numpy (#31): jaxext.ode.dop853 with a jnp function against the same model
hand-written in Numba, and against diffrax running the same jnp function.

    tools/bazel run //benchmarks:ode_jnp [-- --n 1000 --tols 1e-6,1e-9,1e-12 --rounds 3]

Problems (N trajectories each, float64):
* lorenz:     sigma = 10, rho = 28, beta = 8/3 (shared args), y0 around (1, 1, 20), t in [0, 2];
* vdp:        van der Pol, mu per trajectory in [0.5, 2] (args_axes=0), y0 around (2, 0), t in [0, 10];
* arenstorf:  the restricted three-body periodic orbit (Hairer), y0 perturbed by 1e-7, one period;
* j2:         two-body + J2 Earth orbits (LEO, random planes), t in [0, 6000] s.

Arms (interleaved rounds, best round each; compilation excluded and reported apart):
* jnp:     ode.dop853(f, ...) with f(t, y, args) written in jax.numpy (jaxext/ode/_jnp.py);
* numba:   ode.dop853(g, ...) with g(t, y, p, dydt) the same arithmetic hand-written for Numba;
* diffrax: Dopri8 + PIDController(rtol, atol) under jax.jit(jax.vmap(diffeqsolve)) of the same
           jnp function f (diffrax's convention), SaveAt(t1=True), max_steps 10^6.

Errors: per trajectory max |y - y_ref| / max(1, |y_ref|) at t1, median over trajectories, against
jaxext at rtol = atol = --ref-tol; "matched accuracy": diffrax's time interpolated (log-log) at the
error jaxext's jnp arm achieved. "first call": trace, translation, Numba compilation (an empty
Numba cache) and XLA compilation of a new right-hand side, for the value and for its derivatives.
"""

import argparse
import datetime
import math
import os
import platform
import sys
import tempfile
import time
import warnings

os.environ["JAXEXT_NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxext-bench-numba-")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxext import ode  # noqa: E402
from jaxext.ode import models  # noqa: E402
from ode_bench import interp_time  # noqa: E402 (the same work-precision interpolation)

MU_E, RE, J2 = models.EARTH_MU, models.EARTH_RADIUS, models.EARTH_J2
ARENSTORF_Y0 = np.array([0.994, 0.0, 0.0, -2.00158510637908252240537862224])
ARENSTORF_T = 17.0652165601579625588917206249
ARENSTORF_MU = 0.012277471


# --- the models, in jnp and in Numba ----------------------------------------------------------

def lorenz(t, y, args):
  sigma, rho, beta = args
  return jnp.stack([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1], y[0] * y[1] - beta * y[2]])


def lorenz_nb(t, y, p, dydt):
  dydt[0] = p[0] * (y[1] - y[0])
  dydt[1] = y[0] * (p[1] - y[2]) - y[1]
  dydt[2] = y[0] * y[1] - p[2] * y[2]


def vdp(t, y, mu):
  return jnp.stack([y[1], mu * (1 - y[0] * y[0]) * y[1] - y[0]])


def vdp_nb(t, y, p, dydt):
  dydt[0] = y[1]
  dydt[1] = p[0] * (1 - y[0] * y[0]) * y[1] - y[0]


def arenstorf(t, y, m):
  mp = 1 - m
  d1 = ((y[0] + m) ** 2 + y[1] ** 2) ** 1.5
  d2 = ((y[0] - mp) ** 2 + y[1] ** 2) ** 1.5
  return jnp.stack([y[2], y[3], y[0] + 2 * y[3] - mp * (y[0] + m) / d1 - m * (y[0] - mp) / d2,
                    y[1] - 2 * y[2] - mp * y[1] / d1 - m * y[1] / d2])


def arenstorf_nb(t, y, p, dydt):
  m = p[0]
  mp = 1 - m
  d1 = ((y[0] + m) ** 2 + y[1] ** 2) ** 1.5
  d2 = ((y[0] - mp) ** 2 + y[1] ** 2) ** 1.5
  dydt[0] = y[2]
  dydt[1] = y[3]
  dydt[2] = y[0] + 2 * y[3] - mp * (y[0] + m) / d1 - m * (y[0] - mp) / d2
  dydt[3] = y[1] - 2 * y[2] - mp * y[1] / d1 - m * y[1] / d2


def j2(t, y, args):
  mu, re, j2_ = args
  r2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2]
  r = jnp.sqrt(r2)
  mu_r3 = mu / (r2 * r)
  fj = -1.5 * j2_ * mu_r3 * re * re / r2
  q = 1 - 5 * y[2] * y[2] / r2
  return jnp.stack([y[3], y[4], y[5], -mu_r3 * y[0] + fj * y[0] * q,
                    -mu_r3 * y[1] + fj * y[1] * q, -mu_r3 * y[2] + fj * y[2] * (q + 2)])


def j2_nb(t, y, p, dydt):
  r2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2]
  r = np.sqrt(r2)
  mu_r3 = p[0] / (r2 * r)
  fj = -1.5 * p[2] * mu_r3 * p[1] * p[1] / r2
  q = 1 - 5 * y[2] * y[2] / r2
  dydt[0] = y[3]
  dydt[1] = y[4]
  dydt[2] = y[5]
  dydt[3] = -mu_r3 * y[0] + fj * y[0] * q
  dydt[4] = -mu_r3 * y[1] + fj * y[1] * q
  dydt[5] = -mu_r3 * y[2] + fj * y[2] * (q + 2)


def problems(n, rng):
  """name -> (jnp f, Numba g, y0 (n, d), args, args_axes, params for g (n, p), t1)."""
  out = {}
  y0 = rng.normal(size=(n, 3)) + np.array([1.0, 1.0, 20.0])
  args = (10.0, 28.0, 8.0 / 3.0)
  out["lorenz"] = (lorenz, lorenz_nb, y0, args, None, np.tile(args, (n, 1)), 2.0)
  mu = rng.uniform(0.5, 2.0, n)
  y0 = np.stack([2.0 + 0.1 * rng.normal(size=n), 0.1 * rng.normal(size=n)], axis=1)
  out["vdp"] = (vdp, vdp_nb, y0, mu, 0, mu[:, None], 10.0)
  y0 = ARENSTORF_Y0 * (1 + 1e-7 * rng.normal(size=(n, 4)))
  out["arenstorf"] = (arenstorf, arenstorf_nb, y0, ARENSTORF_MU, None,
                      np.full((n, 1), ARENSTORF_MU), ARENSTORF_T)
  a = RE + rng.uniform(300.0, 1500.0, n)
  inc, node, u = rng.uniform(0, np.pi, n), rng.uniform(0, 2 * np.pi, n), rng.uniform(0, 2 * np.pi, n)
  v = np.sqrt(MU_E / a)
  ci, si, co, so, cu, su = np.cos(inc), np.sin(inc), np.cos(node), np.sin(node), np.cos(u), np.sin(u)
  pos = a[:, None] * np.stack([co * cu - so * su * ci, so * cu + co * su * ci, su * si], 1)
  vel = v[:, None] * np.stack([-co * su - so * cu * ci, -so * su + co * cu * ci, cu * si], 1)
  args = (MU_E, RE, J2)
  out["j2"] = (j2, j2_nb, np.concatenate([pos, vel], 1), args, None, np.tile(args, (n, 1)), 6000.0)
  return out


# --- the arms -----------------------------------------------------------------------------------

def jaxext_arm(f, y0, args, axes, t1, tol, numba_params=None):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # rtol raised to 100 eps, as scipy does
    if numba_params is None:
      fn = jax.jit(lambda y: ode.dop853(f, y, (0.0, t1), args=args, args_axes=axes, rtol=tol,
                                        atol=tol, max_steps=10**6).y_final)
    else:
      fn = jax.jit(lambda y: ode.dop853(f, y, (0.0, t1), numba_params, rtol=tol, atol=tol,
                                        max_steps=10**6).y_final)
    t = time.perf_counter()
    exe = fn.lower(jax.ShapeDtypeStruct(y0.shape, jnp.float64)).compile()
  return exe, time.perf_counter() - t


def diffrax_arm(diffrax, f, y0, args, axes, t1, tol):
  term = diffrax.ODETerm(f)

  def one(y, a):
    sol = diffrax.diffeqsolve(term, diffrax.Dopri8(), 0.0, t1, None, y, args=a,
                              stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                              saveat=diffrax.SaveAt(t1=True), max_steps=10**6, throw=False)
    return sol.ys[-1]
  in_axes = (0, 0 if axes == 0 else None)
  fn = jax.jit(lambda y: jax.vmap(one, in_axes=in_axes)(y, args))
  t = time.perf_counter()
  exe = fn.lower(jax.ShapeDtypeStruct(y0.shape, jnp.float64)).compile()
  return exe, time.perf_counter() - t


def error(y, ref):
  y, ref = np.asarray(y), np.asarray(ref)
  return float(np.median(np.max(np.abs(y - ref) / np.maximum(1, np.abs(ref)), axis=1)))


def first_call(f, y0, args, axes, t1):
  """Seconds to trace, translate, Numba-compile and XLA-compile a new right-hand side (a fresh
  copy of f's code, so nothing is cached), for the value and for jax.jacfwd of it."""
  g = type(f)(f.__code__.replace(co_name=f.__name__ + "_fresh"), f.__globals__,
              f.__name__ + "_fresh")
  t = time.perf_counter()
  jax.block_until_ready(ode.dop853(g, y0[:2], (0.0, t1), args=args if axes is None else
                                   jax.tree_util.tree_map(lambda a: a[:2], args),
                                   args_axes=axes, rtol=1e-9, atol=1e-9).y_final)
  value = time.perf_counter() - t
  t = time.perf_counter()
  jax.block_until_ready(jax.jacfwd(lambda y: ode.dop853(
      g, y, (0.0, t1), args=args if axes is None else jax.tree_util.tree_map(lambda a: a[:2], args),
      args_axes=axes, rtol=1e-9, atol=1e-9).y_final)(y0[:2]))
  return value, time.perf_counter() - t


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--n", type=int, default=1000)
  p.add_argument("--tols", default="1e-6,1e-9,1e-12")
  p.add_argument("--diffrax-tols", default="1e-5,1e-6,1e-7,1e-8,1e-9,1e-10,1e-11,1e-12,1e-13",
                 help="diffrax's tolerances (a wider grid: its error at a given tolerance differs)")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--ref-tol", type=float, default=1e-14)
  p.add_argument("--problems", default="lorenz,vdp,arenstorf,j2")
  p.add_argument("--no-diffrax", action="store_true")
  args = p.parse_args()
  tols = [float(t) for t in args.tols.split(",")]
  dtols = [float(t) for t in args.diffrax_tols.split(",")]
  diffrax = None
  if not args.no_diffrax:
    try:
      import diffrax  # noqa: PLC0415
    except ImportError:
      print("diffrax is not importable: its arm is skipped")
  print(f"# {datetime.date.today()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, python {platform.python_version()}, jax {jax.__version__}, "
        f"load average {os.getloadavg()[0]:.2f}; N = {args.n}, {args.rounds} rounds")
  probs = problems(args.n, np.random.default_rng(0))
  for name in args.problems.split(","):
    f, g, y0, fargs, axes, params, t1 = probs[name]
    value_s, deriv_s = first_call(f, y0, fargs, axes, t1)
    ref_exe, _ = jaxext_arm(g, y0, None, None, t1, args.ref_tol, params)
    ref = np.asarray(ref_exe(y0))
    arms = {}
    for tol in tols:
      arms[("jnp", tol)] = jaxext_arm(f, y0, fargs, axes, t1, tol)
      arms[("numba", tol)] = jaxext_arm(g, y0, None, None, t1, tol, params)
    if diffrax is not None:
      for tol in dtols:
        arms[("diffrax", tol)] = diffrax_arm(diffrax, f, y0, fargs, axes, t1, tol)
    best = {k: math.inf for k in arms}
    errs = {}
    for _ in range(args.rounds):
      for k, (exe, _) in arms.items():  # interleaved: every arm once per round
        t = time.perf_counter()
        out = jax.block_until_ready(exe(y0))
        best[k] = min(best[k], time.perf_counter() - t)
        errs[k] = error(out, ref)
    print(f"\n## {name} (d = {y0.shape[1]}): first call of a new jnp right-hand side "
          f"{value_s:.2f} s, with derivatives (jax.jacfwd) {deriv_s:.2f} s")
    print("| tol | jnp | numba | jnp / numba | error jnp | error numba | diffrax at jnp's error |"
          " diffrax / jnp |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    dpts = [(errs[k], best[k]) for k in arms if k[0] == "diffrax"]
    for tol in tols:
      tj, tn = best[("jnp", tol)], best[("numba", tol)]
      ej, en = errs[("jnp", tol)], errs[("numba", tol)]
      td = interp_time(dpts, ej) if dpts else None
      dcol = f"{td * 1e3:.1f} ms | {td / tj:.1f}x" if td else "outside diffrax's range | -"
      print(f"| {tol:g} | {tj * 1e3:.1f} ms | {tn * 1e3:.1f} ms | {tj / tn:.3f} | {ej:.1e} | "
            f"{en:.1e} | {dcol} |")
    if dpts:
      print("diffrax points (error, ms): " + ", ".join(
          f"({e:.1e}, {t * 1e3:.0f})" for e, t in sorted(dpts)))
  sys.stdout.flush()


if __name__ == "__main__":
  main()
