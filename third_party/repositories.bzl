"""WORKSPACE-mode entry point: the same repositories the bzlmod module extensions create.

    load("@jaxext//third_party:repositories.bzl", "jaxext_dependencies")
    jaxext_dependencies()
    # Optional: run py targets in jaxext's test environment instead of a Python of your own.
    register_toolchains("@jaxext_python//:toolchain")

Rule sets (rules_cc, rules_python, platforms, bazel_skylib) come from Bazel's own WORKSPACE suffix
or the consumer's WORKSPACE; offline, tools/bazel points them at Debian's copies.
"""

load("//third_party/auditwheel:auditwheel_repository.bzl", "auditwheel_repository")
load("//third_party/batman:batman_repository.bzl", "batman_repository")
load("//third_party/cuda:cuda_repository.bzl", "cuda_repository")
load(
    "//third_party/python:python_repository.bzl",
    "CROSS_ARCHS",
    "pybind11_repository",
    "python_cross_headers",
    "python_headers_repository",
    "python_repository",
    "python_requirements_repository",
)
load("//third_party/xla_ffi:xla_ffi_repository.bzl", "xla_ffi_repository")
load("//third_party/zig:zig_repository.bzl", "zig_repository")

def jaxext_dependencies(python_requirements = [], python_headers = None):
    """jaxext's repositories.

    Args:
      python_requirements: py_library labels providing jax and jaxlib (a pip hub's "@pypi//jax",
        "@pypi//jaxlib"), which jaxext's package then depends on; empty: jax is installed in the
        interpreter of the registered Python toolchain.
      python_headers: a cc_library of your Python's CPython headers (with patchlevel.h), which
        jaxext's extension modules then compile with; None: those of the CPython jaxext selects.
    """
    if not native.existing_rule("jaxext_python_requirements"):
        python_requirements_repository(
            name = "jaxext_python_requirements",
            packages = python_requirements,
            python_headers = python_headers,
        )
    if not native.existing_rule("jaxext_python_headers"):  # fetched unless python_headers is given
        python_headers_repository(name = "jaxext_python_headers")
    if not native.existing_rule("jaxext_pybind11"):
        pybind11_repository(name = "jaxext_pybind11")
    if not native.existing_rule("jaxext_python"):  # fetched only when used (jaxext's test environment)
        python_repository(name = "jaxext_python")
    for arch in CROSS_ARCHS:  # fetched only by cross builds (//:wheel_aarch64)
        if not native.existing_rule("jaxext_python_" + arch):
            python_cross_headers(name = "jaxext_python_" + arch, arch = arch)
    if not native.existing_rule("jaxext_xla_ffi"):
        xla_ffi_repository(name = "jaxext_xla_ffi")
    if not native.existing_rule("jaxext_auditwheel"):
        auditwheel_repository(name = "jaxext_auditwheel")
    if not native.existing_rule("jaxext_cuda"):
        cuda_repository(name = "jaxext_cuda")  # fetched only by --config=cuda builds
    if not native.existing_rule("jaxext_batman"):
        batman_repository()  # fetched only by //benchmarks:limbdark
    if not native.existing_rule("jaxext_zig"):
        zig_repository(name = "jaxext_zig")  # fetched only by --config=manylinux builds
