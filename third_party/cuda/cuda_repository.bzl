"""Hermetic CUDA toolkit for jaxext: NVIDIA's pinned PyPI wheels, or a local install on request.

`cuda_repository` (conventionally `@jaxext_cuda`) provides

* `:toolkit`      every file nvcc needs at compile time (nvcc, cicc, ptxas, fatbinary, headers);
* `:nvcc`         the compiler driver;
* `:cuda_headers` CUDA runtime and CCCL headers, for C++ code that includes cuda_runtime_api.h;
* `:cudart`       the static CUDA runtime (no libcudart.so needed next to the extension), of the
                  target's architecture: x86_64, or aarch64 for the cross-built wheel (Grace Hopper);
* `:host_compiler` a file naming the host compiler nvcc runs for the target's architecture.

The aarch64 build runs the same x86_64 nvcc with a cross compiler as its host compiler
(`CUDA_HOST_COMPILER_AARCH64`, which the toolchain root has) and links the static runtime of
`CUDA_PACKAGES_AARCH64`; the headers are the same files for both architectures.

By default the wheels of `CUDA_PACKAGES` (//third_party:pins.bzl) are installed with pip
`--require-hashes` into the repository. `LOCAL_CUDA_PATH=/usr/local/cuda-13.0` (as XLA's
hermetic CUDA does) uses an installed toolkit instead. The toolkit is installed only when
`--config=cuda` asks for it (`--repo_env=JAXEXT_CUDA=1`): otherwise the repository holds stand-ins
with the same names, so that `bazel query 'deps(//...)'` (which walks every select branch) and
IDE syncs see the graph without fetching 489 MB, and a CUDA compile without the config fails
saying what to add.
"""

load(
    "//third_party:pins.bzl",
    "CUDA_HOST_COMPILER",
    "CUDA_HOST_COMPILER_AARCH64",
    "CUDA_PACKAGES",
    "CUDA_PACKAGES_AARCH64",
    "PYTHON",
)

_BUILD = """\
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "toolkit",
    srcs = glob(["cuda/**"]),
)

filegroup(
    name = "nvcc",
    srcs = ["cuda/bin/nvcc"],
)

filegroup(
    name = "cuobjdump",
    srcs = ["cuda/bin/cuobjdump"],
)

cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda/include/**/*.h", "cuda/include/**/*.hpp", "cuda/include/cccl/**"]),
    includes = ["cuda/include", "cuda/include/cccl"],
)

cc_library(
    name = "cudart",
    srcs = select({
        "@platforms//cpu:aarch64": ["AARCH64_CUDART"],
        "//conditions:default": ["cuda/lib/libcudart_static.a"],
    }),
    linkopts = ["-ldl", "-lpthread", "-lrt"],
    deps = [":cuda_headers"],
)

genrule(
    name = "no_aarch64_runtime",
    outs = ["no_aarch64_runtime/libcudart_static.a"],
    cmd = "echo 'jaxext: no aarch64 CUDA runtime: LOCAL_CUDA_PATH has no targets/sbsa-linux/lib/libcudart_static.a (install the toolkit's sbsa cross packages, then re-fetch: bazel sync --only=jaxext_cuda; or build without LOCAL_CUDA_PATH to use the pinned wheels)' >&2; exit 1",
)

alias(
    name = "host_compiler",
    actual = select({
        "@platforms//cpu:aarch64": "host_compiler_aarch64.txt",
        "//conditions:default": "host_compiler.txt",
    }),
)

exports_files(["host_compiler.txt", "host_compiler_aarch64.txt"])
"""

# Without --config=cuda: the same targets, empty; "nvcc" explains what to add.
_STUB_BUILD = """\
package(default_visibility = ["//visibility:public"])

filegroup(name = "toolkit")

filegroup(
    name = "nvcc",
    srcs = ["cuda/bin/nvcc"],
)

filegroup(
    name = "cuobjdump",
    srcs = ["cuda/bin/nvcc"],
)

cc_library(name = "cuda_headers")

cc_library(name = "cudart")

alias(
    name = "host_compiler",
    actual = "host_compiler.txt",
)

exports_files(["host_compiler.txt", "host_compiler_aarch64.txt"])
"""

_STUB_NVCC = """#!/bin/sh
echo "jaxext: the CUDA toolkit is installed only for CUDA builds: add --config=cuda" \\
  "(or --repo_env=JAXEXT_CUDA=1 with --define=jaxext_cuda=true)" >&2
exit 1
"""

# An aarch64 host compiler that is missing fails the compilation that needs it, saying why (x86_64
# builds do not need one).
_NO_HOST_COMPILER = """#!/bin/sh
echo "jaxext: nvcc's host compiler for aarch64, %s, is not on PATH: tools/bazel's toolchain root" \\
  "has it; or set --repo_env=JAXEXT_CUDA_HOST_COMPILER_AARCH64=/path/to/aarch64-linux-gnu-g++-N" \\
  "with N <= 15" >&2
exit 1
"""

def _cert_args(rctx):
    """pip's --cert: the system's CA bundle where there is one (as setup_python_repo.py's
    cert_args: a host interpreter's pip, pyenv's, trusts only its certifi, without a site's CAs)."""
    for bundle in (rctx.os.environ.get("SSL_CERT_FILE", ""), "/etc/ssl/certs/ca-certificates.crt"):
        if bundle and rctx.path(bundle).exists:
            return ["--cert", bundle]
    return []

