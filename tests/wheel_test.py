"""Installs the built wheel into a clean virtual environment and uses every op there.

CI runs this under every CPython the wheel is built for (--config=python3.X): the wheel's tags and
metadata must be true, and in the clean environment each op must work under jit, vmap and grad.
tools/wheel_host_test runs the `installed` checks outside the toolchain root, on the machine's own
(older) userland.

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
import math
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

import numpy as np
import pytest

def _wheel_path():
  wheel_dir = os.environ["JAXEXT_WHEEL_DIR"]
  wheels = [f for f in os.listdir(wheel_dir) if f.endswith(".whl")]
  assert len(wheels) == 1, wheels
  return os.path.abspath(os.path.join(wheel_dir, wheels[0]))


# A wheel with the CPU handlers as a plain library (jaxext_wheel(plain_library = True)): py3-none, no
# extension module (//tests:wheel_plain_test, Linux; the macOS wheel's form).
PLAIN = os.environ.get("JAXEXT_WHEEL_PLAIN") == "1"
_PLAIN_LIBRARY = "jaxext/cpu/jaxext_cpu_handlers.so"


def test_wheel_name_tags_are_true():
  name = os.path.basename(_wheel_path())
  m = re.fullmatch(r"jaxext-([^-]+)-(cp\d+|py3)-(cp\d+|none)-(manylinux_\d+_\d+_(x86_64|aarch64))\.whl",
                   name)
  assert m, name
  version, py, abi, platform, arch = m.groups()
  import jaxext.version
  assert version == jaxext.version.__version__
  # MODULE.bazel repeats the version for Bazel consumers; it must not drift.
  with open(os.environ["JAXEXT_MODULE_BAZEL"]) as f:
    module_version = re.search(r'^\s*version = "([^"]+)"', f.read(), re.M).group(1)
  assert module_version == version, (module_version, version)
  if PLAIN:  # no CPython ABI inside: one wheel for every CPython
    assert (py, abi) == ("py3", "none"), name
  else:
    assert py == abi == "cp%d%d" % sys.version_info[:2]
  # The platform tag is the one auditwheel (pinned) computes from the extension modules: the most
  # compatible manylinux policy whose glibc, libstdc++ and libraries they need no more than.
  report = _auditwheel_show(_wheel_path())
  assert report["overall_tag"] == platform, (report["overall_tag"], platform, report)
  # Wheels are built by zig's clang for glibc 2.17 with libc++ linked in (third_party/zig):
  # manylinux2014, no libstdc++ or libgcc_s at all (the toolchain root's GCC would need its own,
  # newest libstdc++: CXXABI_1.3.15, not on Debian 12, Ubuntu 24.04 or RHEL 9). The CUDA wheel
  # (--config=cuda) too: its nvcc objects import no C++ runtime (cuda_kernels_abi_test).
  assert platform == f"manylinux_2_17_{arch}", report
  needed = set(report["versioned_symbols"])
  assert not needed & {"libstdc++.so.6", "libgcc_s.so.1"}, needed


_CUDA_MODULE = "jaxext/cuda/_cuda_ops.so"


def _auditwheel_show(wheel):
  env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(
      os.environ["JAXEXT_AUDITWHEEL_SITE"])), PYTHONDONTWRITEBYTECODE="1")
  res = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", wheel],
                       capture_output=True, text=True, env=env)
  assert res.returncode == 0, res.stdout + res.stderr
  return json.loads(res.stdout)


def test_metadata_and_record():
  with zipfile.ZipFile(_wheel_path()) as z:
    names = z.namelist()
    dist = [n for n in names if n.endswith(".dist-info/METADATA")][0].rsplit("/", 1)[0]
    meta = z.read(f"{dist}/METADATA").decode()
    for field in ["Name: jaxext", "Requires-Python: >=3.", "Requires-Dist: jax>=",
                  "Requires-Dist: jaxlib>=", "License-Expression: MIT", "Provides-Extra: numba",
                  'Requires-Dist: numba>=0.68.1; extra == "numba"', "Provides-Extra: numba-cuda",
                  'Requires-Dist: numba-cuda[cu13]>=0.30.4; extra == "numba-cuda" and sys_platform == "linux"',
                  "Provides-Extra: examples", 'Requires-Dist: matplotlib>=3.8; extra == "examples"',
                  "Provides-Extra: flax", 'Requires-Dist: flax>=0.12.8; extra == "flax"',
                  'Requires-Dist: e3nn-jax>=0.21.0; extra == "flax"']:
      assert field in meta, field
    floor = re.search(r"Requires-Dist: jaxlib>=([\d.]+)", meta).group(1)
    import jax
    assert jax.ffi  # the floor's jaxlib provides the FFI API we compile against
    assert floor.startswith("0.")
    from jaxext.cpu import _cpu_ops
    assert _cpu_ops.xla_ffi_api_version == (0, 3)
    requires = re.search(r"^Requires-Python: (.*)$", meta, re.M).group(1)
    if PLAIN:
      assert requires == ">=3.11", requires  # PYTHON["versions"][0]
    else:
      major, minor = sys.version_info[:2]
      assert requires == f">={major}.{minor},<{major}.{minor + 1}", requires
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
    assert ("jaxext/cpu/_cpu_ops.so" in names) == (not PLAIN), names
    assert (_PLAIN_LIBRARY in names) == PLAIN, names
    # The CUDA module is in the wheels of --config=cuda builds (x86_64 and aarch64), only there.
    assert (_CUDA_MODULE in names) == (os.environ["JAXEXT_WHEEL_CUDA"] == "1"), names
    assert "jaxext/py.typed" in names  # PEP 561: users' type checkers read the annotations


# The script run in the clean environment (tests/wheel_script.py): every op under jit, vmap and
# grad, results as JSON, checked below against closed forms computed here.
_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wheel_script.py")


def uniform_disk_flux(b, r):
  """Unocculted fraction of a uniform disk: 1 - (lens area of two circles) / pi."""
  b, r = float(b), float(r)
  if b >= 1 + r:
    return 1.0
  if b + r <= 1:
    return 1 - r * r
  if r >= 1 + b:
    return 0.0
  k0 = math.acos((b * b + r * r - 1) / (2 * b * r))
  k1 = math.acos((b * b + 1 - r * r) / (2 * b))
  area = r * r * k0 + k1 - 0.5 * math.sqrt(max(0.0, 4 * b * b - (1 + b * b - r * r) ** 2))
  return 1 - area / math.pi


def _run_in_clean_venv():
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
    out = subprocess.run([py, "-I", _SCRIPT], capture_output=True, text=True, env=env,
                         cwd=empty)
    assert out.returncode == 0, out.stdout + out.stderr
    return site, json.loads(out.stdout.strip().splitlines()[-1])


# tools/wheel_emulated_test ran the script itself (another architecture, under qemu, where this
# interpreter cannot start subprocesses): its output, the site it installed into, its jax.
EMULATED_RESULT = os.environ.get("JAXEXT_WHEEL_TEST_RESULT")
# //tests:smoke_test: the script against the jaxext this test imports (the build's own, e.g. under
# --config=asan), no wheel.
IN_PLACE = bool(os.environ.get("JAXEXT_WHEEL_TEST_IN_PLACE"))


def _run_in_place():
  out = subprocess.run([sys.executable, _SCRIPT], capture_output=True, text=True)
  assert out.returncode == 0, out.stdout + out.stderr
  import jaxext
  return os.path.dirname(os.path.dirname(jaxext.__file__)), json.loads(
      out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def installed():
  if EMULATED_RESULT:
    with open(EMULATED_RESULT) as f:
      return os.environ["JAXEXT_WHEEL_TEST_SITE"], json.loads(f.read().strip().splitlines()[-1])
  if IN_PLACE:
    return _run_in_place()
  return _run_in_clean_venv()


@pytest.mark.skipif(IN_PLACE, reason="no wheel: the build's own jaxext runs the script")
def test_installed_wheel_is_what_runs(installed):
  site, result = installed
  assert result["file"].startswith(site), result["file"]
  checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  assert not any(p.startswith(checkout) for p in result["path"] if p), result["path"]
  assert result["python"] == "%d.%d" % sys.version_info[:2]
  if EMULATED_RESULT:
    assert result["jax"] == os.environ["JAXEXT_WHEEL_TEST_JAX"]
    return
  import jax
  assert result["jax"] == jax.__version__
  if os.environ.get("JAXEXT_WHEEL_TEST_HOST"):  # tools/wheel_host_test: no jaxext beside it
    return
  import jaxext
  assert result["version"] == jaxext.__version__


def test_installed_cpu_handlers_form(installed):
  """The CPU handlers registered from the extension module, or in a plain-library wheel from the
  library (jaxext._ffi, through ctypes): the form the wheel holds is the one that runs."""
  _, r = installed
  assert r["cpu_handlers"] == ("library" if PLAIN else "extension"), r["cpu_handlers"]


def test_installed_platforms_list_every_cpu_op(installed):
  _, r = installed
  where = r["platforms"]
  assert {"kepler", "transit_light_curve", "ode.dop853", "equivariant.conv"} <= set(where)
  for op, platforms in where.items():
    assert ("cpu" in platforms) == (op != "numba_cuda_kernel"), (op, platforms)


def test_installed_cuda_module_registers_every_cuda_op(installed):
  """A CUDA wheel's module loads where it is installed (its static CUDA runtime needs no GPU until
  a kernel runs) and registers a CUDA handler for every op; a CPU wheel has none."""
  _, r = installed
  if IN_PLACE:  # the script looked in this very environment (no wheel to read)
    has_module = r["cuda_module"]
  else:
    with zipfile.ZipFile(_wheel_path()) as z:
      has_module = _CUDA_MODULE in z.namelist()
    assert r["cuda_module"] == has_module
  for op, platforms in r["platforms"].items():
    if op == "numba_kernel":  # the CPU's own (numba_cuda_kernel is CUDA's)
      want = False
    elif op == "numba_cuda_kernel":
      want = has_module and r["numba_cuda"]
    else:
      want = has_module
    assert ("cuda" in platforms) == want, (op, platforms, has_module)


def test_installed_kepler_jit_vmap_grad(installed):
  _, r = installed
  m = np.array([0.5, 2.0, -3.0, 7.0])
  s, c = (np.array(v) for v in r["kepler_jit"])
  ecc_anom = np.arctan2(s, c)
  residual = np.angle(np.exp(1j * (ecc_anom - 0.6 * s - m)))  # E - e sin E - M, modulo 2 pi
  np.testing.assert_allclose(residual, 0, atol=1e-13)
  np.testing.assert_allclose(s * s + c * c, 1, atol=1e-14)
  np.testing.assert_array_equal(r["kepler_vmap"], np.ravel(r["kepler_vmap_rows"]))
  s0, c0 = s[0], c[0]
  assert r["kepler_grad"] == pytest.approx(c0 / (1 - 0.6 * c0), rel=1e-12)  # dsinE/dM


def test_installed_limbdark_jit_vmap_grad(installed):
  _, r = installed
  want = [uniform_disk_flux(b, 0.1) for b in (0.0, 0.5, 0.95, 1.05, 2.0)]
  np.testing.assert_allclose(r["limbdark_jit"], want, rtol=0, atol=1e-13)
  bb = [[0.0, 0.3, 0.95], [0.5, 1.0, 1.2]]
  want = [uniform_disk_flux(b, rad) for row, rad in zip(bb, (0.1, 0.3)) for b in row]
  np.testing.assert_allclose(r["limbdark_vmap"], want, rtol=0, atol=1e-13)
  assert r["limbdark_grad_r"] == pytest.approx(-0.2, abs=1e-13)  # d(1 - r^2)/dr
  h = 1e-6
  fd = (uniform_disk_flux(0.97 + h, 0.1) - uniform_disk_flux(0.97 - h, 0.1)) / (2 * h)
  assert r["limbdark_grad_b"] == pytest.approx(fd, rel=1e-6)
  assert r["quadratic"][0] == r["quadratic"][1]
  # Limb-darkened: near the centre the planet blocks ~1.19 r^2 (I(0.95)/<I> for this law).
  assert 1 - 0.0125 < r["quadratic"][0] < 1 - 0.0115


def test_installed_transit_jit_vmap_grad(installed):
  _, r = installed
  mid, out_of_transit, behind = r["transit_jit"]
  assert mid == pytest.approx(r["transit_mid_expected"], abs=1e-14)
  assert out_of_transit == 1.0 and behind == 1.0
  np.testing.assert_allclose(r["transit_vmap"], r["transit_vmap_rows"], rtol=0, atol=1e-15)
  assert r["transit_grad"] == pytest.approx(r["transit_fd"], rel=1e-6)
  assert r["transit_grad"] < 0  # a bigger planet blocks more light


def test_installed_equivariant_jit_vmap_grad(installed):
  _, r = installed
  v = np.array([[0.3, -1.2, 0.5], [2.0, 0.1, -0.7], [-0.4, 0.9, 1.1]])
  unit = v / np.linalg.norm(v, axis=1, keepdims=True)
  sh = np.reshape(r["sh_jit"], (3, 9))  # "0e+1o+2e", e3nn's component normalisation
  np.testing.assert_allclose(sh[:, 0], 1, rtol=0, atol=1e-15)
  cos = unit @ unit.T  # addition theorem: Y_l(a) . Y_l(b) = (2l + 1) P_l(a . b)
  np.testing.assert_allclose(sh[:, 1:4] @ sh[:, 1:4].T, 3 * cos, rtol=0, atol=1e-13)
  np.testing.assert_allclose(sh[:, 4:9] @ sh[:, 4:9].T, 5 * (3 * cos ** 2 - 1) / 2, rtol=0, atol=1e-13)
  np.testing.assert_allclose(r["sh_vmap"], r["sh_jit"], rtol=2e-15, atol=0)
  # d/da of 3 a^ . w^ = 3 (w^ - (a^ . w^) a^) / |a|
  want = 3 * (unit[1] - cos[0, 1] * unit[0]) / np.linalg.norm(v[0])
  np.testing.assert_allclose(r["sh_grad"], want, rtol=0, atol=1e-13)

  x = np.arange(12.0).reshape(4, 3) * 0.25
  idx = np.array([2, 0, 2, 3, 2])
  np.testing.assert_array_equal(np.reshape(r["gather_jit"], (5, 3)), x[idx])
  np.testing.assert_array_equal(np.reshape(r["gather_vmap"], (5, 3)), x[idx])
  want = np.zeros_like(x)
  np.add.at(want, idx, np.arange(15.0).reshape(5, 3))
  np.testing.assert_array_equal(np.reshape(r["gather_grad"], (4, 3)), want)
  ids = np.array([1, 0, 1, 1, 3])
  data = np.arange(10.0).reshape(5, 2) ** 1.5
  want = np.zeros((4, 2))
  np.add.at(want, ids, data)
  np.testing.assert_allclose(np.reshape(r["segment_jit"], (4, 2)), want, rtol=1e-15, atol=0)
  want = np.zeros((5, 2))
  want[:, 0] = np.arange(4.0)[ids]
  np.testing.assert_array_equal(np.reshape(r["segment_grad"], (5, 2)), want)

  tp = np.array(r["tp_jit"])  # linear in x and in the weights
  assert np.abs(tp).max() > 0.1
  np.testing.assert_allclose(r["tp_eager"], tp, rtol=0, atol=1e-15)
  np.testing.assert_allclose(r["tp_scaled"], 6 * tp, rtol=1e-14, atol=1e-14)
  np.testing.assert_allclose(r["tp_vmap"], tp, rtol=0, atol=1e-15)
  np.testing.assert_allclose(r["tp_grad"][:8], r["tp_grad_fd"], rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(r["conv_jit"], r["conv_composed"], rtol=0, atol=1e-13)
  np.testing.assert_allclose(r["conv_grad"], r["conv_grad_composed"], rtol=0, atol=1e-12)


def test_installed_ode_model(installed):
  _, r = installed
  assert r["ode_model_status"] == [0, 0]
  th, rad = r["ode_model_expected_angle"], 7000.0
  v = (398600.4418 / rad) ** 0.5
  c, s = math.cos(th), math.sin(th)
  want = [[rad * c, rad * s, 0, -v * s, v * c, 0], [-rad * s, rad * c, 0, -v * c, -v * s, 0]]
  got = np.array(r["ode_model_final"])
  np.testing.assert_allclose(got[:, :3], np.array(want)[:, :3], rtol=0, atol=1e-5)  # km
  np.testing.assert_allclose(got[:, 3:], np.array(want)[:, 3:], rtol=0, atol=1e-8)  # km/s


def test_installed_numba_kernel_and_ode_rhs(installed):
  _, r = installed
  x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 4.0])
  np.testing.assert_array_equal(r["numba_jit"], 2.5 * x + y)
  np.testing.assert_array_equal(r["numba_vmap"], 2.5 * x + y)
  np.testing.assert_array_equal(r["numba_grad"], [2.5] * 3)
  k, y0 = np.array([0.5, 1.5]), np.array([2.0, 1.0])
  np.testing.assert_allclose(r["ode_rhs_final"], y0 * np.exp(-2 * k), rtol=1e-10)
  np.testing.assert_allclose(r["ode_rhs_dk"], -2 * y0 * np.exp(-2 * k), rtol=1e-8)
  np.testing.assert_allclose(r["ode_rhs_dy0"], np.exp(-2 * k), rtol=1e-8)
