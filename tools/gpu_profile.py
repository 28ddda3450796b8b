#!/usr/bin/env python3
"""Nsight Compute over jaxext's equivariant kernels on a GPU machine (run by a developer, not CI).

One workload per process, each one jitted call profiled after a warm-up call (compilation, first
run), the profiled window opened and closed with cudaProfilerStart/Stop so that the profiler sees
that call's kernels and nothing else (jaxext's and XLA's alike: where the time goes beside the
peers' kernels). tools/gpu_profile.sh runs them under `ncu` and then summarises:

    tools/gpu_profile.py list                          # the workloads, one per line
    tools/gpu_profile.py run WORKLOAD [--libs .gpu] [--small] [--device gpu|cpu]
    tools/gpu_profile.py summarize ncu_*.csv           # ncu --csv --page details output

Workloads (benchmarks/equivariant_bench.py's MACE-like layer, N = 1000, E = 30000, radial MLP
weights, forward + backward: forces and the weights' gradient):
    layer-fused-f32, layer-fused-f64       jaxext's conv
    layer-unfused-f32                      jaxext's tensor_product + segment_sum
    layer-e3nn-f32, layer-e3nn-f64         e3nn-jax 0.21.0 (where importable)
    layer-cueq-f32                         cuequivariance-jax (where it installs, on a GPU)
    padded-conv-f32                        jax-md's NequIP first layer's conv on its padded graph
                                           (3001 nodes, 128,810 edges, a fifth on the dummy node;
                                           the graph an argument, sorted in the call, and the
                                           weights factored, as jaxext.equivariant.jax_md's)
    padded-segment-f32                     segment_sum of NequIP's 340 features over that graph
`--small` shrinks every size (the CPU stand-in of tests/gpu_profile_test.py, and
compute-sanitizer's memcheck, whose replay is slow).

The handlers come from the plain shared libraries of `--libs` as in tools/gpu_checks.py (its
docstring says how to build them). With `--device cpu` the CPU stands in and no profiler window
is opened (the test of this script).
"""

import argparse
import csv
import ctypes
import ctypes.util
import glob
import io
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The ones #32 asks about first (ncu writes a workload's CSV only when it exits: a deadline
# loses the last ones whole).
WORKLOADS = ("layer-fused-f32", "layer-e3nn-f32", "layer-cueq-f32", "padded-conv-f32",
             "padded-segment-f32", "layer-fused-f64", "layer-e3nn-f64", "layer-unfused-f32")
# Peers whose absence skips a workload (said, exit 0); anything else missing is a failure.
PEER_WORKLOADS = ("layer-e3nn-f32", "layer-e3nn-f64", "layer-cueq-f32")
# jaxext's kernels (tp_kernels.cu, sph_kernels.cu), by name as ncu shows them.
_OURS = re.compile(r"jaxext::|\b(TpFastKernel|TpFastEdgeCtsKernel|TpKernel|ConvJoinKernel|"
                   r"SegmentSumKernel|SegmentJoinKernel|CheckSegmentTasksKernel|"
                   r"CheckSortedKernel|SphKernel)\b")

# The metrics the summary shows (ncu's section names of SpeedOfLight, Occupancy, LaunchStats).
COLUMNS = (("Duration", "us"), ("Compute (SM) Throughput", "SM %"),
           ("Memory Throughput", "mem %"), ("DRAM Throughput", "DRAM %"),
           ("Achieved Occupancy", "occ %"), ("Registers Per Thread", "regs"),
           ("Dynamic Shared Memory Per Block", "dyn smem B"))

_TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}
_BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "KB": 1e3, "MB": 1e6, "Kibyte": 1024,
               "Mibyte": 1024 ** 2}


# --- the profiled window --------------------------------------------------------------------------

def _cudart():
  """The CUDA runtime, for cudaProfilerStart/Stop (the primary context, which XLA uses): the
  toolkit's, the nvidia-cuda-runtime wheel's that jax's CUDA plugin depends on, or the loader's."""
  candidates = []
  try:  # the runtime already mapped into this process (jax's CUDA plugin's), if any
    with open("/proc/self/maps") as maps:
      candidates += sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
  except OSError:
    pass
  for entry in sys.path:  # the nvidia-cuda-runtime wheel's, then the toolkit's, newest first
    candidates += sorted(glob.glob(os.path.join(entry, "nvidia", "cu*", "lib", "libcudart.so*")))
    candidates += sorted(glob.glob(os.path.join(entry, "nvidia", "cuda_runtime", "lib",
                                                "libcudart.so*")))
  candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"), reverse=True)
  found = ctypes.util.find_library("cudart")
  if found:
    candidates.append(found)
  for path in candidates:
    try:
      lib = ctypes.CDLL(path)
      lib.cudaProfilerStart, lib.cudaProfilerStop  # noqa: B018 - both must exist
      return lib, path
    except (OSError, AttributeError):
      continue
  return None, None


