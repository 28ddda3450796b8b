"""tools/gpu_checks.py runs end to end with the CPU standing in for the GPU.

GPU time is scarce: a broken script should fail here, not on a lent GPU machine."""

import json
import os
import shutil
import subprocess
import sys


def _setup(tmp_path, **extra):
  """The CPU handler library in tmp_path/libs (gpu_checks' --libs) and the script's environment:
  the report under tmp_path, unbuffered output, faulthandler on."""
  libs = tmp_path / "libs"
  libs.mkdir()
  shutil.copy(os.environ["JAXEXT_CPU_HANDLERS"], libs / "jaxext_cpu_handlers.so")
  env = {k: v for k, v in os.environ.items() if k != "JAXEXT_HANDLER_LIBRARIES"}
  env.update(OUT=str(tmp_path), PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1", **extra)
  return libs, env


def _sections():
  r = subprocess.run([sys.executable, os.environ["JAXEXT_GPU_CHECKS"], "--list-sections"],
                     capture_output=True, text=True, check=True)
  return r.stdout.split()


def test_gpu_checks_script_runs_on_cpu(tmp_path):
  libs, env = _setup(tmp_path)
  sections = [s for s in _sections() if s != "nequip"]  # (nequip: the test below)
  r = subprocess.run([sys.executable, os.environ["JAXEXT_GPU_CHECKS"], "--device", "cpu",
                      "--libs", str(libs), "--n", "200000", "--repeats", "2",
                      "--only", ",".join(sections)],
                     env=env, capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr
  report = json.loads((tmp_path / "gpu_checks.json").read_text())
  assert report["checks"] and all(report["checks"].values()), report["checks"]
  # 10 Kepler + 7 limbdark + 10 transit + 8 ode + 17 equivariant (4 of conv's runs cut into
  # tasks, 1 of the segment sum's) + 7 ode_jnp (CPU against CPU; ode and ode_jnp: 2 each for
  # the dense output)
  assert len(report["checks"]) == 59
  segment = [row for row in report["bench"]
             if row.get("op") == "equivariant segment_sum, jax-md's padded graph"]
  assert {row["dtype"] for row in segment} == {"float32", "float64"} and len(segment) == 2
  for row in segment:
    assert all(row[k] > 0 for k in ("padded_ms", "padded_jax_ops_ms", "spread_ms",
                                    "spread_jax_ops_ms")), row
  layer = [row for row in report["bench"]
           if row.get("op", "").startswith("equivariant MACE-like layer (")]
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


def test_gpu_checks_peer_arms_run_on_cpu(tmp_path):
  """The peer arms (jaxoplanet, diffrax, e3nn-jax), which run by default only on a GPU, section by
  section into one merged report."""
  import pytest
  for name in ("jaxoplanet", "diffrax", "e3nn_jax"):
    pytest.importorskip(name)
  libs, env = _setup(tmp_path, JAXEXT_GPU_CHECKS_PEERS="1")
  for section in ("limbdark", "ode", "equivariant"):
    r = subprocess.run([sys.executable, os.environ["JAXEXT_GPU_CHECKS"], "--device", "cpu",
                        "--libs", str(libs), "--n", "20000", "--repeats", "1", "--only", section],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
  report = json.loads((tmp_path / "gpu_checks.json").read_text())
  assert report["checks"] and all(report["checks"].values()), report["checks"]
  assert not [row for row in report["bench"] if "error" in row or "jaxoplanet_error" in row]
  limbdark = [row for row in report["bench"] if row.get("op") == "limbdark"]
  assert {row["dtype"] for row in limbdark} == {"float32", "float64"}
  for row in limbdark:
    assert row["jaxoplanet_ns_per_point"] > 0
    assert row["jaxoplanet_max_abs_diff"] < (1e-5 if row["dtype"] == "float32" else 1e-12)
  (diffrax,) = [row for row in report["bench"] if row.get("op", "").startswith("ode GPU vs diffrax")]
  assert diffrax["n"] == 100 and diffrax["diffrax_all_successful"]
  # tol 1e-9 for a day: ~1e-4 km (ours) and ~3e-3 km (diffrax) here; a wrong model is off by 1e3
  assert diffrax["ours_median_error_km"] < 1e-2 and diffrax["diffrax_median_error_km"] < 1e-1
  assert diffrax["diffrax_lockstep_inflation"] >= 1
  e3nn = [row for row in report["bench"] if row.get("op") == "equivariant MACE-like layer vs e3nn-jax"]
  assert {row["dtype"] for row in e3nn} == {"float32", "float64"}
  for row in e3nn:
    tol = 1e-10 if row["dtype"] == "float64" else 1e-4
    diffs = [v for k, v in row.items() if k.endswith("max rel diff vs e3nn")]
    # fused and unfused, forward and forward + backward; then the fused arm's A/B (its edge
    # cotangents from the two modes' own calls, both node orders whole, then fused again) and
    # the unfused arm's (its product's y and w cotangents from the modes' own calls, then
    # unfused again): forward + backward
    assert len(diffs) == 9 and max(diffs) < tol, row
    for arm, call in (("fused edge-cts-separate", "conv_edge_cts"),
                      ("fused whole-graph", "conv_edge_cts"), ("fused again", "conv_edge_cts"),
                      ("unfused edge-cts-separate", "tensor_product_edge_cts"),
                      ("unfused again", "tensor_product_edge_cts")):
      assert row[f"{arm} fwd+bwd ms"] > 0, row
      assert row[f"{arm} calls jaxext_{call}"] is False, row  # the CPU: modes alone
    assert row["fused edge-cts A/B max rel diff"] == 0, row
    assert row["fused whole-graph A/B max rel diff"] == 0, row
    assert row["unfused edge-cts A/B max rel diff"] == 0, row


def test_gpu_checks_nequip_section_on_cpu(tmp_path):
  """The jax-md NequIP section (#32 item 4's model): both arms, both dtypes, each in its own
  process, on 64 atoms and 2 layers; its checks pass and its rows carry every arm's times."""
  libs, env = _setup(tmp_path)
  r = subprocess.run([sys.executable, os.environ["JAXEXT_GPU_CHECKS"], "--device", "cpu",
                      "--libs", str(libs), "--repeats", "1", "--only", "nequip",
                      "--nequip-atoms", "64", "--nequip-layers", "2"],
                     env=env, capture_output=True, text=True)
  assert r.returncode == 0, r.stdout + r.stderr
  report = json.loads((tmp_path / "gpu_checks.json").read_text())
  assert len(report["checks"]) == 2 and all(report["checks"].values()), report["checks"]
  rows = [row for row in report["bench"] if row.get("op") == "jax-md NequIP"]
  assert {row["dtype"] for row in rows} == {"float32", "float64"}
  for row in rows:
    assert row["atoms"] == 64 and row["layers"] == 2 and row["edges"] > 10 * 64
    for key in ("e3nn energy ms", "e3nn energy+forces ms", "jaxext energy ms",
                "jaxext energy+forces ms", "speed-up energy", "speed-up energy+forces"):
      assert row[key] > 0, (key, row)