def _pip_install(rctx, python, packages, target, extra = []):
    """Installs the pinned wheels `packages` (name -> (version, sha256)) into `target`."""
    req = target + ".requirements.txt"
    lines = ["%s==%s --hash=sha256:%s" % (n, v, h) for n, (v, h) in sorted(packages.items())]
    rctx.file(req, "\n".join(lines) + "\n")
    rctx.report_progress("installing %d pinned CUDA wheels (%s)" % (len(packages), target))
    res = rctx.execute(
        [python, "-m", "pip", "install", "--isolated", "--no-input", "--disable-pip-version-check",
         "--require-hashes", "--no-deps", "--only-binary=:all:", "--quiet",
         "--index-url", rctx.os.environ.get("JAXEXT_PIP_INDEX_URL", PYTHON["index_url"]),
         "--target", str(rctx.path(target)), "-r", str(rctx.path(req))] + extra + _cert_args(rctx),
        timeout = 1800,
        quiet = False,
    )
    if res.return_code != 0:
        fail("installing the pinned CUDA wheels failed:\n" + res.stdout + res.stderr)

def _which(rctx, name):
    return rctx.which(name) if not name.startswith("/") else rctx.path(name)

def _cuda_repository_impl(rctx):
    if rctx.os.environ.get("JAXEXT_CUDA", "") != "1":
        rctx.file("cuda/bin/nvcc", _STUB_NVCC, executable = True)
        rctx.file("host_compiler.txt", "/bin/false\n")
        rctx.file("host_compiler_aarch64.txt", "/bin/false\n")
        rctx.file("BUILD.bazel", _STUB_BUILD)
        rctx.file("WORKSPACE", "")
        return
    local = rctx.os.environ.get("LOCAL_CUDA_PATH", "")
    aarch64_cudart = None
    if local:
        rctx.report_progress("using the local CUDA toolkit at " + local)
        rctx.symlink(local, "cuda")
        if rctx.path("cuda/targets/sbsa-linux/lib/libcudart_static.a").exists:
            aarch64_cudart = "cuda/targets/sbsa-linux/lib/libcudart_static.a"
    else:
        info = json.decode(rctx.read(rctx.path(Label("@jaxext_python//:python_info.json"))))
        python = info["interpreter"]
        _pip_install(rctx, python, CUDA_PACKAGES, "wheels")
        rctx.symlink("wheels/nvidia/cu13", "cuda")
        # NVIDIA's wheels keep libnvvm in lib/; a toolkit has it in nvvm/lib64, where tools given
        # the tree as CUDA_HOME (numba-cuda, through cuda-pathfinder) look for it.
        rctx.symlink("wheels/nvidia/cu13/lib/libnvvm.so.4", "wheels/nvidia/cu13/nvvm/lib64/libnvvm.so.4")
        platforms = ["manylinux2014_aarch64"] + ["manylinux_2_%d_aarch64" % n for n in range(17, 40)]
        _pip_install(rctx, python, CUDA_PACKAGES_AARCH64, "wheels_aarch64",
                     [a for p in platforms for a in ["--platform", p]])
        aarch64_cudart = "wheels_aarch64/nvidia/cu13/lib/libcudart_static.a"
        if not rctx.path(aarch64_cudart).exists:
            fail("the aarch64 CUDA runtime wheel has no %s" % aarch64_cudart.removeprefix("wheels_aarch64/"))
    host = rctx.os.environ.get("JAXEXT_CUDA_HOST_COMPILER", CUDA_HOST_COMPILER)
    host_path = _which(rctx, host)
    if not host_path:
        fail("nvcc's host compiler %s is not on PATH (tools/bazel's toolchain root has it; or set " % host +
             "--repo_env=JAXEXT_CUDA_HOST_COMPILER=/path/to/g++-N with N <= 15)")
    rctx.file("host_compiler.txt", str(host_path) + "\n")
    host = rctx.os.environ.get("JAXEXT_CUDA_HOST_COMPILER_AARCH64", CUDA_HOST_COMPILER_AARCH64)
    host_path = _which(rctx, host)
    if not host_path:
        rctx.file("no_host_compiler_aarch64", _NO_HOST_COMPILER % host, executable = True)
        host_path = rctx.path("no_host_compiler_aarch64")
    rctx.file("host_compiler_aarch64.txt", str(host_path) + "\n")
    libdir = None
    for d in ["lib", "lib64"]:
        if rctx.path("cuda/%s/libcudart_static.a" % d).exists:
            libdir = d
            break
    if not libdir:
        fail("no libcudart_static.a under %s/lib or lib64" % rctx.path("cuda").realpath)
    build = _BUILD.replace("cuda/lib/libcudart_static.a", "cuda/%s/libcudart_static.a" % libdir)
    build = build.replace("AARCH64_CUDART", aarch64_cudart or ":no_aarch64_runtime")
    rctx.file("BUILD.bazel", build)
    rctx.file("WORKSPACE", "")

cuda_repository = repository_rule(
    implementation = _cuda_repository_impl,
    attrs = {"_pins": attr.label(default = "//third_party:pins.bzl")},
    environ = ["JAXEXT_CUDA", "LOCAL_CUDA_PATH", "JAXEXT_CUDA_HOST_COMPILER",
               "JAXEXT_CUDA_HOST_COMPILER_AARCH64", "JAXEXT_PIP_INDEX_URL"],
)

def _cuda_deps_impl(_mctx):
    cuda_repository(name = "jaxext_cuda")

cuda_deps = module_extension(
    implementation = _cuda_deps_impl,
    doc = "Creates @jaxext_cuda (see cuda_repository); fetched only by CUDA builds.",
)
