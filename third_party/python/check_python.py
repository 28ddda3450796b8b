"""Build-time check of the Python that jaxext's package will run under (python_requirements.bzl).

    check_python.py PATCHLEVEL_H JAXLIB_FLOOR SUPPORTED STAMP [NAME=VERSION ...]

Run by the Python toolchain's interpreter of the build. Fails, saying what to change, when
* that interpreter's CPython (major.minor) is not the one whose headers jaxext's extension modules
  are compiled with (PATCHLEVEL_H, their patchlevel.h): importing them would fail ("module
  compiled for Python 3.14"); or
* jax or jaxlib is missing or older than JAXLIB_FLOOR. NAME=VERSION pairs are the versions of the
  Bazel targets declared as jaxext's Python requirements (a pip hub's); a package not among them
  must be installed in the interpreter itself.
SUPPORTED: the CPython versions jaxext selects itself (comma-separated), for the advice given.
Writes STAMP when all is well.
"""

import importlib.metadata
import json
import re
import sys


def key(version: str) -> tuple:
  parts = []
  for p in version.split("."):
    digits = "".join(c for c in p if c.isdigit())
    if not digits:
      break
    parts.append(int(digits))
    if digits != p:
      break
  return tuple(parts)


def headers_version(patchlevel_h: str) -> str:
  with open(patchlevel_h) as f:
    text = f.read()
  parts = [re.search(rf"#define\s+PY_{p}_VERSION\s+(\d+)", text) for p in ("MAJOR", "MINOR")]
  if not all(parts):
    raise SystemExit(f"jaxext: {patchlevel_h} does not define PY_MAJOR_VERSION and PY_MINOR_VERSION")
  return ".".join(m.group(1) for m in parts)


def main() -> int:
  patchlevel_h, floor, supported, stamp, *declared = sys.argv[1:]
  versions = dict(d.split("=", 1) for d in declared)
  errors = []
  built_for = headers_version(patchlevel_h)
  running = "%d.%d" % sys.version_info[:2]
  if running != built_for:
    advice = (f"name your toolchain's headers (python_deps.requirements(python_headers = ...); "
              f"with rules_python >= 0.25: \"@rules_python//python/cc:current_py_cc_headers\")")
    if running in supported.split(","):
      advice += (f", or select CPython {running} for jaxext's headers: "
                 f"--repo_env=HERMETIC_PYTHON_VERSION={running} (with python{running} and its "
                 f"headers on PATH, or --repo_env=JAXEXT_PYTHON=/path/to/python{running})")
    else:
      advice += f" (jaxext's own headers are for CPython {supported.replace(',', ', ')} only)"
    errors.append(
        f"the Python toolchain of this build is CPython {running} ({sys.executable}), but jaxext's "
        f"extension modules compile with the headers of CPython {built_for} ({patchlevel_h}); "
        f"they would not import. Use the same CPython for both: {advice}.")
  for name in ("jax", "jaxlib"):
    where = "declared as a Bazel requirement of jaxext"
    version = versions.get(name)
    if version is None:
      where = f"installed in {sys.executable}"
      try:
        version = importlib.metadata.version(name)
      except importlib.metadata.PackageNotFoundError:
        errors.append(
            f"{name} is neither declared as a Bazel requirement of jaxext nor installed in "
            f"{sys.executable}. Declare your pip hub's targets (MODULE.bazel: "
            f"python_deps.requirements(packages = [\"@pypi//jax\", \"@pypi//jaxlib\"]) on "
            f"use_extension(\"@jaxext//third_party/python:python_repository.bzl\", "
            f"\"python_deps\")), or install {name} >= {floor} into that interpreter.")
        continue
    if key(version) < key(floor):
      errors.append(f"{name} {version} ({where}) is older than jaxext supports: {name} >= {floor}.")
  if errors:
    print("jaxext: the Python environment of this build cannot run jaxext:", file=sys.stderr)
    for e in errors:
      print("  - " + e, file=sys.stderr)
    return 1
  with open(stamp, "w") as f:
    json.dump({"python": running, "headers": patchlevel_h, "built_for": built_for,
               "declared": versions}, f)
  return 0


if __name__ == "__main__":
  sys.exit(main())
