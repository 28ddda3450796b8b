"""The hermetic Python toolchain of jaxext: a selected CPython, a locked jax set, C++ headers.

Repositories (a repository that vendors jaxext with a Python of its own, its headers named,
fetches only the first two, which need no interpreter):

`python_requirements_repository` (`@jaxext_python_requirements`): what jaxext's Python side takes
from its user (python_requirements.bzl has the rule that uses them):

* `:deps`              a py_library of the targets declared as jaxext's jax and jaxlib (a pip
                       hub's; the module extension's `requirements` tag), empty by default (jax
                       installed in the interpreter);
* `:python_headers`    the CPython headers extension modules compile with: the declared ones, else
                       @jaxext_python_headers';
* `:host_cpu`          this machine's @platforms//cpu constraint (the build-time check of the
                       Python runs only where the target is this machine's CPU);
* `:selection.json`    which CPython and jax set are selected (the environment variables below and
                       a digest of the set's lock file): every jaxext_py_test depends on it, so
                       switching either re-runs the tests.

`pybind11_repository` (`@jaxext_pybind11`): `:pybind11`, the headers of the pinned wheel (PYBIND11
of //third_party:pins.bzl), with `:python_headers` above.

`python_headers_repository` (`@jaxext_python_headers`): `:python_headers`, CPython's C headers of
the selected interpreter (for another architecture: Debian's for the same release, from
`python_cross_headers`).

`python_repository` (conventionally `@jaxext_python`): jaxext's own test environment.

* `:toolchain`         a Python toolchain whose interpreter is a virtual environment with every wheel
                       of the selected lock file installed. jaxext registers it for its own builds
                       only (a dev dependency); a repository that vendors jaxext brings its own
                       Python, or registers this one explicitly;
* `:numpy_headers`     NumPy's C API headers (the benchmark's batman extension);
* `:python_info.json`  what was selected and installed (Python and jax versions, python tag): the
                       wheels' tags and the CUDA repository read it;
* `:python_headers`, `:pybind11`: aliases of the targets above.

Two repository environment variables select the environment, in the manner of jaxlib's hermetic
Python (`--repo_env=NAME=VALUE`, or the `--config=python3.X` / `--config=jax_<set>` shorthands of
.bazelrc):

* `HERMETIC_PYTHON_VERSION` (3.11 ... 3.15; default `PYTHON["default"]` of //third_party:pins.bzl):
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

load("//third_party:pins.bzl", "DEBIAN_SUITE", "JAXLIB_FLOOR", "JAX_SETS", "PYBIND11", "PYTHON", "PYTHON_DEBIAN_SUITES")

_BUILD = """\
load("@rules_python//python:defs.bzl", "py_runtime", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

exports_files(["python_info.json"])

alias(
    name = "python_headers",
    actual = "@jaxext_python_headers//:python_headers",
)

alias(
    name = "pybind11",
    actual = "@jaxext_pybind11//:pybind11",
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

_HEADERS_BUILD = """\
package(default_visibility = ["//visibility:public"])

# CPython's headers for the target's architecture: the interpreter's own, or (cross builds such as
# //:wheel_aarch64) Debian's for the same CPython release on that architecture.
cc_library(
    name = "python_headers",
    deps = select({cross_headers}),
)

cc_library(
    name = "host_python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)
"""

_PYBIND11_BUILD = """\
# pybind11 {version}: the headers of its wheel, with the CPython headers extensions compile with
# (the consumer's when it names its own: @jaxext_python_requirements).
cc_library(
    name = "pybind11",
    hdrs = glob(["pybind11_wheel/pybind11/include/**/*.h"]),
    includes = ["pybind11_wheel/pybind11/include"],
    visibility = ["//visibility:public"],
    deps = ["@jaxext_python_requirements//:python_headers"],
)
"""

_REQUIREMENTS_BUILD = """\
load("@rules_python//python:defs.bzl", "py_library")

package(default_visibility = ["//visibility:public"])

exports_files(["selection.json"])

# jaxext's Python requirements as the consumer declared them (empty: the interpreter's own).
py_library(
    name = "deps",
    deps = [{deps}],
)

# The CPython headers extension modules compile with: the consumer's, else those of the CPython
# jaxext selected (@jaxext_python_headers).
alias(
    name = "python_headers",
    actual = "{headers}",
)

# This machine's CPU: the build-time check of the Python runs only for targets of this CPU.
alias(
    name = "host_cpu",
    actual = "@platforms//cpu:{host_cpu}",
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
    jax_set = _jax_set(rctx)
    lock, lock_versions, notes, pkgs = _read_lock(rctx, jax_set)
    if version not in lock_versions:
        others = [s for s in sorted(JAX_SETS) if s != "default" and s != jax_set and
                  version in _read_lock(rctx, s)[1]]
        fail("the jax set '%s' (jax %s) has no wheels for CPython %s: %s. " %
             (jax_set, JAX_SETS[jax_set], version, "; ".join(notes) or "not in its lock file") +
             ("Choose a set that has: %s (--repo_env=JAXEXT_JAX=<set>, or --config=jax_<set>)" %
              ", ".join(["'%s' (jax %s)" % (s, JAX_SETS[s]) for s in others])
              if others else "No jax set has wheels for it"))
    if pkgs.get("jax") != JAX_SETS[jax_set] or pkgs.get("jaxlib") != JAX_SETS[jax_set]:
        fail("%s pins jax %s / jaxlib %s but JAX_SETS['%s'] is %s; regenerate the lock" %
             (lock, pkgs.get("jax"), pkgs.get("jaxlib"), jax_set, JAX_SETS[jax_set]))
    if pkgs.get("pybind11") != PYBIND11["version"]:
        fail("%s pins pybind11 %s but PYBIND11 in //third_party:pins.bzl is %s (the headers extensions build with)" %
             (lock, pkgs.get("pybind11"), PYBIND11["version"]))
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

def _jax_set(rctx):
    jax_set = rctx.os.environ.get("JAXEXT_JAX", "") or JAX_SETS["default"]
    sets = sorted([k for k in JAX_SETS if k != "default"])
    if jax_set not in sets:
        fail("JAXEXT_JAX=%s: the jax sets are %s (JAX_SETS in //third_party:pins.bzl)" % (jax_set, ", ".join(sets)))
    return jax_set

def _python_headers_repository_impl(rctx):
    python, version, found = _select_python(rctx)
    res = rctx.execute([python, "-I", rctx.path(rctx.attr._setup), "headers", rctx.path(".")])
    if res.return_code != 0:
        fail("copying the C headers of %s (CPython %s) failed:\n%s%s" % (python, found, res.stdout, res.stderr))
    if not rctx.path("python_include/Python.h").exists:
        fail("%s (CPython %s) has no C headers (Python.h): install its development package (Debian: python%s-dev)" %
             (python, found, version))
    host = _ARCH.get(rctx.os.arch, rctx.os.arch)
    cross = ['"@platforms//cpu:%s": ["@jaxext_python_%s//:python_headers"]' % (a, a) for a in CROSS_ARCHS if a != host]
    cross_headers = "{%s}" % ", ".join(cross + ['"//conditions:default": [":host_python_headers"]'])
    rctx.file("BUILD.bazel", _HEADERS_BUILD.format(cross_headers = cross_headers))
    rctx.file("WORKSPACE", "")

python_headers_repository = repository_rule(
    implementation = _python_headers_repository_impl,
    attrs = {
        "_setup": attr.label(default = "//third_party/python:setup_python_repo.py"),
        "_pins": attr.label(default = "//third_party:pins.bzl"),
    },
    environ = ["HERMETIC_PYTHON_VERSION", "JAXEXT_PYTHON"],
)

def _pybind11_repository_impl(rctx):
    rctx.download_and_extract(
        url = PYBIND11["url"],
        sha256 = PYBIND11["sha256"],
        type = "zip",
        output = "pybind11_wheel",
    )
    rctx.file("BUILD.bazel", _PYBIND11_BUILD.format(version = PYBIND11["version"]))
    rctx.file("WORKSPACE", "")

pybind11_repository = repository_rule(
    implementation = _pybind11_repository_impl,
    attrs = {"_pins": attr.label(default = "//third_party:pins.bzl")},
    doc = "`:pybind11`: the headers of the pinned pybind11 wheel (PYBIND11 of //third_party:pins.bzl).",
)

def _python_requirements_repository_impl(rctx):
    jax_set = _jax_set(rctx)
    lock = rctx.read(rctx.path(Label("//third_party/python:requirements_lock_%s.txt" % jax_set)))
    rctx.file("selection.json", json.encode_indent({
        "HERMETIC_PYTHON_VERSION": rctx.os.environ.get("HERMETIC_PYTHON_VERSION", "") or PYTHON["default"],
        "JAXEXT_PYTHON": rctx.os.environ.get("JAXEXT_PYTHON", ""),
        "jax_set": jax_set,
        "jax": JAX_SETS[jax_set],
        "lock_digest": str(hash(lock)),
    }, indent = "  ") + "\n")
    headers = str(rctx.attr.python_headers) if rctx.attr.python_headers else "@jaxext_python_headers//:python_headers"
    rctx.file("BUILD.bazel", _REQUIREMENTS_BUILD.format(
        deps = ", ".join(['"%s"' % str(label) for label in rctx.attr.packages]),
        headers = headers,
        host_cpu = _ARCH.get(rctx.os.arch, rctx.os.arch),
    ))
    rctx.file("WORKSPACE", "")

python_requirements_repository = repository_rule(
    implementation = _python_requirements_repository_impl,
    attrs = {
        "packages": attr.label_list(doc = "py_library targets providing jax and jaxlib"),
        "python_headers": attr.label(doc = "a cc_library of CPython headers (with patchlevel.h)"),
        "_pins": attr.label(default = "//third_party:pins.bzl"),
    },
    environ = ["HERMETIC_PYTHON_VERSION", "JAXEXT_JAX", "JAXEXT_PYTHON"],
    doc = """`:deps`, a py_library of `packages` (jaxext's declared Python requirements);
    `:python_headers`, `python_headers` or jaxext's own; `:host_cpu`; `:selection.json`.""",
)

# Architectures wheels are cross-built for (//:wheel_<arch>), as Bazel's @platforms//cpu names them.
CROSS_ARCHS = ["aarch64"]

# rctx.os.arch (Java's os.arch) -> @platforms//cpu; Debian's architecture and multiarch names.
_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
_DEBIAN_ARCH = {"x86_64": ("amd64", "x86_64-linux-gnu"), "aarch64": ("arm64", "aarch64-linux-gnu")}

_CROSS_BUILD = """\
package(default_visibility = ["//visibility:public"])

# Debian's libpython{version}-dev {deb_version} for {deb_arch}: CPython's headers with the
# pyconfig.h of that architecture (selected by Debian's pyconfig.h through <{multiarch}/...>).
cc_library(
    name = "python_headers",
    hdrs = glob(["python_include/**/*.h"]),
    includes = ["python_include"],
)
"""

def _system_mirror(rctx):
    """The first Debian mirror of this system's apt sources (tools/bazel's root: the one it used)."""
    for f in ("/etc/apt/sources.list", "/etc/apt/sources.list.d/debian.sources"):
        if not rctx.path(f).exists:
            continue
        for line in rctx.read(f).splitlines():
            if line.strip().startswith("#"):
                continue
            words = [w for w in line.replace("URIs:", "deb").replace("\t", " ").split(" ") if w]
            for w in words[1:]:
                if w.startswith("http") and "/debian" in w and "security" not in w:
                    return w
    return None

def _python_cross_headers_impl(rctx):
    python, version, found = _select_python(rctx)
    arch = rctx.attr.arch
    deb_arch, multiarch = _DEBIAN_ARCH[arch]
    pkg = "libpython%s-dev" % version
    suite = PYTHON_DEBIAN_SUITES.get(version)
    if suite:
        # A CPython the toolchain root's Debian lacks: the newest headers of a suite that has it.
        deb_version = None
    else:
        suite = DEBIAN_SUITE
        why = ("Wheels for %s are built against Debian's %s CPython headers of the same release as the " % (arch, deb_arch) +
               "interpreter, so the interpreter must be Debian's python%s (tools/bazel's toolchain root " % version +
               "has 3.13, 3.14 and 3.15; PYTHON_DEBIAN_SUITES in //third_party:pins.bzl names suites for " +
               "others, %s; no Debian suite has 3.12)" % ", ".join(sorted(PYTHON_DEBIAN_SUITES)))
        res = rctx.execute(["dpkg-query", "-W", "-f=${Version}", pkg])
        deb_version = res.stdout.strip()
        if res.return_code != 0 or not deb_version:
            fail("%s: %s is not installed here (%s). %s." % (python, pkg, res.stderr.strip(), why))
        if str(python) not in ("/usr/bin/python" + version, "/bin/python" + version):
            fail("%s (CPython %s) is not Debian's /usr/bin/python%s. %s." % (python, found, version, why))
        if deb_version.split("-")[0] != found:
            fail("%s is CPython %s but %s is %s. %s." % (python, found, pkg, deb_version, why))

    # apt with a private state (no root, nothing of the system's apt touched): the Debian archive's
    # signed index for the target architecture, then that one package at the host's version.
    mirror = rctx.os.environ.get("JAXEXT_DEBIAN_MIRROR", "") or _system_mirror(rctx) or "http://deb.debian.org/debian"
    apt = rctx.path("apt")
    for d in ("lists/partial", "cache/archives/partial", "etc", "download"):
        rctx.execute(["mkdir", "-p", "%s/%s" % (apt, d)])
    rctx.file("apt/status", "")
    rctx.file("apt/etc/sources.list", "deb [arch=%s signed-by=%s] %s %s main\n" % (
        deb_arch, rctx.attr.keyring, mirror, suite))
    opts = []
    for kv in [
        "Debug::NoLocking=1",
        "Dir::Etc::SourceList=%s/etc/sources.list" % apt,
        "Dir::Etc::SourceParts=%s/etc" % apt,
        "Dir::State::Lists=%s/lists" % apt,
        "Dir::State::status=%s/status" % apt,
        "Dir::Cache=%s/cache" % apt,
        "APT::Architecture=" + deb_arch,
        "APT::Architectures::=" + deb_arch,
        "APT::Sandbox::User=root",
        "Acquire::Check-Valid-Until=false",
        "Acquire::Languages=none",
    ]:
        opts += ["-o", kv]
    want = "%s:%s" % (pkg, deb_arch) + ("=" + deb_version if deb_version else "")
    rctx.report_progress("apt: Debian %s's %s" % (suite, want))
    for cmd in (["apt-get"] + opts + ["-q", "update"],
                ["apt-get"] + opts + ["-q", "download", want]):
        res = rctx.execute(cmd, working_directory = str(apt) + "/download", timeout = 600)
        if res.return_code != 0:
            fail("%s failed (the %s %s headers of %s): %s%s" % (
                " ".join(cmd[:1] + cmd[-2:]), deb_arch, pkg, mirror, res.stdout, res.stderr))
    debs = [p for p in rctx.path(str(apt) + "/download").readdir() if p.basename.endswith(".deb")]
    if len(debs) != 1:
        fail("apt-get download left %s" % debs)
    if not deb_version:
        res = rctx.execute(["dpkg-deb", "-f", str(debs[0]), "Version"])
        if res.return_code != 0:
            fail("dpkg-deb -f %s Version: %s" % (debs[0], res.stderr))
        deb_version = res.stdout.strip()
    res = rctx.execute(["dpkg-deb", "-x", str(debs[0]), str(rctx.path("deb"))])
    if res.return_code != 0:
        fail("dpkg-deb -x %s: %s" % (debs[0], res.stderr))
    inc = "deb/usr/include"
    py = "python" + version
    if not rctx.path("%s/%s/%s/pyconfig.h" % (inc, multiarch, py)).exists:
        fail("%s has no %s/%s/pyconfig.h" % (debs[0], multiarch, py))
    rctx.execute(["mkdir", "-p", "python_include/%s/%s" % (multiarch, py)])
    for src, dst in (("%s/%s" % (inc, py), "python_include"),
                     ("%s/%s/%s" % (inc, multiarch, py), "python_include/%s/%s" % (multiarch, py))):
        res = rctx.execute(["cp", "-r", "--no-preserve=mode", src + "/.", dst])
        if res.return_code != 0:
            fail("cp %s: %s" % (src, res.stderr))
    rctx.delete("apt")
    rctx.delete("deb")
    rctx.file("BUILD.bazel", _CROSS_BUILD.format(
        version = version, deb_version = deb_version, deb_arch = deb_arch, multiarch = multiarch))
    rctx.file("WORKSPACE", "")

python_cross_headers = repository_rule(
    implementation = _python_cross_headers_impl,
    doc = """CPython's C headers for another architecture (`arch`, an @platforms//cpu name): those of
    Debian's libpython3.X-dev for it, at the version of the selected interpreter's own Debian package
    (so the selected interpreter must be Debian's: tools/bazel's toolchain root has 3.13-3.15), or,
    for a CPython of PYTHON_DEBIAN_SUITES (//third_party:pins.bzl: 3.11), the newest of that suite.
    Fetched through apt with a private state, checked against the Debian archive's keyring.""",
    attrs = {
        "arch": attr.string(mandatory = True, values = CROSS_ARCHS),
        "keyring": attr.string(default = "/usr/share/keyrings/debian-archive-keyring.gpg"),
        "_pins": attr.label(default = "//third_party:pins.bzl"),
    },
    environ = ["HERMETIC_PYTHON_VERSION", "JAXEXT_PYTHON", "JAXEXT_DEBIAN_MIRROR"],
)

def python_repositories():
    """@jaxext_python_headers, @jaxext_pybind11, @jaxext_python and, fetched only by cross builds,
    @jaxext_python_<arch> headers (@jaxext_python_requirements: the caller's)."""
    python_headers_repository(name = "jaxext_python_headers")
    pybind11_repository(name = "jaxext_pybind11")
    python_repository(name = "jaxext_python")
    for arch in CROSS_ARCHS:
        python_cross_headers(name = "jaxext_python_" + arch, arch = arch)

def _python_deps_impl(mctx):
    python_repositories()
    packages, headers = [], None
    for mod in mctx.modules:
        for tag in mod.tags.requirements:
            if not mod.is_root:
                fail("module %s declares jaxext's Python requirements (python_deps.requirements); " % mod.name +
                     "only the root module may: the Python environment is the root's")
            packages += tag.packages
            if tag.python_headers:
                if headers:
                    fail("python_deps.requirements: python_headers given twice (%s, %s)" % (headers, tag.python_headers))
                headers = tag.python_headers
    python_requirements_repository(name = "jaxext_python_requirements", packages = packages, python_headers = headers)

_requirements = tag_class(
    attrs = {
        "packages": attr.label_list(doc = "py_library targets providing jax and jaxlib (a pip hub's " +
                                          "`@pypi//jax`, `@pypi//jaxlib`): jaxext's package depends on them"),
        "python_headers": attr.label(doc = "a cc_library of the CPython headers of your Python toolchain " +
                                           "(with patchlevel.h): jaxext's extension modules compile with them"),
    },
    doc = """Declares the root module's own targets for jaxext's Python requirements (jax, jaxlib)
    and, optionally, CPython headers. Without packages, jax must be installed in the interpreter of
    the build's Python toolchain; without headers, those of the CPython jaxext selects are used.""",
)

python_deps = module_extension(
    implementation = _python_deps_impl,
    tag_classes = {"requirements": _requirements},
    doc = """Creates @jaxext_python_requirements (the root module's `requirements` tag),
    @jaxext_pybind11, @jaxext_python_headers, @jaxext_python (see python_repository) and
    @jaxext_python_<arch> (python_cross_headers).""",
)