class Window:
  """cudaProfilerStart on entry, cudaProfilerStop on exit (nothing on the CPU stand-in); `opened`
  says whether the window opened (on a GPU: a runtime found and its start call succeeded)."""

  def __init__(self, on_gpu):
    self.lib, self.path = _cudart() if on_gpu else (None, None)
    self.opened = not on_gpu

  def __enter__(self):
    if self.lib is not None:
      err = self.lib.cudaProfilerStart()
      self.opened = err == 0
      print(f"gpu_profile: cudaProfilerStart ({self.path}) -> {err}", file=sys.stderr)
    return self

  def __exit__(self, *exc):
    if self.lib is not None:
      self.lib.cudaProfilerStop()
    return False


# --- the workloads --------------------------------------------------------------------------------

def build(name, small):
  """(jitted function, its arguments) of a workload, the arguments on the default device."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from jaxext import equivariant as eq

  kind, dtype = name.rsplit("-", 1)
  dtype = {"f32": "float32", "f64": "float64"}[dtype]
  if kind.startswith("layer-"):
    sys.path[:0] = [os.path.join(ROOT, "benchmarks")]
    import equivariant_bench as eb
    arm = kind[len("layer-"):]
    if arm == "cueq" and jax.default_backend() != "gpu":
      raise ImportError("cuequivariance-jax's kernels run on GPUs only")
    nodes, edges = (100, 3000) if small else (1000, 30000)
    args = eb.device_args(eb.make_problem(nodes, edges, "mlp"), dtype)
    return jax.jit(eb.job_fn(arm, "fwd+bwd", "mlp", nodes)), args
  # jax-md's padded neighbour list: a fifth of the slots from and to a dummy node (the last)
  rng = np.random.default_rng(0)
  nodes, rows = (300, 12_881) if small else (3000, 128_810)
  real = rows - rows // 5
  snd = np.concatenate([rng.integers(0, nodes, real), np.full(rows - real, nodes)])
  rcv = np.concatenate([rng.integers(0, nodes, real), np.full(rows - real, nodes)])
  if kind == "padded-segment":
    ids = np.sort(rcv).astype(np.int32)
    data = jnp.asarray(rng.normal(size=(rows, 34 if small else 340)), dtype)
    return jax.jit(lambda d, i: eq.segment_sum(d, i, nodes + 1, indices_are_sorted=True)), (
        data, jnp.asarray(ids))
  if kind == "padded-conv":  # NequIP's first layer: 128 scalars by harmonics to l = 2
    ix, iy, io = "128x0e", "0e+1o+2e", "128x0e+128x1o+128x2e"
    nw = sum(128 for _ in eq.paths(ix, iy, io))
    x = jnp.asarray(rng.normal(size=(nodes + 1, 128)), dtype)
    vec = jnp.asarray(rng.normal(size=(rows, 3)), dtype)
    # the radial MLP's last hidden layer (64 wide, as jax-md's) and last kernel: the weights are
    # hidden @ kernel, made on the way (edge_weights_kernel), as the routed model's
    hidden = jnp.asarray(rng.normal(size=(rows, 64)), dtype)
    kernel = jnp.asarray(rng.normal(size=(64, nw)) / 8, dtype)

    def energy(x, vec, hidden, kernel, snd, rcv):  # the graph an argument: sorted in the call
      h = eq.conv(x, eq.spherical_harmonics(iy, vec), hidden, snd, rcv, nodes + 1, ix, iy, io,
                  edge_weights_kernel=kernel)
      return jnp.sum(h ** 2)

    return jax.jit(jax.value_and_grad(energy, argnums=(0, 1, 2, 3))), (
        x, vec, hidden, kernel, jnp.asarray(snd, jnp.int32), jnp.asarray(rcv, jnp.int32))
  raise SystemExit(f"gpu_profile: unknown workload {name!r}; choose from {list(WORKLOADS)}")


def run(args):
  libs = ["cpu=" + os.path.join(args.libs, "jaxext_cpu_handlers.so")]
  on_gpu = args.device == "gpu"
  if on_gpu:
    libs.append("CUDA=" + os.path.join(args.libs, "jaxext_cuda_handlers.so"))
  os.environ["JAXEXT_HANDLER_LIBRARIES"] = ",".join(libs)
  sys.path[:0] = [ROOT]
  import jax
  jax.config.update("jax_enable_x64", True)
  jax.config.update("jax_default_device", jax.devices(args.device)[0])
  try:
    fn, operands = build(args.workload, args.small)
  except ImportError as err:
    if args.workload not in PEER_WORKLOADS:
      raise
    print(f"gpu_profile: {args.workload} skipped: {err}", file=sys.stderr)  # a peer: said
    return 0
  operands = jax.device_put(operands, jax.devices(args.device)[0])
  t = time.perf_counter()
  jax.block_until_ready(fn(*operands))  # compilation, autotuning, first run: not profiled
  warm = time.perf_counter() - t
  t = time.perf_counter()
  with Window(on_gpu) as window:
    jax.block_until_ready(fn(*operands))
  print(f"gpu_profile: {args.workload}: warm-up {warm:.2f} s, profiled call "
        f"{(time.perf_counter() - t) * 1e3:.2f} ms (under the profiler: not a timing)",
        file=sys.stderr)
  if not window.opened:
    print("gpu_profile: the profiler window did not open (no CUDA runtime found, or its "
          "cudaProfilerStart failed): ncu --profile-from-start off saw nothing; run "
          "tools/gpu_profile.sh with NCU_FROM_START=1", file=sys.stderr)
    return 2
  return 0


# --- the summary ----------------------------------------------------------------------------------

def _number(text):
  try:
    return float(text.replace(",", ""))
  except ValueError:
    return None


def read_ncu_csv(text):
  """ncu --csv --page details output (the program's and ncu's own lines around it skipped) as
  {kernel: {"name", "grid", "block", metric name: (value, unit)}}, in launch order. Columns as
  ncu writes them (2023 on: ID, Process ID, ..., Kernel Name, ..., Block Size, Grid Size, ...,
  Section Name, Metric Name, Metric Unit, Metric Value; older ones lack the sizes)."""
  lines = text.splitlines()
  start = next((i for i, line in enumerate(lines) if line.startswith('"') and
                '"Metric Name"' in line and '"Metric Value"' in line), None)
  if start is None:
    return {}
  body = [line for line in lines[start:] if line.startswith('"')]
  kernels = {}
  for row in csv.DictReader(io.StringIO("\n".join(body))):
    key = row.get("ID") or row.get("Kernel Name")
    if not key:
      continue
    k = kernels.setdefault(key, {"name": row.get("Kernel Name") or "?",
                                 "grid": row.get("Grid Size") or "",
                                 "block": row.get("Block Size") or ""})
    k[row.get("Metric Name") or ""] = (row.get("Metric Value") or "", row.get("Metric Unit") or "")
  return kernels


def _value(kernel, metric):
  value, unit = kernel.get(metric, ("", ""))
  v = _number(value)
  if v is None:
    return None
  if metric == "Duration":
    return v * _TIME_UNITS.get(unit, 1.0)
  if "Shared Memory" in metric:  # (units such as "Kbyte/block")
    return v * _BYTE_UNITS.get(unit.split("/")[0], 1)
  return v


def short_name(name, width=58):
  """A kernel's name without template arguments and parameter lists, at most `width` long."""
  out, depth = [], 0
  for ch in name:
    if ch in "<(":
      depth += 1
    elif ch in ">)":
      depth = max(depth - 1, 0)
    elif depth == 0:
      out.append(ch)
  name = "".join(out).replace("void ", "").replace("::::", "::").strip() or name
  return name if len(name) <= width else name[:width - 3] + "..."


