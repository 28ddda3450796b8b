"""The hermetic Python toolchain of jaxext: a selected CPython, a locked jax set, C++ headers.

`python_repository` creates one repository (conventionally `@jaxext_python`) holding

* `:toolchain`         a Python toolchain whose interpreter is a virtual environment with every wheel
                       of the selected lock file installed (register it; py_test targets run in it);
* `:python_headers`    CPython's C headers of the selected interpreter;
* `:pybind11`          pybind11's headers (from the locked wheel);
* `:numpy_headers`     NumPy's C API headers (the benchmark's batman extension);
* `:python_info.json`  what was selected and found (Python and jax versions, python tag); every
                       jaxext_py_test depends on it, so switching either re-runs the tests.

Two repository environment variables select the environment, in the manner of jaxlib's hermetic
Python (`--repo_env=NAME=VALUE`, or the `--config=python3.X` / `--config=jax_<set>` shorthands of
.bazelrc):

* `HERMETIC_PYTHON_VERSION` (3.12 ... 3.15; default `PYTHON["default"]` of //third_party:pins.bzl):
  the CPython the extensions are built for and the tests run under. The interpreter is
  `JAXEXT_PYTHON` if set (an explicit path; when HERMETIC_PYTHON_VERSION is unset, its version
  selects), else `python3.X` on PATH (tools/bazel's toolchain root has 3.13, 3.14 and 3.15).
* `JAXEXT_JAX` (a key of `JAX_SETS`; default `JAX_SETS["default"]`): which hashed lock file,
  `requirements_lock_<set>.txt`, the virtual environment is installed from (pip `--require-hashes`,
  no dependency resolution, binary wheels only). A set whose lock has no wheels for the selected
  Python is refused with the reason.

The XLA FFI headers do not come from here: they are the JAXLIB_FLOOR headers of
@jaxext_xla_ffi (third_party/xla_ffi), whatever jax the tests run with.
"""

load("//third_party:pins.bzl", "JAXLIB_FLOOR", "JAX_SETS", "PYTHON")

_BUILD = """\
load("@rules_python//python:defs.bzl", "py_runtime", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

exports_files(["python_info.json"])

cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)

cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_include/**/*.h"]),
    includes = ["pybind11_include"],
    deps = [":python_headers"],
)

# NumPy's C API headers (for the benchmark's batman extension).
cc_library(
    name = "numpy_headers",
    hdrs = glob(["numpy_include/**/*.h"]),
    includes = ["numpy_include"],
    deps = [":python_headers"],
)

py_runtime(
    name = "runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
    stub_shebang = "#!{interpreter}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)

# The interpreter as a file, for sh_test and genrule users: `$(location @jaxext_python//:python3)`.
sh_binary(
    name = "python3",
    srcs = ["python3.sh"],
)
"""

def _version_key(v):
    return [int(x) for x in v.split(".")]

