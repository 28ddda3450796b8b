"""A/B of two builds of jaxext's CPU FFI handlers: the same workloads on each, interleaved.

    tools/bazel run //benchmarks:handlers_ab -- --a /abs/gcc.so --b /abs/zig.so
        [--labels gcc,zig --rounds 5 --families kepler,limbdark,transit,numba,ode,equivariant
         --threads 2 --repeats-scale 1 --json /abs/out.json]
    python benchmarks/handlers_ab.py --a /tmp/ab/gcc.so --b /tmp/ab/zig.so   # jaxext importable

Both builds are `ffi_handler_library` shared objects (the CPU handlers without Python), loaded by
jaxext in place of its extension module's through `JAXEXT_HANDLER_LIBRARIES=cpu=<lib>` (see
jaxext/_ffi.py). Under `bazel run` through tools/bazel's toolchain root, only the checkout and
Bazel's output root (~/.cache/jaxext/bazel) are visible at their own paths (/tmp is the root's):
put the libraries there; relative paths are taken from the workspace root.

Each round runs one child process per library (this script with --child and the variable set),
alternating the order (A, B; then B, A; ...) so that a drifting machine favours neither. A child
builds a fixed set of workloads through jaxext's public API, each under jax.jit, calls each once
to compile and warm it, then times it: best of k calls (block_until_ready), k fixed per workload
(times --repeats-scale). It also reports a checksum per workload (the sum of |x| over every
output, in float64) and which handler library it registered. The parent prints, per workload, the
best and the median over the rounds of each build's time, the ratios B/A of both (flagged above
1.05), the geometric mean of the ratios per op family, and whether the checksums of A and B agree
to 1e-9 relative (float64 workloads) or 1e-4 (float32): compilers may round differently, so a
difference is reported, not fatal.

Workloads (sizes and inputs from the benchmarks of each family; "extra" marks cases the benchmark
itself does not time, added so that every handler of the family runs):
* kepler: jaxext.kepler on 1e6 float64 and float32 elements (kepler_bench.py: M uniform in
  [-10, 10], e uniform in [0, 1]). kepler_bench times no gradient (the JVP is implicit
  differentiation in JAX, no handler of its own).
* limbdark: the quadratic law (u = 0.4, 0.26, r = 0.1) at 1e6 points, b uniform in [0, 1.2]
  (limbdark_bench.py): float64 value, float64 value + grad (b, u), float32 value, float64 on the
  sorted light curve b = sqrt(0.09 + x^2); extra: float32 value + grad, and the quartic law of
  limbdark_bench's accuracy table (0.3, 0.2, -0.1, 0.05) in float64.
* transit: jaxext.transit_light_curve as transit_bench.py's jaxext rows: 1e5 times over t0 +- 0.2
  d, circular, eccentric (e = 0.3, omega = 1) and exposure (texp = 0.02 d, 7 sub-exposures) cases,
  value and value + grad w.r.t. (period, t0, a, impact, r, u), parameters traced. These light
  curves are long enough (>= 4096 sub-exposures) for the CPU's flux-series path; extra: 64 short
  light curves of 2000 times (the exact occultation per point), and the circular value in float32.
* numba: numba_bench.py's axpy kernel (jaxext.numba_kernel, vmap="elementwise"): inside a
  lax.fori_loop of 1000 iterations on 16 and 1024 float64 elements (the handler's per-call
  dispatch), and one call on 1e7 elements.
* ode: jaxext.ode.dop853 as ode_bench.py's "ours" on its LEO set (two-body + J2 + drag, the
  single-band atmosphere, 0 to 86400 s, rtol = atol = tol), N = 100 and 1000, tol 1e-6, 1e-9 and
  1e-12; extra (ode_bench has neither): the sensitivities as in RESULTS.md's "Sensitivities in
  lanes too" (jax.jvp of y_final w.r.t. (y0, B), LEO, N = 200, tol 1e-9), and a Python (Numba)
  right-hand side, van der Pol (tools/gpu_checks.py's; N = 1000, mu in [0.1, 3], 0 to 10, tol
  1e-10).
* equivariant: equivariant_bench.py's layer at N = 300 nodes, E = 6000 edges (its default is
  1000 and 30000), random weights, float64 and float32: the fused arm (spherical_harmonics +
  conv) forward and forward + backward (value_and_grad of sum(out^2) w.r.t. positions and
  weights), the unfused arm (tensor_product + segment_sum) forward + backward; extra: gather +
  segment_sum, value_and_grad w.r.t. x; the tensor product alone on E gathered rows (forward,
  vjp w.r.t. x) and spherical_harmonics alone (l <= 3, 200000 vectors), whose own differences
  the layer's time hides.

Every workload's k is fixed (the same for A and B) and sized for ~0.2-0.4 s of timed calls per
child on a 2-core AVX-512 VM: one round of every family, two children of ~20 s each (compilation
included), takes ~40 s there; --repeats-scale 2 doubles the timed part.
"""

