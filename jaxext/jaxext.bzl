"""Build macros of jaxext, in the manner of jaxlib's jax.bzl: every macro the BUILD files use."""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")
load("@rules_python//python:defs.bzl", "py_binary", "py_library", "py_test")
load("//third_party:pins.bzl", _CUDA_CAPABILITIES = "CUDA_CAPABILITIES", _PYTHON = "PYTHON")

# Compiler options for kernel code: IEEE arithmetic is kept (NaN handling depends on it), but errno
# and trapping semantics are dropped so that element loops can be if-converted and vectorised.
KERNEL_COPTS = [
    "-fno-math-errno",
    "-fno-trapping-math",
    "-Wall",
    "-Werror=return-type",
]

# The kernels are optimised whatever the compilation mode of the build that includes them (as
# jaxlib's are): a monorepo building in Bazel's default fastbuild (or dbg) still gets fast ops.
# Under -c opt nothing is added (the mode's -O2, and a --copt such as --config=asan's -O1, apply);
# otherwise -O2 comes before a target's own copts, so that one asking for more (tp_common's -O3)
# keeps it, and after --copt (which Bazel puts first). Label(): resolved in jaxext's repository
# whichever repository calls the macros.
OPTIMIZE_COPTS = select({
    Label("//jaxext:compilation_mode_opt"): [],
    "//conditions:default": ["-O2"],
})

def _bool_flag_impl(_ctx):
    return []

bool_flag = rule(
    implementation = _bool_flag_impl,
    build_setting = config.bool(flag = True),
    doc = "A boolean command-line flag (--//<package>:<name>=true|false), read by config_setting.",
)

# The per-CPU clones' switch (//jaxext/cpu:cpu_clones): the wheels always carry the clones.
_CPU_CLONES = str(Label("//jaxext/cpu:cpu_clones"))

def jaxext_cc_library(name, copts = [], linkstatic = True, **kwargs):
    """A cc_library of kernel or handler code (kernel copts, kept alive for FFI registration).

    Static only (`linkstatic`): its code ends up in one of jaxext's shared objects or in a test,
    never in a shared library of its own. (Such a library would also fail to link the per-CPU
    clones, whose resolvers read the CPU model each shared object keeps hidden: clones.h.)
    """
    cc_library(
        name = name,
        copts = KERNEL_COPTS + OPTIMIZE_COPTS + copts,
        linkstatic = linkstatic,
        **kwargs
    )

def jaxext_cc_test(name, copts = [], **kwargs):
    cc_test(
        name = name,
        copts = KERNEL_COPTS + copts,
        **kwargs
    )

def _shared_object(name, exported, linkopts = [], target_compatible_with = None, **kwargs):
    """`<name>.so` (cc_binary, linkshared) exporting only the symbols matching `exported`.

    A generated linker version script makes every other symbol local (ELF). Mach-O (macOS) keeps
    the symbols' own visibility: zig's linker has no exported-symbols list. macOS's two-level
    namespace binds ordinary references to the library that provided them at link time; weak
    definitions bind by name across images, so the macOS C++ runtime is a libc++ of jaxext's own
    ABI namespace (@jaxext_zig//:macos_libcxx, linked into every shared object there).
    """
    native.genrule(
        name = name + "_version_script",
        outs = [name + ".lds"],
        cmd = "printf '{\\n  global: %s;\\n  local: *;\\n};\\n' > $@" % exported,
        visibility = ["//visibility:private"],
        target_compatible_with = target_compatible_with,
    )
    # macOS: the C++ runtime is jaxext's own libc++ (@jaxext_zig//:macos_libcxx), linked in.
    deps = kwargs.pop("deps", []) + select({
        Label("//jaxext:macos"): [Label("@jaxext_zig//:macos_libcxx")],
        "//conditions:default": [],
    })
    cc_binary(
        name = name + ".so",
        linkshared = True,
        linkstatic = True,
        deps = deps,
        additional_linker_inputs = [":" + name + ".lds"],
        linkopts = linkopts + select({
            # Its install name: the file's, not its path in the build (dlopen goes by path).
            Label("//jaxext:macos"): ["-Wl,-install_name,@rpath/%s.so" % name],
            "//conditions:default": ["-Wl,--version-script=$(location :%s.lds)" % name],
        }),
        target_compatible_with = target_compatible_with,
        **kwargs
    )

