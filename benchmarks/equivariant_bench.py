"""jaxext.equivariant benchmark (#12): one MACE-like interaction layer on CPU, three ways.

    tools/bazel run //benchmarks:equivariant [-- --nodes 1000 --edges 30000 --rounds 5 --calls 1
        --dtypes float64,float32 --arms fused,unfused,e3nn --weights random|mlp --cpus 0
        --no-rss --no-profile --json /abs/path.json]

The default (N = 1000 nodes, E = 30000 edges, both dtypes, 5 rounds, RSS workers and the kernel
profile) takes 3-5 min on 2 cores (the longer when they are busy); figures in
benchmarks/RESULTS.md. `--cpus 0` pins the process to CPU 0 before jax starts (a one-core
comparison: XLA sizes its thread pool from the allowed CPUs).

The layer: a random directed graph (senders uniform, receivers = sender + uniform(1, N-1) mod N,
so no self-loops), random positions (standard normal), edge vectors pos[receivers] -
pos[senders], node features x of irreps "64x0e+64x1o+64x2e" (random), edge spherical harmonics
"0e+1o+2e+3o" (normalize=True, component normalisation), output "64x0e+64x1o+64x2e": the 13
"uvu" paths of jaxext.equivariant.paths, 832 weights per edge. Per-edge weights: random (E, 832)
by default, or `--weights mlp`: a radial MLP (8 Bessel functions of |r| with cutoff 10, 8 -> 64 ->
832, SiLU) applied identically in every arm (then "the weights" are the MLP's parameters).

Arms (each jitted, x64 enabled, float64 and float32 inputs):

* fused:   jaxext.equivariant.spherical_harmonics + jaxext.equivariant.conv (no E x 576 array);
* unfused: spherical_harmonics + tensor_product(x[senders], Y, W) + jaxext segment_sum;
* e3nn:    e3nn_jax.spherical_harmonics + legacy FunctionalTensorProduct("uvu") .left_right
           vmapped over edges on x[senders] + jax.ops.segment_sum (what e3nn.scatter_sum calls);
* cueq:    (`--arms ...,cueq`, GPUs: cuequivariance-jax's fused CUDA kernel) benchmarks/cueq_arm.py.

Figures: forward (out), forward+backward (jax.value_and_grad of sum(out ** 2) with respect to
positions (forces) and the weights). Every arm's outputs and gradients are compared with e3nn's
before timing (asserted). Timings exclude compilation (reported apart), use block_until_ready,
interleaved rounds (every job once per round; `--calls 2`: twice back to back, the faster kept),
best round (median printed too), CPU/wall of the best round. Peak memory two ways: XLA's buffer assignment (`compiled.memory_analysis()`: temp +
output bytes, the arguments being the same for every arm) and the RSS high-water mark of one call
measured in a fresh subprocess per (arm, dtype, job) (VmHWM after `echo 5 > /proc/self/clear_refs`
minus VmRSS before the call; glibc's mmap threshold pinned at 64 KiB so that freed buffers leave
the RSS). The profile (skipped with --no-profile) times the kernels' four modes one by one (the forward and the
x-, y- and w-cotangents, each primitive bound directly on precomputed operands) against e3nn's
pieces.
"""

import os
import sys

if __name__ == "__main__" and "--cpus" in sys.argv:
  # Pin before jax starts: XLA's CPU client sizes its thread pools from the allowed CPUs.
  os.sched_setaffinity(0, {int(c) for c in sys.argv[sys.argv.index("--cpus") + 1].split(",")})

import argparse  # noqa: E402
import collections  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_enable_x64", True)

import e3nn_jax as e3nn  # noqa: E402
from e3nn_jax.legacy import FunctionalTensorProduct  # noqa: E402

import jaxext.equivariant as eq  # noqa: E402
from jaxext.equivariant import _irreps  # noqa: E402

_tp = importlib.import_module("jaxext.equivariant.tensor_product")
_conv = importlib.import_module("jaxext.equivariant.conv")

IRREPS_X = "64x0e+64x1o+64x2e"
IRREPS_SH = "0e+1o+2e+3o"
IRREPS_OUT = "64x0e+64x1o+64x2e"
ARMS = ("fused", "unfused", "e3nn")
JOBS = ("fwd", "fwd+bwd")
N_BASIS, HIDDEN, CUTOFF = 8, 64, 10.0