import argparse
import datetime
import gc
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

FAMILIES = ("kepler", "limbdark", "transit", "numba", "ode", "equivariant")
RATIO_LIMIT = 1.05
CHECK_TOL = {"float64": 1e-9, "float32": 1e-4}


# --- the child: workloads --------------------------------------------------------------------

class Workload:
  """A jitted call to time: `fn()` returns its (pytree) output."""

  def __init__(self, name, fn, repeats, dtype="float64"):
    self.name, self.fn, self.repeats, self.dtype = name, fn, repeats, dtype


def kepler_workloads(n=1_000_000):
  """kepler_bench.py's inputs (the same draws, in its order)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import jaxext
  rng = np.random.default_rng(0)
  f = jax.jit(jaxext.kepler)
  for dtype in ("float64", "float32"):
    m = jnp.asarray(rng.uniform(-10, 10, n).astype(dtype))
    e = jnp.asarray(rng.uniform(0, 1, n).astype(dtype))
    yield Workload(f"kepler/{dtype} n=1e6", lambda m=m, e=e: f(m, e),
                   30 if dtype == "float64" else 50, dtype)


def limbdark_workloads(n=1_000_000):
  """limbdark_bench.py's timed jaxext cases."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import jaxext
  r = 0.1
  rng = np.random.default_rng(0)
  b = rng.uniform(0.0, 1.2, n)
  x = np.linspace(-3.0, 3.0, n)
  bj, blc = jnp.asarray(b), jnp.asarray(np.sqrt(0.09 + x * x))
  b32 = jnp.asarray(b, jnp.float32)
  u = jnp.array([0.4, 0.26])
  u32 = u.astype(jnp.float32)
  u4 = jnp.array([0.3, 0.2, -0.1, 0.05])
  value = jax.jit(lambda bb, uu: jaxext.limb_dark_flux(bb, r, uu))
  value32 = jax.jit(lambda bb, uu: jaxext.limb_dark_flux(bb, np.float32(r), uu))
  grad = jax.jit(jax.value_and_grad(lambda bb, uu: jnp.sum(jaxext.limb_dark_flux(bb, r, uu)),
                                    argnums=(0, 1)))
  grad32 = jax.jit(jax.value_and_grad(
      lambda bb, uu: jnp.sum(jaxext.limb_dark_flux(bb, np.float32(r), uu)), argnums=(0, 1)))
  yield Workload("limbdark/quadratic float64 value", lambda: value(bj, u), 25)
  yield Workload("limbdark/quadratic float64 value+grad", lambda: grad(bj, u), 20)
  yield Workload("limbdark/quadratic float32 value", lambda: value32(b32, u32), 25, "float32")
  yield Workload("limbdark/quadratic float64 light curve", lambda: value(blc, u), 60)
  yield Workload("limbdark/quadratic float32 value+grad (extra)", lambda: grad32(b32, u32), 20,
                 "float32")
  yield Workload("limbdark/quartic float64 value (extra)", lambda: value(bj, u4), 7)