def pybind_extension(name, srcs, deps = [], copts = [], linkopts = [], visibility = None, **kwargs):
    """A pybind11 extension module importable as `name`, plus a py_library `name` carrying it.

    The shared object `<name>.so` is built with hidden symbol visibility and a linker version script
    that exports only `PyInit_<name>`: the FFI handlers inside are reached through the capsules that
    the module's `registrations()` returns, never by symbol name. Handler libraries in `deps` should
    be `alwayslink` so that nothing they define is dropped by the linker.
    """
    compat = kwargs.pop("target_compatible_with", None)
    _shared_object(
        name = name,
        exported = "PyInit_" + name,
        srcs = srcs,
        copts = OPTIMIZE_COPTS + copts + ["-fvisibility=hidden", "-fvisibility-inlines-hidden",
                                          "-fexceptions"],
        linkopts = linkopts + ["-Wl,-Bsymbolic"],
        deps = deps + [
            Label("@jaxext_pybind11//:pybind11"),
            Label("@jaxext_python_requirements//:python_headers"),
        ],
        visibility = visibility,
        target_compatible_with = compat,
        **kwargs
    )
    py_library(
        name = name,
        data = [":" + name + ".so"],
        visibility = visibility,
        target_compatible_with = compat,
    )

# pytest's entry point for jaxext_py_test, in jaxext's repository whichever repository calls it.
_PYTEST_MAIN = Label("//tests:pytest_main.py")

def jaxext_py_test(name, srcs, deps = [], args = [], data = [], env = {}, **kwargs):
    """A py_test run by pytest (absltest-style test classes work too), in the pinned environment.

    pytest writes its JUnit report where Bazel asks (XML_OUTPUT_FILE), so per-case results appear
    in bazel-testlogs; `.ci/run` counts them. The test depends on
    `@jaxext_python_requirements//:selection.json` (the selected CPython and jax set): the environment is
    outside Bazel's view, and without it a switch of `HERMETIC_PYTHON_VERSION` or `JAXEXT_JAX` would
    report cached results. It runs under the registered Python toolchain: jaxext's test environment
    in jaxext, the consumer's own Python (which must provide pytest) elsewhere.
    """
    py_test(
        name = name,
        srcs = srcs + [_PYTEST_MAIN],
        main = _PYTEST_MAIN,
        args = ["$(location %s)" % srcs[0]] + args,
        deps = deps,
        data = data + [Label("@jaxext_python_requirements//:selection.json")],
        env = env,
        python_version = "PY3",
        **kwargs
    )

def jaxext_example(name, deps = [Label("//jaxext")], test_size = "medium"):
    """An example `<name>.py` kept working by `<name>_test.py`: the library `<name>_lib` (which the
    test imports), the binary `<name>` (`bazel run //examples:<name>`) and the test `<name>_test`.
    """
    py_library(
        name = name + "_lib",
        srcs = [name + ".py"],
        deps = deps,
    )
    py_binary(
        name = name,
        srcs = [name + ".py"],
        main = name + ".py",
        deps = [":" + name + "_lib"],
    )
    jaxext_py_test(
        name = name + "_test",
        size = test_size,
        srcs = [name + "_test.py"],
        deps = [":" + name + "_lib"],
    )

# Wheels are built by zig's clang for an old glibc, with libc++ linked in (third_party/zig), not by
# the toolchain root's GCC, whose libstdc++ most users' systems lack: //:wheel is the portable
# artifact whatever toolchain the rest of the build uses, CUDA builds included (nvcc's objects
# need no C++ runtime: the kernels' halves of the CUDA ops).
_ZIG_TOOLCHAINS = {
    "x86_64": str(Label("@jaxext_zig//:x86_64")),
    "aarch64": str(Label("@jaxext_zig//:aarch64")),
    "macos_arm64": str(Label("@jaxext_zig//:macos_arm64")),
}

