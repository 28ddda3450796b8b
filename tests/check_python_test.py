"""third_party/python/check_python.py: the build-time check of the Python jaxext will run in.

Runs the script as the validation action does (this interpreter standing in for a toolchain's),
with a patchlevel.h of this or another CPython, and jax/jaxlib declared as Bazel requirements (a
pip hub's) or looked up in the interpreter.
"""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "third_party",
                      "python", "check_python.py")
HERE = "%d.%d" % sys.version_info[:2]
OTHER = "3.%d" % (sys.version_info[1] - 1)


def patchlevel(tmp_path, python_version):
  major, minor = python_version.split(".")
  path = tmp_path / "patchlevel.h"
  path.write_text(f"/* CPython's */\n#define PY_MAJOR_VERSION        {major}\n"
                  f"#define PY_MINOR_VERSION        {minor}\n#define PY_MICRO_VERSION 7\n")
  return path


def run(tmp_path, python_version, *declared, floor="0.10.0", supported=f"{OTHER},{HERE}"):
  stamp = tmp_path / "stamp.json"
  proc = subprocess.run([sys.executable, "-I", SCRIPT, str(patchlevel(tmp_path, python_version)),
                         floor, supported, str(stamp), *declared], capture_output=True, text=True)
  return proc.returncode, proc.stderr, stamp


def test_matching_python_and_installed_jax_pass(tmp_path):
  rc, err, stamp = run(tmp_path, HERE)
  assert rc == 0, err
  assert json.loads(stamp.read_text())["python"] == HERE


def test_headers_without_a_version_are_refused(tmp_path):
  bad = tmp_path / "patchlevel.h"
  bad.write_text("#define PY_VERSION \"3.14\"\n")
  proc = subprocess.run([sys.executable, "-I", SCRIPT, str(bad), "0.10.0", HERE, str(tmp_path / "s")],
                        capture_output=True, text=True)
  assert proc.returncode != 0 and "does not define PY_MAJOR_VERSION" in proc.stderr


def test_declared_versions_pass(tmp_path):
  rc, err, stamp = run(tmp_path, HERE, "jax=0.12.0.1", "jaxlib=0.12.0.1")
  assert rc == 0, err
  assert json.loads(stamp.read_text())["declared"] == {"jax": "0.12.0.1", "jaxlib": "0.12.0.1"}


def test_other_cpython_is_refused_naming_both(tmp_path):
  rc, err, stamp = run(tmp_path, OTHER)
  assert rc == 1 and not stamp.exists()
  assert f"the Python toolchain of this build is CPython {HERE}" in err
  assert f"compile with the headers of CPython {OTHER}" in err
  assert f"HERMETIC_PYTHON_VERSION={HERE}" in err
  assert "python_headers" in err


def test_unsupported_cpython_is_not_told_to_select_itself(tmp_path):
  rc, err, _ = run(tmp_path, OTHER, supported=OTHER)
  assert rc == 1
  assert "HERMETIC_PYTHON_VERSION" not in err
  assert f"jaxext's own headers are for CPython {OTHER} only" in err


@pytest.mark.parametrize("declared,name", [(("jax=0.9.2", "jaxlib=0.12.0"), "jax"),
                                           (("jax=0.12.0", "jaxlib=0.4.38"), "jaxlib"),
                                           (("jax=0.10.0rc1", "jaxlib=0.10.0"), None)])
def test_declared_versions_below_the_floor_are_refused(tmp_path, declared, name):
  rc, err, _ = run(tmp_path, HERE, *declared)
  if name is None:  # 0.10.0rc1 reads as 0.10.0: at the floor
    assert rc == 0, err
  else:
    assert rc == 1
    assert f"{name} {dict(d.split('=') for d in declared)[name]} (declared as a Bazel requirement" in err
    assert f"{name} >= 0.10.0" in err


def test_installed_jax_below_a_raised_floor_is_refused(tmp_path):
  rc, err, _ = run(tmp_path, HERE, floor="999.0")
  assert rc == 1
  assert f"(installed in {sys.executable})" in err and "jax >= 999.0" in err


def test_missing_jax_says_how_to_declare_it(tmp_path):
  # An interpreter without jax: the base interpreter of a virtual environment, or this one with
  # an empty path in isolated mode cannot be arranged portably, so fake the lookup instead.
  code = ("import importlib.metadata as m, runpy, sys\n"
          "def version(name): raise m.PackageNotFoundError(name)\n"
          "m.version = version\n"
          "sys.argv = sys.argv[1:]\n"
          "runpy.run_path(sys.argv[0], run_name='__main__')\n")
  proc = subprocess.run([sys.executable, "-I", "-c", code, SCRIPT, str(patchlevel(tmp_path, HERE)),
                         "0.10.0", HERE, str(tmp_path / "stamp")], capture_output=True, text=True)
  assert proc.returncode == 1
  assert "jax is neither declared as a Bazel requirement of jaxext nor installed" in proc.stderr
  assert "python_deps.requirements(packages" in proc.stderr
