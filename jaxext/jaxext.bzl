"""Build macros of jaxext, in the manner of jaxlib's jax.bzl: every macro the BUILD files use."""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("@rules_python//python:defs.bzl", "py_library", "py_test")

# Compiler options for kernel code: IEEE arithmetic is kept (NaN handling depends on it), but errno
# and trapping semantics are dropped so that element loops can be if-converted and vectorised.
KERNEL_COPTS = [
    "-fno-math-errno",
    "-fno-trapping-math",
    "-Wall",
    "-Werror=return-type",
]

def jaxext_cc_library(name, copts = [], **kwargs):
    """A cc_library of kernel or handler code (kernel copts, kept alive for FFI registration)."""
    cc_library(
        name = name,
        copts = KERNEL_COPTS + copts,
        **kwargs
    )

def jaxext_cc_test(name, copts = [], **kwargs):
    cc_test(
        name = name,
        copts = KERNEL_COPTS + copts,
        **kwargs
    )

def pybind_extension(name, srcs, deps = [], copts = [], linkopts = [], visibility = None, **kwargs):
    """A pybind11 extension module importable as `name`, plus a py_library `name` carrying it.

    The shared object `<name>.so` is built with hidden symbol visibility and a linker version script
    that exports only `PyInit_<name>`: the FFI handlers inside are reached through the capsules that
    the module's `registrations()` returns, never by symbol name. Handler libraries in `deps` should
    be `alwayslink` so that nothing they define is dropped by the linker.
    """
    version_script = name + "_version_script"
    native.genrule(
        name = version_script,
        outs = [name + ".lds"],
        cmd = "printf '{\\n  global: PyInit_%s;\\n  local: *;\\n};\\n' > $@" % name,
        visibility = ["//visibility:private"],
    )
    cc_binary(
        name = name + ".so",
        srcs = srcs,
        copts = copts + ["-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fexceptions"],
        linkopts = linkopts + [
            "-Wl,--version-script=$(location :%s.lds)" % name,
            "-Wl,-Bsymbolic",
        ],
        linkshared = True,
        linkstatic = True,
        additional_linker_inputs = [":" + name + ".lds"],
        deps = deps + [
            "@jaxext_python//:pybind11",
            "@jaxext_python//:python_headers",
        ],
        visibility = visibility,
        **kwargs
    )
    py_library(
        name = name,
        data = [":" + name + ".so"],
        visibility = visibility,
    )

def jaxext_py_test(name, srcs, deps = [], args = [], data = [], env = {}, **kwargs):
    """A py_test run by pytest (absltest-style test classes work too), in the pinned environment.

    pytest writes its JUnit report where Bazel asks (XML_OUTPUT_FILE), so per-case results appear
    in bazel-testlogs; `.ci/run` counts them.
    """
    py_test(
        name = name,
        srcs = srcs + ["//tests:pytest_main.py"],
        main = "//tests:pytest_main.py",
        args = ["$(location %s)" % srcs[0]] + args,
        deps = deps,
        data = data,
        env = env,
        python_version = "PY3",
        **kwargs
    )
