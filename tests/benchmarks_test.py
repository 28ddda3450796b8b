"""The benchmark binaries whose main imports a sibling module start under Bazel (rules_python runs
mains with PYTHONSAFEPATH set, so the script's own directory is not on sys.path): each prints its
usage. The benchmarks themselves run by hand (`bazel run //benchmarks:...`), not in CI."""

import os
import subprocess
import sys

import pytest

BINARIES = ["ode_jnp", "equivariant", "handlers_ab", "message_passing"]


@pytest.mark.parametrize("name", BINARIES)
def test_benchmark_starts(name):
  path = os.path.abspath(os.path.join("benchmarks", name))  # (the test runs in the main runfiles)
  env = {k: v for k, v in os.environ.items()
         if k not in ("RUNFILES_DIR", "RUNFILES_MANIFEST_FILE", "PYTHONPATH")}
  out = subprocess.run([path, "--help"], capture_output=True, text=True, env=env, timeout=300,
                       check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "usage:" in out.stdout, (out.stdout[-2000:], sys.executable)
