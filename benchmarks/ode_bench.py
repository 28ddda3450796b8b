"""jaxext.ode.dop853 benchmark (#11): many Earth orbits for one day, two-body + J2 + drag.

    tools/bazel run //benchmarks:ode [-- --sizes 100,1000,10000 --tols 1e-6,1e-9,1e-12 --rounds 3]

The default (N = 100 and 1000) takes ~1.5 min on 2 cores, the full grid above ~15 min; figures in
benchmarks/RESULTS.md. `--probe-threads` also reports XLA's intra-op pool size and timings under
other thread settings (CPU affinity, NPROC, XLA_FLAGS).

Two sets of trajectories: a LEO debris cloud (altitude 300-2000 km, e <= 0.02, random inclination
and angles) and a mixed set where every 10th trajectory is a GTO (perigee altitude 200-300 km,
apogee altitude 35786 km, e ~ 0.73); ballistic coefficients log-uniform in [0.005, 0.05] m^2/kg.
Every arm integrates the same model, in km and km/s, from t = 0 to 86400 s, rtol = atol = tol:

* ours:    jaxext.ode.dop853 with the built-in C++ model, on 2 threads (this process: XLA's CPU
           client sizes its intra-op pool from the CPUs the process may run on) and on 1 thread (a
           worker process pinned to CPU 0 with sched_setaffinity before jax starts; the worker
           reports its pool's thread count and CPU time / wall time);
* scipy:   solve_ivp(method="DOP853") trajectory by trajectory with a NumPy-returning right-hand
           side (Python floats inside), on the first --scipy-count trajectories (exactly 10% GTO in
           the mixed set), scaled per trajectory;
* diffrax: Dopri8 + PIDController(rtol, atol) under jax.jit(jax.vmap(diffeqsolve)) (forward mode,
           max_steps 10^6, throw=False), XLA's default threading;
* heyoka:  (if importable) the same model in heyoka expressions, taylor_adaptive_batch (SIMD batch
           of hy.recommended_simd_size() lanes) looped over the set on 1 thread, and
           ensemble_propagate_until_batch (TBB, all CPUs). tol = the arms' rtol = atol.

The atmosphere is a single exponential band (Vallado's 300-350 km band, rho0 = 2.418e-11 kg/m^3
at 300 km, H = 53.628 km, used at every altitude) in every arm by default, so that heyoka's
expression system runs the same model; `--atmosphere table` uses Vallado's 28-band table (the
built-in default) in the other arms and skips heyoka.

Errors: |r - r_ref| of the final position (km) against ours at rtol = atol = --ref-tol (1e-14;
rtol raised to 100 eps; checked against heyoka at tol 1e-15 on a few trajectories when heyoka is
present). Timings exclude
compilation (reported apart) and use block_until_ready; interleaved rounds, best round per arm.
Work-precision: each arm's time interpolated (log-log) at ours' achieved median error.
"""

import os
import sys

if __name__ == "__main__" and "--worker" in sys.argv:
  # Pin before jax starts: XLA's CPU client sizes its thread pools from the allowed CPUs.
  _cpus = sys.argv[sys.argv.index("--worker") + 1]
  os.sched_setaffinity(0, {int(c) for c in _cpus.split(",")})

import argparse  # noqa: E402
import bisect  # noqa: E402
import collections  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxext import ode  # noqa: E402
from jaxext.ode import models  # noqa: E402

T_END = 86400.0
MU, RE, J2, OMEGA = models.EARTH_MU, models.EARTH_RADIUS, models.EARTH_J2, models.EARTH_ROTATION
GEO_ALTITUDE = 35786.0
SINGLE_BAND = models.Atmosphere(base_altitude=(300.0,), density=(2.418e-11,),
                                scale_height=(53.628,))
ATMOSPHERES = {"single": SINGLE_BAND, "table": models.EXPONENTIAL_ATMOSPHERE}


# --- the trajectories -------------------------------------------------------------------------

