"""The hermetic Python toolchain of jaxext: pinned interpreter, pinned wheels, C++ headers.

`python_repository` creates one repository (conventionally `@jaxext_python`) holding

* `:toolchain`         a Python toolchain whose interpreter is a virtual environment with every pin
                       of `PYTHON_PACKAGES` installed (register it; py_test targets then run in it);
* `:python_headers`    CPython's C headers for the pinned interpreter;
* `:pybind11`          pybind11's headers (from the pinned wheel);
* `:xla_ffi_headers`   XLA's external FFI headers, from the pinned jaxlib (the FFI API floor);
* `:python_info.json`  what was found (versions, python tag, FFI API version).

The interpreter is the pinned CPython found as `python3.X` on PATH, or `JAXEXT_PYTHON` (an explicit
choice). Its version is checked against the pin: a different minor version fails the build, since the
extensions would be built for another ABI. Wheels come from the package index through pip with
`--require-hashes`: versions and hashes are those of `//third_party:pins.bzl`.
"""

load("//third_party:pins.bzl", "JAXLIB_FLOOR", "PYTHON", "PYTHON_PACKAGES")

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

cc_library(
    name = "xla_ffi_headers",
    hdrs = glob(["xla_ffi_include/xla/ffi/api/*.h"]),
    includes = ["xla_ffi_include"],
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

def _find_python(rctx):
    explicit = rctx.os.environ.get("JAXEXT_PYTHON", "")
    if explicit:
        return rctx.path(explicit)
    major_minor = ".".join(PYTHON["version"].split(".")[:2])
    found = rctx.which("python" + major_minor)
    if not found:
        fail(("jaxext needs CPython {v} (pinned in //third_party:pins.bzl) to build its extensions " +
              "and run its tests; no python{mm} is on PATH. Run Bazel through tools/bazel (which " +
              "provisions it), install python{mm} with its headers and venv module, or point " +
              "JAXEXT_PYTHON at such an interpreter (--repo_env=JAXEXT_PYTHON=/path/python{mm}).")
            .format(v = PYTHON["version"], mm = major_minor))
    return found

def _python_repository_impl(rctx):
    python = _find_python(rctx)
    res = rctx.execute([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
    if res.return_code != 0:
        fail("cannot run the Python interpreter %s: %s" % (python, res.stderr))
    found = res.stdout.strip()
    want = PYTHON["version"]
    if found.split(".")[:2] != want.split(".")[:2]:
        fail("jaxext is pinned to CPython %s but %s is %s; extensions would be built for the wrong ABI" %
             (want, python, found))
    if found != want:
        print("WARNING: jaxext pins CPython %s; building with %s (%s)" % (want, found, python))  # buildifier: disable=print

    lines = ["%s==%s --hash=sha256:%s" % (name, ver, sha) for name, (ver, sha) in sorted(PYTHON_PACKAGES.items())]
    rctx.file("requirements.txt", "\n".join(lines) + "\n")
    if PYTHON_PACKAGES["jaxlib"][0] != JAXLIB_FLOOR:
        fail("the jaxlib pin must equal JAXLIB_FLOOR (the FFI headers come from it)")

    rctx.report_progress("installing %d pinned wheels into a virtual environment" % len(PYTHON_PACKAGES))
    res = rctx.execute(
        [python, "-I", rctx.path(rctx.attr._setup), rctx.path("."), rctx.path("requirements.txt"),
         rctx.os.environ.get("JAXEXT_PIP_INDEX_URL", PYTHON["index_url"]), want],
        timeout = 1800,
        quiet = False,
    )
    if res.return_code != 0:
        fail("setting up the pinned Python environment failed:\n" + res.stdout + res.stderr)
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
    environ = ["JAXEXT_PYTHON", "JAXEXT_PIP_INDEX_URL"],
)

def _python_deps_impl(_mctx):
    python_repository(name = "jaxext_python")

python_deps = module_extension(
    implementation = _python_deps_impl,
    doc = "Creates @jaxext_python (see python_repository).",
)
