"""jaxext's Python requirements (jax, jaxlib) as Bazel dependencies, checked when the build runs.

`python_requirements` (`//jaxext:python_requirements`, a dependency of `//jaxext`) takes the
targets of `@jaxext_python_requirements//:deps` (what a consumer declared as jaxext's jax and
jaxlib: module extension tag `python_deps.requirements`, or `jaxext_dependencies(
python_requirements = [...])` in WORKSPACE mode; empty by default, jax then being installed in the
interpreter) and forwards them, so that whatever depends on jaxext gets them. It adds a validation
action that runs the build's Python toolchain and fails the build, with what to change, when its
CPython is not the one of the headers the extension modules compile with (their patchlevel.h) or
jax/jaxlib are missing or too old (third_party/python/check_python.py). The check runs only when
the target platform has this machine's CPU (a cross build's interpreter could not run here).

The repository rule behind `@jaxext_python_requirements` lives in python_repository.bzl, which
loads nothing outside jaxext (WORKSPACE mode loads it before any rule set is defined).
"""

load("@rules_python//python:defs.bzl", "PyInfo")
load("//third_party:pins.bzl", "JAXLIB_FLOOR", "PYTHON")

_PY_TOOLCHAIN = "@bazel_tools//tools/python:toolchain_type"

def _declared_versions(deps):
    """{name: version} of the jax/jaxlib dist-info directories in the deps' runfiles (pip hubs)."""
    found = {}
    for dep in deps:
        for f in dep[DefaultInfo].default_runfiles.files.to_list():
            if not f.path.endswith(".dist-info/METADATA"):
                continue
            dist = f.path.split("/")[-2].removesuffix(".dist-info")
            name, _, version = dist.partition("-")
            if name in ("jax", "jaxlib") and version:
                found[name] = version
    return found

def _python_requirements_impl(ctx):
    runfiles = ctx.runfiles().merge_all([d[DefaultInfo].default_runfiles for d in ctx.attr.deps])
    providers = [
        DefaultInfo(runfiles = runfiles),
        PyInfo(
            transitive_sources = depset(transitive = [d[PyInfo].transitive_sources for d in ctx.attr.deps]),
            imports = depset(transitive = [d[PyInfo].imports for d in ctx.attr.deps]),
        ),
    ]
    if not ctx.target_platform_has_constraint(ctx.attr._host_cpu[platform_common.ConstraintValueInfo]):
        return providers  # a cross build: its interpreter cannot run on this machine
    runtime = ctx.toolchains[_PY_TOOLCHAIN].py3_runtime
    stamp = ctx.actions.declare_file(ctx.label.name + ".checked.json")
    declared = _declared_versions(ctx.attr.deps)
    patchlevel = [h for h in ctx.attr.python_headers[CcInfo].compilation_context.headers.to_list()
                  if h.basename == "patchlevel.h"]
    if len(patchlevel) != 1:
        fail("%s: expected one patchlevel.h (CPython's version) among the headers of %s, found %s" %
             (ctx.label, ctx.attr.python_headers.label, [h.path for h in patchlevel]))
    args = ctx.actions.args()
    args.add(ctx.file._script)
    args.add(patchlevel[0])
    args.add(JAXLIB_FLOOR)
    args.add(",".join(PYTHON["versions"]))
    args.add(stamp)
    args.add_all(["%s=%s" % kv for kv in sorted(declared.items())])
    inputs = [ctx.file._script, patchlevel[0]]
    if runtime.interpreter != None:  # an interpreter in the build (a hermetic toolchain's): an input
        interpreter = runtime.interpreter
        inputs = depset(inputs + [interpreter], transitive = [runtime.files] if runtime.files else [])
    else:
        interpreter = runtime.interpreter_path
    ctx.actions.run(
        executable = interpreter,
        arguments = ["-I", args],
        inputs = inputs,
        outputs = [stamp],
        mnemonic = "JaxextPythonCheck",
        progress_message = "Checking the Python environment jaxext will run in (%{label})",
    )
    return providers + [OutputGroupInfo(_validation = depset([stamp]))]

python_requirements = rule(
    implementation = _python_requirements_impl,
    attrs = {
        "deps": attr.label_list(providers = [PyInfo]),
        "python_headers": attr.label(mandatory = True, providers = [CcInfo],
                                     doc = "the CPython headers the extension modules compile with"),
        "_host_cpu": attr.label(default = "@jaxext_python_requirements//:host_cpu", providers = [platform_common.ConstraintValueInfo]),
        "_script": attr.label(default = "//third_party/python:check_python.py", allow_single_file = True),
    },
    toolchains = [_PY_TOOLCHAIN],
    provides = [PyInfo],
)