def elements_to_state(a, e, inc, raan, argp, nu):
  """Keplerian elements (km, rad) to (N, 6) position/velocity in km and km/s."""
  p = a * (1 - e * e)
  r = p / (1 + e * np.cos(nu))
  rp = np.stack([r * np.cos(nu), r * np.sin(nu), np.zeros_like(r)], -1)
  vp = np.sqrt(MU / p)[:, None] * np.stack([-np.sin(nu), e + np.cos(nu), np.zeros_like(r)], -1)
  cO, sO, ci, si, cw, sw = (np.cos(raan), np.sin(raan), np.cos(inc), np.sin(inc), np.cos(argp),
                            np.sin(argp))
  rot = np.stack([
      np.stack([cO * cw - sO * sw * ci, -cO * sw - sO * cw * ci, sO * si], -1),
      np.stack([sO * cw + cO * sw * ci, -sO * sw + cO * cw * ci, -cO * si], -1),
      np.stack([sw * si, cw * si, ci], -1)], -2)
  return np.concatenate([np.einsum("nij,nj->ni", rot, rp), np.einsum("nij,nj->ni", rot, vp)], -1)


def make_set(kind, n, seed=0):
  """(y0 (n, 6), B (n,), is_gto (n,)). Sets are nested: the first n of a larger set."""
  rng = np.random.default_rng([seed, 0 if kind == "leo" else 1])
  e = rng.uniform(0, 0.02, n)
  lo, hi = (RE + 300) / (1 - e), (RE + 2000) / (1 + e)
  a = lo + (hi - lo) * rng.uniform(size=n)
  inc = np.arccos(rng.uniform(-1, 1, n))  # isotropic orbit normals
  raan, argp, nu = (rng.uniform(0, 2 * np.pi, n) for _ in range(3))
  b = np.exp(rng.uniform(np.log(0.005), np.log(0.05), n))
  gto = np.zeros(n, bool)
  if kind == "mixed":
    gto = np.arange(n) % 10 == 9
    rp = RE + rng.uniform(200, 300, n)
    ra = RE + GEO_ALTITUDE
    a = np.where(gto, (rp + ra) / 2, a)
    e = np.where(gto, (ra - rp) / (ra + rp), e)
    inc = np.where(gto, np.radians(rng.uniform(0, 30, n)), inc)
  return elements_to_state(a, e, inc, raan, argp, nu), b, gto


# --- the model in NumPy (scipy), jnp (diffrax) and heyoka expressions -------------------------

def scipy_rhs(b, atm):
  base, rho0 = list(atm.base_altitude), list(atm.density)
  inv_h = [1 / s for s in atm.scale_height]
  scale = 500.0 * b  # meters_per_unit / 2 * B
  upper = base[1:]

  def f(t, y):
    x, yy, z, vx, vy, vz = y.tolist()
    r2 = x * x + yy * yy + z * z
    r = math.sqrt(r2)
    mu_r3 = MU / (r2 * r)
    fj = -1.5 * J2 * mu_r3 * (RE / r) ** 2
    q = 1 - 5 * z * z / r2
    wx, wy = vx + OMEGA * yy, vy - OMEGA * x
    v = math.sqrt(wx * wx + wy * wy + vz * vz)
    h = r - RE
    k = bisect.bisect_right(upper, h)
    dk = -scale * rho0[k] * math.exp((base[k] - h) * inv_h[k]) * v
    return np.array([vx, vy, vz, -mu_r3 * x + fj * x * q + dk * wx,
                     -mu_r3 * yy + fj * yy * q + dk * wy, -mu_r3 * z + fj * z * (q + 2) + dk * vz])
  return f


def jnp_rhs(atm):
  base, rho0 = jnp.asarray(atm.base_altitude), jnp.asarray(atm.density)
  inv_h = 1 / jnp.asarray(atm.scale_height)

  def f(t, y, b):
    x, yy, z, vx, vy, vz = y
    r2 = x * x + yy * yy + z * z
    r = jnp.sqrt(r2)
    mu_r3 = MU / (r2 * r)
    fj = -1.5 * J2 * mu_r3 * (RE / r) ** 2
    q = 1 - 5 * z * z / r2
    wx, wy = vx + OMEGA * yy, vy - OMEGA * x
    v = jnp.sqrt(wx * wx + wy * wy + vz * vz)
    h = r - RE
    if len(atm.base_altitude) == 1:
      rho = rho0[0] * jnp.exp((base[0] - h) * inv_h[0])
    else:
      k = jnp.sum(base[1:] <= h)
      rho = rho0[k] * jnp.exp((base[k] - h) * inv_h[k])
    dk = -500.0 * b * rho * v
    return jnp.stack([vx, vy, vz, -mu_r3 * x + fj * x * q + dk * wx,
                      -mu_r3 * yy + fj * yy * q + dk * wy, -mu_r3 * z + fj * z * (q + 2) + dk * vz])
  return f