def _run_version(rctx, python):
    res = rctx.execute([python, "-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
    if res.return_code != 0:
        fail("cannot run the Python interpreter %s: %s" % (python, res.stderr))
    return res.stdout.strip()

def _select_python(rctx):
    """Returns (interpreter path, selected major.minor, full version found)."""
    supported = PYTHON["versions"]
    wanted = rctx.os.environ.get("HERMETIC_PYTHON_VERSION", "")
    explicit = rctx.os.environ.get("JAXEXT_PYTHON", "")
    if wanted and wanted not in supported:
        fail("HERMETIC_PYTHON_VERSION=%s: jaxext supports CPython %s (PYTHON in //third_party:pins.bzl)" %
             (wanted, ", ".join(supported)))
    if explicit:
        python = rctx.path(explicit)
        if not python.exists:
            fail("JAXEXT_PYTHON=%s does not exist (under tools/bazel, give a path on the host: " % explicit +
                 "its installation is mounted into the toolchain root)")
        found = _run_version(rctx, python)
        mm = ".".join(found.split(".")[:2])
        if wanted and mm != wanted:
            fail("JAXEXT_PYTHON=%s is CPython %s but HERMETIC_PYTHON_VERSION=%s" % (explicit, found, wanted))
        if mm not in supported:
            fail("JAXEXT_PYTHON=%s is CPython %s; jaxext supports %s" % (explicit, found, ", ".join(supported)))
        return python, mm, found
    wanted = wanted or PYTHON["default"]
    python = rctx.which("python" + wanted)
    if not python:
        fail(("jaxext is building for CPython {v} (HERMETIC_PYTHON_VERSION, default in " +
              "//third_party:pins.bzl) but no python{v} is on PATH. Run Bazel through tools/bazel " +
              "(its toolchain root has python3.13, 3.14 and 3.15), install python{v} with its headers " +
              "and venv module, or point JAXEXT_PYTHON at such an interpreter " +
              "(JAXEXT_PYTHON=/path/python{v} tools/bazel ..., or --repo_env=JAXEXT_PYTHON=...).")
            .format(v = wanted))
    found = _run_version(rctx, python)
    if ".".join(found.split(".")[:2]) != wanted:
        fail("%s reports CPython %s, not %s" % (python, found, wanted))
    return python, wanted, found

def _read_lock(rctx, jax_set):
    """Returns (lock path, Python versions it covers, {name: version})."""
    lock = rctx.path(Label("//third_party/python:requirements_lock_%s.txt" % jax_set))
    versions, notes, pkgs = None, [], {}
    for line in rctx.read(lock).splitlines():
        if line.startswith("# python-versions:"):
            versions = [v for v in line.removeprefix("# python-versions:").split(" ") if v]
        elif line.startswith("# python ") and "not supported" in line:
            notes.append(line.removeprefix("# "))
        elif line and line[0].isalpha() and "==" in line:
            name, _, rest = line.partition("==")
            pkgs[name] = rest.split(" ")[0]
    if versions == None:
        fail("%s has no '# python-versions:' header; regenerate it with tools/lock_python.py" % lock)
    return lock, versions, notes, pkgs

def _python_repository_impl(rctx):
    python, version, found = _select_python(rctx)
    jax_set = rctx.os.environ.get("JAXEXT_JAX", "") or JAX_SETS["default"]
    sets = sorted([k for k in JAX_SETS if k != "default"])
    if jax_set not in sets:
        fail("JAXEXT_JAX=%s: the jax sets are %s (JAX_SETS in //third_party:pins.bzl)" % (jax_set, ", ".join(sets)))
    lock, lock_versions, notes, pkgs = _read_lock(rctx, jax_set)
    if version not in lock_versions:
        fail("the jax set '%s' (jax %s) has no wheels for CPython %s: %s. Choose another set, e.g. " %
             (jax_set, JAX_SETS[jax_set], version, "; ".join(notes) or "not in its lock file") +
             "--repo_env=JAXEXT_JAX=" + JAX_SETS["default"])
    if pkgs.get("jax") != JAX_SETS[jax_set] or pkgs.get("jaxlib") != JAX_SETS[jax_set]:
        fail("%s pins jax %s / jaxlib %s but JAX_SETS['%s'] is %s; regenerate the lock" %
             (lock, pkgs.get("jax"), pkgs.get("jaxlib"), jax_set, JAX_SETS[jax_set]))
    if _version_key(JAX_SETS[jax_set]) < _version_key(JAXLIB_FLOOR):
        fail("JAX_SETS['%s'] = %s is older than JAXLIB_FLOOR %s" % (jax_set, JAX_SETS[jax_set], JAXLIB_FLOOR))

    rctx.report_progress("installing the '%s' jax set (jax %s) for CPython %s" % (jax_set, JAX_SETS[jax_set], found))
    res = rctx.execute(
        [python, "-I", rctx.path(rctx.attr._setup), rctx.path("."), lock,
         rctx.os.environ.get("JAXEXT_PIP_INDEX_URL", PYTHON["index_url"]), jax_set],
        timeout = 1800,
        quiet = False,
    )
    if res.return_code != 0:
        fail("setting up the Python environment (CPython %s, jax set '%s') failed:\n" % (found, jax_set) +
             res.stdout + res.stderr)
    interpreter = str(rctx.path("venv/bin/python3"))
    rctx.file("python3.sh", "#!/bin/sh\nexec \"%s\" \"$@\"\n" % interpreter, executable = True)
    rctx.file("BUILD.bazel", _BUILD.format(interpreter = interpreter))
    rctx.file("WORKSPACE", "")

python_repository = repository_rule(
    implementation = _python_repository_impl,
    attrs = {
        "_setup": attr.label(default = "//third_party/python:setup_python_repo.py"),
        "_pins": attr.label(default = "//third_party:pins.bzl"),
    },
    environ = ["HERMETIC_PYTHON_VERSION", "JAXEXT_JAX", "JAXEXT_PYTHON", "JAXEXT_PIP_INDEX_URL"],
)

def _python_deps_impl(_mctx):
    python_repository(name = "jaxext_python")

python_deps = module_extension(
    implementation = _python_deps_impl,
    doc = "Creates @jaxext_python (see python_repository).",
)