def spec():
  return _tp._spec(*(_irreps.parse(i, n) for i, n in ((IRREPS_X, "x"), (IRREPS_SH, "sh"),
                                                        (IRREPS_OUT, "out"))))


def entries_per_edge():
  """Inner-loop iterations of kernels/tp.h per edge: sum over paths of mul x CG nonzeros."""
  return sum(p[4] * (p[9] - p[8]) for p in spec().paths)


# --- the problem --------------------------------------------------------------------------------

def make_problem(nodes, edges, weights, seed=0):
  """NumPy float64 inputs: pos (N, 3), x (N, 576), senders/receivers (E,) int32, weight params."""
  rng = np.random.default_rng(seed)
  snd = rng.integers(nodes, size=edges)
  rcv = (snd + rng.integers(1, nodes, size=edges)) % nodes
  pos = rng.normal(size=(nodes, 3))
  x = rng.normal(size=(nodes, _irreps.dim(_irreps.parse(IRREPS_X, "x"))))
  nw = spec().dims[2]
  if weights == "random":
    wp = rng.normal(size=(edges, nw))
  else:
    wp = (rng.normal(size=(N_BASIS, HIDDEN)), rng.normal(size=(HIDDEN, nw)))
  return pos, wp, x, snd.astype(np.int32), rcv.astype(np.int32)


def edge_weights(wp, vec, weights):
  if weights == "random":
    return wp
  w1, w2 = wp
  r = jnp.sqrt(jnp.sum(vec * vec, axis=-1, keepdims=True))
  n = jnp.arange(1, N_BASIS + 1, dtype=vec.dtype)
  basis = math.sqrt(2 / CUTOFF) * jnp.sin(n * (math.pi / CUTOFF) * r) / r  # Python floats: weak
  h = jax.nn.silu(basis @ w1 / math.sqrt(N_BASIS))
  return h @ w2 / math.sqrt(HIDDEN)


_E3NN_TP = {}


def e3nn_tp():
  if "tp" not in _E3NN_TP:
    instructions = [(i1, i2, io, "uvu", True) for i1, i2, io in eq.paths(IRREPS_X, IRREPS_SH,
                                                                          IRREPS_OUT)]
    _E3NN_TP["tp"] = FunctionalTensorProduct(e3nn.Irreps(IRREPS_X), e3nn.Irreps(IRREPS_SH),
                                             e3nn.Irreps(IRREPS_OUT), instructions)
  return _E3NN_TP["tp"]


def e3nn_messages(xs, y, w):
  tp = e3nn_tp()
  row = lambda a, b, c: tp.left_right(c, e3nn.IrrepsArray(IRREPS_X, a),
                                      e3nn.IrrepsArray(IRREPS_SH, b)).array
  return jax.vmap(row)(xs, y, w)


def e3nn_sh(vec):
  return e3nn.spherical_harmonics(IRREPS_SH, vec, normalize=True, normalization="component").array


def layer(arm, weights, nodes):
  def f(pos, wp, x, snd, rcv):
    vec = pos[rcv] - pos[snd]
    w = edge_weights(wp, vec, weights)
    if arm == "fused":
      y = eq.spherical_harmonics(IRREPS_SH, vec)
      return eq.conv(x, y, w, snd, rcv, nodes, IRREPS_X, IRREPS_SH, IRREPS_OUT)
    if arm == "unfused":
      y = eq.spherical_harmonics(IRREPS_SH, vec)
      m = eq.tensor_product(x[snd], y, w, IRREPS_X, IRREPS_SH, IRREPS_OUT)
      return eq.segment_sum(m, rcv, nodes)
    return jax.ops.segment_sum(e3nn_messages(x[snd], e3nn_sh(vec), w), rcv, nodes)
  if arm == "cueq":  # cuequivariance-jax, not in ARMS: on GPUs (benchmarks/cueq_arm.py)
    import cueq_arm
    return cueq_arm.cueq_layer(nodes, weights, edge_weights=edge_weights)
  return f


def job_fn(arm, job, weights, nodes):
  f = layer(arm, weights, nodes)
  if job == "fwd":
    return f
  # forces (d/dpos) and the weights' gradient of sum(out^2), with the loss itself
  return jax.value_and_grad(lambda pos, wp, x, snd, rcv: jnp.sum(f(pos, wp, x, snd, rcv) ** 2),
                            argnums=(0, 1))