def heyoka_system(hy, atm):
  x, y, z, vx, vy, vz = hy.make_vars("x", "y", "z", "vx", "vy", "vz")
  r2 = x * x + y * y + z * z
  r = hy.sqrt(r2)
  mu_r3 = MU / (r2 * r)
  fj = -1.5 * J2 * RE * RE * mu_r3 / r2
  q = 1. - 5. * z * z / r2
  wx, wy = vx + OMEGA * y, vy - OMEGA * x
  v = hy.sqrt(wx * wx + wy * wy + vz * vz)
  (h0,), (rho0,), (hs,) = atm.base_altitude, atm.density, atm.scale_height
  dk = -500.0 * hy.par[0] * rho0 * hy.exp((h0 + RE - r) / hs) * v
  return [(x, vx), (y, vy), (z, vz), (vx, -mu_r3 * x + fj * x * q + dk * wx),
          (vy, -mu_r3 * y + fj * y * q + dk * wy), (vz, -mu_r3 * z + fj * z * (q + 2.) + dk * vz)]


# --- the arms -----------------------------------------------------------------------------------

def ours_compiled(model, n, tol, max_steps=10**6):
  fn = jax.jit(lambda y0, p: (lambda s: (s.y_final, s.status, s.n_steps, s.n_rhs))(
      ode.dop853(model, y0, (0.0, T_END), p, rtol=tol, atol=tol, max_steps=max_steps)))
  t = time.perf_counter()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # rtol raised to 100 eps, as scipy does
    exe = fn.lower(jax.ShapeDtypeStruct((n, 6), jnp.float64),
                   jax.ShapeDtypeStruct((n, 1), jnp.float64)).compile()
  return exe, time.perf_counter() - t


def timed(fn, *args):
  """(result, wall s, process CPU s) of one blocking call."""
  c, t = time.process_time(), time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return out, time.perf_counter() - t, time.process_time() - c


def pool_threads():
  """Thread names of this process (XLA's intra-op pool threads are 'XLAEigen')."""
  names = collections.Counter()
  for tid in os.listdir("/proc/self/task"):
    try:
      with open(f"/proc/self/task/{tid}/comm") as f:
        names[f.read().strip()] += 1
    except OSError:
      pass
  return dict(names)


def worker_main(args):
  """Serves 'time ours' requests on stdin (one JSON per line) from a pinned process."""
  model = ode.models.earth(j2=True, drag=True, atmosphere=ATMOSPHERES[args.atmosphere])
  cache, sets = {}, {}
  for line in sys.stdin:
    req = json.loads(line)
    key = (req["kind"], req["n"], req["tol"])
    if req["kind"] not in sets:
      y, b, _ = make_set(req["kind"], req["max_n"], args.seed)
      sets[req["kind"]] = (y, b)
    y, b = sets[req["kind"]]
    y0, p = jnp.asarray(y[:req["n"]]), jnp.asarray(b[:req["n"], None])
    reply = {}
    if key not in cache:
      cache[key] = ours_compiled(model, req["n"], req["tol"])
      reply["compile_s"] = cache[key][1]
      timed(cache[key][0], y0, p)  # warm
    out, wall, cpu = timed(cache[key][0], y0, p)
    reply.update(wall=wall, cpu=cpu, checksum=float(np.sum(np.asarray(out[0]))),
                 threads=pool_threads(), affinity=sorted(os.sched_getaffinity(0)))
    print("@@" + json.dumps(reply), flush=True)