# Target platforms of cross-built wheels (the build's own platform for the host's architecture).
_CROSS_PLATFORMS = {
    "aarch64": str(Label("//third_party/zig:linux_aarch64")),
    "macos_arm64": str(Label("//third_party/zig:macos_arm64")),
}

# Platforms whose wheels carry the plain handler library, not extension modules (no CPython
# headers of theirs are at hand; //jaxext/cpu:cpu selects the library there).
_PLAIN_ONLY = ["macos_arm64"]

def _portable_transition_impl(settings, attr):
    toolchains = settings["//command_line_option:extra_toolchains"]
    platforms = settings["//command_line_option:platforms"]
    # A wheel's handlers carry their per-CPU clones (clones.h) whatever the build's flag says: a
    # build that turns them off for speed (.bazelrc's test builds) still ships what users run.
    out = {
        "//command_line_option:extra_toolchains": toolchains,
        "//command_line_option:platforms": platforms,
        _CPU_CLONES: True,
    }
    if not attr.toolchain:
        return out
    zig = str(Label(_ZIG_TOOLCHAINS[attr.toolchain]))
    if attr.toolchain in _CROSS_PLATFORMS:
        out["//command_line_option:platforms"] = [str(Label(_CROSS_PLATFORMS[attr.toolchain]))]
    out["//command_line_option:extra_toolchains"] = [zig] + [t for t in toolchains if t != zig]
    return out

_portable_transition = transition(
    implementation = _portable_transition_impl,
    inputs = ["//command_line_option:extra_toolchains", "//command_line_option:platforms"],
    outputs = ["//command_line_option:extra_toolchains", "//command_line_option:platforms", _CPU_CLONES],
)

def _jaxext_wheel_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    files = []
    for dep in ctx.attr.deps:
        for f in dep[DefaultInfo].default_runfiles.files.to_list():
            path = f.short_path
            if path.startswith(ctx.attr.package_dir + "/") and (path.endswith(".py") or path.endswith(".so") or path.endswith("/py.typed")):
                files.append(f)
    plain = ctx.attr.plain_library or ctx.attr.toolchain in _PLAIN_ONLY  # a py3-none wheel
    if ctx.attr.plain_library:
        # The CPU extension module's place taken by the plain library (built in the same
        # configuration as the rest: no second compilation of the handlers).
        files = [f for f in files if f.basename != "_cpu_ops.so"] + ctx.files.plain_library
    if plain:
        if [f for f in files if f.basename.startswith("_") and f.basename.endswith(".so")]:
            fail("a CPython extension module (--config=cuda's) cannot go into a py3-none wheel")
    files = sorted({f.short_path: f for f in files}.values(), key = lambda f: f.short_path)
    args = ctx.actions.args()
    args.add(ctx.file._tool)
    args.add("--out_dir", out.path)
    args.add("--version_file", ctx.file.version_file)
    args.add("--python_info", ctx.file._python_info)
    args.add("--jaxlib_floor", ctx.attr.jaxlib_floor)
    args.add("--license", ctx.file.license)
    args.add("--readme", ctx.file.readme)
    args.add("--auditwheel_site", ctx.file._auditwheel_site.dirname)
    if plain:
        args.add("--requires_python", ctx.attr.requires_python)
    if ctx.attr.plain_library and ctx.attr.toolchain in _CROSS_PLATFORMS:
        fail("plain_library: Linux on the host's architecture only (macos_arm64 has it always)")
    for f in files:
        args.add("--file", "%s=%s" % (f.short_path, f.path))
    ctx.actions.run(
        executable = ctx.executable._python,
        arguments = [args],
        inputs = files + ctx.files._auditwheel + [
            ctx.file._tool,
            ctx.file.version_file,
            ctx.file._python_info,
            ctx.file.license,
            ctx.file.readme,
        ],
        outputs = [out],
        mnemonic = "JaxextWheel",
        progress_message = "Building wheel %{label}",
    )
    return [DefaultInfo(files = depset([out]))]