def transit_workloads(n=100_000):
  """transit_bench.py's jaxext rows (jaxext_flux, jax_arm), its three cases."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import jaxext
  period, t0, a, impact, r, u = 3.0, 0.5, 10.0, 0.3, 0.1, (0.4, 0.26)
  t = jnp.asarray(np.linspace(t0 - 0.2, t0 + 0.2, n))
  p = {k: jnp.asarray(v) for k, v in dict(period=period, t0=t0, a=a, impact=impact, r=r,
                                           u=np.array(u)).items()}
  cases = [("circular", {}, {}),
           ("eccentric", {"ecc": jnp.asarray(0.3), "omega": jnp.asarray(1.0)}, {}),
           ("exposure", {}, {"texp": 0.02, "oversample": 7})]

  def flux_fn(kw):
    return lambda tt, q, orbit: jaxext.transit_light_curve(
        tt, period=q["period"], t0=q["t0"], a=q["a"], impact=q["impact"], r=q["r"], u=q["u"],
        **orbit, **kw)

  for key, orbit, kw in cases:
    flux = flux_fn(kw)
    value = jax.jit(flux)
    grad = jax.jit(jax.value_and_grad(lambda q, tt, o, flux=flux: jnp.sum(flux(tt, q, o))))
    slow = key == "exposure"  # ~5x (value) and ~7x (value + grad) the others' time
    yield Workload(f"transit/{key} value", lambda v=value, o=orbit: v(t, p, o),
                   300 if slow else 1000)
    yield Workload(f"transit/{key} value+grad", lambda g=grad, o=orbit: g(p, t, o),
                   40 if slow else 200)
  # 64 light curves (t0 per curve) of 2000 times: under 4096 each, the exact occultation.
  t_short = jnp.asarray(np.linspace(t0 - 0.2, t0 + 0.2, 2000))
  p_short = dict(p, t0=jnp.asarray(t0 + np.linspace(-0.01, 0.01, 64)[:, None]))
  value = jax.jit(flux_fn({}))
  yield Workload("transit/64 short curves x 2000 value (extra)",
                 lambda: value(t_short, p_short, {}), 500)
  t32 = t.astype(jnp.float32)
  p32 = {k: v.astype(jnp.float32) for k, v in p.items()}
  yield Workload("transit/circular float32 value (extra)", lambda: value(t32, p32, {}), 1000,
                 "float32")


def _axpy_py(x, y, out, alpha):
  for i in range(x.shape[0]):
    out[i] = alpha * x[i] + y[i]


def numba_workloads(iters=1000, big=10_000_000):
  """numba_bench.py's jaxext.numba_kernel arm: the fori_loop per-call figure and the throughput."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import jaxext
  axpy = jaxext.numba_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
                             vmap="elementwise")(_axpy_py)
  call = lambda x, y: axpy(x, y, alpha=0.5)
  loop = jax.jit(lambda x: jax.lax.fori_loop(0, iters, lambda i, y: call(y, x), x))
  for n in (16, 1024):
    x = jnp.linspace(0.0, 1.0, n)
    yield Workload(f"numba/fori_loop {iters} calls n={n}", lambda x=x: loop(x),
                   800 if n == 16 else 400)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=big))
  y = jnp.asarray(rng.normal(size=big))
  one = jax.jit(call)
  yield Workload("numba/axpy n=1e7", lambda: one(x, y), 10)


def _van_der_pol(t, y, p, dydt):
  dydt[0] = y[1]
  dydt[1] = p[0] * (1 - y[0] * y[0]) * y[1] - y[0]