class Worker:
  def __init__(self, args, cpus, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    cmd = [sys.executable, __file__, "--worker", cpus, "--atmosphere", args.atmosphere,
           "--seed", str(args.seed)]
    self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                 text=True)

  def request(self, **req):
    self.proc.stdin.write(json.dumps(req) + "\n")
    self.proc.stdin.flush()
    for line in self.proc.stdout:
      if line.startswith("@@"):
        return json.loads(line[2:])
    raise RuntimeError(f"worker exited ({self.proc.wait()})")

  def close(self):
    self.proc.stdin.close()
    self.proc.wait()


def probe_threads(args, n=1000, tol=1e-9, calls=5):
  """ours on (leo, n, tol) in workers under several thread settings: XLA's intra-op pool size
  (tf_XLAEigen threads), best wall time of `calls`, CPU time / wall time."""
  configs = [
      ("CPUs {0,1} (default)", "0,1", {}),
      ("CPUs {0} (sched_setaffinity, as taskset -c 0)", "0", {}),
      ("CPUs {0,1}, NPROC=1 (XLA's pool-size override)", "0,1", {"NPROC": "1"}),
      ("CPUs {0,1}, XLA_FLAGS=--xla_cpu_multi_thread_eigen=false", "0,1",
       {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
      ("CPUs {0,1}, XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
       "0,1", {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}),
  ]
  print(f"\nthread probe: ours on leo, N = {n}, tol {tol:g}, best of {calls} calls per setting")
  print("| setting | tf_XLAEigen threads | time/traj | CPU/wall |\n|---|---|---|---|")
  for name, cpus, env in configs:
    w = Worker(args, cpus, env)
    try:
      reps = [w.request(kind="leo", n=n, tol=tol, max_n=n) for _ in range(calls)]
      b = min(reps, key=lambda r: r["wall"])
      print(f"| {name} | {b['threads'].get('tf_XLAEigen', 0)} | {fmt_t(b['wall'] / n)} | "
            f"{b['cpu'] / b['wall']:.2f} |", flush=True)
      w.close()
    except (RuntimeError, BrokenPipeError) as err:
      print(f"| {name} | worker failed: {err} (see its stderr above) | | |", flush=True)


def diffrax_solver(diffrax, atm):
  term = diffrax.ODETerm(jnp_rhs(atm))

  def one(y0, b, rtol, atol):
    sol = diffrax.diffeqsolve(
        term, diffrax.Dopri8(), 0.0, T_END, None, y0, args=b,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        saveat=diffrax.SaveAt(t1=True), max_steps=10**6, adjoint=diffrax.ForwardMode(),
        throw=False)
    return (sol.ys[-1], sol.result == diffrax.RESULTS.successful, sol.stats["num_steps"],
            sol.stats["num_accepted_steps"])
  return jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)))