_jaxext_wheel = rule(
    implementation = _jaxext_wheel_impl,
    doc = """A platform wheel of the Python package `package_dir` and its extension modules.

    Produces a directory `<name>/` holding `jaxext-<version>-<py>-<abi>-<platform>.whl`; the tags
    are read off the built extensions by tools/build_wheel.py, the platform tag by auditwheel (a
    directory because the platform tag is only known once the extensions are linked).""",
    attrs = {
        "deps": attr.label_list(
            doc = "py_library targets whose files go into the wheel (built by zig's clang)",
            cfg = _portable_transition,
        ),
        "toolchain": attr.string(
            doc = "the zig toolchain (a key of _ZIG_TOOLCHAINS) deps are built with; '' keeps the build's",
        ),
        "plain_library": attr.label(
            doc = "the CPU handlers' plain library, in the extension module's place: a py3-none wheel",
            allow_single_file = True,
            cfg = _portable_transition,
        ),
        "requires_python": attr.string(doc = "the oldest CPython of a plain library's wheel"),
        "_allowlist_function_transition": attr.label(
            default = Label("@bazel_tools//tools/allowlists/function_transition_allowlist"),
        ),
        "package_dir": attr.string(default = "jaxext"),
        "version_file": attr.label(allow_single_file = True, mandatory = True),
        "jaxlib_floor": attr.string(mandatory = True),
        "license": attr.label(allow_single_file = True, mandatory = True),
        "readme": attr.label(allow_single_file = True, mandatory = True),
        "_tool": attr.label(default = Label("//tools:build_wheel.py"), allow_single_file = True),
        "_python_info": attr.label(default = Label("@jaxext_python//:python_info.json"), allow_single_file = True),
        "_python": attr.label(default = Label("@jaxext_python//:python3"), executable = True, cfg = "exec"),
        "_auditwheel": attr.label(default = Label("@jaxext_auditwheel//:site")),
        "_auditwheel_site": attr.label(default = Label("@jaxext_auditwheel//:site/AUDITWHEEL_SITE"), allow_single_file = True),
    },
)

def jaxext_wheel(name, arch = "x86_64", plain_library = False, **kwargs):
    """The platform wheel (see _jaxext_wheel): its extensions built by zig's clang for `arch`
    (x86_64, the host; aarch64, cross-built: glibc 2.17; macos_arm64, cross-built: macOS 11). With
    --config=cuda the wheel holds the CUDA handlers too: their .cu halves compiled by nvcc (with its
    own host compiler for `arch`, no C++ runtime: tests/cuda_kernels_abi_test.py), the rest by zig's
    clang like every handler.

    plain_library (always on macos_arm64): the CPU handlers as a plain library registered through
    ctypes (jaxext/_ffi.py), not an extension module: a `py3-none` wheel for every CPython from
    PYTHON["versions"][0] on (on Linux, what //tests:wheel_plain_test runs: macOS's form)."""
    _jaxext_wheel(
        name = name,
        toolchain = arch,
        plain_library = Label("//jaxext/cpu:jaxext_cpu_handlers.so") if plain_library else None,
        requires_python = _PYTHON["versions"][0],
        **kwargs
    )

# ------------------------------------------------------------------------------------------------
# Documentation
# ------------------------------------------------------------------------------------------------

def _sphinx_html_impl(ctx):
    out = ctx.actions.declare_directory(ctx.attr.name)
    ctx.actions.run(
        executable = ctx.executable.builder,
        arguments = [ctx.file.conf.dirname, out.path],
        inputs = ctx.files.srcs + ctx.files.data + [ctx.file.conf],
        outputs = [out],
        tools = [ctx.attr.builder[DefaultInfo].files_to_run],
        env = {"HOME": "/nonexistent"},
        mnemonic = "SphinxHtml",
        progress_message = "Building the manual %{label}",
    )
    return [DefaultInfo(files = depset([out]))]

