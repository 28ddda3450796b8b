"""The C/C++ toolchain configuration of @jaxext_zig: zig's clang for one target (arch + glibc, or
macOS on arm64, whose C++ compilations get jaxext's own libc++ through `compile_flags`).

Tools are the wrapper scripts @jaxext_zig generates (`zig cc|c++|ar -target <triple>.<glibc>`).
Bazel's legacy features supply the usual action flags (includes, defines, copts, PIC, linker
param files, archiver flags); this adds what the local GCC toolchain's configuration adds for each
compilation mode, and the reproducibility flags. On Linux zig links its libc++ statically and
links glibc against stubs of the target version, so what is built needs nothing newer from the
system; on macOS the libc++ linked in is jaxext's own (@jaxext_zig//:macos_libcxx), and libSystem's
stubs are zig's.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load(
    "@bazel_tools//tools/cpp:cc_toolchain_config_lib.bzl",
    "feature",
    "flag_group",
    "flag_set",
    "tool_path",
    "with_feature_set",
)

_COMPILE = [
    ACTION_NAMES.assemble,
    ACTION_NAMES.preprocess_assemble,
    ACTION_NAMES.c_compile,
    ACTION_NAMES.cpp_compile,
    ACTION_NAMES.cpp_header_parsing,
    ACTION_NAMES.cpp_module_compile,
    ACTION_NAMES.linkstamp_compile,
]
_LINK = [
    ACTION_NAMES.cpp_link_executable,
    ACTION_NAMES.cpp_link_dynamic_library,
    ACTION_NAMES.cpp_link_nodeps_dynamic_library,
]

def _flags(actions, flags, modes = None):
    return flag_set(
        actions = actions,
        flag_groups = [flag_group(flags = flags)],
        with_features = [with_feature_set(features = modes)] if modes else [],
    )

def _impl(ctx):
    macos = ctx.attr.os == "macos"
    if macos:
        # Mach-O: ld64's spellings. An API newer than the target's macOS, called unguarded, is an
        # error (it would fail to bind at load time on the oldest macOS the wheel's tag admits).
        os_compile = ["-Werror=unguarded-availability", "-Werror=unguarded-availability-new"]
        os_link = ["-Wl,-headerpad_max_install_names"]  # room for install_name_tool's edits
        os_link_opt = ["-Wl,-dead_strip", "-Wl,-S"]
    else:
        os_compile = []
        os_link = ["-Wl,-z,relro,-z,now", "-lm"]
        os_link_opt = ["-Wl,--gc-sections", "-Wl,--strip-debug"]
    features = [
        feature(name = "supports_pic", enabled = True),
        feature(name = "supports_dynamic_linker", enabled = True),
        feature(name = "opt"),
        feature(name = "dbg"),
        feature(name = "fastbuild"),
        feature(
            name = "default_compile_flags",
            enabled = True,
            flag_sets = [
                _flags(_COMPILE, [
                    # No absolute paths or build times in what is built (reproducible wheels).
                    "-no-canonical-prefixes",
                    "-Wno-builtin-macro-redefined",
                    "-D__DATE__=\"redacted\"",
                    "-D__TIMESTAMP__=\"redacted\"",
                    "-D__TIME__=\"redacted\"",
                    "-fno-omit-frame-pointer",
                ] + os_compile + ctx.attr.compile_flags),
                _flags(_COMPILE, ["-g0", "-O2", "-DNDEBUG", "-ffunction-sections", "-fdata-sections"], ["opt"]),
                _flags(_COMPILE, ["-g"], ["dbg"]),
            ],
        ),
        feature(
            name = "default_link_flags",
            enabled = True,
            flag_sets = [
                _flags(_LINK, os_link),
                # No debug information in optimised builds: zig compiles its libc++ and libunwind
                # with it, which would carry the absolute paths of their sources (of this
                # machine's output base) into every shared object.
                _flags(_LINK, os_link_opt, ["opt"]),
            ],
        ),
    ]
    tools = ctx.attr.tools
    return cc_common.create_cc_toolchain_config_info(
        ctx = ctx,
        features = features,
        toolchain_identifier = "jaxext_zig_" + ctx.attr.target,
        host_system_name = "local",
        target_system_name = ctx.attr.target,
        target_cpu = ctx.attr.cpu,
        # (not "macosx": Bazel would then drive the archiver with libtool's flags; zig's ar is llvm-ar)
        target_libc = "libsystem" if macos else "glibc",
        compiler = "clang",
        abi_version = "local",
        abi_libc_version = "local",
        cxx_builtin_include_directories = ctx.attr.builtin_include_directories,
        tool_paths = [
            tool_path(name = "gcc", path = tools["c++"]),
            tool_path(name = "cpp", path = tools["c++"]),
            tool_path(name = "ld", path = tools["c++"]),
            tool_path(name = "ar", path = tools["ar"]),
            tool_path(name = "nm", path = "/bin/false"),
            tool_path(name = "objdump", path = "/bin/false"),
            tool_path(name = "objcopy", path = tools["objcopy"]),
            tool_path(name = "strip", path = "/bin/false"),
            tool_path(name = "gcov", path = "/bin/false"),
        ],
    )

zig_cc_toolchain_config = rule(
    implementation = _impl,
    attrs = {
        "target": attr.string(mandatory = True, doc = "zig's target, e.g. x86_64-linux-gnu.2.17"),
        "cpu": attr.string(mandatory = True, doc = "Bazel's name of the CPU: k8, aarch64, darwin_arm64"),
        "os": attr.string(default = "linux", values = ["linux", "macos"]),
        "tools": attr.string_dict(mandatory = True, doc = "c++, ar, objcopy -> wrapper path"),
        "compile_flags": attr.string_list(),
        "builtin_include_directories": attr.string_list(),
    },
    provides = [CcToolchainConfigInfo],
)