class Heyoka:
  """heyoka's batch integrator for one tolerance, looped over the set (1 thread), and its ensemble
  propagation (all CPUs)."""

  def __init__(self, hy, atm, tol):
    self.hy, self.bs = hy, hy.recommended_simd_size()
    t = time.perf_counter()
    self.ta = hy.taylor_adaptive_batch(heyoka_system(hy, atm), np.zeros((6, self.bs)), tol=tol,
                                       pars=np.zeros((1, self.bs)))
    self.compile_s = time.perf_counter() - t

  def _chunks(self, y0, b):
    n = len(b)
    m = -(-n // self.bs) * self.bs
    idx = np.minimum(np.arange(m), n - 1)  # pad with the last trajectory
    return y0[idx].reshape(-1, self.bs, 6).transpose(0, 2, 1), b[idx].reshape(-1, 1, self.bs)

  def batch(self, y0, b):
    ys, bs = self._chunks(y0, b)
    out, steps = np.empty_like(ys), np.zeros((len(ys), self.bs), np.int64)
    ta = self.ta
    for i in range(len(ys)):
      ta.set_time(0.0)
      ta.state[:] = ys[i]
      ta.pars[:] = bs[i]
      ta.propagate_until(T_END)
      out[i] = ta.state
      steps[i] = [res[3] for res in ta.propagate_res]
    return out.transpose(0, 2, 1).reshape(-1, 6)[:len(b)], steps.reshape(-1)[:len(b)]

  def ensemble(self, y0, b):
    ys, bs = self._chunks(y0, b)

    def gen(ta, i):
      ta.set_time(0.0)
      ta.state[:] = ys[i]
      ta.pars[:] = bs[i]
      return ta
    res = self.hy.ensemble_propagate_until_batch(self.ta, T_END, len(ys), gen)
    out = np.stack([r[0].state for r in res])
    return out.transpose(0, 2, 1).reshape(-1, 6)[:len(b)]


def run_scipy(y0, b, tol, atm):
  import scipy.integrate
  out, nfev, ok = np.empty_like(y0), np.zeros(len(b), np.int64), True
  for j in range(len(b)):
    sol = scipy.integrate.solve_ivp(scipy_rhs(b[j], atm), (0.0, T_END), y0[j], method="DOP853",
                                    rtol=tol, atol=tol)
    out[j], nfev[j], ok = sol.y[:, -1], sol.nfev, ok and sol.status == 0
  return out, nfev, ok


# --- reporting ----------------------------------------------------------------------------------

def pos_error(y, ref):
  return np.linalg.norm(np.asarray(y)[:, :3] - ref[:, :3], axis=1)


def interp_time(points, err):
  """log-log interpolated time at achieved error `err` from [(err_i, time_i)]; None outside."""
  pts = sorted((e, t) for e, t in points if e > 0 and np.isfinite(e))
  for (e0, t0), (e1, t1) in zip(pts, pts[1:]):
    if e0 <= err <= e1:
      w = 0.0 if e1 == e0 else (math.log(err) - math.log(e0)) / (math.log(e1) - math.log(e0))
      return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))
  if pts and any(abs(math.log(err / e)) < 1e-9 for e, _ in pts):
    return next(t for e, t in pts if abs(math.log(err / e)) < 1e-9)
  return None