jaxext_sphinx_html = rule(
    implementation = _sphinx_html_impl,
    doc = """A Sphinx HTML site in the directory `<name>/`, built by `builder` (a py_binary taking the
    source directory and the output directory) from `conf` (conf.py, whose directory is the
    source directory), the pages `srcs` and what they reference (`data`, e.g. images elsewhere
    in the repository, at their own paths). The builder runs in the target configuration, so the
    package it documents is the one the tests use (not a second, exec-configuration build of its
    extensions).""",
    attrs = {
        "conf": attr.label(allow_single_file = [".py"], mandatory = True),
        "srcs": attr.label_list(allow_files = True),
        "data": attr.label_list(allow_files = True),
        "builder": attr.label(executable = True, cfg = "target", mandatory = True),
    },
)

# ------------------------------------------------------------------------------------------------
# CUDA
# ------------------------------------------------------------------------------------------------

def if_cuda(if_true, if_false = []):
    """select() on --config=cuda (which sets --define=jaxext_cuda=true)."""
    return select({
        Label("//jaxext:cuda_enabled"): if_true,
        "//conditions:default": if_false,
    })

CUDA_ONLY = if_cuda([], [Label("@platforms//:incompatible")])
CPU_ONLY = if_cuda([Label("@platforms//:incompatible")], [])

def _nvcc(ctx, src, out, mode, extra = []):
    """Runs the hermetic nvcc on `src` (`mode`: "-c" for an object, "-fatbin" for device code)."""
    cc_deps = [d[CcInfo] for d in ctx.attr.deps if CcInfo in d]
    comp = cc_common.merge_cc_infos(cc_infos = cc_deps).compilation_context
    args = ctx.actions.args()
    args.add(ctx.file._nvcc)
    args.add(ctx.file._host_compiler)
    args.add_all([mode, src, "-o", out])
    args.add_all(["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC"])
    for cap in ctx.attr.capabilities:
        num = cap.removeprefix("sm_")
        args.add("-gencode=arch=compute_%s,code=[sm_%s,compute_%s]" % (num, num, num))
    args.add_all(extra)
    args.add_all(ctx.attr.copts)
    args.add_all(comp.defines, format_each = "-D%s")
    args.add_all(comp.quote_includes, format_each = "-I%s")
    args.add_all(comp.includes, format_each = "-I%s")
    args.add_all(comp.system_includes, format_each = "-isystem=%s")
    ctx.actions.run_shell(
        command = 'nvcc="$1"; host="$(cat "$2")"; shift 2; exec "$nvcc" -ccbin "$host" "$@"',
        arguments = [args],
        inputs = depset([src, ctx.file._host_compiler] + ctx.files._toolkit + ctx.files.hdrs,
                        transitive = [comp.headers]),
        outputs = [out],
        mnemonic = "NvccCompile",
        progress_message = "Compiling CUDA %s" % src.short_path,
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )

def _cuda_objects_impl(ctx):
    outs = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, src.basename.removesuffix(".cu")))
        _nvcc(ctx, src, obj, "-c")
        outs.append(obj)
    return [DefaultInfo(files = depset(outs))]

_NVCC_ATTRS = {
    "hdrs": attr.label_list(allow_files = True),
    "deps": attr.label_list(providers = [CcInfo]),
    "copts": attr.string_list(),
    "capabilities": attr.string_list(),
    "_toolkit": attr.label(default = Label("@jaxext_cuda//:toolkit")),
    "_nvcc": attr.label(default = Label("@jaxext_cuda//:nvcc"), allow_single_file = True),
    # The target's architecture picks it (the aarch64 wheel's objects: a cross compiler).
    "_host_compiler": attr.label(default = Label("@jaxext_cuda//:host_compiler"), allow_single_file = True),
}

# nvcc's objects depend on the target platform (its host compiler) and on nothing else of the
# build's C++ configuration: the same objects serve the tests' configuration (per-CPU clones off)
# and the wheels' (clones on, zig's toolchains), so that a build needing both (bazel test //...
# with --config=cuda) runs nvcc once per source rather than once per configuration. The transition
# puts both on one configuration: the clones' flag at its default, and the zig toolchain that
# _portable_transition adds (the same strings) removed; other entries, target patterns included,
# stay as they are.
def _nvcc_transition_impl(settings, _attr):
    zigs = _ZIG_TOOLCHAINS.values()
    return {
        "//command_line_option:extra_toolchains": [
            t for t in settings["//command_line_option:extra_toolchains"] if t not in zigs
        ],
        _CPU_CLONES: True,
    }

