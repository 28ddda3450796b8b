#!/usr/bin/env python3
"""GPU checks and benchmark of jaxext on a machine without Bazel (run by a developer, not by CI).

The GPU machine's Python need not match the build's: the handlers come from the two plain shared
libraries built here (`ffi_handler_library`), registered through ctypes, with jaxext's pure-Python
package from this checkout. Steps, from the repository root on the build machine:

    tools/bazel build --config=cuda --extra_toolchains=@jaxext_zig//:x86_64 \
        //jaxext/cpu:jaxext_cpu_handlers.so //jaxext/cuda:jaxext_cuda_handlers.so
    mkdir -p .gpu && cp -f bazel-bin/jaxext/cpu/jaxext_cpu_handlers.so bazel-bin/jaxext/cuda/jaxext_cuda_handlers.so .gpu/

(zig's clang, as the wheels: glibc 2.17 and libc++ linked in, so the libraries load on any
machine; without --extra_toolchains the toolchain root's GCC builds them, needing its libstdc++).

then check this script itself on the CPU (`tools/bazel test //tests:gpu_checks_test`: manual, not
part of //..., and device time is scarce), and on the GPU machine (with `.gpu` carried along):

    python3 tools/gpu_checks.py --libs .gpu [--n 100000000] [--only SECTION,...]

or, better, `tools/gpu_run.sh -- --libs .gpu`: every section in its own process under one
deadline, peers' wheels from `.whl` (`tools/gpu_wheels` fetches them) installed first, one merged
report under $OUT. One device call for the equivariant layer and jax-md's NequIP, for instance:
`DEADLINE=560 SECTION_CAP=400 tools/gpu_run.sh equivariant nequip -- --libs .gpu --repeats 10`,
carrying `.gpu` and `.whl`. On a GPU the
peer libraries run as anchors on the same device when importable (jaxoplanet, diffrax, e3nn-jax).

It checks GPU results against the CPU op and an extended-precision residual in float32 and float64,
under jit, vmap and grad, then benchmarks n elements: GB/s of jaxext.kepler against an element-wise
kernel with the same traffic (two arrays in, two out) measured in the same run, and the ratio
against the pure-JAX solver of benchmarks/kepler_bench.py on the GPU; then the limb-darkening op:
GPU against CPU (flux and gradients, quadratic and quartic laws, both dtypes), NaN handling, and
ns per point on n points; the fused transit light curve (GPU against CPU, ns per point); then
jaxext.numba_cuda_kernel (needs numba-cuda on the GPU machine):
results against NumPy, both vmap modes, a jitted loop, and per-call cost; jaxext.ode.dop853 with
built-in models and with Python right-hand sides linked at run time (against the CPU, then
trajectories per second up to 1e6); jaxext.equivariant (against the CPU, determinism, the
MACE-like layer fused and unfused); jax-md's NequIP as shipped and routed through jaxext (needs
jax-md and e3nn-jax: tools/gpu_wheels fetches them into .whl). Exits non-zero on a failure.
"""

import argparse
import json
import os
import sys
import time