def summarize(paths):
  """A table per file: each kernel of the profiled call, slowest first, with COLUMNS; then the
  call's total kernel time and jaxext's share of it."""
  lines = []
  for path in paths:
    with open(path, errors="replace") as f:
      kernels = read_ncu_csv(f.read())
    label = os.path.basename(path)
    if not kernels:
      lines.append(f"== {label}: no kernels (did the workload run, and under ncu?)")
      continue
    total = sum(_value(k, "Duration") or 0.0 for k in kernels.values())
    ours = sum(_value(k, "Duration") or 0.0 for k in kernels.values()
               if _OURS.search(k["name"]))
    lines.append(f"== {label}: {len(kernels)} kernels, {total:.1f} us in all, jaxext's "
                 f"{ours:.1f} us")
    header = f"{'kernel':58} {'grid':>16} {'block':>12}" + "".join(f" {c:>10}" for _, c in COLUMNS)
    lines.append(header)
    order = sorted(kernels.values(), key=lambda k: -(_value(k, "Duration") or 0.0))
    for k in order:
      cells = []
      for metric, _ in COLUMNS:
        v = _value(k, metric)
        cells.append(f" {'-' if v is None else f'{v:.1f}' if v < 1e5 else f'{v:.3g}':>10}")
      lines.append(f"{short_name(k['name']):58} {k['grid']:>16} {k['block']:>12}" +
                   "".join(cells))
  return "\n".join(lines)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="command", required=True)
  sub.add_parser("list", help="print the workloads, one per line")
  r = sub.add_parser("run", help="run one workload: a warm-up call, then one call in the window")
  r.add_argument("workload", choices=WORKLOADS)
  r.add_argument("--libs", default=os.path.join(ROOT, ".gpu"))
  r.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
  r.add_argument("--small", action="store_true")
  s = sub.add_parser("summarize", help="tables of ncu --csv --page details files")
  s.add_argument("files", nargs="+")
  args = p.parse_args(argv)
  if args.command == "list":
    print("\n".join(WORKLOADS))
    return 0
  if args.command == "summarize":
    print(summarize(args.files))
    return 0
  return run(args)


if __name__ == "__main__":
  sys.exit(main())