_nvcc_transition = transition(
    implementation = _nvcc_transition_impl,
    inputs = ["//command_line_option:extra_toolchains"],
    outputs = ["//command_line_option:extra_toolchains", _CPU_CLONES],
)

_NVCC_RULE_ATTRS = {
    "_allowlist_function_transition": attr.label(
        default = Label("@bazel_tools//tools/allowlists/function_transition_allowlist"),
    ),
}

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    cfg = _nvcc_transition,
    attrs = dict(_NVCC_ATTRS, srcs = attr.label_list(allow_files = [".cu"]), **_NVCC_RULE_ATTRS),
)

def _cuda_fatbin_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".fatbin")
    _nvcc(ctx, ctx.file.src, out, "-fatbin", ["-rdc=true"])
    return [DefaultInfo(files = depset([out]))]

_cuda_fatbin = rule(
    implementation = _cuda_fatbin_impl,
    cfg = _nvcc_transition,
    attrs = dict(_NVCC_ATTRS, src = attr.label(allow_single_file = [".cu"], mandatory = True), **_NVCC_RULE_ATTRS),
)

def _embed_bytes_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".cc")
    args = ctx.actions.args()
    args.add(out)
    for symbol, f in zip(ctx.attr.symbols, ctx.files.srcs):
        args.add(symbol)
        args.add(f)
    ctx.actions.run_shell(
        command = """out="$1"; shift
{ echo '// Generated by jaxext.bzl (embed): device code images.'
  echo '#include <cstddef>'
  echo 'namespace jaxext {'
  echo 'namespace cuda {'
  while [ $# -gt 0 ]; do
    echo "alignas(64) extern const unsigned char $1[] = {"
    od -An -v -tx1 "$2" | sed -e 's/ \\([0-9a-f][0-9a-f]\\)/0x\\1,/g'
    echo '};'
    echo "extern const size_t $1Size = sizeof($1);"
    shift 2
  done
  echo '}  // namespace cuda'
  echo '}  // namespace jaxext'
} > "$out"
""",
        arguments = [args],
        inputs = ctx.files.srcs,
        outputs = [out],
        mnemonic = "EmbedDeviceCode",
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )
    return [DefaultInfo(files = depset([out]))]

_embed_bytes = rule(
    implementation = _embed_bytes_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True),
        "symbols": attr.string_list(),
    },
)

# nvcc flags of the kernels' half of an op (BUILD.bazel of jaxext/cuda): no exceptions, so that
# their host objects need nothing of the host compiler's C++ runtime (no __cxa_call_terminate).
CUDA_KERNEL_COPTS = ["-Xcompiler=-fno-exceptions"]

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], capabilities = None, **kwargs):
    """A cc_library of CUDA code: `.cu` sources compiled by the hermetic nvcc (@jaxext_cuda).

    Device code is compiled for `capabilities` (default: CUDA_CAPABILITIES of the pins, sm_90)
    as machine code plus PTX of the same virtual architecture, which newer GPUs JIT-compile. The
    static CUDA runtime is linked in. Only buildable with --config=cuda (tagged "gpu").
    """
    objs = name + "_nvcc"
    _cuda_objects(
        name = objs,
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + [Label("@jaxext_cuda//:cuda_headers")],
        copts = copts,
        capabilities = capabilities or _CUDA_CAPABILITIES,
        target_compatible_with = CUDA_ONLY,
        tags = ["gpu"],
    )
    cc_library(
        name = name,
        srcs = [":" + objs],
        hdrs = hdrs,
        deps = deps + [Label("@jaxext_cuda//:cudart")],
        alwayslink = True,
        target_compatible_with = CUDA_ONLY,
        tags = kwargs.pop("tags", []) + ["gpu"],
        **kwargs
    )

