"""tools/gpu_checks.py runs end to end with the CPU standing in for the GPU.

GPU time is scarce: a broken script should fail here, not on a lent GPU machine."""

import json
import os
import shutil
import subprocess
import sys


def test_gpu_checks_script_runs_on_cpu(tmp_path):
  libs = tmp_path / "libs"
  libs.mkdir()
  shutil.copy(os.environ["JAXEXT_CPU_HANDLERS"], libs / "jaxext_cpu_handlers.so")
  env = {k: v for k, v in os.environ.items() if k != "JAXEXT_HANDLER_LIBRARIES"}
  env["OUT"] = str(tmp_path)
  env["PYTHONFAULTHANDLER"] = "1"
  env["PYTHONUNBUFFERED"] = "1"
  r = subprocess.run([sys.executable, os.environ["JAXEXT_GPU_CHECKS"], "--device", "cpu",
                      "--libs", str(libs), "--n", "200000", "--repeats", "2"],
                     env=env, capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr
  report = json.loads((tmp_path / "gpu_checks.json").read_text())
  assert report["checks"] and all(report["checks"].values()), report["checks"]
  # 10 Kepler + 7 limbdark + 9 transit + 5 ode + 7 equivariant (CPU against CPU here)
  assert len(report["checks"]) == 38
  layer = [row for row in report["bench"] if row.get("op", "").startswith("equivariant")]
  assert len(layer) == 4 and all(row["forward_ms"] > 0 and row["forward_backward_ms"] > 0
                                 for row in layer)
  ode = [row for row in report["bench"] if row.get("op", "").startswith("ode.dop853")]
  assert len(ode) == 1 and ode[0]["n"] == 100 and ode[0]["us_per_trajectory"] > 0
  kepler = [row for row in report["bench"] if "op" not in row]
  limbdark = [row for row in report["bench"] if row.get("op") == "limbdark"]
  assert {row["dtype"] for row in kepler} == {"float32", "float64"}
  assert {row["dtype"] for row in limbdark} == {"float32", "float64"}
  for row in kepler:
    assert row["jaxext_GBps"] > 0 and row["copy_GBps"] > 0 and row["speedup_vs_pure_jax"] > 0
  transit = [row for row in report["bench"] if row.get("op") == "transit"]
  assert len(transit) == 2 and all(row["ns_per_point"] > 0 for row in transit)
  for row in limbdark:
    assert row["ns_per_point"] > 0 and row["value_and_grad_ns_per_point"] > 0