def device_args(problem, dtype):
  pos, wp, x, snd, rcv = problem
  cast = lambda a: jnp.asarray(a, dtype)
  return (cast(pos), jax.tree.map(cast, wp), cast(x), jnp.asarray(snd), jnp.asarray(rcv))


def compile_job(arm, job, weights, nodes, args):
  t = time.perf_counter()
  exe = jax.jit(job_fn(arm, job, weights, nodes)).lower(*args).compile()
  return exe, time.perf_counter() - t


def memory_bytes(exe):
  ma = exe.memory_analysis()
  return dict(temp=int(ma.temp_size_in_bytes), output=int(ma.output_size_in_bytes),
              argument=int(ma.argument_size_in_bytes))


# --- RSS high-water mark in a fresh process -----------------------------------------------------

def _proc_kb(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1])
  raise RuntimeError(f"no {field} in /proc/self/status")


def rss_worker(args):
  arm, dtype, job = args.rss_worker.split(",")
  problem = make_problem(args.nodes, args.edges, args.weights, args.seed)
  dev = device_args(problem, jnp.dtype(dtype))
  del problem
  exe, _ = compile_job(arm, job, args.weights, args.nodes, dev)
  out = jax.block_until_ready(exe(*dev))  # warm: thread pools, lazy initialisations
  del out
  gc.collect()
  # The warm call's buffers may be released after block_until_ready returns: wait for the RSS to
  # settle (two reads 0.2 s apart within 1 MiB) before taking the baseline.
  before = _proc_kb("VmRSS")
  for _ in range(50):
    time.sleep(0.2)
    now = _proc_kb("VmRSS")
    if abs(now - before) < 1024:
      break
    before = now
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
  reset = _proc_kb("VmHWM")
  out = jax.block_until_ready(exe(*dev))
  peak = _proc_kb("VmHWM")
  del out
  gc.collect()
  time.sleep(0.5)
  print("@@" + json.dumps(dict(before_kb=before, reset_hwm_kb=reset, peak_kb=peak,
                               after_kb=_proc_kb("VmRSS"))), flush=True)


def measure_rss(args, arm, dtype, job):
  env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
  cmd = [sys.executable, __file__, "--rss-worker", f"{arm},{dtype},{job}",
         "--nodes", str(args.nodes), "--edges", str(args.edges), "--weights", args.weights,
         "--seed", str(args.seed)] + (["--cpus", args.cpus] if args.cpus else [])
  res = subprocess.run(cmd, env=env, capture_output=True, text=True)
  for line in res.stdout.splitlines():
    if line.startswith("@@"):
      rep = json.loads(line[2:])
      if rep["reset_hwm_kb"] > rep["before_kb"] + 1024:
        print(f"  warning: clear_refs did not reset VmHWM ({rep})")
      print(f"  RSS {arm} {dtype} {job}: baseline {rep['before_kb'] / 1024:.0f} MiB, peak "
            f"{rep['peak_kb'] / 1024:.0f} MiB, after {rep['after_kb'] / 1024:.0f} MiB", flush=True)
      return (rep["peak_kb"] - rep["before_kb"]) * 1024
  print(f"  RSS worker {arm} {dtype} {job} failed (rc {res.returncode}):\n{res.stderr[-2000:]}")
  return None


# --- timing -------------------------------------------------------------------------------------

def timed(fn, *args):
  c, t = time.process_time(), time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - t, time.process_time() - c


def best_of(fn, args, calls):
  fn_out = jax.block_until_ready(fn(*args))  # warm
  del fn_out
  return min(timed(fn, *args)[0] for _ in range(calls))


def max_rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def check(outs, dtype):
  """Every arm's outputs (and gradients) against e3nn's; returns {(arm, job): max rel diff}."""
  # float32 on GPUs: e3nn-jax's contractions and the radial MLP's matmuls run at XLA's default
  # precision there, TF32 (10-bit mantissas), in every arm's weights and in e3nn's products.
  tol = 1e-10 if dtype == "float64" else 1e-4 if jax.default_backend() == "cpu" else 2e-3
  diffs = {}
  for (arm, job), out in outs.items():
    if arm == "e3nn" or ("e3nn", job) not in outs:
      continue
    ref = jax.tree.leaves(outs[("e3nn", job)])
    got = jax.tree.leaves(out)
    d = max(max_rel(g, r) for g, r in zip(got, ref))
    diffs[(arm, job)] = d
    assert d < tol, f"{arm} {job} {dtype}: max |diff| / max |e3nn| = {d:.2e} > {tol:g}"
  return diffs