def cuda_device_code(name, src, variants, hdrs = [], deps = [], capabilities = None, **kwargs):
    """Relocatable device code, linked with other device code at run time by the CUDA driver.

    `src` (a `.cu` file) is compiled once per entry of `variants` ({symbol: [defines]}) with
    `-rdc=true` into a fatbin (machine code for `capabilities` plus PTX), embedded in the
    cc_library `name` as `extern const unsigned char jaxext::cuda::<symbol>[]` and
    `extern const size_t jaxext::cuda::<symbol>Size`. The fatbins themselves are the targets
    `<name>_<symbol>` (and `<name>_fatbins`, all of them): tests link them offline with nvlink.
    Only buildable with --config=cuda.
    """
    fatbins = []
    for symbol, defines in variants.items():
        _cuda_fatbin(
            name = name + "_" + symbol,
            src = src,
            hdrs = hdrs,
            deps = deps + [Label("@jaxext_cuda//:cuda_headers")],
            copts = ["-D" + d for d in defines],
            capabilities = capabilities or _CUDA_CAPABILITIES,
            target_compatible_with = CUDA_ONLY,
            tags = ["gpu"],
            visibility = kwargs.get("visibility"),
        )
        fatbins.append(":" + name + "_" + symbol)
    native.filegroup(
        name = name + "_fatbins",
        srcs = fatbins,
        target_compatible_with = CUDA_ONLY,
        tags = ["gpu"],
        visibility = kwargs.get("visibility"),
    )
    _embed_bytes(
        name = name + "_embedded",
        srcs = fatbins,
        symbols = list(variants.keys()),
        target_compatible_with = CUDA_ONLY,
        tags = ["gpu"],
        visibility = ["//visibility:private"],
    )
    cc_library(
        name = name,
        srcs = [":" + name + "_embedded"],
        alwayslink = True,
        target_compatible_with = CUDA_ONLY,
        tags = kwargs.pop("tags", []) + ["gpu"],
        **kwargs
    )

def cuda_emulated_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """jaxext's CUDA sources built to run on the CPU (tests/cuda_emu/README.md): `.cu` files
    rewritten as C++ by tests/cuda_emu/rewrite.py, `.cc` handlers as they are, every source with
    the emulation's device.h and ffi_stream.h force-included and its cuda_runtime_api.h in place
    of CUDA's. No CUDA toolkit is needed: it builds in every configuration."""
    emu = Label("//tests/cuda_emu:runtime")
    rewrite = Label("//tests/cuda_emu:rewrite.py")
    python = Label("@jaxext_python//:python3")
    root = emu.workspace_root  # "" in jaxext itself, external/<name> where it is a dependency
    headers = (root + "/" if root else "") + emu.package + "/"
    cc_srcs = []
    for src in srcs:
        if not src.endswith(".cu"):
            cc_srcs.append(src)
            continue
        base = src.split(":")[-1].split("/")[-1][:-len(".cu")]
        out = "%s_emu/%s.cc" % (name, base)
        native.genrule(
            name = "%s_%s_rewritten" % (name, base),
            srcs = [src],
            outs = [out],
            cmd = "$(location %s) $(location %s) $< $@" % (python, rewrite),
            tools = [python, rewrite],
            visibility = ["//visibility:private"],
        )
        cc_srcs.append(":" + out)
    cc_library(
        name = name,
        srcs = cc_srcs,
        hdrs = hdrs,
        copts = KERNEL_COPTS + OPTIMIZE_COPTS + [
            "-include",
            headers + "device.h",
            "-include",
            headers + "ffi_stream.h",
            "-Wno-unknown-pragmas",  # nvcc's `#pragma unroll`
        ],
        linkstatic = True,
        alwayslink = True,
        deps = deps + [emu],
        **kwargs
    )

def ffi_handler_library(name, deps, **kwargs):
    """`<name>.so`: a plain shared library exporting the C symbols of the FFI handlers in `deps`.

    No Python inside, so it loads in any Python and any jaxlib from the FFI floor on; jaxext
    registers its handlers through ctypes when `JAXEXT_HANDLER_LIBRARIES` names it (see
    jaxext/_ffi.py). Only symbols named `Jaxext*` are exported. This is how the GPU checks run on a
    machine whose Python differs from the build's.
    """
    _shared_object(name = name, exported = "Jaxext*", deps = deps, **kwargs)