def ode_workloads(t_end=86400.0):
  """ode_bench.py's "ours" (ours_compiled) on its LEO set; then the two extras."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jaxext import ode
  try:  # its trajectories and atmosphere, not copies
    from benchmarks import ode_bench  # under Bazel (the workspace root on sys.path)
  except ImportError:
    import ode_bench  # run as a script (its directory on sys.path)
  model = ode.models.earth(j2=True, drag=True, atmosphere=ode_bench.SINGLE_BAND)
  y, b, _ = ode_bench.make_set("leo", 1000)  # nested sets: N = 100 is the first 100 of these

  def run(tol):
    return jax.jit(lambda y0, p: (lambda s: (s.y_final, s.status, s.n_steps, s.n_rhs))(
        ode.dop853(model, y0, (0.0, t_end), p, rtol=tol, atol=tol, max_steps=10**6)))

  repeats = {(100, 1e-6): 150, (100, 1e-9): 70, (100, 1e-12): 30, (1000, 1e-6): 20,
             (1000, 1e-9): 10, (1000, 1e-12): 5}
  for n in (100, 1000):
    y0, p = jnp.asarray(y[:n]), jnp.asarray(b[:n, None])
    for tol in (1e-6, 1e-9, 1e-12):
      f = run(tol)
      yield Workload(f"ode/leo N={n} tol {tol:g}", lambda f=f, y0=y0, p=p: f(y0, p),
                     repeats[(n, tol)])
  # Sensitivities: jvp of y_final w.r.t. (y0, B), which integrates the whole 6 x 7 matrix.
  n, tol = 200, 1e-9
  y0, p = jnp.asarray(y[:n]), jnp.asarray(b[:n, None])
  rng = np.random.default_rng(1)
  dy, dp = jnp.asarray(rng.normal(size=(n, 6)) * 1e-3), jnp.asarray(rng.normal(size=(n, 1)) * 1e-3)
  jvp = jax.jit(lambda y0, p, dy, dp: jax.jvp(
      lambda yy, pp: ode.dop853(model, yy, (0.0, t_end), pp, rtol=tol, atol=tol).y_final,
      (y0, p), (dy, dp)))
  yield Workload(f"ode/leo jvp (sensitivities) N={n} tol 1e-9 (extra)",
                 lambda: jvp(y0, p, dy, dp), 7)
  # A Python right-hand side (Numba cfunc called by the handler).
  n = 1000
  rng = np.random.default_rng(0)
  y0 = jnp.asarray(np.stack([rng.uniform(-2, 2, n), rng.uniform(-1, 1, n)], axis=1))
  mu = jnp.asarray(rng.uniform(0.1, 3.0, (n, 1)))
  rhs = ode.rhs(_van_der_pol, name="van_der_pol")
  vdp = jax.jit(lambda y0, p: (lambda s: (s.y_final, s.status, s.n_rhs))(
      ode.dop853(rhs, y0, (0.0, 10.0), p, rtol=1e-10, atol=1e-10)))
  yield Workload(f"ode/van der Pol (Python rhs) N={n} tol 1e-10 (extra)", lambda: vdp(y0, mu), 30)


def equivariant_workloads(nodes=300, edges=6000):
  """equivariant_bench.py's layer (make_problem, layer, job_fn), random weights, smaller."""
  import importlib
  import jax
  import jax.numpy as jnp
  import numpy as np
  import jaxext.equivariant as eq
  from jaxext.equivariant import _irreps
  tp = importlib.import_module("jaxext.equivariant.tensor_product")
  irreps_x, irreps_sh, irreps_out = "64x0e+64x1o+64x2e", "0e+1o+2e+3o", "64x0e+64x1o+64x2e"
  spec = tp._spec(*(_irreps.parse(i, w) for i, w in ((irreps_x, "x"), (irreps_sh, "sh"),
                                                       (irreps_out, "out"))))
  rng = np.random.default_rng(0)
  snd = rng.integers(nodes, size=edges)
  rcv = (snd + rng.integers(1, nodes, size=edges)) % nodes
  pos = rng.normal(size=(nodes, 3))
  x = rng.normal(size=(nodes, _irreps.dim(_irreps.parse(irreps_x, "x"))))
  wp = rng.normal(size=(edges, spec.dims[2]))
  snd, rcv = jnp.asarray(snd.astype(np.int32)), jnp.asarray(rcv.astype(np.int32))

  def layer(arm):
    def f(pos, w, x):
      vec = pos[rcv] - pos[snd]
      y = eq.spherical_harmonics(irreps_sh, vec)
      if arm == "fused":
        return eq.conv(x, y, w, snd, rcv, nodes, irreps_x, irreps_sh, irreps_out)
      m = eq.tensor_product(x[snd], y, w, irreps_x, irreps_sh, irreps_out)
      return eq.segment_sum(m, rcv, nodes)
    return f

  def fwd_bwd(f):
    return jax.value_and_grad(lambda pos, w, x: jnp.sum(f(pos, w, x) ** 2), argnums=(0, 1))

  # Extra: each handler alone (in the layer above, the tensor product's share and the spherical
  # harmonics' are small enough to hide a 1.3-1.6x difference of their own): the tensor product
  # on gathered rows, forward and the vjp w.r.t. x; the harmonics of 200000 vectors, l <= 3.
  tp_fwd = jax.jit(lambda xs, y, w: eq.tensor_product(xs, y, w, irreps_x, irreps_sh, irreps_out))
  tp_vjp_x = jax.jit(lambda xs, y, w, ct: jax.vjp(lambda xs: eq.tensor_product(
      xs, y, w, irreps_x, irreps_sh, irreps_out), xs)[1](ct)[0])
  sph = jax.jit(lambda v: eq.spherical_harmonics(irreps_sh, v, normalize=False))
  xs_np = rng.normal(size=(edges, x.shape[1]))
  ct_np = rng.normal(size=(edges, spec.dims[3]))
  vec_np = rng.normal(size=(200000, 3))
  ys_np = rng.normal(size=(edges, 3))
  gather_sum = jax.jit(jax.value_and_grad(
      lambda x: jnp.sum(eq.segment_sum(eq.gather(x, snd), rcv, nodes) ** 2)))
  fused, fused_fb = jax.jit(layer("fused")), jax.jit(fwd_bwd(layer("fused")))
  unfused_fb = jax.jit(fwd_bwd(layer("unfused")))
  for dtype in ("float64", "float32"):
    args = tuple(jnp.asarray(v, dtype) for v in (pos, wp, x))
    size = f"N={nodes} E={edges}"
    k = 1 if dtype == "float64" else 2  # float32 runs in ~half the time
    yield Workload(f"equivariant/fused fwd {dtype} {size}", lambda a=args: fused(*a), 40 * k,
                   dtype)
    yield Workload(f"equivariant/fused fwd+bwd {dtype} {size}", lambda a=args: fused_fb(*a),
                   10 * k, dtype)
    yield Workload(f"equivariant/unfused fwd+bwd {dtype} {size}",
                   lambda a=args: unfused_fb(*a), 7 * k, dtype)
    yield Workload(f"equivariant/gather+segment_sum value+grad {dtype} (extra)",
                   lambda a=args: gather_sum(a[2]), 50 * k, dtype)
    xs, ct, vec = (jnp.asarray(v, dtype) for v in (xs_np, ct_np, vec_np))
    ys = sph(jnp.asarray(ys_np, dtype))
    yield Workload(f"equivariant/tensor_product fwd {dtype} E={edges} (extra)",
                   lambda a=args, xs=xs, ys=ys: tp_fwd(xs, ys, a[1]), 20 * k, dtype)
    yield Workload(f"equivariant/tensor_product vjp x {dtype} E={edges} (extra)",
                   lambda a=args, xs=xs, ys=ys, ct=ct: tp_vjp_x(xs, ys, a[1], ct), 20 * k, dtype)
    yield Workload(f"equivariant/spherical_harmonics l<=3 {dtype} N=200000 (extra)",
                   lambda vec=vec: sph(vec), 20 * k, dtype)


