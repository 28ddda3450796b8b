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

def _jaxext_wheel_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    files = []
    for dep in ctx.attr.deps:
        for f in dep[DefaultInfo].default_runfiles.files.to_list():
            path = f.short_path
            if path.startswith(ctx.attr.package_dir + "/") and (path.endswith(".py") or path.endswith(".so")):
                files.append(f)
    files = sorted({f.short_path: f for f in files}.values(), key = lambda f: f.short_path)
    args = ctx.actions.args()
    args.add(ctx.file._tool)
    args.add("--out_dir", out.path)
    args.add("--version_file", ctx.file.version_file)
    args.add("--python_info", ctx.file._python_info)
    args.add("--jaxlib_floor", ctx.attr.jaxlib_floor)
    args.add("--license", ctx.file.license)
    args.add("--readme", ctx.file.readme)
    for f in files:
        args.add("--file", "%s=%s" % (f.short_path, f.path))
    ctx.actions.run(
        executable = ctx.executable._python,
        arguments = [args],
        inputs = files + [ctx.file._tool, ctx.file.version_file, ctx.file._python_info, ctx.file.license, ctx.file.readme],
        outputs = [out],
        mnemonic = "JaxextWheel",
        progress_message = "Building wheel %{label}",
    )
    return [DefaultInfo(files = depset([out]))]

jaxext_wheel = rule(
    implementation = _jaxext_wheel_impl,
    doc = """A platform wheel of the Python package `package_dir` and its extension modules.

    Produces a directory `<name>/` holding `jaxext-<version>-<py>-<abi>-<platform>.whl`; the tags
    are read off the built extensions by tools/build_wheel.py (a directory because the platform
    tag is only known once the extensions are linked).""",
    attrs = {
        "deps": attr.label_list(doc = "py_library targets whose files go into the wheel"),
        "package_dir": attr.string(default = "jaxext"),
        "version_file": attr.label(allow_single_file = True, mandatory = True),
        "jaxlib_floor": attr.string(mandatory = True),
        "license": attr.label(allow_single_file = True, mandatory = True),
        "readme": attr.label(allow_single_file = True, mandatory = True),
        "_tool": attr.label(default = "//tools:build_wheel.py", allow_single_file = True),
        "_python_info": attr.label(default = "@jaxext_python//:python_info.json", allow_single_file = True),
        "_python": attr.label(default = "@jaxext_python//:python3", executable = True, cfg = "exec"),
    },
)
