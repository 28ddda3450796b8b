"""Transit light-curve benchmark (#15): full light curves, times to flux, in one run.

Arms (each evaluates the same light curve at the same times; "per point" = per observation time):
  * jaxext: `jaxext.transit_light_curve` (the public API, jitted; the parameters are traced
    arguments, as in a fit; texp is a Python float), on all cores (XLA's CPU thread pool) and
    pinned to one core (a child process with `os.sched_setaffinity`: XLA sizes its pool at
    start-up);
  * PyTransit 2.10.1's RoadRunner model (`pytransit.RoadRunnerModel('quadratic')`, Numba; its
    defaults nq = 8, ng = 100, and nq = 16, ng = 400, which PyTransit documents as below 1 ppm
    everywhere). Single-threaded by default (nthreads=1); also with nthreads = all cores (Numba's
    parallel loop). Timed is `evaluate()`; `set_data()` (once per data set) is not. The orbit is
    PyTransit's: a Taylor expansion of the sky position around mid-transit (meepmeep). pytransit is
    locked for CPython 3.12 only (its dependency celerite has no wheels for newer Pythons): on other
    Pythons this arm is skipped with the reason printed (run with --config=python3.12 and, as
    tools/bazel's toolchain root has no 3.12, JAXEXT_PYTHON=/path/to/python3.12);
  * jaxoplanet 0.2.0 (pure JAX): `jaxoplanet.light_curves.limb_dark_light_curve` of a
    `keplerian.System` (Central.from_orbital_properties(period, semimajor=a, radius=1), one body
    with period, time_transit, impact_param, radius and, for eccentric orbits, eccentricity and
    omega_peri; default order 40), `transforms.integrate` (order 0, 7 samples) for exposures;
  * batman 2.5.2 (C, OpenMP), what its TransitModel.light_curve computes: `_rsky` (orbit: a
    Newton Kepler solve to |E - e sin E - M| < 1e-7 per time) and `_quadratic_ld` (both built by
    Bazel from the pinned sdist), then the mean over sub-exposures, on 1 thread and on all cores.
    For exposures the times are the same 7 sub-exposure midpoints as every other arm (batman's
    TransitModel itself puts its samples at linspace(-texp/2, texp/2, n), endpoints included).
    batman's C code may print "Convergence failure in ellpic_bulirsch" for some inputs; its errors
    are in the table regardless.

Cases (row groups), period 3 d, t0 = 0.5 d, a = 10, r = 0.1, impact 0.3, u = (0.4, 0.26),
--n times evenly spaced over [t0 - 0.2, t0 + 0.2] d (19-30% of them in transit):
  circular orbit; eccentric orbit (e = 0.3, omega = 1 rad, the window around that transit);
  circular with exposure integration (texp = 0.02 d, 7 sub-exposures at the midpoints
  t + texp ((j + 1/2) / 7 - 1/2), j = 0..6: jaxext's, jaxoplanet's order-0 and RoadRunner's
  convention alike). Value + gradient of sum(flux) w.r.t. (period, t0, a, impact, r, u) for jaxext
  and jaxoplanet in every case. As a check (untimed), their per-time derivatives d flux / d
  (period, t0, a, impact, r, u) at the random reference times are compared with each other.

Timing: --rounds interleaved rounds over all arms (this VM's speed drifts), each arm the best of
--repeats runs after a warm-up call (compilation), best round kept; ns per time; the ratio to
jaxext (all cores) of the same group (value + gradient rows: to jaxext's value + gradient). The
pinned jaxext runs in its own process, with the same rounds, not interleaved with the others.

Accuracy: worst absolute flux error against a high-precision reference at --ref-points of the
times plus t0 and the four contact times: the sky separation at 30 digits (mpmath: Kepler's
equation by findroot, the batman/jaxoplanet geometry), the flux by tests/limbdark_reference.py
(mpmath quadrature at 30 digits; exactly 1 where the disks do not overlap or the planet is behind).
For exposure cases the reference is the mean of the references at the same 7 sub-exposure
midpoints, i.e. the error of the model at that sampling, not of the sampling itself.

The goals of #15 (jaxext >= 2x RoadRunner per core at <= 1e-12 error, >= 20x jaxoplanet, value +
gradient >= 20x jaxoplanet) are printed as measured ratios, met or not.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time

# The pinned child process (see single_core_times) takes its core before jax starts XLA's pool.
if os.environ.get("TRANSIT_BENCH_PIN_CORE"):
  os.sched_setaffinity(0, {int(os.environ.pop("TRANSIT_BENCH_PIN_CORE"))})

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import mpmath as mp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from tests.limbdark_reference import relative_flux_mp  # noqa: E402

PERIOD, T0, A, IMPACT, R = 3.0, 0.5, 10.0, 0.3, 0.1
U = (0.4, 0.26)
HALF_WINDOW = 0.2
OVERSAMPLE = 7
GRAD_NAMES = ("period", "t0", "a", "impact", "r", "u")


class Case:

  def __init__(self, key, title, ecc=0.0, omega=0.0, texp=None):
    self.key, self.title, self.ecc, self.omega, self.texp = key, title, ecc, omega, texp

  @property
  def inclination(self):
    """Radians, from the impact parameter (batman/jaxoplanet convention)."""
    cos_i = IMPACT * (1 + self.ecc * np.sin(self.omega)) / (A * (1 - self.ecc**2))
    return float(np.arccos(cos_i))

  @property
  def offsets(self):
    """Sub-exposure offsets in units of texp (midpoints), or (0,)."""
    if self.texp is None:
      return np.zeros(1)
    return (np.arange(OVERSAMPLE) + 0.5) / OVERSAMPLE - 0.5


CASES = [
    Case("circular", "circular orbit"),
    Case("eccentric", "eccentric orbit (e = 0.3, omega = 1 rad)", ecc=0.3, omega=1.0),
    Case("exposure", f"circular orbit, exposure 0.02 d, {OVERSAMPLE} sub-exposures", texp=0.02),
]


def params(case):
  """The differentiated parameters (traced arguments of the jitted functions)."""
  p = {"period": PERIOD, "t0": T0, "a": A, "impact": IMPACT, "r": R, "u": np.array(U)}
  return {k: jnp.asarray(v) for k, v in p.items()}


def orbit_params(case):
  """ecc and omega of eccentric cases (traced arguments, not differentiated)."""
  if case.ecc == 0:
    return {}
  return {"ecc": jnp.asarray(case.ecc), "omega": jnp.asarray(case.omega)}


# --- arms: each `make(t)` returns a thunk computing the flux at t (or value + gradient) ---------

def jaxext_flux(case):
  def flux(t, p, orbit):
    kw = {} if case.texp is None else {"texp": case.texp, "oversample": OVERSAMPLE}
    return jaxext.transit_light_curve(t, period=p["period"], t0=p["t0"], a=p["a"],
                                      impact=p["impact"], r=p["r"], u=p["u"], **orbit, **kw)
  return flux


def jaxoplanet_flux(case):
  from jaxoplanet.light_curves import limb_dark_light_curve
  from jaxoplanet.light_curves.transforms import integrate
  from jaxoplanet.orbits.keplerian import Central, System

  def flux(t, p, orbit):
    central = Central.from_orbital_properties(period=p["period"], semimajor=p["a"], radius=1.0)
    body = dict(period=p["period"], time_transit=p["t0"], impact_param=p["impact"], radius=p["r"])
    if orbit:
      body.update(eccentricity=orbit["ecc"], omega_peri=orbit["omega"])
    lc = limb_dark_light_curve(System(central).add_body(**body), p["u"])
    if case.texp is not None:
      lc = integrate(lc, exposure_time=case.texp, order=0, num_samples=OVERSAMPLE)
    return 1.0 + lc(t)[..., 0]
  return flux


def jax_arm(flux_fn, case, grad=False):
  p, orbit = params(case), orbit_params(case)
  if grad:
    f = jax.jit(jax.value_and_grad(lambda q, t, o: jnp.sum(flux_fn(t, q, o))))
  else:
    f = jax.jit(flux_fn)

  def make(t):
    tj = jnp.asarray(t)
    if grad:
      return lambda: jax.block_until_ready(f(p, tj, orbit))
    return lambda: jax.block_until_ready(f(tj, p, orbit))
  return make


def jacobian(flux_fn, case, t):
  """d flux(t_i) / d (period, t0, a, impact, r, u) as an (n, 7) array (forward mode)."""
  jac = jax.jit(jax.jacfwd(lambda q, o: flux_fn(jnp.asarray(t), q, o)))(params(case),
                                                                         orbit_params(case))
  return np.concatenate([np.asarray(jac[k]).reshape(len(t), -1) for k in GRAD_NAMES], axis=1)


def roadrunner_arm(case, threads, **model_kw):
  from pytransit import RoadRunnerModel

  def make(t):
    tm = RoadRunnerModel("quadratic", nthreads=threads, **model_kw)
    if case.texp is None:
      tm.set_data(t)
    else:
      tm.set_data(t, nsamples=OVERSAMPLE, exptimes=case.texp)
    ldc = np.array(U)
    inc = case.inclination
    return lambda: np.asarray(tm.evaluate(k=R, ldc=ldc, t0=T0, p=PERIOD, a=A, i=inc, e=case.ecc,
                                          w=case.omega), dtype=np.float64).ravel()
  return make


def load_extension(name, path):
  loader = importlib.machinery.ExtensionFileLoader(name, path)
  spec = importlib.util.spec_from_file_location(name, path, loader=loader)
  module = importlib.util.module_from_spec(spec)
  loader.exec_module(module)
  return module


def batman_arm(case, rsky, qld, threads):
  k = OVERSAMPLE if case.texp is not None else 1
  inc = case.inclination

  def make(t):
    # TransitModel.__init__ builds the supersampled times once; light_curve() does the rest.
    ts = t if k == 1 else np.ascontiguousarray((t[:, None] + case.texp * case.offsets).ravel())

    def run():
      d = rsky._rsky(ts, T0, PERIOD, A, inc, case.ecc, case.omega, 1, threads)
      f = qld._quadratic_ld(d, R, U[0], U[1], threads)
      return f if k == 1 else np.mean(f.reshape(-1, k), axis=1)
    return run
  return make


# --- the reference --------------------------------------------------------------------------

def ref_separation(t, case):
  """(sky separation, planet in front) at the current mpmath precision; t an mpf."""
  period, t0, a, b = (mp.mpf(x) for x in (PERIOD, T0, A, IMPACT))
  e, w = mp.mpf(case.ecc), mp.mpf(case.omega)
  cos_i = b * (1 + e * mp.sin(w)) / (a * (1 - e * e))
  sin_i = mp.sqrt(1 - cos_i * cos_i)
  f_tr = mp.pi / 2 - w  # true anomaly at mid-transit
  e_tr = 2 * mp.atan2(mp.sqrt(1 - e) * mp.sin(f_tr / 2), mp.sqrt(1 + e) * mp.cos(f_tr / 2))
  m = 2 * mp.pi * (t - t0) / period + e_tr - e * mp.sin(e_tr)
  ecc_anom = m if e == 0 else mp.findroot(lambda x: x - e * mp.sin(x) - m, m)
  denom = 1 - e * mp.cos(ecc_anom)
  cos_f = (mp.cos(ecc_anom) - e) / denom
  sin_f = mp.sqrt(1 - e * e) * mp.sin(ecc_anom) / denom
  dist = a * denom
  sin_wf = mp.sin(w) * cos_f + mp.cos(w) * sin_f
  cos_wf = mp.cos(w) * cos_f - mp.sin(w) * sin_f
  return dist * mp.sqrt(cos_wf**2 + (sin_wf * cos_i)**2), sin_wf * sin_i > 0


def ref_flux_point(t, case):
  with mp.workdps(30):
    sep, front = ref_separation(mp.mpf(float(t)), case)
    if not front or sep >= 1 + mp.mpf(R):
      return mp.mpf(1)
    return relative_flux_mp(sep, R, U)


def ref_flux(t, case):
  """The reference at each time (the mean over the sub-exposure midpoints for exposure cases)."""
  out = []
  for tt in t:
    sub = [ref_flux_point(float(tt + case.texp * o) if case.texp else tt, case)
           for o in case.offsets]
    with mp.workdps(30):
      out.append(float(mp.fsum(sub) / len(sub)))
  return np.array(out)


def contact_times(case):
  """Mid-transit and the four contact times (separation 1 +- r), to double precision."""
  grid = np.linspace(T0 - HALF_WINDOW, T0 + HALF_WINDOW, 401)
  with mp.workdps(20):
    sep = np.array([float(ref_separation(mp.mpf(float(x)), case)[0]) for x in grid])
  out = [T0]
  for level in (1 + R, 1 - R):
    for i in np.nonzero(np.diff(np.sign(sep - level)))[0]:
      with mp.workdps(30):
        root = mp.findroot(lambda x: ref_separation(x, case)[0] - level,
                           (mp.mpf(float(grid[i])), mp.mpf(float(grid[i + 1]))),
                           solver="anderson")
      out.append(float(root))
  return np.array(sorted(out))


# --- timing ---------------------------------------------------------------------------------

def best_time(f, repeats):
  f()
  best = np.inf
  for _ in range(repeats):
    start = time.perf_counter()
    f()
    best = min(best, time.perf_counter() - start)
  return best


def interleaved(thunks, rounds, repeats):
  best = [np.inf] * len(thunks)
  for _ in range(rounds):
    for i, f in enumerate(thunks):
      best[i] = min(best[i], best_time(f, repeats))
  return best


def times(n):
  return np.linspace(T0 - HALF_WINDOW, T0 + HALF_WINDOW, n)


def jaxext_rows(case):
  """The jaxext rows (also what the pinned child process times)."""
  return [("jaxext", jax_arm(jaxext_flux(case), case), "value"),
          ("jaxext value + grad", jax_arm(jaxext_flux(case), case, grad=True), "grad")]


def single_core_main(args):
  t = times(args.n)
  keys, thunks = [], []
  for case in CASES:
    for name, make, _ in jaxext_rows(case):
      keys.append(f"{case.key}/{name}")
      thunks.append(make(t))
  best = interleaved(thunks, args.rounds, args.repeats)
  print(json.dumps(dict(zip(keys, best))), flush=True)


def single_core_times(args):
  """jaxext pinned to one core, in a child process; {case/name: seconds} or None."""
  if not hasattr(os, "sched_setaffinity"):
    return None, "os.sched_setaffinity is not available"
  cmd = [sys.executable, os.path.abspath(__file__), "--single-core", "--n", str(args.n),
         "--repeats", str(args.repeats), "--rounds", str(args.rounds), "--cases", args.cases]
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
             TRANSIT_BENCH_PIN_CORE=str(min(os.sched_getaffinity(0))))
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
  if proc.returncode != 0:
    return None, "pinned run failed:\n" + proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1]), None


def machine_line(n):
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  import importlib.metadata as md
  versions = []
  for pkg in ("jax", "jaxlib", "numpy", "jaxoplanet", "pytransit", "numba"):
    try:
      versions.append(f"{pkg} {md.version(pkg)}")
    except md.PackageNotFoundError:
      pass
  return (f"machine: {cpu}, {cores} cores; Python {platform.python_version()}; "
          f"{', '.join(versions)}; backend {jax.default_backend()}; {n} times per light curve")


def main():
  global CASES
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--n", type=int, default=100_000, help="times per light curve")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--ref-points", type=int, default=200)
  parser.add_argument("--batman-rsky", help="path to batman's _rsky extension")
  parser.add_argument("--batman-ld", help="path to batman's _quadratic_ld extension")
  parser.add_argument("--cases", default=",".join(c.key for c in CASES))
  parser.add_argument("--json", help="also write the results to this file (under `bazel run`, a "
                      "relative path is taken from the workspace root)")
  parser.add_argument("--single-core", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  unknown = set(args.cases.split(",")) - {c.key for c in CASES}
  if unknown:
    parser.error(f"unknown cases {sorted(unknown)}")
  CASES = [c for c in CASES if c.key in args.cases.split(",")]
  if args.single_core:
    single_core_main(args)
    return
  threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  print(machine_line(args.n), flush=True)
  skipped = []

  bat = None
  if args.batman_rsky and args.batman_ld:
    try:
      bat = (load_extension("_rsky", args.batman_rsky),
             load_extension("_quadratic_ld", args.batman_ld))
    except (ImportError, OSError) as e:
      skipped.append(f"batman: {e}")
  else:
    skipped.append("batman: --batman-rsky and --batman-ld not given")
  try:
    import pytransit  # noqa: F401
    have_rr = True
  except ImportError as e:
    have_rr = False
    skipped.append(f"PyTransit RoadRunner: not installed for Python {platform.python_version()} "
                   f"({e}); pytransit is locked for CPython 3.12 only (its dependency celerite has "
                   "no newer wheels): `JAXEXT_PYTHON=/path/to/python3.12 tools/bazel run "
                   "--config=python3.12 //benchmarks:transit`")
  try:
    import jaxoplanet  # noqa: F401
    have_jo = True
  except ImportError as e:
    have_jo = False
    skipped.append(f"jaxoplanet: {e}")
  for s in skipped:
    print(f"skipped: {s}")

  t = times(args.n)
  rng = np.random.default_rng(0)
  groups = {}
  for case in CASES:
    rows = []  # (name, make, kind)
    rows += jaxext_rows(case)[:1]
    if have_rr:
      rows.append(("RoadRunner (1 thread)", roadrunner_arm(case, 1), "value"))
      if threads > 1:
        rows.append((f"RoadRunner ({threads} threads)", roadrunner_arm(case, threads), "value"))
      rows.append(("RoadRunner nq=16 ng=400 (1 thread)",
                   roadrunner_arm(case, 1, nq=16, ng=400), "value"))
    if have_jo:
      rows.append(("jaxoplanet", jax_arm(jaxoplanet_flux(case), case), "value"))
    if bat is not None:
      rows.append(("batman (1 thread)", batman_arm(case, *bat, 1), "value"))
      if threads > 1:
        rows.append((f"batman ({threads} threads)", batman_arm(case, *bat, threads), "value"))
    rows += jaxext_rows(case)[1:]
    if have_jo:
      rows.append(("jaxoplanet value + grad", jax_arm(jaxoplanet_flux(case), case, grad=True),
                   "grad"))

    # Accuracy on a subsample plus the special times, against the reference.
    special = contact_times(case)
    t_ref = np.concatenate([np.sort(rng.choice(t, args.ref_points, replace=False)), special])
    print(f"[{case.key}] reference at {len(t_ref)} times ({len(special)} special: t0 and "
          f"contacts) ...", flush=True)
    start = time.perf_counter()
    want = ref_flux(t_ref, case)
    print(f"[{case.key}] reference done in {time.perf_counter() - start:.0f} s; "
          f"{np.mean(want < 1):.0%} of the subsample in transit", flush=True)
    errors = {}
    for name, make, kind in rows:
      if kind == "value":
        errors[name] = float(np.max(np.abs(np.asarray(make(t_ref)()) - want)))
    # The gradients of jaxext and jaxoplanet against each other, per time, at the random reference
    # times (not at the contact points, where the derivatives are (near-)discontinuous).
    jac_check = None
    if have_jo:
      ja = jacobian(jaxext_flux(case), case, t_ref[:args.ref_points])
      jb = jacobian(jaxoplanet_flux(case), case, t_ref[:args.ref_points])
      names = [n for n in GRAD_NAMES if n != "u"] + ["u1", "u2"]
      worst = np.max(np.abs(ja - jb), axis=0) / np.max(np.abs(jb), axis=0)
      jac_check = (names[int(np.argmax(worst))], float(np.max(worst)))
    groups[case.key] = dict(case=case, rows=rows, errors=errors, jac_check=jac_check,
                            thunks=[make(t) for _, make, _ in rows])

  print(f"timing: {args.rounds} interleaved rounds, best of {args.repeats} runs each ...",
        flush=True)
  flat = [th for g in groups.values() for th in g["thunks"]]
  best = interleaved(flat, args.rounds, args.repeats)
  i = 0
  for g in groups.values():
    g["best"] = dict(zip([r[0] for r in g["rows"]], best[i:i + len(g["rows"])]))
    i += len(g["rows"])
  pinned, why = single_core_times(args)
  if pinned is None:
    print(f"jaxext pinned to one core: not measured ({why})")

  results = {"machine": machine_line(args.n), "n": args.n, "groups": {}}
  for key, g in groups.items():
    case, b = g["case"], g["best"]
    in_transit = float(np.mean(np.asarray(g["thunks"][0]()) < 1))
    print(f"\n== {case.title}: {args.n} times over t0 +- {HALF_WINDOW} d "
          f"({in_transit:.0%} in transit)")
    print(f"{'implementation':38s} {'ns/time':>10s} {'time/jaxext':>11s} {'max |error|':>12s}")
    # (label, seconds, the jaxext row it is compared with, error)
    entries = [(f"jaxext ({threads} cores)", b["jaxext"], "jaxext", g["errors"]["jaxext"])]
    if pinned is not None:
      entries.append(("jaxext (1 core)", pinned[f"{key}/jaxext"], "jaxext", g["errors"]["jaxext"]))
    entries += [(n, b[n], "jaxext", g["errors"][n]) for n, _, k in g["rows"]
                if k == "value" and n != "jaxext"]
    base = "jaxext value + grad"
    entries.append((f"jaxext value + grad ({threads} cores)", b[base], base, None))
    if pinned is not None:
      entries.append(("jaxext value + grad (1 core)", pinned[f"{key}/{base}"], base, None))
    entries += [(n, b[n], base, None) for n, _, k in g["rows"] if k == "grad" and n != base]
    table = []
    for label, sec, ref, err in entries:
      ns = sec / args.n * 1e9
      e = "" if err is None else f"{err:12.1e}"
      print(f"{label:38s} {ns:10.2f} {sec / b[ref]:10.2f}x {e}")
      table.append({"name": label, "ns_per_time": ns, "vs_jaxext": sec / b[ref],
                    "max_abs_error": err})
    if g["jac_check"] is not None:
      name, worst = g["jac_check"]
      print(f"gradient check, jaxext vs jaxoplanet: d flux / d (period, t0, a, impact, r, u1, "
            f"u2) at the {args.ref_points} random reference times, worst max|difference| / "
            f"max|jaxoplanet| {worst:.1e} ({name})")
    results["groups"][key] = {"title": case.title, "in_transit": in_transit, "rows": table,
                              "gradient_check": g["jac_check"]}

  print("\ngoals of #15 (measured ratios; 'jaxext' is the public API as built now):")
  for key, g in groups.items():
    b, err = g["best"], g["errors"]
    jx_err = err["jaxext"]
    lines = []
    if pinned is not None and "RoadRunner (1 thread)" in b:
      ratio = b["RoadRunner (1 thread)"] / pinned[f"{key}/jaxext"]
      ok = ratio >= 2 and jx_err <= 1e-12
      lines.append(f"jaxext 1 core vs RoadRunner 1 thread: speed-up {ratio:.2f}x, jaxext error "
                   f"{jx_err:.1e} (RoadRunner {err['RoadRunner (1 thread)']:.1e}); goal >= 2x at "
                   f"<= 1e-12: {'met' if ok else 'NOT met'}")
    else:
      lines.append("jaxext 1 core vs RoadRunner: not measured (see skipped/pinned above)")
    if "jaxoplanet" in b:
      ratio = b["jaxoplanet"] / b["jaxext"]
      lines.append(f"jaxext vs jaxoplanet ({threads} cores each): speed-up {ratio:.2f}x; goal >= "
                   f"20x: {'met' if ratio >= 20 else 'NOT met'}")
      ratio = b["jaxoplanet value + grad"] / b["jaxext value + grad"]
      lines.append(f"value + grad, jaxext vs jaxoplanet: speed-up {ratio:.2f}x; goal >= 20x: "
                   f"{'met' if ratio >= 20 else 'NOT met'}")
    print(f"[{key}]")
    for line in lines:
      print("  " + line)
    results["groups"][key]["goals"] = lines
  if args.json:
    path = args.json
    if not os.path.isabs(path) and os.environ.get("BUILD_WORKSPACE_DIRECTORY"):
      path = os.path.join(os.environ["BUILD_WORKSPACE_DIRECTORY"], path)
    with open(path, "w") as f:
      json.dump(results, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
  main()