def fmt_ms(s):  # two decimals below 10 ms (GPU figures), one above
  return "-" if s is None else f"{s * 1e3:.2f}" if s < 0.01 else f"{s * 1e3:.1f}"


def fmt_mib(b):
  return "-" if b is None else f"{b / 2**20:.0f}"


# --- profile: the kernels' modes one by one ----------------------------------------------------

def profile(args, problem, dtype, calls):
  """Times of each piece of the layer, jitted alone on precomputed operands (best of `calls`)."""
  X, Y, W, OUT = _tp.X, _tp.Y, _tp.W, _tp.OUT
  sp = spec()
  key = tuple(_irreps.parse(i, n) for i, n in ((IRREPS_X, "x"), (IRREPS_SH, "sh"),
                                                 (IRREPS_OUT, "out")))
  pos, wp, x, snd, rcv = device_args(problem, jnp.dtype(dtype))
  n, e = x.shape[0], snd.shape[0]
  vec = pos[rcv] - pos[snd]
  w = edge_weights(wp, vec, args.weights)
  y = eq.spherical_harmonics(IRREPS_SH, vec)
  xs = x[snd]
  rng = np.random.default_rng(1)
  ct_node = jnp.asarray(rng.normal(size=(n, sp.dims[OUT])), dtype)
  ct_edge = jnp.asarray(rng.normal(size=(e, sp.dims[OUT])), dtype)
  graph = jax.jit(_conv._graph, static_argnums=(2, 3))(snd, rcv, n, n)
  value = {X: x, Y: y, W: w, OUT: ct_node}
  edge_value = {X: xs, Y: y, W: w, OUT: ct_edge}
  names = {OUT: "forward (out)", X: "x-cotangent", Y: "y-cotangent", W: "w-cotangent"}
  rows = []

  def add(what, fn, *ops, entries=None):
    t = best_of(jax.jit(fn), ops, calls)
    rows.append((what, t, None if entries is None else t / entries * 1e9))

  total = e * entries_per_edge()
  for mode in (OUT, X, Y, W):
    ops = [value[s] for s in range(4) if s != mode]
    add(f"conv_p {names[mode]} (exported: checks the bound graph on GPUs)",
        lambda a, b, c, *g, m=mode: _conv.conv_p.bind(
        a, b, c, *g, mode=m, key=key), *ops, *graph, entries=total)
  add("conv() forward (out): conv's own primitive, graph trusted",
      lambda a, b, c, *g: _conv._conv_built_p.bind(a, b, c, *g, mode=OUT, key=key),
      *[value[s] for s in range(4) if s != OUT], *graph, entries=total)
  for mode in (OUT, X, Y, W):
    ops = [edge_value[s] for s in range(4) if s != mode]
    add(f"tp_p {names[mode]} (E rows)", lambda a, b, c, m=mode: _tp.tp_p.bind(
        a, b, c, mode=m, key=key), *ops, entries=total)
  add("conv's graph (2 stable argsorts + per-node counts)",
      lambda s, r: _conv._graph(s, r, n, n), snd, rcv)
  add("jaxext spherical_harmonics (E x 16)", lambda v: eq.spherical_harmonics(IRREPS_SH, v), vec)
  add("e3nn spherical_harmonics (E x 16)", e3nn_sh, vec)
  add("jaxext segment_sum (E x 576 -> N)", lambda m, r: eq.segment_sum(m, r, n), ct_edge, rcv)
  add("jax.ops.segment_sum (E x 576 -> N)", lambda m, r: jax.ops.segment_sum(m, r, n), ct_edge,
      rcv)
  add("gather x[senders] (E x 576)", lambda a, s: a[s], x, snd)
  add("e3nn TP forward (vmapped, E rows)", e3nn_messages, xs, y, w)
  add("e3nn TP forward + vjp -> (y, w) cotangents", lambda a, b, c, ct: jax.vjp(
      lambda b, c: e3nn_messages(a, b, c), b, c)[1](ct), xs, y, w, ct_edge)
  add("e3nn TP forward + vjp -> x cotangent", lambda a, b, c, ct: jax.vjp(
      lambda a: e3nn_messages(a, b, c), a)[1](ct), xs, y, w, ct_edge)
  return rows