def fmt_t(s):
  if s is None:
    return "n/a"
  for unit, f in (("s", 1), ("ms", 1e3), ("µs", 1e6)):
    if s * f >= 1:
      return f"{s * f:.3g} {unit}"
  return f"{s * 1e9:.3g} ns"


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--sizes", default="100,1000", help="N values (comma-separated); the issue's "
                 "full grid is 100,1000,10000")
  p.add_argument("--tols", default="1e-6,1e-9,1e-12", help="rtol = atol values (every arm)")
  p.add_argument("--extra-tols", default="1e-4,1e-13,1e-14",
                 help="more tolerances for diffrax and heyoka only, so that their work-precision "
                 "curves reach ours' achieved errors (their error at a given tol differs)")
  p.add_argument("--probe-threads", action="store_true",
                 help="also time ours in workers under other thread settings (XLA_FLAGS)")
  p.add_argument("--sets", default="leo,mixed")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--ref-tol", type=float, default=1e-14,
                 help="the reference's rtol = atol (rtol is raised to 100 eps = 2.2e-14)")
  p.add_argument("--scipy-count", type=int, default=10)
  p.add_argument("--atmosphere", choices=sorted(ATMOSPHERES), default="single")
  p.add_argument("--arms", default="ours1,ours2,scipy,diffrax,heyoka,heyoka-ens")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--json", help="write the raw figures here (an absolute path: `bazel run` "
                 "runs elsewhere)")
  p.add_argument("--worker", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.worker:
    return worker_main(args)

  sizes = [int(float(s)) for s in args.sizes.split(",")]
  tols = [float(t) for t in args.tols.split(",")]
  extra = [float(t) for t in args.extra_tols.split(",") if t] if args.extra_tols else []
  all_tols = sorted(set(tols) | set(extra), reverse=True)
  kinds = args.sets.split(",")
  arms = args.arms.split(",")
  atm = ATMOSPHERES[args.atmosphere]
  model = ode.models.earth(j2=True, drag=True, atmosphere=atm)
  max_n = max(sizes)

  hy = None
  if any(a.startswith("heyoka") for a in arms):
    if args.atmosphere != "single":
      print("heyoka: skipped (its arm runs only with --atmosphere single)")
    else:
      try:
        import heyoka as hy
      except ImportError as err:
        print(f"heyoka: not importable ({err}); its arms are skipped")
  if hy is None:
    arms = [a for a in arms if not a.startswith("heyoka")]
  try:
    import diffrax
  except ImportError as err:
    diffrax = None
    print(f"diffrax: not importable ({err}); its arm is skipped")
    arms = [a for a in arms if a != "diffrax"]

  import scipy
  print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, allowed "
        f"{sorted(os.sched_getaffinity(0))}; Python {platform.python_version()}; jax "
        f"{jax.__version__}; scipy {scipy.__version__}; diffrax "
        f"{getattr(diffrax, '__version__', '-')}; heyoka {getattr(hy, '__version__', '-')}; "
        f"{datetime.date.today()}")
  print(f"sets {kinds}, N {sizes}, tol {tols} (diffrax, heyoka also {extra}), {args.rounds} "
        f"rounds, atmosphere "
        f"{args.atmosphere}, reference tol {args.ref_tol:g}, scipy on the first "
        f"{args.scipy_count} trajectories", flush=True)

  if args.probe_threads:
    probe_threads(args)
  data = {k: make_set(k, max_n, args.seed) for k in kinds}
  worker = Worker(args, "0") if "ours1" in arms else None
  compile_s, results, times, cpu = {}, {}, collections.defaultdict(list), {}

  # Pass 0: compile, run once, errors against the reference.
  refs, cases, jobs = {}, [], {}
  dfx = diffrax_solver(diffrax, atm) if "diffrax" in arms else None
  hey = {tol: Heyoka(hy, atm, tol) for tol in all_tols} if hy is not None else {}
  if hey:
    print(f"heyoka: batch size (SIMD lanes) {hey[tols[0]].bs}")
  for tol in all_tols:
    if hey:
      compile_s[("heyoka", tol)] = hey[tol].compile_s
  for kind in kinds:
    y, b, gto = data[kind]
    exe, _ = ours_compiled(model, max_n, args.ref_tol)
    out = jax.block_until_ready(exe(jnp.asarray(y), jnp.asarray(b[:, None])))
    assert np.all(np.asarray(out[1]) == 0), "reference: not every trajectory succeeded"
    refs[kind] = np.asarray(out[0])
    if hy is not None:  # the reference against a Taylor integrator at tol 1e-15
      k = min(8, max_n)
      ta = Heyoka(hy, atm, 1e-15)
      check = ta.batch(y[:k], b[:k])[0]
      print(f"{kind}: reference (ours, tol {args.ref_tol:g}) vs heyoka tol 1e-15 on {k} "
            f"trajectories: max |dr| = {pos_error(check, refs[kind][:k]).max():.2e} km")
    for tol in all_tols:
      if "scipy" in arms and tol in tols:
        k = min(args.scipy_count, max_n)
        t0 = time.perf_counter()
        ys, nfev, ok = run_scipy(y[:k], b[:k], tol, atm)
        results[("scipy", kind, None, tol)] = dict(
            err=pos_error(ys, refs[kind][:k]), rhs=nfev, ok=ok, n=k, y=ys)
        jobs[("scipy", kind, None, tol)] = (lambda y=y[:k], b=b[:k], tol=tol: run_scipy(
            y, b, tol, atm), k)
        print(f"  scipy {kind} tol {tol:g}: {(time.perf_counter() - t0) / k:.3g} s/trajectory "
              "(first run)", flush=True)
      for n in sizes:
        y0, p = jnp.asarray(y[:n]), jnp.asarray(b[:n, None])
        ref = refs[kind][:n]
        if tol in tols:  # ours on 2 threads: also the errors of the 1-thread arm (same results)
          exe, compile_s[("ours", kind, n, tol)] = ours_compiled(model, n, tol)
          out = jax.block_until_ready(exe(y0, p))
          results[("ours2", kind, n, tol)] = dict(
              err=pos_error(out[0], ref), rhs=np.asarray(out[3]), steps=np.asarray(out[2]),
              ok=bool(np.all(np.asarray(out[1]) == 0)), n=n,
              checksum=float(np.sum(np.asarray(out[0]))), y=np.asarray(out[0]))
          if ("scipy", kind, None, tol) in results:  # the same algorithm: the same results
            sp = results[("scipy", kind, None, tol)]
            k = min(sp["n"], n)
            same = (int(np.sum(sp["rhs"][:k] != np.asarray(out[3])[:k])),
                    float(pos_error(sp["y"][:k], np.asarray(out[0])[:k]).max()))
            results[("scipy", kind, None, tol)].setdefault("vs_ours", same)
          if "ours2" in arms:
            jobs[("ours2", kind, n, tol)] = (lambda exe=exe, y0=y0, p=p: exe(y0, p), n)
        if worker is not None and tol in tols:
          rep = worker.request(kind=kind, n=n, tol=tol, max_n=max_n)
          compile_s[("ours1", kind, n, tol)] = rep["compile_s"]
          results[("ours1", kind, n, tol)] = dict(threads=rep["threads"],
                                                  affinity=rep["affinity"],
                                                  checksum=rep["checksum"], n=n)
          jobs[("ours1", kind, n, tol)] = (
              lambda kind=kind, n=n, tol=tol: worker.request(kind=kind, n=n, tol=tol,
                                                             max_n=max_n), n)
        if dfx is not None:
          t0 = time.perf_counter()
          exe = dfx.lower(y0, p[:, 0], tol, tol).compile()
          compile_s.setdefault(("diffrax", n), time.perf_counter() - t0)  # once per shape
          out = jax.block_until_ready(exe(y0, p[:, 0], tol, tol))
          steps = np.asarray(out[2])
          results[("diffrax", kind, n, tol)] = dict(
              err=pos_error(out[0], ref), steps=steps, ok=bool(np.all(np.asarray(out[1]))), n=n,
              inflation=n * steps.max() / steps.sum())
          jobs[("diffrax", kind, n, tol)] = (
              lambda exe=exe, y0=y0, b=p[:, 0], tol=tol: exe(y0, b, tol, tol), n)
        if hy is not None:
          yn, bn = y[:n], b[:n]
          if "heyoka" in arms:
            yh, steps = hey[tol].batch(yn, bn)
            results[("heyoka", kind, n, tol)] = dict(err=pos_error(yh, ref), steps=steps, n=n,
                                                     ok=True)
            jobs[("heyoka", kind, n, tol)] = (lambda h=hey[tol], yn=yn, bn=bn: h.batch(yn, bn),
                                              n)
          if "heyoka-ens" in arms:
            yh = hey[tol].ensemble(yn, bn)
            results[("heyoka-ens", kind, n, tol)] = dict(err=pos_error(yh, ref), n=n, ok=True)
            jobs[("heyoka-ens", kind, n, tol)] = (
                lambda h=hey[tol], yn=yn, bn=bn: h.ensemble(yn, bn), n)
        print(f"  {kind} N={n} tol {tol:g}: compiled and checked", flush=True)

  # Timing rounds, interleaved: every job once per round.
  for r in range(args.rounds):
    t_round = time.perf_counter()
    for key, (fn, count) in jobs.items():
      if key[0] == "ours1":
        rep = fn()
        times[key].append(rep["wall"] / count)
        cpu.setdefault(key, []).append(rep["cpu"] / rep["wall"])
        results[key]["threads"] = rep["threads"]
      else:
        _, wall, c = timed(fn)
        times[key].append(wall / count)
        cpu.setdefault(key, []).append(c / wall)
    print(f"round {r + 1}/{args.rounds}: {time.perf_counter() - t_round:.1f} s", flush=True)
  if worker is not None:
    worker.close()

  # Report.
  best = {k: min(v) for k, v in times.items()}
  med = {k: float(np.median(v)) for k, v in times.items()}
  label = {"ours1": "ours, 1 thread", "ours2": "ours, 2 threads", "scipy": "scipy loop",
           "diffrax": "diffrax vmap", "heyoka": "heyoka batch, 1 thread",
           "heyoka-ens": "heyoka ensemble, 2 threads"}

  def err_of(arm, kind, n, tol):
    res = results.get((arm, kind, None if arm == "scipy" else n, tol))
    if arm == "ours1":
      res = results.get(("ours2", kind, n, tol))
    return res

  if worker is not None:
    print("\nthreads of the 1-thread worker (name: count):",
          results[next(k for k in results if k[0] == "ours1")]["threads"])
    print("threads of this process:", pool_threads())
  print("\nCompile times (excluded from every timing):")
  for k, v in compile_s.items():
    print(f"  {k}: {v:.2f} s")
  for kind in kinds:
    for n in sizes:
      print(f"\n### {kind}, N = {n} (time per trajectory, best of {args.rounds} rounds; median "
            "in brackets; error |dr| km: median / max)")
      print("| arm | tol | time/traj | error median | error max | RHS evals or steps/traj | "
            "CPU/wall | notes |")
      print("|---|---|---|---|---|---|---|---|")
      for arm in arms:
        for tol in all_tols:
          key = (arm, kind, None if arm == "scipy" else n, tol)
          if key not in best:
            continue
          res = err_of(arm, kind, n, tol)
          work, notes = "", []
          if arm in ("ours1", "ours2", "scipy"):
            work = f"{np.mean(res['rhs']):.0f} RHS"
          elif arm in ("diffrax", "heyoka"):
            work = f"{np.mean(results[key]['steps']):.0f} steps"
          if arm == "diffrax":
            notes.append(f"lockstep inflation {results[key]['inflation']:.2f}")
          if arm == "ours1":
            r1 = results[key]
            notes.append(f"affinity {r1['affinity']}; same results as 2 threads: "
                         f"{r1['checksum'] == results[('ours2', kind, n, tol)]['checksum']}")
          if arm == "scipy":
            notes.append(f"first {res['n']} trajectories")
            if "vs_ours" in res:
              notes.append(f"vs ours: RHS counts differ on {res['vs_ours'][0]}, max |dr| "
                           f"{res['vs_ours'][1]:.1e} km")
          if not res.get("ok", True):
            notes.append("NOT ALL SUCCEEDED")
          print(f"| {label[arm]} | {tol:g} | {fmt_t(best[key])} ({fmt_t(med[key])}) | "
                f"{np.median(res['err']):.2e} | {res['err'].max():.2e} | {work} | "
                f"{np.median(cpu[key]):.2f} | {'; '.join(notes)} |")
      # Work-precision: every arm's time at ours' achieved median errors.
      base = "ours1" if "ours1" in arms else "ours2"
      print(f"\nwork-precision, {kind}, N = {n}: time/trajectory at {label[base]}'s achieved "
            "median error (log-log interpolation over each arm's tolerances; n/a = outside its "
            "range; scipy: the same tol, the same algorithm and steps as ours); ratio = arm / "
            "ours")
      print("| error (km) | " + " | ".join(label[a] for a in arms) + " |")
      print("|---|" + "---|" * len(arms))
      for tol in tols:
        e = float(np.median(err_of(base, kind, n, tol)["err"]))
        cells = []
        t_ours = best[(base, kind, n, tol)]
        for arm in arms:
          if arm == "scipy":  # the same algorithm: the same error per trajectory at the same tol
            ti = best.get(("scipy", kind, None, tol))
          else:
            pts = [(float(np.median(err_of(arm, kind, n, t)["err"])),
                    best[(arm, kind, n, t)]) for t in all_tols if (arm, kind, n, t) in best]
            ti = interp_time(pts, e)
          cells.append(fmt_t(ti) + ("" if ti is None or arm == base else f" ({ti / t_ours:.3g}x)"))
        print(f"| {e:.2e} | " + " | ".join(cells) + " |")

  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(
          times={repr(k): v for k, v in times.items()}, cpu={repr(k): v for k, v in cpu.items()},
          compile_s={repr(k): v for k, v in compile_s.items()},
          results={repr(k): {f: (v.tolist() if isinstance(v, np.ndarray) else v)
                             for f, v in res.items() if f != "y"}
                   for k, res in results.items()}), f)


if __name__ == "__main__":
  main()
