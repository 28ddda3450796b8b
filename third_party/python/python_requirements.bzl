"""jaxext's Python requirements (jax, jaxlib) as Bazel dependencies, checked when the build runs.

* `python_requirements_repository` (`@jaxext_python_requirements`): `:deps`, a py_library of the
  targets a consumer declares as jaxext's requirements (its pip hub's `@pypi//jax`,
  `@pypi//jaxlib`; module extension tag `python_deps.requirements`, or `jaxext_dependencies(
  python_requirements = [...])` in WORKSPACE mode). Empty by default: jax then comes from the
  interpreter's own site-packages, as in jaxext's own test environment. `:python_headers`: the
  CPython headers the extension modules compile with, the consumer's when it names them (the
  tag's `python_headers`), else those of the CPython jaxext selected.
* `python_requirements` (`//jaxext:python_requirements`, a dependency of `//jaxext`): forwards
  those targets (so that whatever depends on jaxext gets them) and adds a validation action that
  runs the build's Python toolchain and fails the build, with what to change, when its CPython
  is not the one of the headers the extension modules compile with (their patchlevel.h) or
  jax/jaxlib are missing or too old
  (third_party/python/check_python.py).
"""

load("@rules_python//python:defs.bzl", "PyInfo")
load("//third_party:pins.bzl", "JAXLIB_FLOOR")

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
    runtime = ctx.toolchains[_PY_TOOLCHAIN].py3_runtime
    stamp = ctx.actions.declare_file(ctx.label.name + ".checked.json")
    declared = _declared_versions(ctx.attr.deps)
    patchlevel = [h for h in ctx.attr.python_headers[CcInfo].compilation_context.headers.to_list()
                  if h.basename == "patchlevel.h" and h.dirname.split("/")[-1] != "cpython"]
    if len(patchlevel) != 1:
        fail("%s: expected one patchlevel.h (CPython's version) among the headers of %s, found %s" %
             (ctx.label, ctx.attr.python_headers.label, [h.path for h in patchlevel]))
    args = ctx.actions.args()
    args.add(ctx.file._script)
    args.add(patchlevel[0])
    args.add(JAXLIB_FLOOR)
    args.add(stamp)
    args.add_all(["%s=%s" % kv for kv in sorted(declared.items())])
    inputs = [ctx.file._script, patchlevel[0]]
    if runtime.interpreter != None:
        interpreter = runtime.interpreter.path
        inputs = depset(inputs, transitive = [runtime.files] if runtime.files else [])
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
    runfiles = ctx.runfiles().merge_all([d[DefaultInfo].default_runfiles for d in ctx.attr.deps])
    return [
        DefaultInfo(runfiles = runfiles),
        PyInfo(
            transitive_sources = depset(transitive = [d[PyInfo].transitive_sources for d in ctx.attr.deps]),
            imports = depset(transitive = [d[PyInfo].imports for d in ctx.attr.deps]),
        ),
        OutputGroupInfo(_validation = depset([stamp])),
    ]

python_requirements = rule(
    implementation = _python_requirements_impl,
    attrs = {
        "deps": attr.label_list(providers = [PyInfo]),
        "python_headers": attr.label(mandatory = True, providers = [CcInfo],
                                     doc = "the CPython headers the extension modules compile with"),
        "_script": attr.label(default = "//third_party/python:check_python.py", allow_single_file = True),
    },
    toolchains = [_PY_TOOLCHAIN],
    provides = [PyInfo],
)

def _python_requirements_repository_impl(rctx):
    deps = ",\n        ".join(['"%s"' % str(label) for label in rctx.attr.packages])
    headers = str(rctx.attr.python_headers) if rctx.attr.python_headers else "@jaxext_python_headers//:python_headers"
    rctx.file("BUILD.bazel", """\
load("@rules_python//python:defs.bzl", "py_library")

package(default_visibility = ["//visibility:public"])

# jaxext's Python requirements as the consumer declared them (empty: the interpreter's own).
py_library(
    name = "deps",
    deps = [
        {deps}
    ],
)

# The CPython headers extension modules compile with: the consumer's, else those of the CPython
# jaxext selected (@jaxext_python_headers).
alias(
    name = "python_headers",
    actual = "{headers}",
)
""".format(deps = deps, headers = headers))
    rctx.file("WORKSPACE", "")

python_requirements_repository = repository_rule(
    implementation = _python_requirements_repository_impl,
    attrs = {
        "packages": attr.label_list(),
        "python_headers": attr.label(),
    },
    doc = """`:deps`, a py_library of `packages` (jaxext's declared Python requirements), and
    `:python_headers`, `python_headers` or jaxext's own.""",
)
