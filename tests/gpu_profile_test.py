"""tools/gpu_profile.py (Nsight Compute over the equivariant kernels, on a lent GPU): its workloads
run with the CPU standing in, and its summary reads ncu's CSV. Device time is scarce: a broken
profiling script should fail here, not on the GPU machine."""

import os
import shutil
import subprocess
import sys

SCRIPT = os.environ.get("JAXEXT_GPU_PROFILE", "")

# ncu --csv --page details as ncu 2023+ writes it: its own lines and the program's around the
# table, thousands separators, units per metric, the same kernel's rows repeated per metric.
_ROW = ('"{id}","4242","python3.12","127.0.0.1","{name}","1","7","{block}","{grid}","0","9.0",'
        '"{section}","{metric}","{unit}","{value}"')
_TP = ("void jaxext::cuda::(anonymous namespace)::TpFastKernel<float, 0>(jaxext::cuda::TpFast"
       "<float>, jaxext::cuda::TpOperands<float>, jaxext::cuda::TpGraph, long)")
FIXTURE = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    '==PROF== Profiling "TpFastKernel" - 0: 0%....50%....100% - 9 passes',
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
    _ROW.format(id=0, name=_TP, block="(256, 1, 1)", grid="(1000, 1, 1)", section="SOL",
                metric="Duration", unit="usecond", value="1,234.5"),
    _ROW.format(id=0, name=_TP, block="(256, 1, 1)", grid="(1000, 1, 1)", section="SOL",
                metric="Compute (SM) Throughput", unit="%", value="61.25"),
    _ROW.format(id=0, name=_TP, block="(256, 1, 1)", grid="(1000, 1, 1)", section="Launch",
                metric="Dynamic Shared Memory Per Block", unit="Kbyte/block", value="18.5"),
    _ROW.format(id=1, name="loop_add_fusion", block="(128, 1, 1)", grid="(3750, 1, 1)",
                section="SOL", metric="Duration", unit="nsecond", value="5,120"),
    _ROW.format(id=1, name="loop_add_fusion", block="(128, 1, 1)", grid="(3750, 1, 1)",
                section="Occupancy", metric="Achieved Occupancy", unit="%", value="88.1"),
    "==PROF== Disconnected from process 4242",
])


def _run(*args, env=None, timeout=600):
  return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                        env=env, timeout=timeout)


def test_summary_reads_ncu_details_csv(tmp_path):
  (tmp_path / "ncu_layer.csv").write_text(FIXTURE)
  (tmp_path / "ncu_empty.csv").write_text("==PROF== Connected\nno table\n")
  r = _run("summarize", str(tmp_path / "ncu_layer.csv"), str(tmp_path / "ncu_empty.csv"))
  assert r.returncode == 0, r.stderr
  lines = r.stdout.splitlines()
  # two kernels, 1234.5 us + 5.12 us, the jaxext one first (slowest first), its template and
  # parameter lists dropped, the shared memory in bytes
  assert lines[0] == "== ncu_layer.csv: 2 kernels, 1239.6 us in all, jaxext's 1234.5 us", lines
  tp, xla = lines[2].split(), lines[3].split()
  assert tp[0] == "jaxext::cuda::TpFastKernel" and tp[7:9] == ["1234.5", "61.2"], tp
  assert tp[-1] == "18500.0" and tp[-2] == "-", tp
  assert xla[0] == "loop_add_fusion" and xla[7] == "5.1" and xla[11] == "88.1", xla
  assert lines[4] == "== ncu_empty.csv: no kernels (did the workload run, and under ncu?)"


def test_workloads_run_on_the_cpu_stand_in(tmp_path):
  libs = tmp_path / "libs"
  libs.mkdir()
  shutil.copy(os.environ["JAXEXT_CPU_HANDLERS"], libs / "jaxext_cpu_handlers.so")
  env = {k: v for k, v in os.environ.items() if k != "JAXEXT_HANDLER_LIBRARIES"}
  names = _run("list").stdout.split()
  assert len(names) == 8 and {"layer-fused-f32", "padded-conv-f32", "padded-segment-f32"} <= set(
      names), names
  for name in ("layer-fused-f64", "layer-e3nn-f32", "padded-conv-f32", "padded-segment-f32"):
    r = _run("run", name, "--device", "cpu", "--small", "--libs", str(libs), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"gpu_profile: {name}: warm-up" in r.stderr, r.stderr
  # cuequivariance-jax's kernels run on GPUs only: said, not failed
  r = _run("run", "layer-cueq-f32", "--device", "cpu", "--small", "--libs", str(libs), env=env)
  assert r.returncode == 0 and "layer-cueq-f32 skipped" in r.stderr, r.stderr
  r = _run("run", "no-such-workload", "--device", "cpu", env=env)  # refused, naming the choices
  assert r.returncode != 0 and "invalid choice" in r.stderr and "layer-fused-f32" in r.stderr


def test_shell_driver_runs_each_workload_and_summarises_this_runs_csvs(tmp_path):
  """tools/gpu_profile.sh with a stub ncu (which prints the CSV above): one CSV per workload named,
  the summary of those alone (not a former run's), and with no time left every workload skipped,
  said, and a non-zero status."""
  sh = os.environ["JAXEXT_GPU_PROFILE_SH"]
  root = os.path.dirname(os.path.dirname(os.path.abspath(SCRIPT)))
  stub = tmp_path / "bin"
  stub.mkdir()
  (stub / "python3").symlink_to(sys.executable)
  ncu = stub / "ncu"
  ncu.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "Nsight Compute (stub)"; exit 0; }\n'
                 'cat "$STUB_CSV"\n')
  ncu.chmod(0o755)
  (tmp_path / "fixture.csv").write_text(FIXTURE)
  out = tmp_path / "out"
  out.mkdir()
  (out / "ncu_former.csv").write_text(FIXTURE)
  env = dict(os.environ, PATH=f"{stub}:{os.environ.get('PATH', '/usr/bin:/bin')}", OUT=str(out),
             MEMCHECK="0", STUB_CSV=str(tmp_path / "fixture.csv"))
  r = subprocess.run(["bash", sh, "layer-fused-f32", "padded-segment-f32"], cwd=root, env=env,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stdout + r.stderr
  summary = (out / "ncu_summary.txt").read_text()
  assert summary.count(": 2 kernels, 1239.6 us in all") == 2, summary
  assert "ncu_layer-fused-f32.csv" in summary and "ncu_padded-segment-f32.csv" in summary
  assert "former" not in summary and not (out / "ncu_former.csv").exists()
  r = subprocess.run(["bash", sh, "layer-fused-f32"], cwd=root, env=dict(env, DEADLINE="0"),
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 1 and "layer-fused-f32 skipped: deadline" in r.stdout, r.stdout + r.stderr
  assert (out / "ncu_summary.txt").read_text().strip() == "gpu_profile: no workload ran"
