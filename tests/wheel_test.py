"""Installs the built wheel into a clean virtual environment and uses it from a subprocess.

Nothing of the checkout is importable there: the subprocess runs `python -I` (no PYTHONPATH, no
user site, no script directory on sys.path) from an empty directory. Only jax and its dependencies
are made visible, through a .pth file pointing at the pinned environment's site-packages (which
does not contain jaxext).
"""

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

import pytest

WHEEL_DIR = os.environ["JAXEXT_WHEEL_DIR"]


def _wheel_path():
  wheels = [f for f in os.listdir(WHEEL_DIR) if f.endswith(".whl")]
  assert len(wheels) == 1, wheels
  return os.path.abspath(os.path.join(WHEEL_DIR, wheels[0]))


def test_wheel_name_tags_are_true():
  name = os.path.basename(_wheel_path())
  m = re.fullmatch(r"jaxext-([^-]+)-(cp\d+)-(cp\d+)-manylinux_(\d+)_(\d+)_x86_64\.whl", name)
  assert m, name
  version, py, abi, glibc_major, glibc_minor = m.groups()
  import jaxext.version
  assert version == jaxext.version.__version__
  # MODULE.bazel repeats the version for Bazel consumers; it must not drift.
  with open(os.environ["JAXEXT_MODULE_BAZEL"]) as f:
    module_version = re.search(r'^\s*version = "([^"]+)"', f.read(), re.M).group(1)
  assert module_version == version, (module_version, version)
  assert py == abi == "cp%d%d" % sys.version_info[:2]
  # The platform tag must cover the newest GLIBC symbol version the extensions need, and the
  # newest GLIBCXX one by auditwheel's policies, as objdump (an independent ELF reader) sees them.
  # (auditwheel's policies: manylinux_2_31's libstdc++ provides up to GLIBCXX_3.4.28.)
  glibcxx_floor = {(3, 4, 29): (2, 34), (3, 4, 30): (2, 35), (3, 4, 28): (2, 31),
                   (3, 4, 27): (2, 31), (3, 4, 26): (2, 31)}
  with zipfile.ZipFile(_wheel_path()) as z, tempfile.TemporaryDirectory() as tmp:
    newest = (2, 17)
    for so in [n for n in z.namelist() if n.endswith(".so")]:
      path = z.extract(so, tmp)
      out = subprocess.run(["objdump", "-T", path], check=True, capture_output=True, text=True)
      for major, minor in re.findall(r"GLIBC_(\d+)\.(\d+)", out.stdout):
        newest = max(newest, (int(major), int(minor)))
      for v in re.findall(r"GLIBCXX_(\d+\.\d+\.\d+)", out.stdout):
        key = tuple(int(x) for x in v.split("."))
        if key > (3, 4, 25):
          assert key in glibcxx_floor, f"{so} needs GLIBCXX_{v}; extend this test's table"
          newest = max(newest, glibcxx_floor[key])
  assert (int(glibc_major), int(glibc_minor)) == newest


def test_metadata_and_record():
  with zipfile.ZipFile(_wheel_path()) as z:
    names = z.namelist()
    dist = [n for n in names if n.endswith(".dist-info/METADATA")][0].rsplit("/", 1)[0]
    meta = z.read(f"{dist}/METADATA").decode()
    for field in ["Name: jaxext", "Requires-Python: >=3.", "Requires-Dist: jax>=",
                  "Requires-Dist: jaxlib>=", "License-Expression: MIT"]:
      assert field in meta, field
    floor = re.search(r"Requires-Dist: jaxlib>=([\d.]+)", meta).group(1)
    import jax
    assert jax.ffi  # the floor's jaxlib provides the FFI API we compile against
    from jaxext.cpu import _cpu_ops
    assert floor.startswith("0.")
    assert _cpu_ops.xla_ffi_api_version == (0, 3)
    rows = list(csv.reader(io.StringIO(z.read(f"{dist}/RECORD").decode())))
    recorded = {r[0] for r in rows}
    assert recorded == set(names)
    for path, digest, size in rows:
      if path.endswith("RECORD"):
        assert digest == "" and size == ""
        continue
      data = z.read(path)
      expect = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
      assert digest == f"sha256={expect}" and int(size) == len(data), path
    for info in z.infolist():
      assert info.date_time == (1980, 1, 1, 0, 0, 0)
    assert "jaxext/cpu/_cpu_ops.so" in names


_SCRIPT = r"""
import json, os, sys
import jax
jax.config.update("jax_enable_x64", True)
import jaxext
s, c = jax.jit(jaxext.kepler)(jax.numpy.array([0.5, 2.0, -3.0]), 0.6)
g = jax.grad(lambda m: jaxext.kepler(m, 0.6)[0])(0.5)
print(json.dumps({"file": jaxext.__file__, "version": jaxext.__version__,
                  "sin": [float(x) for x in s], "cos": [float(x) for x in c], "grad": float(g),
                  "path": sys.path}))
"""


def test_installed_wheel_works_in_a_clean_venv():
  with tempfile.TemporaryDirectory() as tmp:
    venv = os.path.join(tmp, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "pinned_deps.pth"), "w") as f:
      f.write(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    subprocess.run([py, "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", "-q",
                    _wheel_path()], check=True, env=env, cwd=tmp)
    check = subprocess.run([py, "-m", "pip", "check"], capture_output=True, text=True, env=env,
                           cwd=tmp)
    assert check.returncode == 0, check.stdout + check.stderr
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    out = subprocess.run([py, "-I", "-c", _SCRIPT], check=True, capture_output=True, text=True,
                         env=env, cwd=empty)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["file"].startswith(site), result["file"]
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert not any(p.startswith(checkout) for p in result["path"] if p), result["path"]

    import jax
    jax.config.update("jax_enable_x64", True)
    import jaxext
    s, c = jaxext.kepler(jax.numpy.array([0.5, 2.0, -3.0]), 0.6)
    assert result["sin"] == [float(x) for x in s]
    assert result["cos"] == [float(x) for x in c]
    assert result["grad"] == pytest.approx(
        float(jax.grad(lambda m: jaxext.kepler(m, 0.6)[0])(0.5)), rel=1e-15)