BUILDERS = {"kepler": kepler_workloads, "limbdark": limbdark_workloads,
            "transit": transit_workloads, "numba": numba_workloads, "ode": ode_workloads,
            "equivariant": equivariant_workloads}


def pool_threads():
  """XLA's intra-op pool threads of this process (named tf_XLAEigen)."""
  count = 0
  for tid in os.listdir("/proc/self/task"):
    try:
      with open(f"/proc/self/task/{tid}/comm") as f:
        count += f.read().strip() == "tf_XLAEigen"
    except OSError:
      pass
  return count


def child_main(args):
  import jax
  import numpy as np
  jax.config.update("jax_enable_x64", True)
  import jaxext
  from jaxext import _ffi

  lib = _ffi._libraries.get("cpu")
  times, checksums, dtypes, first = {}, {}, {}, {}
  for family in args.families.split(","):
    for w in BUILDERS[family]():
      t = time.perf_counter()
      out = jax.block_until_ready(w.fn())  # compile and warm
      first[w.name] = time.perf_counter() - t
      checksums[w.name] = float(sum(np.sum(np.abs(np.asarray(leaf, np.float64)))
                                    for leaf in jax.tree.leaves(out)))
      del out
      gc.collect()
      best = math.inf
      for _ in range(max(1, round(w.repeats * args.repeats_scale))):
        t = time.perf_counter()
        jax.block_until_ready(w.fn())
        best = min(best, time.perf_counter() - t)
      times[w.name], dtypes[w.name] = best, w.dtype
    gc.collect()
  import importlib.metadata as md
  versions = {}
  for pkg in ("jax", "jaxlib", "numpy", "numba"):
    try:
      versions[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
      pass
  meta = dict(handler_library=None if lib is None else lib._name,
              extension_module_loaded="jaxext.cpu._cpu_ops" in sys.modules,
              jaxext=jaxext.__version__, versions=versions, python=platform.python_version(),
              xla_pool_threads=pool_threads(), affinity=sorted(os.sched_getaffinity(0)))
  print("@@" + json.dumps(dict(times=times, checksums=checksums, dtypes=dtypes, first_call=first,
                               meta=meta)), flush=True)


# --- the parent ------------------------------------------------------------------------------

def machine():
  """The CPU model and its AVX flags (lscpu's, else /proc/cpuinfo's), CPUs, load average."""
  fields = {}
  try:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
      key, _, value = line.partition(":")
      fields.setdefault({"Model name": "model", "Flags": "flags"}.get(key.strip()), value.strip())
  except OSError:  # the toolchain root of `bazel run` has no lscpu
    pass
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        fields.setdefault({"model name": "model", "flags": "flags"}.get(key.strip()), value.strip())
  except OSError:
    pass
  flags = set(fields.get("flags", "").split())
  return dict(model=fields.get("model") or platform.processor() or platform.machine(),
              avx512f="avx512f" in flags, avx2="avx2" in flags, cpus=os.cpu_count(),
              allowed=sorted(os.sched_getaffinity(0)), load_average=os.getloadavg()[0],
              date=datetime.datetime.now().isoformat("T", "seconds"))


def workspace_path(path):
  """A relative path from the workspace root under `bazel run` (which runs in the runfiles)."""
  root = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
  if not os.path.isabs(path) and root:
    path = os.path.join(root, path)
  return os.path.abspath(path)


def library_info(path):
  with open(path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
  return dict(path=path, bytes=os.path.getsize(path), sha256=digest)


def run_child(args, lib, cpus):
  cmd = [sys.executable, os.path.abspath(__file__), "--child", "--families", args.families,
         "--repeats-scale", str(args.repeats_scale)]
  env = dict(os.environ, JAXEXT_HANDLER_LIBRARIES=f"cpu={lib}",
             PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
  pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
  t = time.perf_counter()
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pin)
  wall = time.perf_counter() - t
  for line in reversed(proc.stdout.splitlines()):
    if line.startswith("@@"):
      rep = json.loads(line[2:])
      rep["wall_s"] = wall
      return rep
  sys.exit(f"child with {lib} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n"
           f"{proc.stderr[-5000:]}")


def fmt_t(s):
  for unit, f in (("s", 1), ("ms", 1e3), ("µs", 1e6)):
    if s * f >= 1:
      return f"{s * f:.4g} {unit}"
  return f"{s * 1e9:.4g} ns"


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                              epilog="see the module docstring for the workloads")
  p.add_argument("--a", help="the baseline handler library (A)")
  p.add_argument("--b", help="the candidate handler library (B)")
  p.add_argument("--labels", default="gcc,zig", help="names of A and B")
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--families", default=",".join(FAMILIES))
  p.add_argument("--threads", type=int, help="pin each child to this many CPUs (the first allowed"
                 " ones) before jax starts: XLA sizes its pool from them (default: all allowed)")
  p.add_argument("--repeats-scale", type=float, default=1.0,
                 help="multiply every workload's timed calls per child by this")
  p.add_argument("--json", help="also write the results here (relative: from the workspace root)")
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args()
  unknown = set(args.families.split(",")) - set(FAMILIES)
  if unknown:
    p.error(f"unknown families {sorted(unknown)}; choose from {','.join(FAMILIES)}")
  if args.child:
    return child_main(args)
  if not args.a or not args.b:
    p.error("--a and --b are required")
  labels = args.labels.split(",")
  if len(labels) != 2 or labels[0] == labels[1]:
    p.error("--labels: two different names, comma-separated")
  libs = [workspace_path(args.a), workspace_path(args.b)]
  for lib in libs:
    if not os.path.isfile(lib):
      p.error(f"no such file: {lib} (under `bazel run`, /tmp is the toolchain root's)")
  cpus = None
  if args.threads:
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= args.threads <= len(allowed):
      p.error(f"--threads must be in [1, {len(allowed)}]")
    cpus = set(allowed[:args.threads])

  mach = machine()
  info = {label: library_info(lib) for label, lib in zip(labels, libs)}
  print(f"machine: {mach['model']}, {mach['cpus']} CPUs (allowed {mach['allowed']}), avx512f "
        f"{'yes' if mach['avx512f'] else 'no'}, avx2 {'yes' if mach['avx2'] else 'no'}; load "
        f"average {mach['load_average']:.2f}; {mach['date']}")
  for i, label in enumerate(labels):
    print(f"{'AB'[i]} = {label}: {info[label]['path']} ({info[label]['bytes']} bytes, sha256 "
          f"{info[label]['sha256'][:16]})")
  print(f"families {args.families}; {args.rounds} rounds, order alternating; threads "
        f"{args.threads or 'XLA default'}; repeats scale {args.repeats_scale:g}", flush=True)

  rounds, reps = [], {label: [] for label in labels}
  t_start = time.perf_counter()
  for r in range(args.rounds):
    order = [0, 1] if r % 2 == 0 else [1, 0]
    entry = {"order": [labels[i] for i in order], "children": {},
             "load_average": os.getloadavg()[0]}
    for i in order:
      rep = run_child(args, libs[i], cpus)
      got = rep["meta"]["handler_library"]
      if got is None or os.path.realpath(got) != os.path.realpath(libs[i]):
        sys.exit(f"the child registered its handlers from {got!r}, not {libs[i]}")
      reps[labels[i]].append(rep)
      entry["children"][labels[i]] = rep
    rounds.append(entry)
    print(f"round {r + 1}/{args.rounds} ({' then '.join(entry['order'])}): " + ", ".join(
        f"{labels[i]} {entry['children'][labels[i]]['wall_s']:.1f} s" for i in order)
          + f"; load average {os.getloadavg()[0]:.2f}", flush=True)
  total = time.perf_counter() - t_start

  meta = reps[labels[0]][0]["meta"]
  v = meta["versions"]
  print(f"\njax {v.get('jax')}, jaxlib {v.get('jaxlib')}, numpy {v.get('numpy')}, numba "
        f"{v.get('numba', '-')}, CPython {meta['python']}, jaxext {meta['jaxext']}; XLA pool "
        f"threads per child {meta['xla_pool_threads']} (affinity {meta['affinity']}); extension "
        f"module also loaded: {meta['extension_module_loaded']}; {total:.0f} s in all")
  a, b = labels
  names = list(reps[a][0]["times"])
  print(f"\nper workload: best and median over {args.rounds} rounds of each child's best of k "
        f"calls; ratio {b}/{a}; * = ratio above {RATIO_LIMIT}; checksum: |{a} - {b}| / |{a}| of "
        "sum |outputs|")
  print(f"| workload | {a} best | {b} best | {b}/{a} best | {a} median | {b} median | "
        f"{b}/{a} median | checksum |")
  print("|---|---:|---:|---:|---:|---:|---:|---|")
  summary, flagged, differ = {}, [], []
  for name in names:
    ta = [rep["times"][name] for rep in reps[a]]
    tb = [rep["times"][name] for rep in reps[b]]
    best_a, best_b = min(ta), min(tb)
    med_a, med_b = statistics.median(ta), statistics.median(tb)
    ca = {rep["checksums"][name] for rep in reps[a]}
    cb = {rep["checksums"][name] for rep in reps[b]}
    xa, xb = next(iter(ca)), next(iter(cb))
    rel = abs(xa - xb) / max(abs(xa), 1e-300) if math.isfinite(xa) and math.isfinite(xb) else (
        0.0 if str(xa) == str(xb) else math.inf)
    dtype = reps[a][0]["dtypes"][name]
    check = f"{rel:.1e}" + ("" if rel <= CHECK_TOL[dtype] else f" DIFFERS (> {CHECK_TOL[dtype]:g})")
    if len(ca) > 1 or len(cb) > 1:
      check += " (varies between rounds)"
    if rel > CHECK_TOL[dtype]:
      differ.append(name)
    rb, rm = best_b / best_a, med_b / med_a
    mark = lambda x: f"{x:.3f}" + (" *" if x > RATIO_LIMIT else "")
    if rb > RATIO_LIMIT or rm > RATIO_LIMIT:
      flagged.append(name)
    print(f"| {name} | {fmt_t(best_a)} | {fmt_t(best_b)} | {mark(rb)} | {fmt_t(med_a)} | "
          f"{fmt_t(med_b)} | {mark(rm)} | {check} |")
    summary[name] = dict(family=name.split("/")[0], dtype=dtype, times={a: ta, b: tb},
                         best={a: best_a, b: best_b}, median={a: med_a, b: med_b},
                         ratio_best=rb, ratio_median=rm, checksum={a: sorted(ca), b: sorted(cb)},
                         checksum_rel_diff=rel)
  print(f"\nper family: geometric mean of {b}/{a} over its workloads (best; median)")
  families = {}
  for name, s in summary.items():
    families.setdefault(s["family"], []).append(s)
  gmean = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
  for fam, rows in families.items():
    gb, gm = gmean([s["ratio_best"] for s in rows]), gmean([s["ratio_median"] for s in rows])
    worst = max(rows, key=lambda s: s["ratio_best"])
    print(f"  {fam:12s} {gb:.3f}; {gm:.3f}  ({len(rows)} workloads; worst best-ratio "
          f"{worst['ratio_best']:.3f})" + (" *" if max(gb, gm) > RATIO_LIMIT else ""))
  print(f"\n{len(flagged)} of {len(summary)} workloads with a ratio above {RATIO_LIMIT}"
        + (": " + "; ".join(flagged) if flagged else ""))
  print(f"{len(differ)} of {len(summary)} workloads whose checksums differ beyond the tolerance"
        + (": " + "; ".join(differ) if differ else ""))

  if args.json:
    path = workspace_path(args.json)
    with open(path, "w") as f:
      json.dump(dict(machine=mach, versions=v, python=meta["python"], labels=labels,
                     libraries=info, rounds_run=args.rounds, threads=args.threads,
                     repeats_scale=args.repeats_scale, families=args.families.split(","),
                     rounds=rounds, workloads=summary, total_s=total), f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
  main()