SECTIONS = ("kepler", "limbdark", "numba", "transit", "ode", "equivariant", "ode_user", "ode_jnp",
            "nequip")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--libs", default=os.path.join(ROOT, ".gpu"))
  p.add_argument("--n", type=int, default=100_000_000)
  p.add_argument("--repeats", type=int, default=20)
  p.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                 help="cpu: run every check with the CPU standing in for the GPU (tests this script)")
  p.add_argument("--only", default=",".join(SECTIONS),
                 help="comma-separated sections to run, of " + ",".join(SECTIONS) + " (default: all); "
                 "running each in its own process keeps a crash in one from losing the others")
  p.add_argument("--ode-sizes", default="10000,100000,1000000",
                 help="trajectory counts of the ODE benchmarks (GPU only)")
  p.add_argument("--nequip-atoms", type=int, default=None,
                 help="atoms of jax-md's NequIP in the nequip section (default 3000 on a GPU, "
                 "64 on the CPU stand-in)")
  p.add_argument("--nequip-layers", type=int, default=5,
                 help="its interaction layers (jax-md's default configuration has 5)")
  p.add_argument("--list-sections", action="store_true",
                 help="print the sections, one per line, and exit (tools/gpu_run.sh reads them)")
  p.add_argument("--report", default=None,
                 help="JSON report to write (default $OUT/gpu_checks.json); an existing report there "
                 "is merged with this run's, so sections run one by one add up to one report")
  args = p.parse_args()
  if args.list_sections:
    print("\n".join(SECTIONS))
    return 0
  only = args.only.split(",")
  ode_sizes = tuple(int(float(v)) for v in args.ode_sizes.split(","))
  # Peer libraries (jaxoplanet, diffrax, e3nn-jax) on the same device: on a GPU, or when asked.
  peers = args.device == "gpu" or os.environ.get("JAXEXT_GPU_CHECKS_PEERS") == "1"
  unknown = sorted(set(only) - set(SECTIONS))
  if unknown:
    p.error(f"--only: unknown sections {unknown}; choose from {list(SECTIONS)}")
  libs = ["cpu=" + os.path.join(args.libs, "jaxext_cpu_handlers.so")]
  if args.device == "gpu":
    libs.append("CUDA=" + os.path.join(args.libs, "jaxext_cuda_handlers.so"))
  os.environ["JAXEXT_HANDLER_LIBRARIES"] = ",".join(libs)
  sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

  import jax
  import jax.numpy as jnp
  import numpy as np
  jax.config.update("jax_enable_x64", True)
  import jaxext
  from kepler_bench import kepler_pure_jax, residuals

  gpu = jax.devices(args.device)[0]
  cpu = jax.devices("cpu")[0]
  report = {"device": gpu.device_kind, "jax": jax.__version__, "checks": {}, "bench": []}
  failures = []

  def check(name, ok, detail=""):
    report["checks"][name] = bool(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}")
    if not ok:
      failures.append(name)

  rng = np.random.default_rng(0)
  # Benchmark: n elements, GB/s against a same-traffic element-wise kernel, ratio to pure JAX.
  def best(fn, *xs, repeats=None):
    jax.block_until_ready(fn(*xs))
    t = np.inf
    for _ in range(repeats or args.repeats):
      t0 = time.perf_counter()
      jax.block_until_ready(fn(*xs))
      t = min(t, time.perf_counter() - t0)
    return t

  if "kepler" in only:
    for dtype in (np.float32, np.float64):
      n = min(1_000_000, args.n)
      m = np.concatenate([rng.uniform(-10, 10, n // 2), rng.uniform(-1e6, 1e6, n // 2)]).astype(dtype)
      e = np.concatenate([rng.uniform(0, 1, n // 2),
                          1 - 10.0 ** rng.uniform(-7 if dtype == np.float32 else -16, 0, n // 2)])
      e = e.astype(dtype)  # may round up to 1 in float32: pull those back below 1
      e = np.where(e >= 1, np.nextafter(dtype(1), dtype(0)), e).astype(dtype)
      f = jax.jit(jaxext.kepler)
      sg, cg = (np.asarray(x) for x in f(jax.device_put(m, gpu), jax.device_put(e, gpu)))
      sc, cc = (np.asarray(x) for x in f(jax.device_put(m, cpu), jax.device_put(e, cpu)))
      eps = float(np.finfo(dtype).eps)
      floor = 2e-15 if dtype == np.float64 else 1e-6
      name = np.dtype(dtype).name
      res = residuals(m, e, sg, cg)  # extended precision, against the documented bound
      tol = floor + np.abs(m.astype(np.float64)) * eps
      check(f"{name} GPU residual within bound", np.all(res <= tol), f"worst ratio {np.max(res / tol):.3g}")
      slope = 1 - e.astype(np.float64) * cc.astype(np.float64)
      agree = np.abs(sg.astype(np.float64) - sc) <= 2 * tol / np.maximum(slope, 1e-300) + 8 * eps
      check(f"{name} GPU agrees with CPU", np.all(agree), f"max |diff| {np.max(np.abs(sg - sc)):.3g}")
      nan_in = np.array([0.5, 0.5, np.nan, np.inf], dtype)
      nan_e = np.array([-0.1, 1.0, 0.3, 0.3], dtype)
      s_bad, _ = f(jax.device_put(nan_in, gpu), jax.device_put(nan_e, gpu))
      check(f"{name} out-of-domain gives NaN on GPU", np.all(np.isnan(np.asarray(s_bad))))
      mv = jax.device_put(m[:4096].reshape(64, 64), gpu)
      ev = jax.device_put(e[:4096].reshape(64, 64), gpu)
      sv, _ = jax.jit(jax.vmap(jaxext.kepler))(mv, ev)
      check(f"{name} vmap on GPU", np.array_equal(np.asarray(sv), sg[:4096].reshape(64, 64)))
      g = jax.jit(jax.vmap(jax.grad(lambda a, b: jaxext.kepler(a, b)[0])))
      dg = np.asarray(g(jax.device_put(m[:1000], gpu), jax.device_put(e[:1000], gpu)))
      expect = cc[:1000] / (1 - e[:1000] * cc[:1000])
      check(f"{name} grad on GPU", np.allclose(dg, expect, rtol=1e3 * eps, atol=1e3 * eps))

    for dtype in (np.float32, np.float64):
      n = args.n
      key = jax.random.PRNGKey(1)
      m = jax.device_put(jax.random.uniform(key, (n,), dtype, -10, 10), gpu)
      e = jax.device_put(jax.random.uniform(jax.random.split(key)[0], (n,), dtype, 0, 0.999), gpu)
      nbytes = 4 * n * np.dtype(dtype).itemsize
      t_ours = best(jax.jit(jaxext.kepler), m, e)
      t_copy = best(jax.jit(lambda a, b: (a + b, a - b)), m, e)
      t_pure = best(jax.jit(kepler_pure_jax), m, e)
      row = {"dtype": np.dtype(dtype).name, "n": n, "jaxext_GBps": nbytes / t_ours / 1e9,
             "copy_GBps": nbytes / t_copy / 1e9, "fraction_of_copy": t_copy / t_ours,
             "speedup_vs_pure_jax": t_pure / t_ours, "jaxext_ms": t_ours * 1e3,
             "pure_jax_ms": t_pure * 1e3}
      report["bench"].append(row)
      print(json.dumps(row))
  if "limbdark" in only:
    # Limb-darkened occultation: the CUDA handler against the CPU one (both exact to ~1e-15).
    nl = min(1_000_000, args.n)
    bl = np.concatenate([rng.uniform(0, 1.3, nl - 6), [0.0, 0.1, 0.9, 1.1, 0.3, 1.0]])
    rl = np.concatenate([np.exp(rng.uniform(np.log(1e-3), np.log(2.0), nl - 6)),
                         [0.1, 0.1, 0.1, 0.1, 0.3, 1.0]])
    for law in ([0.4, 0.26], [0.3, 0.2, -0.1, 0.05]):
      for dtype in (np.float32, np.float64):
        u = np.array(law, dtype)
        f = jax.jit(jaxext.limb_dark_flux)
        fg = np.asarray(f(jax.device_put(bl.astype(dtype), gpu), jax.device_put(rl.astype(dtype), gpu),
                          jax.device_put(u, gpu)))
        fc = np.asarray(f(jax.device_put(bl.astype(dtype), cpu), jax.device_put(rl.astype(dtype), cpu),
                          jax.device_put(u, cpu)))
        tol = 1e-13 if dtype == np.float64 else 1e-6
        check(f"limbdark order {len(law)} {np.dtype(dtype).name} GPU agrees with CPU",
              np.max(np.abs(fg.astype(np.float64) - fc)) <= tol,
              f"max |diff| {np.max(np.abs(fg.astype(np.float64) - fc)):.3g}")
      grad = jax.jit(jax.grad(lambda b, r, u: jaxext.limb_dark_flux(b, r, u).sum(), argnums=(0, 1, 2)))
      gg = grad(*(jax.device_put(x, gpu) for x in (bl[:4096], rl[:4096], np.array(law))))
      gc = grad(*(jax.device_put(x, cpu) for x in (bl[:4096], rl[:4096], np.array(law))))
      check(f"limbdark order {len(law)} grad on GPU agrees with CPU",
            all(np.allclose(np.asarray(a), np.asarray(c), rtol=1e-10, atol=1e-12)
                for a, c in zip(gg, gc)))
    bad = np.asarray(jaxext.limb_dark_flux(jax.device_put(np.array([-0.1, 0.5, np.nan]), gpu),
                                           jax.device_put(np.array([0.1, 0.0, 0.1]), gpu),
                                           jax.device_put(np.array([0.4, 0.26]), gpu)))
    check("limbdark out-of-domain gives NaN on GPU", np.all(np.isnan(bad)))
    for dtype in (np.float32, np.float64):
      n = args.n
      key = jax.random.PRNGKey(2)
      b = jax.device_put(jax.random.uniform(key, (n,), dtype, 0, 1.2), gpu)
      u = jax.device_put(np.array([0.4, 0.26], dtype), gpu)
      f = jax.jit(lambda b, u: jaxext.limb_dark_flux(b, dtype(0.1), u))
      fgrad = jax.jit(jax.value_and_grad(lambda b, u: jaxext.limb_dark_flux(b, dtype(0.1), u).sum(),
                                         argnums=(0, 1)))
      row = {"op": "limbdark", "dtype": np.dtype(dtype).name, "n": n,
             "ns_per_point": best(f, b, u) / n * 1e9,
             "value_and_grad_ns_per_point": best(fgrad, b, u) / n * 1e9}
      if peers:  # jaxoplanet 0.2.0 (pure JAX), the same points on the same device
        try:
          from jaxoplanet.core.limb_dark import light_curve
          jo = jax.jit(lambda b, u: light_curve(u, b, dtype(0.1)))
          jog = jax.jit(jax.value_and_grad(lambda b, u: light_curve(u, b, dtype(0.1)).sum(),
                                           argnums=(0, 1)))
          ref = np.asarray(f(b[:100_000], u), np.float64)
          row["jaxoplanet_max_abs_diff"] = float(np.max(np.abs(
              np.asarray(jo(b[:100_000], u), np.float64) + 1.0 - ref)))
          row["jaxoplanet_ns_per_point"] = best(jo, b, u, repeats=5) / n * 1e9
          row["jaxoplanet_value_and_grad_ns_per_point"] = best(jog, b, u, repeats=5) / n * 1e9
        except Exception as err:  # noqa: BLE001 - a peer's failure is reported, not fatal
          row["jaxoplanet_error"] = repr(err)[:300]
      report["bench"].append(row)
      print(json.dumps(row))

  if args.device == "gpu" and "numba" in only:
    try:
      numba_checks(check, gpu, best, report, rng)
    except Exception as err:  # noqa: BLE001 - keep the other results; report this one
      check("numba_cuda_kernel checks completed", False, repr(err)[:2000])

  if "transit" in only:
    try:
      transit_checks(check, gpu, cpu, best, report, rng, n=min(args.n, 10_000_000))
    except Exception as err:  # noqa: BLE001
      check("transit checks completed", False, repr(err)[:2000])

  if "ode" in only:
    try:
      ode_checks(check, gpu, cpu, best, report, rng, small=args.device != "gpu", peers=peers,
                 sizes=ode_sizes)
    except Exception as err:  # noqa: BLE001
      check("ode.dop853 checks completed", False, repr(err)[:2000])

  if "equivariant" in only:
    try:
      equivariant_checks(check, gpu, cpu, best, report, rng, small=args.device != "gpu",
                           peers=peers)
    except Exception as err:  # noqa: BLE001
      check("equivariant checks completed", False, repr(err)[:2000])

  if args.device == "gpu" and "ode_user" in only:
    try:
      ode_user_checks(check, gpu, cpu, best, report, rng, sizes=ode_sizes)
    except Exception as err:  # noqa: BLE001
      check("ode.dop853 user right-hand side checks completed", False, repr(err)[:2000])

  if "ode_jnp" in only:
    try:
      ode_jnp_checks(check, gpu, cpu, best, report, rng, small=args.device != "gpu", peers=peers,
                     sizes=ode_sizes)
    except Exception as err:  # noqa: BLE001
      check("ode.dop853 jax.numpy right-hand side checks completed", False, repr(err)[:2000])

  if "nequip" in only:
    try:
      nequip_checks(check, args.device, report,
                    args.nequip_atoms or (3000 if args.device == "gpu" else 64),
                    args.nequip_layers, calls=max(2, args.repeats))
    except Exception as err:  # noqa: BLE001
      check("jax-md NequIP checks completed", False, repr(err)[:2000])

  path = args.report or (os.path.join(os.environ["OUT"], "gpu_checks.json")
                         if os.environ.get("OUT") else None)
  if path:
    merged = report
    if os.path.exists(path):
      with open(path) as fh:
        merged = json.load(fh)
      merged["checks"].update(report["checks"])
      merged["bench"].extend(report["bench"])
    with open(path, "w") as fh:
      json.dump(merged, fh, indent=2)
  print(f"{len(report['checks']) - len(failures)} checks passed, {len(failures)} failed"
        + (f": {failures}" if failures else "") + (f"; report in {path}" if path else ""))
  return 1 if failures else 0


def numba_checks(check, gpu, best, report, rng):
  """jaxext.numba_cuda_kernel on the GPU: results against NumPy for every dtype, both vmap modes
  (nested, in_axes=1), several outputs, 0-d operands, parameters, a user JVP, a jitted loop (where
  XLA may capture the launches into a CUDA graph), and the per-call cost in a fori_loop."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  try:
    from numba import cuda
    import jaxext
  except ImportError as err:
    check("numba_cuda_kernel: numba-cuda importable", False, str(err))
    return
  like = lambda x, *_, **__: jax.ShapeDtypeStruct(x.shape, x.dtype)

  @jaxext.numba_cuda_kernel(outputs=like, vmap="elementwise")
  def axpy(x, y, out, alpha):
    i = cuda.grid(1)
    if i < x.shape[0]:
      out[i] = alpha * x[i] + y[i]

  @axpy.defjvp
  def _(primals, tangents, alpha):
    return axpy(*primals, alpha=alpha), alpha * tangents[0] + tangents[1]

  @jaxext.numba_cuda_kernel(outputs=like, grid=1, block=1)
  def prefix_sum(x, out):
    acc = x[0] - x[0]
    for i in range(x.shape[0]):
      acc += x[i]
      out[i] = acc

  @jaxext.numba_cuda_kernel(outputs=lambda x: (like(x), jax.ShapeDtypeStruct((), x.dtype)),
                            grid=1, block=1)
  def split_and_sum(x, neg, total):
    t = x[0] - x[0]
    for i in range(x.shape[0]):
      neg[i] = -x[i]
      t += x[i]
    total[()] = t

  on = lambda a: jax.device_put(a, gpu)
  for dtype in (np.float32, np.float64, np.int32, np.int64):
    x = (rng.standard_normal(1000) * 100).astype(dtype)
    y = (rng.standard_normal(1000) * 100).astype(dtype)
    alpha = 3.0 if np.issubdtype(dtype, np.floating) else 3
    want = (alpha * x.astype(np.float64) + y).astype(dtype)
    got = np.asarray(jax.jit(lambda a, b: axpy(a, b, alpha=alpha))(on(x), on(y)))
    if np.issubdtype(dtype, np.floating):
      # The GPU contracts alpha * x + y into one fused multiply-add: one rounding instead of two,
      # so the results may differ by an ulp of the terms (not of the sum, which may cancel).
      eps = np.finfo(dtype).eps
      bound = 2 * eps * (np.abs(alpha * x.astype(np.float64)) + np.abs(y))
      excess = np.max(np.abs(got.astype(np.float64) - want) / bound)
      check(f"numba_cuda axpy {np.dtype(dtype).name}", excess <= 1,
            f"max |difference| / (2 eps (|alpha x| + |y|)) = {excess:.3g}")
    else:
      check(f"numba_cuda axpy {np.dtype(dtype).name}", np.array_equal(got, want))
  xb = rng.standard_normal((6, 5, 300))
  got = np.asarray(jax.jit(jax.vmap(jax.vmap(prefix_sum)))(on(xb)))
  check("numba_cuda prefix_sum nested vmap (sequential)", np.allclose(got, np.cumsum(xb, -1)))
  got = np.asarray(jax.jit(jax.vmap(prefix_sum, in_axes=1))(on(xb[0].T.copy())))
  check("numba_cuda prefix_sum vmap in_axes=1", np.allclose(got, np.cumsum(xb[0], -1)))
  ya = rng.standard_normal((7, 1000))
  got = np.asarray(jax.jit(jax.vmap(lambda a, b: axpy(a, b, alpha=0.5), in_axes=(0, None)))(
      on(ya), on(ya[0])))
  check("numba_cuda axpy vmap elementwise, unmapped operand", np.allclose(got, 0.5 * ya + ya[0]))
  neg, tot = jax.jit(split_and_sum)(on(xb[0, 0]))
  check("numba_cuda two outputs, 0-d output", np.allclose(np.asarray(neg), -xb[0, 0])
        and np.isclose(float(tot), xb[0, 0].sum()))
  xs = rng.standard_normal(64)
  check("numba_cuda grad through defjvp", np.allclose(
      np.asarray(jax.jit(jax.grad(lambda a: axpy(a, a, alpha=2.0).sum()))(on(xs))), 3.0))

  def loop(x):
    return jax.lax.fori_loop(0, 1000, lambda i, v: axpy(v, x, alpha=0.5), x)
  x16 = rng.standard_normal(16)
  want = x16.copy()
  for _ in range(1000):
    want = 0.5 * want + x16
  check("numba_cuda in a jitted loop (CUDA graphs allowed)",
        np.allclose(np.asarray(jax.jit(loop)(on(x16))), want))
  for n in (16, 1024):
    xn = on(rng.standard_normal(n))
    t_ours = best(jax.jit(loop), xn) / 1000
    t_jnp = best(jax.jit(lambda x: jax.lax.fori_loop(0, 1000, lambda i, v: 0.5 * v + x, x)), xn) / 1000
    row = {"op": "numba_cuda_kernel", "n": n, "us_per_call_in_loop": t_ours * 1e6,
           "jnp_us_per_iteration": t_jnp * 1e6}
    report["bench"].append(row)
    print(json.dumps(row))


def transit_checks(check, gpu, cpu, best, report, rng, n):
  """The fused transit kernel on the GPU (one thread per point) against the CPU handler: circular
  and eccentric orbits, exposure integration, many light curves at once, both dtypes, gradients
  in every parameter; then ns per point on n times across one transit window."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import jaxext

  base = dict(period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1)
  t = np.concatenate([np.linspace(-0.2, 0.2, 20000), rng.uniform(-30, 30, 5000)])
  cases = {"circular": {}, "eccentric": dict(ecc=0.5, omega=1.0),
           "exposures": dict(ecc=0.2, omega=-0.5, texp=0.02, oversample=7)}
  for name, extra in cases.items():
    for dtype in (np.float32, np.float64):
      u = np.array([0.4, 0.26], dtype)
      f = jax.jit(lambda t, u: jaxext.transit_light_curve(t, u=u, **base, **extra))
      fg = np.asarray(f(jax.device_put(t.astype(dtype), gpu), jax.device_put(u, gpu)))
      fc = np.asarray(f(jax.device_put(t.astype(dtype), cpu), jax.device_put(u, cpu)))
      diff = np.max(np.abs(fg.astype(np.float64) - fc))
      tol = 1e-13 if dtype == np.float64 else 1e-6
      check(f"transit {name} {np.dtype(dtype).name} GPU agrees with CPU", diff <= tol,
            f"max |diff| {diff:.3g}")
  periods = np.array([[2.5], [3.0], [3.5]])
  many = jax.jit(lambda t, p: jaxext.transit_light_curve(t, period=p, t0=0.0, a=10.0, impact=0.3,
                                                         r=0.1, u=np.array([0.4, 0.26])))
  mg = np.asarray(many(jax.device_put(t, gpu), jax.device_put(periods, gpu)))
  mc = np.asarray(many(jax.device_put(t, cpu), jax.device_put(periods, cpu)))
  check("transit many light curves GPU agrees with CPU", np.max(np.abs(mg - mc)) <= 1e-13)
  names = ("period", "t0", "a", "impact", "r", "ecc", "omega", "u")
  curve = lambda *p: jaxext.transit_light_curve(t[:20000], texp=0.02, **dict(zip(names, p)))
  grad = jax.jit(jax.grad(lambda *p: jnp.sum(curve(*p)), argnums=tuple(range(8))))
  args = (3.0, 0.0, 10.0, 0.3, 0.1, 0.2, 0.5, np.array([0.4, 0.26]))
  gg = grad(*(jax.device_put(x, gpu) for x in args))
  gc = grad(*(jax.device_put(x, cpu) for x in args))
  # Per point (forward mode, the linearised kernel): each derivative against the CPU's, relative
  # to the largest of its kind. The summed gradient (reverse mode) is a sum of 20000 terms that
  # nearly cancel for t0: its tolerance scales with the sum of their magnitudes, since the
  # reduction's order differs between the devices.
  jac = jax.jit(jax.jacfwd(curve, argnums=tuple(range(8))))
  jg = [np.asarray(a) for a in jac(*(jax.device_put(x, gpu) for x in args))]
  jcpu = [np.asarray(c) for c in jac(*(jax.device_put(x, cpu) for x in args))]
  rel_points = {k: float(np.max(np.abs(a - c)) / max(np.max(np.abs(c)), 1e-300))
                for k, a, c in zip(names, jg, jcpu)}
  scale = {k: np.sum(np.abs(c), axis=0) for k, c in zip(names, jcpu)}
  rel_sum = {k: float(np.max(np.abs(np.asarray(a) - np.asarray(c)) / np.maximum(scale[k], 1e-300)))
             for k, a, c in zip(names, gg, gc)}
  check("transit per-point derivatives on GPU agree with CPU",
        max(rel_points.values()) < 1e-9,
        "relative " + json.dumps({k: f"{v:.2g}" for k, v in rel_points.items()}))
  check("transit gradients on GPU agree with CPU", max(rel_sum.values()) < 1e-12,
        "|difference| / sum of |terms| " + json.dumps({k: f"{v:.2g}" for k, v in rel_sum.items()}))
  bad = np.asarray(jaxext.transit_light_curve(jax.device_put(np.array([0.0, np.nan]), gpu), u=np.array([0.4, 0.26]),
                                              **dict(base, r=-0.1)))
  check("transit out-of-domain gives NaN on GPU", np.all(np.isnan(bad)))
  for ecc in (0.0, 0.5):
    tn = jax.device_put(np.linspace(-0.2, 0.2, n), gpu)
    f = jax.jit(lambda t: jaxext.transit_light_curve(t, u=np.array([0.4, 0.26]), ecc=ecc,
                                                     omega=1.0, **base))
    fgrad = jax.jit(jax.grad(lambda a, t: jnp.sum(jaxext.transit_light_curve(
        t, u=np.array([0.4, 0.26]), ecc=ecc, omega=1.0, **dict(base, a=a)))))
    row = {"op": "transit", "ecc": ecc, "n": n, "ns_per_point": best(f, tn) / n * 1e9,
           "value_and_grad_ns_per_point": best(lambda t: fgrad(10.0, t), tn) / n * 1e9}
    report["bench"].append(row)
    print(json.dumps(row))


def ode_checks(check, gpu, cpu, best, report, rng, small=False, peers=False,
               sizes=(10_000, 100_000, 1_000_000)):
  """jaxext.ode.dop853 with a built-in model on the GPU (one thread per trajectory) against the CPU
  handler: statuses, step counts, final states, event times, derivatives; then trajectories per
  second at 1e4 to 1e6 LEO orbits (two-body + J2 + drag, one day)."""
  import jax
  import numpy as np
  from jaxext import ode

  def cloud(n):
    r = ode.models.EARTH_RADIUS + rng.uniform(150.0, 2000.0, n)
    v = np.sqrt(ode.models.EARTH_MU / r) * rng.uniform(0.99, 1.01, n)
    inc = rng.uniform(0, np.pi, n)
    y0 = np.stack([r, 0 * r, 0 * r, 0 * r, v * np.cos(inc), v * np.sin(inc)], axis=1)
    return y0, rng.uniform(0.005, 0.2, (n, 1))

  model = ode.models.earth(j2=True, drag=True)
  reentry = [ode.models.altitude_event(100.0)]
  run = lambda y, b: ode.dop853(model, y, (0.0, 86400.0), b, rtol=1e-9, atol=1e-9,
                                t_eval=np.linspace(0, 86400.0, 5), events=reentry)
  y0, b = cloud(200 if small else 2000)
  on = lambda dev, *xs: [jax.device_put(x, dev) for x in xs]
  g = jax.jit(run)(*on(gpu, y0, b))
  c = jax.jit(run)(*on(cpu, y0, b))
  ref = jax.jit(lambda y, b: ode.dop853(model, y, (0.0, 86400.0), b, rtol=1e-13, atol=1e-13,
                                        max_steps=10**7, events=reentry))(
      *on(cpu, y0, b))
  same = lambda a: np.asarray(a)
  check("ode gpu: statuses equal cpu", np.array_equal(same(g.status), same(c.status)))
  # The default atmosphere (Vallado's 28 bands) is discontinuous at the band edges, where the
  # solution depends on where steps fall: a different ulp in exp() moves the step sequence, and
  # the CPU and GPU differ by as much as each differs from a tight reference (checked below).
  # With one smooth exponential band, orbits that stay above 300 km agree to roundoff.
  smooth = ode.models.earth(j2=True, drag=True, atmosphere=ode.models.Atmosphere(
      base_altitude=(300.0,), density=(2.418e-11,), scale_height=(53.628,)))
  run_smooth = jax.jit(lambda y, b: ode.dop853(smooth, y, (0.0, 86400.0), b, rtol=1e-9,
                                               atol=1e-9))
  gs, cs = run_smooth(*on(gpu, y0, b)), run_smooth(*on(cpu, y0, b))
  alt = np.linalg.norm(same(cs.y_final)[:, :3], axis=1) - ode.models.EARTH_RADIUS
  high = (same(cs.status) == 0) & (alt > 300.0)
  steps_diff = np.abs(same(gs.n_accepted) - same(cs.n_accepted))[high]
  check("ode gpu: smooth drag, orbits staying above 300 km: accepted steps within 2 of cpu",
        high.sum() > len(alt) // 4 and steps_diff.max() <= 2,
        f"{high.sum()} orbits, max difference {steps_diff.max()}")
  err = np.abs(same(gs.y_final)[high, :3] - same(cs.y_final)[high, :3]).max()
  check("ode gpu: smooth drag, orbits staying above 300 km: final positions within 1e-5 km of cpu",
        err < 1e-5, f"max {err:.3g} km")
  agree = (same(c.status) == same(ref.status)) & (same(g.status) == same(ref.status))
  ok = agree & (same(ref.status) == 0)
  dist = lambda s: np.linalg.norm(same(s.y_final)[ok, :3] - same(ref.y_final)[ok, :3], axis=1)
  eg, ec = dist(g), dist(c)
  check("ode gpu: every orbit's error against a 1e-13 reference at most 3x the cpu's + 1e-6 km",
        eg.max() <= 3 * ec.max() + 1e-6 and np.median(eg) <= 3 * np.median(ec) + 1e-6,
        f"{ok.sum()} orbits; max {eg.max():.3g} km (cpu {ec.max():.3g}), median "
        f"{np.median(eg):.3g} km (cpu {np.median(ec):.3g})")
  hit = agree & (same(ref.status) == 1)
  if hit.any():
    tg = np.abs(same(g.t_final)[hit] - same(ref.t_final)[hit])
    tc = np.abs(same(c.t_final)[hit] - same(ref.t_final)[hit])
    check("ode gpu: re-entry times' error against the reference at most 3x the cpu's + 1e-6 s",
          tg.max() <= 3 * tc.max() + 1e-6, f"{hit.sum()} re-entries; max {tg.max():.3g} s "
          f"(cpu {tc.max():.3g} s)")
  else:
    check("ode gpu: re-entries happen in the test set", False)
  pick = np.flatnonzero(high)[:64]
  grad = lambda dev: jax.jit(jax.grad(lambda y, b: ode.dop853(
      smooth, y, (0.0, 3600.0), b, rtol=1e-10, atol=1e-10).y_final[:, :3].sum(), argnums=(0, 1)))(
          *on(dev, y0[pick], b[pick]))
  gg, gc = grad(gpu), grad(cpu)
  rel = max(np.abs(same(x) - same(y)).max() / np.abs(same(y)).max() for x, y in zip(gg, gc))
  check("ode gpu: smooth drag, gradients (orbits above 300 km) match cpu to 1e-7", rel < 1e-7,
        f"relative {rel:.3g}")
  dense_checks(check, "ode gpu: smooth drag, orbits above 300 km", lambda y, b, te: ode.dop853(
      smooth, y, (0.0, 3600.0), b, t_eval=te, rtol=1e-10, atol=1e-10, dense=True),
      (y0[pick], b[pick]), gpu, cpu, np.linspace(0.0, 3600.0, 25), 1e-7)
  for n in (100,) if small else sizes:
    y0, b = cloud(n)
    fn = jax.jit(lambda y, b: run(y, b).y_final)
    ys, bs = on(gpu, y0, b)
    jax.block_until_ready(fn(ys, bs))
    t = best(fn, ys, bs, repeats=3)
    row = {"op": "ode.dop853 J2+drag 1 day rtol=1e-9", "n": n, "s": t, "us_per_trajectory": t / n * 1e6}
    report["bench"].append(row)
    print(row)
  if peers:
    try:
      diffrax_arm(gpu, cpu, best, report, (100,) if small else sizes)
    except Exception as err:  # noqa: BLE001 - a peer's failure is reported, not fatal
      report["bench"].append({"op": "diffrax arm", "error": repr(err)[:2000]})
      print("diffrax arm failed:", repr(err)[:2000])


def diffrax_arm(gpu, cpu, best, report, sizes):
  """benchmarks/ode_bench.py's LEO cloud (300-2000 km, e <= 0.02, two-body + J2 + one-band drag,
  one day) on the GPU: ours and diffrax's Dopri8 + PID controller under jit(vmap), both at
  rtol = atol = 1e-9, with each one's achieved error (final position against ours on the CPU at
  1e-13, first 256 trajectories) and diffrax's lockstep inflation (N x max steps / total steps)."""
  import jax
  import numpy as np
  import diffrax
  from jaxext import ode
  import ode_bench as ob

  tol = 1e-9
  model = ode.models.earth(j2=True, drag=True, atmosphere=ob.SINGLE_BAND)
  ours = jax.jit(lambda y, b: ode.dop853(model, y, (0.0, ob.T_END), b, rtol=tol, atol=tol,
                                         max_steps=10**6).y_final)
  theirs = ob.diffrax_solver(diffrax, ob.SINGLE_BAND)
  y_all, b_all, _ = ob.make_set("leo", max(sizes))
  k = min(256, sizes[0])
  ref = np.asarray(jax.jit(lambda y, b: ode.dop853(model, y, (0.0, ob.T_END), b, rtol=1e-13,
                                                   atol=1e-13, max_steps=10**7).y_final)(
      *(jax.device_put(a, cpu) for a in (y_all[:k], b_all[:k, None]))))
  err = lambda y: float(np.median(np.linalg.norm(np.asarray(y)[:k, :3] - ref[:, :3], axis=1)))
  for n in sizes:
    y0 = jax.device_put(y_all[:n], gpu)
    b1, b2 = jax.device_put(b_all[:n, None], gpu), jax.device_put(b_all[:n], gpu)
    t_ours = best(ours, y0, b1, repeats=3)
    print(json.dumps({"op": "ode GPU LEO J2+drag 1 day tol=1e-9 (diffrax arm's set)", "n": n,
                      "ours_s": t_ours}))
    yd, ok, steps, accepted = theirs(y0, b2, tol, tol)
    t_theirs = best(lambda y, b: theirs(y, b, tol, tol)[0], y0, b2, repeats=2)
    steps = np.asarray(steps)
    row = {"op": "ode GPU vs diffrax LEO J2+drag 1 day tol=1e-9", "n": n,
           "ours_s": t_ours, "diffrax_s": t_theirs, "speedup": t_theirs / t_ours,
           "ours_median_error_km": err(ours(y0, b1)), "diffrax_median_error_km": err(yd),
           "diffrax_all_successful": bool(np.all(np.asarray(ok))),
           "diffrax_lockstep_inflation": float(n * steps.max() / steps.sum())}
    report["bench"].append(row)
    print(json.dumps(row))


def dense_checks(check, label, solve, inputs, gpu, cpu, times, tol, grad_solve=None,
                 grad_tol=1e-7):
  """The dense output (dop853(..., dense=S), Solution.evaluate) on the GPU: `solve(*inputs,
  t_eval)` returns a Solution with its dense output. The GPU's and the CPU's step sequences may
  part (a last-bit difference in an error estimate flips a step decision, and every later
  boundary moves), so their kept rows are not compared element by element. Checked instead: the
  GPU's kept steps are min(n_accepted, S), starting at t0 and ending at t_final; evaluate(times)
  equals the GPU's own t_eval rows (the integrator's interpolation, to 1e-12) and the CPU's
  evaluate(times) to `tol` (relative to max(1, |cpu|)); the gradient of evaluate(times).sum()
  with respect to every input (through `grad_solve`, default `solve`) matches the CPU's."""
  import jax
  import numpy as np
  a = lambda x: np.asarray(x)
  on = lambda dev: [jax.device_put(x, dev) for x in inputs]
  run = jax.jit(lambda *xs: (lambda s: (s.n_accepted, s.dense_t, s.t_final, s.ys,
                                        s.evaluate(times)))(solve(*xs, times)))
  (acc, dt, tf, ys, ev), c = run(*on(gpu)), run(*on(cpu))
  acc, dt, tf, ys, ev = a(acc), a(dt), a(tf), a(ys), a(ev)
  steps = dt.shape[1] - 1
  kept = np.minimum(acc, steps)
  idx = np.arange(dt.shape[1])[None, :]
  layout = (np.array_equal(np.isfinite(dt), idx <= kept[:, None]) and kept.min() > 0
            and np.array_equal(dt[:, 0], np.full(len(dt), times[0]))
            and np.array_equal(dt[acc <= steps, kept[acc <= steps]], tf[acc <= steps]))
  own = float(np.max(np.abs(ev - ys) / np.maximum(1, np.abs(ys))))
  err = float(np.max(np.abs(ev - a(c[4])) / np.maximum(1, np.abs(a(c[4])))))
  check(f"{label}: dense output on the GPU: kept steps, evaluate as its t_eval (1e-12), "
        f"evaluate within {tol:g} of cpu", layout and own < 1e-12 and err < tol,
        f"layout {layout}, against its t_eval {own:.3g}, against cpu {err:.3g}, kept steps "
        f"{kept.min()}..{kept.max()}, accepted steps equal cpu in {np.mean(acc == a(c[0])):.0%}")
  grad_solve = grad_solve or solve
  grad = jax.jit(jax.grad(lambda *xs: grad_solve(*xs, None).evaluate(times).sum(),
                          argnums=tuple(range(len(inputs)))))
  gg, gc = grad(*on(gpu)), grad(*on(cpu))
  finite = all(np.isfinite(a(x)).all() for x in gc)
  r = max(np.abs(a(x) - a(y)).max() / np.abs(a(y)).max() for x, y in zip(gg, gc))
  check(f"{label}: gradients through Solution.evaluate match cpu to {grad_tol:g}",
        finite and r < grad_tol, f"relative {r:.3g}")


def ode_user_checks(check, gpu, cpu, best, report, rng, sizes=(100_000, 1_000_000)):
  """jaxext.ode.dop853 with Python right-hand sides, Jacobians and events on the GPU (numba-cuda
  PTX linked into the integrator at run time) against the CPU (Numba cfuncs): statuses, steps,
  values, events, derivatives, a raising function; then the cost of the linked call, a Python
  two-body + J2 against the built-in model at 1e5 and 1e6 orbits."""
  import math

  import jax
  import numpy as np
  from jaxext import ode

  def vdp(t, y, p, dydt):
    dydt[0] = y[1]
    dydt[1] = p[0] * (1 - y[0] * y[0]) * y[1] - y[0]

  def vdp_jacobian(t, y, p, dfdy, dfdp):
    dfdy[0, 1] = 1.0
    dfdy[1, 0] = -2.0 * p[0] * y[0] * y[1] - 1.0
    dfdy[1, 1] = p[0] * (1.0 - y[0] * y[0])
    dfdp[1, 0] = (1.0 - y[0] * y[0]) * y[1]

  rhs = ode.rhs(vdp, jacobian=vdp_jacobian, name="van_der_pol")
  crossing = ode.event(lambda t, y, p: y[0], name="crossing")
  n = 1000
  y0 = np.stack([rng.uniform(-2, 2, n), rng.uniform(-1, 1, n)], axis=1)
  mu = rng.uniform(0.1, 3.0, (n, 1))
  te = np.linspace(0.0, 10.0, 11)
  on = lambda dev, *xs: [jax.device_put(x, dev) for x in xs]
  run = jax.jit(lambda y, p: ode.dop853(rhs, y, (0.0, 10.0), p, t_eval=te, rtol=1e-10,
                                        atol=1e-10, events=[crossing]))
  g, c = run(*on(gpu, y0, mu)), run(*on(cpu, y0, mu))
  a = lambda x: np.asarray(x)
  check("ode user gpu: statuses equal cpu", np.array_equal(a(g.status), a(c.status)))
  steps = np.abs(a(g.n_accepted) - a(c.n_accepted)).max()
  check("ode user gpu: accepted steps within 2 of cpu", steps <= 2, f"max difference {steps}")
  err = np.abs(a(g.ys) - a(c.ys)).max()
  check("ode user gpu: ys within 1e-7 of cpu", err < 1e-7, f"max {err:.3g}")
  check("ode user gpu: event counts equal cpu", np.array_equal(a(g.event_counts), a(c.event_counts)))
  both = np.isfinite(a(c.t_events))
  terr = np.abs(a(g.t_events)[both] - a(c.t_events)[both]).max() if both.any() else 0.0
  check("ode user gpu: event times within 1e-7 of cpu", terr < 1e-7, f"max {terr:.3g}")
  grad = lambda dev: jax.jit(jax.grad(lambda y, p: ode.dop853(
      rhs, y, (0.0, 5.0), p, rtol=1e-11, atol=1e-11).y_final.sum(), argnums=(0, 1)))(
          *on(dev, y0[:128], mu[:128]))
  gg, gc = grad(gpu), grad(cpu)
  rel = max(np.abs(a(x) - a(y)).max() / np.abs(a(y)).max() for x, y in zip(gg, gc))
  check("ode user gpu: gradients match cpu to 1e-7", rel < 1e-7, f"relative {rel:.3g}")
  dense_checks(check, "ode user gpu: van der Pol", lambda y, p, te: ode.dop853(
      rhs, y, (0.0, 10.0), p, t_eval=te, rtol=1e-10, atol=1e-10, events=[crossing], dense=600),
      (y0[:128], mu[:128]), gpu, cpu, np.linspace(0.0, 10.0, 37), 1e-7,
      grad_solve=lambda y, p, te: ode.dop853(rhs, y, (0.0, 10.0), p, rtol=1e-10, atol=1e-10,
                                             dense=600))

  # Derivatives through a terminal Python event: f and the event's gradient at the event rows
  # run as numba-cuda kernels (jaxext/ode/_rows.py), under jit and under vmap.
  def crossing_gradient(t, y, p, dgdy, dgdp):
    dgdy[0] = 1.0
    return 0.0

  stop = ode.event(lambda t, y, p: y[0], terminal=True, direction=-1,
                   gradient=crossing_gradient, name="stop")

  def through_event(y, p):
    sol = ode.dop853(rhs, y, (0.0, 10.0), p, rtol=1e-11, atol=1e-11, events=[stop])
    return jax.numpy.nansum(sol.t_events) + sol.t_final.sum() + sol.y_final.sum()

  ge = lambda dev: jax.jit(jax.grad(through_event, argnums=(0, 1)))(*on(dev, y0[:128], mu[:128]))
  gg, gc = ge(gpu), ge(cpu)
  finite = all(np.isfinite(a(x)).all() for x in gc)
  rel = max(np.abs(a(x) - a(y)).max() / np.abs(a(y)).max() for x, y in zip(gg, gc))
  check("ode user gpu: gradients through a terminal Python event match cpu to 1e-7",
        finite and rel < 1e-7, f"relative {rel:.3g}")
  vb = lambda dev: jax.jit(jax.vmap(jax.grad(through_event)))(
      *on(dev, y0[:64].reshape(4, 16, 2), mu[:64].reshape(4, 16, 1)))
  vg, vc = a(vb(gpu)), a(vb(cpu))
  rel = np.abs(vg - vc).max() / np.abs(vc).max()
  check("ode user gpu: the same under vmap match cpu to 1e-7", rel < 1e-7, f"relative {rel:.3g}")

  def raises(t, y, p, dydt):
    if t > 0.5:
      raise ValueError("boom")
    dydt[0] = 1.0
  bad = jax.jit(lambda y: ode.dop853(raises, y, (0.0, 1.0)).status)(*on(gpu, np.zeros((4, 1))))
  check("ode user gpu: a raising function ends with CALLBACK_FAILED",
        bool(np.all(a(bad) == int(ode.Status.CALLBACK_FAILED))), str(a(bad)))

  # The largest kernels (a per-thread workspace of up to ~62 KB: state bound 256 with
  # derivatives), beside XLA's default preallocation of 75% of the GPU's memory.
  def chain(t, y, p, dydt):
    for i in range(y.shape[0]):
      dydt[i] = -y[i] + (y[i - 1] if i > 0 else 0.0) * 0.5

  def chain_jacobian(t, y, p, dfdy, dfdp):
    for i in range(y.shape[0]):
      dfdy[i, i] = -1.0
      if i > 0:
        dfdy[i, i - 1] = 0.5

  big = ode.rhs(chain, jacobian=chain_jacobian, name="chain")
  for n, derivatives in ((15, True), (64, False)):  # 15 + 15 * 15 = 240 <= 256; 64
    ybig = rng.normal(size=(10_000, n))
    if derivatives:
      fbig = jax.jit(jax.grad(lambda y: ode.dop853(big, y, (0.0, 5.0), rtol=1e-9,
                                                   atol=1e-9).y_final.sum()))
    else:
      fbig = jax.jit(lambda y: ode.dop853(big, y, (0.0, 5.0), rtol=1e-9, atol=1e-9).y_final)
    gb, cb = a(fbig(*on(gpu, ybig))), a(fbig(*on(cpu, ybig[:256])))
    rel = np.abs(gb[:256] - cb).max() / np.abs(cb).max()
    check(f"ode user gpu: {n} states{' with derivatives' if derivatives else ''}, 1e4 "
          "trajectories, match cpu to 1e-12", rel < 1e-12, f"relative {rel:.3g}")

  mu_e, re_, j2 = ode.models.EARTH_MU, ode.models.EARTH_RADIUS, ode.models.EARTH_J2

  def two_body_j2(t, y, p, dydt):
    r2 = y[0] * y[0] + y[1] * y[1] + y[2] * y[2]
    r = math.sqrt(r2)
    k = 1.5 * j2 * (re_ * re_) / r2
    z2 = 5.0 * y[2] * y[2] / r2
    f = -mu_e / (r2 * r)
    dydt[0], dydt[1], dydt[2] = y[3], y[4], y[5]
    dydt[3] = f * y[0] * (1.0 + k * (1.0 - z2))
    dydt[4] = f * y[1] * (1.0 + k * (1.0 - z2))
    dydt[5] = f * y[2] * (1.0 + k * (3.0 - z2))

  model = ode.models.earth(j2=True)
  for count in sizes:
    r = re_ + rng.uniform(300.0, 2000.0, count)
    v = np.sqrt(mu_e / r)
    inc = rng.uniform(0, np.pi, count)
    y0 = np.stack([r, 0 * r, 0 * r, 0 * r, v * np.cos(inc), v * np.sin(inc)], axis=1)
    (ys,) = on(gpu, y0)
    for label, f in (("python", two_body_j2), ("built-in", model)):
      fn = jax.jit(lambda y, f=f: ode.dop853(f, y, (0.0, 86400.0), rtol=1e-9, atol=1e-9).y_final)
      jax.block_until_ready(fn(ys))
      t = best(fn, ys, repeats=3)
      row = {"op": f"ode.dop853 J2 1 day rtol=1e-9 ({label} rhs)", "n": count, "s": t,
             "us_per_trajectory": t / count * 1e6}
      report["bench"].append(row)
      print(row)


def ode_jnp_checks(check, gpu, cpu, best, report, rng, small=False, peers=False,
                   sizes=(100_000, 1_000_000)):
  """jaxext.ode.dop853 with right-hand sides written in jax.numpy (jaxext/ode/_jnp.py: the jaxpr
  written out as scalar code; on the GPU compiled by numba-cuda and linked into the integrator)
  against the CPU: Lorenz with per-trajectory args (statuses, steps, values), derivatives through
  a jnp terminal event, a complex Schrodinger state, the dense output (and what keeping it costs
  at 1e5 trajectories). Then (peers)
  the speed against diffrax integrating the same jnp function (Dopri8 + PID under jit(vmap)),
  both at rtol = atol = 1e-9, with each one's error against jaxext at 1e-13 on 1000 of them."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jaxext import ode

  def lorenz(t, y, args):
    sigma, rho, beta = args
    return jnp.stack([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1],
                      y[0] * y[1] - beta * y[2]])

  n = 256 if small else 4096
  y0 = rng.normal(size=(n, 3)) + np.array([1.0, 1.0, 20.0])
  sigma = rng.uniform(9.0, 11.0, n)
  te = np.linspace(0.0, 2.0, 5)
  on = lambda dev, *xs: [jax.device_put(x, dev) for x in xs]
  a = lambda x: np.asarray(x)
  run = jax.jit(lambda y, s: ode.dop853(lorenz, y, (0.0, 2.0), args=(s, 28.0, 8 / 3),
                                        args_axes=(0, None, None), t_eval=te, rtol=1e-10,
                                        atol=1e-10))
  g, c = run(*on(gpu, y0, sigma)), run(*on(cpu, y0, sigma))
  check("ode jnp gpu: statuses equal cpu", np.array_equal(a(g.status), a(c.status)))
  steps = np.abs(a(g.n_accepted) - a(c.n_accepted)).max()
  check("ode jnp gpu: accepted steps within 2 of cpu", steps <= 2, f"max difference {steps}")
  err = (np.abs(a(g.ys) - a(c.ys)) / np.maximum(1, np.abs(a(c.ys)))).max()
  check("ode jnp gpu: Lorenz values within 1e-7 of cpu", err < 1e-7, f"max {err:.3g}")

  stop = ode.event(lambda t, y, args: y[2] - 25.0, terminal=True, direction=1)
  t_stop = lambda y, s: ode.dop853(lorenz, y, (0.0, 2.0), args=(s, 28.0, 8 / 3),
                                   args_axes=(0, None, None), events=[stop], rtol=1e-11,
                                   atol=1e-11).t_final.sum()
  grad = lambda dev: jax.jit(jax.grad(t_stop, argnums=(0, 1)))(*on(dev, y0[:128], sigma[:128]))
  gg, gc = grad(gpu), grad(cpu)
  rel = max(np.abs(a(x) - a(y)).max() / np.abs(a(y)).max() for x, y in zip(gg, gc))
  finite = all(np.isfinite(a(x)).all() for x in gc)
  check("ode jnp gpu: gradients through a jnp terminal event match cpu to 1e-7",
        finite and rel < 1e-7, f"relative {rel:.3g}")

  hamiltonian = np.array([[1.0, 0.3 - 0.2j], [0.3 + 0.2j, -0.5]])
  psi0 = np.stack([np.ones(n), np.exp(1j * rng.uniform(0, 6, n))], axis=1) / np.sqrt(2)
  schrodinger = jax.jit(lambda psi: ode.dop853(lambda t, p, h: -1j * (h @ p), psi, (0.0, 5.0),
                                               args=hamiltonian, rtol=1e-11,
                                               atol=1e-11).y_final)
  pg, pc = a(schrodinger(*on(gpu, psi0))), a(schrodinger(*on(cpu, psi0)))
  err = np.abs(pg - pc).max()
  check("ode jnp gpu: complex Schrodinger states within 1e-9 of cpu", err < 1e-9, f"max {err:.3g}")
  dense_checks(check, "ode jnp gpu: Lorenz", lambda y, s, te: ode.dop853(
      lorenz, y, (0.0, 2.0), args=(s, 28.0, 8 / 3), args_axes=(0, None, None), t_eval=te,
      rtol=1e-10, atol=1e-10, dense=400), (y0[:256], sigma[:256]), gpu, cpu,
      np.linspace(0.0, 2.0, 41), 1e-7)
  if gpu.platform != "cpu":  # what keeping the interpolants costs (and that it fits) at 1e5
    yb = rng.normal(size=(100_000, 3)) + np.array([1.0, 1.0, 20.0])
    (yd,) = on(gpu, yb)
    for dense, use in ((False, "y_final"), (128, "y_final"), (256, "y_final"),
                       (256, "evaluate at 5 times")):
      fn = jax.jit(lambda y: (lambda s: s.y_final if use == "y_final" else s.evaluate(te))(
          ode.dop853(lorenz, y, (0.0, 2.0), args=(10.0, 28.0, 8 / 3), rtol=1e-9, atol=1e-9,
                     dense=dense)))
      row = {"op": "ode.dop853 jnp Lorenz t <= 2 rtol=1e-9", "dense": dense, "result": use,
             "n": 100_000, "s": best(fn, yd, repeats=3)}
      report["bench"].append(row)
      print(row)
  if not peers:
    return
  try:
    import diffrax
  except ImportError as err:
    report["bench"].append({"op": "ode.dop853 jnp Lorenz vs diffrax", "error": repr(err)})
    return
  term = diffrax.ODETerm(lorenz)

  def one(y, args):
    sol = diffrax.diffeqsolve(term, diffrax.Dopri8(), 0.0, 2.0, None, y, args=args,
                              stepsize_controller=diffrax.PIDController(rtol=1e-9, atol=1e-9),
                              saveat=diffrax.SaveAt(t1=True), max_steps=10**6, throw=False)
    return sol.ys[-1]
  for count in (sizes if not small else (2000,)):
    yb = rng.normal(size=(count, 3)) + np.array([1.0, 1.0, 20.0])
    (yd,) = on(gpu, yb)
    ours = jax.jit(lambda y: ode.dop853(lorenz, y, (0.0, 2.0), args=(10.0, 28.0, 8 / 3),
                                        rtol=1e-9, atol=1e-9).y_final)
    theirs = jax.jit(jax.vmap(lambda y: one(y, (10.0, 28.0, 8 / 3))))
    ref = a(jax.jit(lambda y: ode.dop853(lorenz, y, (0.0, 2.0), args=(10.0, 28.0, 8 / 3),
                                         rtol=1e-13, atol=1e-13).y_final)(*on(gpu, yb[:1000])))
    errs = {}
    for label, fn in (("jaxext", ours), ("diffrax", theirs)):
      out = a(fn(yd))[:1000]
      errs[label] = float(np.median(np.max(np.abs(out - ref) / np.maximum(1, np.abs(ref)),
                                           axis=1)))
    t_ours, t_theirs = best(ours, yd, repeats=3), best(theirs, yd, repeats=3)
    row = {"op": "ode.dop853 jnp Lorenz t <= 2 rtol=1e-9 vs diffrax Dopri8", "n": count,
           "jaxext_s": t_ours, "diffrax_s": t_theirs, "speedup": t_theirs / t_ours,
           "jaxext_median_error": errs["jaxext"], "diffrax_median_error": errs["diffrax"]}
    report["bench"].append(row)
    print(row)


def equivariant_checks(check, gpu, cpu, best, report, rng, small=False, peers=False):
  """jaxext.equivariant on the GPU against the CPU: harmonics to l = 6, the tensor product and the
  fused convolution with their derivatives (forces and the gradient of a force loss), segment
  sums; bitwise determinism from run to run; NaN for unsorted ids / out-of-range nodes; then the
  MACE-like layer of benchmarks/equivariant_bench.py (N = 1000, E = 30000), forward and forward +
  backward, against the same layer unfused (gather, tensor_product, segment_sum) on the GPU."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jaxext import equivariant as eq

  a = lambda x: np.asarray(x)
  on = lambda dev, *xs: [jax.device_put(x, dev) for x in xs]

  def rel(x, y):
    x, y = a(x), a(y)
    return np.abs(x - y).max() / max(np.abs(y).max(), 1e-300)

  for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
    vec = rng.normal(size=(2000, 3)).astype(dtype)
    f = jax.jit(lambda v: eq.spherical_harmonics(range(7), v))
    r = rel(f(*on(gpu, vec)), f(*on(cpu, vec)))
    check(f"equivariant gpu: harmonics l<=6 {np.dtype(dtype).name}", r < tol, f"relative {r:.3g}")

  ix, iy, io = "8x0e+8x1o+8x2e", "0e+1o+2e+3o", "8x0e+8x1o+8x2e"
  nodes, edges = 50, 400
  snd, rcv = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
  pos = rng.normal(size=(nodes, 3))
  x = rng.normal(size=(nodes, 72))
  nw = 8 * 13  # paths of (0e+1o+2e) x (0e+1o+2e+3o) -> (0e+1o+2e): 13, 8 channels each
  w = rng.normal(size=(edges, nw)) * 0.3

  def energy(pos, x, w):
    sh = eq.spherical_harmonics(iy, pos[rcv] - pos[snd])
    h = eq.conv(x, sh, w, snd, rcv, nodes, ix, iy, io)
    t = eq.tensor_product(x[snd], sh, w, ix, iy, io)
    return jnp.sum(h ** 2) + jnp.sum(eq.segment_sum(t, rcv, nodes) * h)

  try:
    energy(pos, x, w)
  except ValueError as err:  # the weight count above is wrong: say so plainly
    check("equivariant gpu: test model builds", False, str(err)[:300])
    return
  forces = jax.jit(jax.grad(energy, argnums=(0, 1, 2)))
  force_loss = jax.jit(jax.grad(lambda p, x, w: jnp.sum(jax.grad(energy)(p, x, w) ** 2),
                                argnums=(0, 2)))
  e_g, e_c = jax.jit(energy)(*on(gpu, pos, x, w)), jax.jit(energy)(*on(cpu, pos, x, w))
  check("equivariant gpu: energy matches cpu", rel(e_g, e_c) < 1e-12, f"{rel(e_g, e_c):.3g}")
  fg, fc = forces(*on(gpu, pos, x, w)), forces(*on(cpu, pos, x, w))
  r = max(rel(p, q) for p, q in zip(fg, fc))
  check("equivariant gpu: gradients (forces, x, w) match cpu", r < 1e-11, f"relative {r:.3g}")
  lg, lc = force_loss(*on(gpu, pos, x, w)), force_loss(*on(cpu, pos, x, w))
  r = max(rel(p, q) for p, q in zip(lg, lc))
  check("equivariant gpu: gradient of a force loss matches cpu", r < 1e-10, f"relative {r:.3g}")
  # Determinism: jaxext's own primitives bitwise from run to run (each derivative kernel
  # included). The model's gradients also pass through XLA's scatter-add (the transpose of
  # pos[rcv] and x[snd]), which is not deterministic on GPUs unless --xla_gpu_deterministic_ops.
  sh = eq.spherical_harmonics(iy, pos[rcv] - pos[snd])
  t = eq.tensor_product(x[snd], sh, w, ix, iy, io)
  ours = jax.jit(lambda x, sh, w, xs, t, vec: (
      jax.vjp(lambda x, sh, w: eq.conv(x, sh, w, snd, rcv, nodes, ix, iy, io), x, sh, w)[1](
          eq.conv(x, sh, w, snd, rcv, nodes, ix, iy, io)),
      jax.vjp(lambda xs, sh, w: eq.tensor_product(xs, sh, w, ix, iy, io), xs, sh, w)[1](t),
      jax.vjp(lambda t: eq.segment_sum(t, rcv, nodes), t)[1](eq.segment_sum(t, rcv, nodes)),
      jax.vjp(lambda v: eq.spherical_harmonics(iy, v), vec)[1](sh)))
  ins = on(gpu, x, sh, w, x[snd], t, pos[rcv] - pos[snd])
  first, second = jax.tree.leaves(ours(*ins)), jax.tree.leaves(ours(*ins))
  same = [bool(np.array_equal(a(p), a(q))) for p, q in zip(first, second)]
  check("equivariant gpu: jaxext's primitives and derivative kernels bitwise deterministic",
        all(same), f"per output {same}")
  again = forces(*on(gpu, pos, x, w))
  same = [bool(np.array_equal(a(p), a(q))) for p, q in zip(fg, again)]
  print(f"note: the whole model's gradients (with XLA's scatter-add) bitwise equal run to run: {same}")
  # The same model gathering with eq.gather (no scatter-add anywhere in its gradients).

  def energy_gathered(pos, x, w):
    sh = eq.spherical_harmonics(iy, eq.gather(pos, rcv) - eq.gather(pos, snd))
    h = eq.conv(x, sh, w, snd, rcv, nodes, ix, iy, io)
    t = eq.tensor_product(eq.gather(x, snd), sh, w, ix, iy, io)
    return jnp.sum(h ** 2) + jnp.sum(eq.segment_sum(t, rcv, nodes) * h)

  forces_gathered = jax.jit(jax.grad(energy_gathered, argnums=(0, 1, 2)))
  d1, d2 = forces_gathered(*on(gpu, pos, x, w)), forces_gathered(*on(gpu, pos, x, w))
  same = all(np.array_equal(a(p), a(q)) for p, q in zip(d1, d2))
  r = max(rel(p, q) for p, q in zip(d1, fc))
  check("equivariant gpu: forces through eq.gather bitwise deterministic and equal to cpu",
        same and r < 1e-11, f"bitwise run to run {same}; relative to the cpu's {r:.3g}")

  ids = np.sort(rng.integers(-2, 30, 500)).astype(np.int32)
  data = rng.normal(size=(500, 7))
  seg = jax.jit(lambda d, i: eq.segment_sum(d, i, 25, indices_are_sorted=True))
  r = rel(seg(*on(gpu, data, ids)), seg(*on(cpu, data, ids)))
  check("equivariant gpu: sorted segment sum matches cpu", r < 1e-14, f"{r:.3g}")
  if gpu.platform != "cpu":
    bad = a(seg(*on(gpu, data, ids[::-1].copy())))
    check("equivariant gpu: unsorted ids promised sorted give NaN", bool(np.isnan(bad).all()))
    far = snd.copy()
    far[0] = nodes + 5
    sh = eq.spherical_harmonics(iy, pos[rcv] - pos[snd])
    h = a(jax.jit(lambda s: eq.conv(x, sh, w, s, rcv, nodes, ix, iy, io))(
        jax.device_put(far, gpu)))
    check("equivariant gpu: an out-of-range sender makes the result NaN", bool(np.isnan(h).all()))
    far_r = rcv.copy()
    far_r[0] = -1
    h = a(jax.jit(lambda r: eq.conv(x, sh, w, snd, r, nodes, ix, iy, io))(
        jax.device_put(far_r, gpu)))
    check("equivariant gpu: an out-of-range receiver makes the result NaN",
          bool(np.isnan(h).all()))
    # conv_p bound with an inconsistent graph (an edge order pointing past the edges): NaN from
    # the lowering's check, not reads out of bounds.
    conv_module = sys.modules["jaxext.equivariant.conv"]
    graph = [np.array(g) for g in conv_module._graph(jnp.asarray(snd, jnp.int32),
                                                      jnp.asarray(rcv, jnp.int32), nodes, nodes)]
    graph[2][0] = 10**6
    key = tuple(eq._irreps.parse(i) for i in (ix, iy, io))
    h = a(jax.jit(lambda *g: eq.conv_p.bind(x, sh, w, *g, mode=3, key=key))(
        *(jax.device_put(g, gpu) for g in graph)))
    check("equivariant gpu: conv_p with an inconsistent graph gives NaN", bool(np.isnan(h).all()))

  # Irreps beyond the model above: multiplicities above a warp and not a multiple of it, l = 3 in
  # x and out (the per-path kernel's largest blocks), l = 4 (the generic kernel's fallback); the
  # tensor product and the convolution with every cotangent, against the CPU.
  for ixo, iyy in (("40x0e+3x1o+33x2e+5x3o", "0e+1o+2e+3o"), ("3x0e+2x4e", "0e+4e")):
    terms = eq._irreps.parse(ixo)
    xs = rng.normal(size=(nodes, eq._irreps.dim(terms)))
    vec = rng.normal(size=(edges, 3))
    ws = rng.normal(size=(edges, sum(terms[i1][0] for i1, _, _ in eq.paths(ixo, iyy, ixo)))) * 0.3

    def model(x, v, w, ixo=ixo, iyy=iyy):
      sh = eq.spherical_harmonics(iyy, v)
      h = eq.conv(x, sh, w, snd, rcv, nodes, ixo, iyy, ixo)
      t = eq.tensor_product(x[snd], sh, w, ixo, iyy, ixo)
      return jnp.sum(h ** 2) + jnp.sum(jnp.sin(t))

    g = jax.jit(jax.value_and_grad(model, argnums=(0, 1, 2)))
    # float64: the GPU equals the CPU to rounding; float32: the GPU is as close to the CPU's
    # float64 result as the CPU's own float32 result is (within 3x).
    err = lambda r, ref: max(rel(p, q) for p, q in zip(jax.tree.leaves(r), jax.tree.leaves(ref)))
    try:
      ref = g(*on(cpu, xs, vec, ws))
      r = err(g(*on(gpu, xs, vec, ws)), ref)
      check(f"equivariant gpu: {ixo} x {iyy}, value and every cotangent match cpu float64",
            r < 1e-11, f"relative {r:.3g}")
      ins = [v.astype(np.float32) for v in (xs, vec, ws)]
      r32, c32 = err(g(*on(gpu, *ins)), ref), err(g(*on(cpu, *ins)), ref)
      check(f"equivariant gpu: {ixo} x {iyy}, float32 value and cotangents as accurate as the "
            "cpu's", r32 <= 3 * c32 + 1e-6, f"relative to float64: gpu {r32:.3g}, cpu {c32:.3g}")
    except Exception as e:  # noqa: BLE001 - reported; the benchmarks below still run
      check(f"equivariant gpu: {ixo} x {iyy} ran", False, repr(e)[:1000])

  # Runs longer than a task (jaxext/kernels/conv_tasks.h: 128 edges) are cut into pieces joined
  # in order: nodes receiving and sending 0, 1, 127, 128, 129, 256, 257 and 1500 edges, and a
  # padding node (jax-md's: 700 edges from and to itself); the per-path kernel (l <= 3) and the
  # generic one (l = 4); value and every cotangent against the CPU, and bits run to run.
  counts = [0, 1, 127, 128, 129, 256, 257, 1500]
  hub_nodes = len(counts) + 1
  hub_rcv = np.concatenate([np.repeat(np.arange(len(counts)), counts), np.full(700, len(counts))])
  hub_snd = np.concatenate([rng.permutation(np.repeat(np.arange(len(counts)), counts)),
                            np.full(700, len(counts))])
  perm = rng.permutation(hub_rcv.size)
  hub_snd, hub_rcv = hub_snd[perm], hub_rcv[perm]
  for ixo, iyy in (("8x0e+8x1o+8x2e", "0e+1o+2e+3o"), ("3x0e+2x4e", "0e+4e")):
    terms = eq._irreps.parse(ixo)
    xs = rng.normal(size=(hub_nodes, eq._irreps.dim(terms)))
    vec = rng.normal(size=(hub_rcv.size, 3))
    ws = rng.normal(size=(hub_rcv.size,
                          sum(terms[i1][0] for i1, _, _ in eq.paths(ixo, iyy, ixo)))) * 0.3

    def hub_model(x, v, w, ixo=ixo, iyy=iyy):
      sh = eq.spherical_harmonics(iyy, v)
      return jnp.sum(jnp.sin(eq.conv(x, sh, w, hub_snd, hub_rcv, hub_nodes, ixo, iyy, ixo)))

    g = jax.jit(jax.value_and_grad(hub_model, argnums=(0, 1, 2)))
    err = lambda r, ref: max(rel(p, q) for p, q in zip(jax.tree.leaves(r), jax.tree.leaves(ref)))
    try:
      ref = g(*on(cpu, xs, vec, ws))
      first, second = g(*on(gpu, xs, vec, ws)), g(*on(gpu, xs, vec, ws))
      r = err(first, ref)
      same = all(np.array_equal(a(p), a(q))
                 for p, q in zip(jax.tree.leaves(first), jax.tree.leaves(second)))
      check(f"equivariant gpu: runs cut into tasks ({ixo}), value and cotangents match cpu, "
            "bitwise run to run", r < 1e-11 and same, f"relative {r:.3g}; bitwise {same}")
      ins = [v.astype(np.float32) for v in (xs, vec, ws)]
      r32, c32 = err(g(*on(gpu, *ins)), ref), err(g(*on(cpu, *ins)), ref)
      check(f"equivariant gpu: runs cut into tasks ({ixo}), float32 as accurate as the cpu's",
            r32 <= 3 * c32 + 1e-6, f"relative to float64: gpu {r32:.3g}, cpu {c32:.3g}")
      if gpu.platform != "cpu":  # an out-of-range receiver: NaN everywhere, cut nodes included
        far_r = hub_rcv.copy()
        far_r[0] = hub_nodes + 3
        sh = eq.spherical_harmonics(iyy, vec)
        h = a(jax.jit(lambda r, ixo=ixo, iyy=iyy, sh=sh: eq.conv(
            xs, sh, ws, hub_snd, r, hub_nodes, ixo, iyy, ixo))(jax.device_put(far_r, gpu)))
        check(f"equivariant gpu: runs cut into tasks ({ixo}), an out-of-range receiver makes "
              "the result NaN", bool(np.isnan(h).all()))
    except Exception as e:  # noqa: BLE001 - reported; the benchmarks below still run
      check(f"equivariant gpu: runs cut into tasks ({ixo}) ran", False, repr(e)[:1000])

  # The segment sum's long segments are cut the same way (128 rows a piece, joined in order):
  # the counts above plus a padding segment, rows out of range at both ends, sorted and shuffled,
  # against the CPU and bits run to run; then timed on jax-md's padded graph (nequip_bench's
  # 128,810 rows, a fifth of them on the dummy node; NequIP's 340 features) against
  # jax.ops.segment_sum, and on the same rows spread over the nodes.
  seg_counts = counts + [700]
  seg_ids = np.concatenate([[-2, -1], np.repeat(np.arange(len(seg_counts)), seg_counts),
                            [len(seg_counts), 99]]).astype(np.int32)
  seg_data = rng.normal(size=(seg_ids.size, 5)) * 10.0 ** rng.uniform(-3, 3, (seg_ids.size, 1))
  shuffle = rng.permutation(seg_ids.size)
  try:
    worst, same = 0.0, True
    for d, i, promise in ((seg_data, seg_ids, True), (seg_data[shuffle], seg_ids[shuffle], False)):
      seg = jax.jit(lambda d, i, promise=promise: eq.segment_sum(d, i, len(seg_counts),
                                                                 indices_are_sorted=promise))
      first, second = a(seg(*on(gpu, d, i))), a(seg(*on(gpu, d, i)))
      same = same and np.array_equal(first, second)
      worst = max(worst, rel(first, seg(*on(cpu, d, i))))
    check("equivariant gpu: segment sum of segments cut into pieces matches cpu, bitwise run to "
          "run", worst < 1e-13 and same, f"relative {worst:.3g}; bitwise {same}")
  except Exception as e:  # noqa: BLE001 - reported; the benchmarks below still run
    check("equivariant gpu: segment sum of segments cut into pieces ran", False, repr(e)[:1000])
  pad_nodes, pad_rows, pad_features = (300, 12_881, 34) if small else (3000, 128_810, 340)
  real = pad_rows - pad_rows // 5
  spread = np.sort(rng.integers(0, pad_nodes, pad_rows)).astype(np.int32)
  padded = np.sort(np.concatenate([rng.integers(0, pad_nodes, real),
                                   np.full(pad_rows - real, pad_nodes)])).astype(np.int32)
  for dtype in (np.float32, np.float64):
    d = jax.device_put(rng.normal(size=(pad_rows, pad_features)).astype(dtype), gpu)
    ours = jax.jit(lambda d, i: eq.segment_sum(d, i, pad_nodes + 1, indices_are_sorted=True))
    xla = jax.jit(lambda d, i: jax.ops.segment_sum(d, i, pad_nodes + 1, indices_are_sorted=True))
    row = {"op": "equivariant segment_sum, jax-md's padded graph", "dtype": np.dtype(dtype).name,
           "rows": pad_rows, "segments": pad_nodes + 1, "features": pad_features}
    for label, ids in (("padded", padded), ("spread", spread)):
      i = jax.device_put(ids, gpu)
      row[f"{label}_ms"] = best(ours, d, i) * 1e3
      row[f"{label}_jax_ops_ms"] = best(xla, d, i) * 1e3
    report["bench"].append(row)
    print(row)

  # The MACE-like layer (benchmarks/equivariant_bench.py's sizes), fused against unfused.
  n_nodes, n_edges = (100, 3000) if small else (1000, 30000)
  ix = io = "64x0e+64x1o+64x2e"
  x = rng.normal(size=(n_nodes, 576))
  snd, rcv = rng.integers(0, n_nodes, n_edges), rng.integers(0, n_nodes, n_edges)
  vec = rng.normal(size=(n_edges, 3))
  w = rng.normal(size=(n_edges, 64 * 13))

  def fused(x, vec, w):
    return eq.conv(x, eq.spherical_harmonics(iy, vec), w, snd, rcv, n_nodes, ix, iy, io)

  def unfused(x, vec, w):
    t = eq.tensor_product(x[snd], eq.spherical_harmonics(iy, vec), w, ix, iy, io)
    return jax.ops.segment_sum(t, rcv, n_nodes)

  for dtype in (np.float32, np.float64):
    args = on(gpu, *(v.astype(dtype) for v in (x, vec, w)))
    for label, fn in (("fused", fused), ("unfused", unfused)):
      fwd = jax.jit(fn)
      both = jax.jit(jax.value_and_grad(lambda x, v, w, fn=fn: jnp.sum(fn(x, v, w) ** 2),
                                        argnums=(0, 1, 2)))
      jax.block_until_ready(fwd(*args))
      jax.block_until_ready(both(*args))
      row = {"op": f"equivariant MACE-like layer ({label})", "dtype": np.dtype(dtype).name,
             "nodes": n_nodes, "edges": n_edges, "forward_ms": best(fwd, *args) * 1e3,
             "forward_backward_ms": best(both, *args) * 1e3}
      report["bench"].append(row)
      print(row)
  if peers:
    try:
      e3nn_arm(gpu, best, report, small, check)
    except Exception as err:  # noqa: BLE001 - a peer's failure is reported, not fatal
      report["bench"].append({"op": "e3nn arm", "error": repr(err)[:2000]})
      print("e3nn arm failed:", repr(err)[:2000])


def e3nn_arm(gpu, best, report, small, check):
  """benchmarks/equivariant_bench.py's layer (radial MLP weights, positions in, forces out) on the
  GPU in its three arms, fused, unfused and e3nn-jax 0.21.0 (gather, vmapped legacy
  FunctionalTensorProduct, jax.ops.segment_sum), and cuequivariance-jax's fused kernel where it
  is installed: forward and forward + backward times, XLA's temporary memory, and every arm's
  outputs against e3nn's."""
  import jax
  import numpy as np
  import equivariant_bench as eb

  nodes, edges = (100, 3000) if small else (1000, 30000)
  problem = eb.make_problem(nodes, edges, "mlp")
  try:  # cuequivariance-jax with its CUDA kernels, where installed (benchmarks/cueq_arm.py)
    import cueq_arm
    import cuequivariance_ops_jax  # noqa: F401
    cueq_ok = cueq_arm.available() and gpu.platform == "gpu"
  except ImportError as err:
    print(f"cuequivariance arm skipped: {err}")
    cueq_ok = False
  for dtype in ("float32", "float64"):
    args = jax.device_put(eb.device_args(problem, dtype), gpu)
    row = {"op": "equivariant MACE-like layer vs e3nn-jax", "dtype": dtype, "nodes": nodes,
           "edges": edges}
    outs = {}
    for arm in eb.ARMS + (("cueq",) if cueq_ok else ()):
      for job in eb.JOBS:
        exe = jax.jit(eb.job_fn(arm, job, "mlp", nodes)).lower(*args).compile()
        outs[(arm, job)] = jax.tree.map(np.asarray, exe(*args))
        row[f"{arm} {job} ms"] = best(exe, *args, repeats=10) * 1e3
        row[f"{arm} {job} temp MB"] = eb.memory_bytes(exe)["temp"] / 1e6
    # A/B: the fused arm's backward with the edge harmonics' and weights' cotangents from their
    # modes' own kernels (JAXEXT_CONV_EDGE_CTS=separate) instead of jaxext_conv_edge_cts' one
    # pass; with both node orders passed whole to every call (JAXEXT_CONV_GRAPH=whole: the sort
    # by sender, which this program's calls do not walk, kept); then the fused arm again
    # (interleaved: this card's clocks drift between calls); the same for the unfused arm's
    # product (JAXEXT_TP_EDGE_CTS=separate against jaxext_tensor_product_edge_cts' one pass)
    fused_call = {"fused": "jaxext_conv_edge_cts", "unfused": "jaxext_tensor_product_edge_cts"}
    for arm, base, env in (
        ("fused edge-cts-separate", "fused", ("JAXEXT_CONV_EDGE_CTS", "separate")),
        ("fused whole-graph", "fused", ("JAXEXT_CONV_GRAPH", "whole")),
        ("fused again", "fused", None),
        ("unfused edge-cts-separate", "unfused", ("JAXEXT_TP_EDGE_CTS", "separate")),
        ("unfused again", "unfused", None)):
      if env:
        os.environ[env[0]] = env[1]
      try:
        lowered = jax.jit(eb.job_fn(base, "fwd+bwd", "mlp", nodes)).lower(*args)
      finally:
        if env:
          os.environ.pop(env[0], None)
      # (on the CPU stand-in no arm has it: the CPU lowers each mode alone)
      row[f"{arm} calls {fused_call[base]}"] = f"@{fused_call[base]}(" in lowered.as_text()
      exe = lowered.compile()
      outs[(arm, "fwd+bwd")] = jax.tree.map(np.asarray, exe(*args))
      row[f"{arm} fwd+bwd ms"] = best(exe, *args, repeats=10) * 1e3
    # each A/B arm against its arm again: the same sums in the same order (bitwise under the CPU
    # emulation)
    def vs_again(arm, again="fused again"):
      ref = jax.tree.leaves(outs[(again, "fwd+bwd")])
      return max(eb.max_rel(a, b) for a, b in zip(jax.tree.leaves(outs[(arm, "fwd+bwd")]), ref))
    row["fused edge-cts A/B max rel diff"] = diff = vs_again("fused edge-cts-separate")
    # without the unwalked order's sort: the same kernels on the same order, the same bits
    row["fused whole-graph A/B max rel diff"] = whole = vs_again("fused whole-graph")
    row["unfused edge-cts A/B max rel diff"] = udiff = vs_again("unfused edge-cts-separate",
                                                                "unfused again")
    if gpu.platform == "gpu":
      tol = 1e-12 if dtype == "float64" else 1e-5
      check(f"equivariant gpu: layer's edge cotangents in one call ({dtype}), as the two alone",
            row["fused again calls jaxext_conv_edge_cts"] and
            not row["fused edge-cts-separate calls jaxext_conv_edge_cts"] and
            diff < tol, f"relative {diff:.3g}")
      check(f"equivariant gpu: layer without the sort by sender ({dtype}), bits as with it",
            whole == 0, f"relative {whole:.3g}")
      check(f"equivariant gpu: unfused layer's product cotangents in one call ({dtype}), as the "
            "two alone",
            row["unfused again calls jaxext_tensor_product_edge_cts"] and
            not row["unfused edge-cts-separate calls jaxext_tensor_product_edge_cts"] and
            udiff < tol, f"relative {udiff:.3g}")
    for (arm, job), out in outs.items():
      if arm != "e3nn":
        ref = jax.tree.leaves(outs[("e3nn", job)])
        row[f"{arm} {job} max rel diff vs e3nn"] = max(
            eb.max_rel(g, r) for g, r in zip(jax.tree.leaves(out), ref))
    report["bench"].append(row)
    print(json.dumps(row))


def nequip_checks(check, device, report, atoms, layers, calls):
  """jax-md 0.2.29's NequIP (#32 items 2 and 4): benchmarks/nequip_bench.py's system on the device,
  as shipped (e3nn-jax) and routed through jaxext.equivariant.jax_md, same parameters, each arm and
  dtype in its own process (nequip_bench's --child: x64 only for float64, as a user runs it).
  Checks: float64 energies and forces of the two arms agree to 1e-10; float32 jaxext is as close
  to the float64 result as e3nn-jax's own float32 is (within 3x; e3nn-jax's contractions run in
  TF32 on GPUs by default). Bench: energy and energy + forces times (best of `calls`), XLA's
  temporaries, the device allocator's peak, and the speed-ups over e3nn-jax."""
  import nequip_bench
  import numpy as np

  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
  if device == "cpu":
    env["JAX_PLATFORMS"] = "cpu"
  res = {}
  for dtype in ("float64", "float32"):
    for arm in ("e3nn", "jaxext"):
      got, failure = nequip_bench.run_arm(arm, atoms, layers, dtype, calls, env=env)
      if got is None:
        check(f"jax-md NequIP {arm} {dtype} ran", False, failure[-4000:])
        continue
      res[arm, dtype] = got
  if ("e3nn", "float64") not in res or ("jaxext", "float64") not in res:
    return
  ref = res["e3nn", "float64"]
  f_ref = np.asarray(ref["forces"])

  def errors(r):
    de = abs(r["energy"] - ref["energy"]) / abs(ref["energy"])
    df = float(np.max(np.abs(np.asarray(r["forces"]) - f_ref)) / np.max(np.abs(f_ref)))
    return de, df

  de, df = errors(res["jaxext", "float64"])
  check("jax-md NequIP float64: jaxext's energy and forces equal e3nn-jax's to 1e-10",
        de < 1e-10 and df < 1e-10, f"energy {de:.2g} relative, forces {df:.2g} of the largest")
  if ("e3nn", "float32") in res and ("jaxext", "float32") in res:
    ours, theirs = errors(res["jaxext", "float32"]), errors(res["e3nn", "float32"])
    check("jax-md NequIP float32: jaxext as close to float64 as e3nn-jax's float32 (3x)",
          all(o <= 3 * t + 1e-6 for o, t in zip(ours, theirs)),
          f"energy, forces: jaxext {ours[0]:.2g}, {ours[1]:.2g}; e3nn-jax {theirs[0]:.2g}, "
          f"{theirs[1]:.2g}")
  for dtype in ("float64", "float32"):
    if ("e3nn", dtype) not in res or ("jaxext", dtype) not in res:
      continue
    e, j = res["e3nn", dtype], res["jaxext", dtype]
    row = {"op": "jax-md NequIP", "dtype": dtype, "atoms": atoms, "edges": j["edges"],
           "layers": layers}
    for arm, r in (("e3nn", e), ("jaxext", j)):
      for job, t in r["times"].items():
        row[f"{arm} {job} ms"] = t * 1e3
        row[f"{arm} {job} temp GiB"] = r["temp_gib"][job]
      row[f"{arm} compile s"] = sum(r["compile_s"].values())
      if "device_peak_gib" in r:
        row[f"{arm} device peak GiB"] = r["device_peak_gib"]
    for job in j["times"]:
      row[f"speed-up {job}"] = e["times"][job] / j["times"][job]
    report["bench"].append(row)
    print(json.dumps(row))


if __name__ == "__main__":
  sys.exit(main())