# --- main ---------------------------------------------------------------------------------------

def cpu_model():
  try:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
      if line.startswith("Model name:"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  with open("/proc/cpuinfo") as f:
    for line in f:
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  return platform.processor() or "?"


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--nodes", type=int, default=1000)
  p.add_argument("--edges", type=int, default=30000)
  p.add_argument("--dtypes", default="float64,float32")
  p.add_argument("--arms", default=",".join(ARMS))
  p.add_argument("--weights", choices=("random", "mlp"), default="random",
                 help="per-edge weights: random (E, 832), or a radial MLP of |r| (both arms)")
  p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
  p.add_argument("--calls", type=int, default=1,
                 help="back-to-back calls of each job per round, the fastest kept (1: each "
                      "call follows another job's; 2: a repeated step, as in training)")
  p.add_argument("--no-rss", action="store_true", help="skip the per-arm RSS subprocesses")
  p.add_argument("--no-profile", action="store_true", help="skip the per-mode kernel profile")
  p.add_argument("--profile-calls", type=int, default=5, help="calls per profiled piece (best)")
  p.add_argument("--cpus", help="pin the process (and its RSS workers) to these CPUs before jax "
                 "starts, e.g. 0 for a one-core comparison (default: every allowed CPU)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--json", help="write the raw figures here (an absolute path: `bazel run` "
                 "runs elsewhere)")
  p.add_argument("--rss-worker", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.rss_worker:
    return rss_worker(args)

  dtypes = args.dtypes.split(",")
  arms = args.arms.split(",")
  t_start = time.perf_counter()
  print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, allowed "
        f"{sorted(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}; Python "
        f"{platform.python_version()}; jax {jax.__version__}; e3nn-jax {e3nn.__version__}; numpy "
        f"{np.__version__}; {datetime.date.today()}")
  print(f"N = {args.nodes} nodes, E = {args.edges} edges, {IRREPS_X} x {IRREPS_SH} -> "
        f"{IRREPS_OUT}: {len(spec().paths)} paths, {spec().dims[2]} weights per edge, "
        f"{entries_per_edge()} kernel entries (mul x CG nonzeros) per edge; weights "
        f"{args.weights}; dtypes {dtypes}; {args.rounds} rounds", flush=True)
  problem = make_problem(args.nodes, args.edges, args.weights, args.seed)

  # Pass 0: compile, run once, check against e3nn, memory analysis.
  jobs, compile_s, mem, diffs = {}, {}, {}, {}
  for dtype in dtypes:
    dev = device_args(problem, jnp.dtype(dtype))
    outs = {}
    for arm in arms:
      for job in JOBS:
        exe, compile_s[(arm, dtype, job)] = compile_job(arm, job, args.weights, args.nodes, dev)
        out = jax.block_until_ready(exe(*dev))
        assert all(leaf.dtype == jnp.dtype(dtype) for leaf in jax.tree.leaves(out)), arm
        outs[(arm, job)] = jax.tree.map(np.asarray, out)
        mem[(arm, dtype, job)] = memory_bytes(exe)
        jobs[(arm, dtype, job)] = (exe, dev)
    for (arm, job), d in check(outs, dtype).items():
      diffs[(arm, dtype, job)] = d
      print(f"  check {dtype} {arm} {job}: max |diff| / max |e3nn| = {d:.1e}")
    del outs
  print(f"compiled and checked ({time.perf_counter() - t_start:.0f} s)", flush=True)

  # Timing rounds, interleaved: every job once per round.
  times, cpu = collections.defaultdict(list), collections.defaultdict(list)
  for r in range(args.rounds):
    t_round = time.perf_counter()
    for key, (exe, dev) in jobs.items():
      wall, c = min(timed(exe, *dev) for _ in range(args.calls))
      times[key].append(wall)
      cpu[key].append(c / wall)
    print(f"round {r + 1}/{args.rounds}: {time.perf_counter() - t_round:.1f} s, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
  jobs.clear()
  gc.collect()

  rss = {}
  if not args.no_rss:
    for dtype in dtypes:
      for arm in arms:
        for job in JOBS:
          rss[(arm, dtype, job)] = measure_rss(args, arm, dtype, job)
    print("RSS workers done", flush=True)

  prof = {}
  if not args.no_profile:
    for dtype in dtypes:
      prof[dtype] = profile(args, problem, dtype, args.profile_calls)
    print("profile done", flush=True)

  # Report.
  best = {k: min(v) for k, v in times.items()}
  med = {k: float(np.median(v)) for k, v in times.items()}
  cpu_best = {k: cpu[k][int(np.argmin(times[k]))] for k in times}
  print("\nCompile times (s, excluded from every timing; lower + compile):")
  for (arm, dtype, job), s in compile_s.items():
    print(f"  {arm} {dtype} {job}: {s:.2f}")
  print(f"\n### N = {args.nodes}, E = {args.edges}, weights {args.weights}: best of "
        f"{args.rounds} interleaved rounds ({args.calls} call(s) per job per round; median in "
        "brackets), ms; peak memory MiB: XLA temp + "
        "output (memory_analysis) / RSS high-water mark of one call (subprocess)")
  print("| arm | dtype | forward ms | fwd+bwd ms | CPU/wall fwd, f+b | fwd mem XLA / RSS | "
        "f+b mem XLA / RSS | speed-up (e3nn time / ours): fwd, f+b | f+b memory ours / e3nn: "
        "XLA, RSS |")
  print("|---|---|---:|---:|---|---|---|---|---|")
  for dtype in dtypes:
    for arm in arms:
      f, b = (arm, dtype, "fwd"), (arm, dtype, "fwd+bwd")
      xla = lambda k: mem[k]["temp"] + mem[k]["output"]
      ratio = ""
      e_f, e_b = ("e3nn", dtype, "fwd"), ("e3nn", dtype, "fwd+bwd")
      if arm != "e3nn" and e_b in best:
        ratio_mem = f"{xla(b) / xla(e_b):.2f}x"
        if rss.get(b) and rss.get(e_b):
          ratio_mem += f", {rss[b] / rss[e_b]:.2f}x"
        ratio = f"{best[e_f] / best[f]:.2f}x, {best[e_b] / best[b]:.2f}x | {ratio_mem}"
      else:
        ratio = " | "
      print(f"| {arm} | {dtype} | {fmt_ms(best[f])} ({fmt_ms(med[f])}) | {fmt_ms(best[b])} "
            f"({fmt_ms(med[b])}) | {cpu_best[f]:.2f}, {cpu_best[b]:.2f} | "
            f"{fmt_mib(xla(f))} / {fmt_mib(rss.get(f))} | {fmt_mib(xla(b))} / "
            f"{fmt_mib(rss.get(b))} | {ratio} |")
  print("\nXLA memory_analysis detail (MiB: temp, output; arguments are the same in every arm):")
  for (arm, dtype, job), m in mem.items():
    print(f"  {arm} {dtype} {job}: temp {fmt_mib(m['temp'])}, output {fmt_mib(m['output'])}, "
          f"arguments {fmt_mib(m['argument'])}")
  if diffs:
    print("\nagreement with e3nn (max |diff| / max |e3nn| over the output, or the loss, forces "
          "and weight gradient): " + ", ".join(f"{a} {d} {j} {v:.1e}"
                                                for (a, d, j), v in diffs.items()))
  for dtype, rows in prof.items():
    print(f"\n### profile, {dtype}: each piece jitted alone on precomputed operands, best of "
          f"{args.profile_calls} calls; kernel ns/entry = time / (E x {entries_per_edge()})")
    print("| piece | ms | ns per kernel entry |\n|---|---:|---:|")
    for what, t, per in rows:
      print(f"| {what} | {fmt_ms(t)} | {'' if per is None else f'{per:.2f}'} |")
  print(f"\ntotal {time.perf_counter() - t_start:.0f} s, load average {os.getloadavg()[0]:.2f}")

  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(times={repr(k): v for k, v in times.items()},
                     cpu={repr(k): v for k, v in cpu.items()},
                     compile_s={repr(k): v for k, v in compile_s.items()},
                     memory={repr(k): v for k, v in mem.items()},
                     rss={repr(k): v for k, v in rss.items()},
                     diffs={repr(k): v for k, v in diffs.items()},
                     profile={d: rows for d, rows in prof.items()}), f, indent=1)


if __name__ == "__main__":
  main()
