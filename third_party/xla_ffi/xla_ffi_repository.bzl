"""@jaxext_xla_ffi: XLA's external FFI headers, from the pinned JAXLIB_FLOOR wheel.

Every handler is compiled against these headers, whichever jax the tests run with: XLA accepts
handlers built against an FFI API no newer than its own, so headers of the oldest supported jaxlib
make one build load in all of them. Only `jaxlib/include/` of the wheel (a zip) is extracted; the
download is checked against the pinned sha256 and kept in Bazel's repository cache.

* `:ffi_api`            cc_library of `xla/ffi/api/{api,c_api,ffi}.h`;
* `:ffi_api_version`    a text file `MAJOR.MINOR` (XLA_FFI_API_MAJOR/MINOR of c_api.h).
"""

load("//third_party:pins.bzl", "JAXLIB_FLOOR", "XLA_FFI_HEADERS")

_BUILD = """\
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "ffi_api",
    hdrs = glob(["include/xla/ffi/api/*.h"]),
    includes = ["include"],
)

exports_files(["ffi_api_version"])
"""

def _xla_ffi_repository_impl(rctx):
    if XLA_FFI_HEADERS["jaxlib"] != JAXLIB_FLOOR:
        fail("XLA_FFI_HEADERS must come from the JAXLIB_FLOOR wheel (%s), not jaxlib %s" %
             (JAXLIB_FLOOR, XLA_FFI_HEADERS["jaxlib"]))
    rctx.download_and_extract(
        url = XLA_FFI_HEADERS["url"],
        sha256 = XLA_FFI_HEADERS["sha256"],
        type = "zip",
        stripPrefix = "jaxlib/include",
        output = "include",
    )
    c_api = rctx.read("include/xla/ffi/api/c_api.h")
    version = {}
    for line in c_api.splitlines():
        parts = [p for p in line.replace("\t", " ").split(" ") if p]
        if len(parts) == 3 and parts[0] == "#define" and parts[1] in ("XLA_FFI_API_MAJOR", "XLA_FFI_API_MINOR"):
            version[parts[1]] = parts[2]
    if len(version) != 2:
        fail("no XLA_FFI_API_MAJOR/MINOR in the jaxlib %s headers" % JAXLIB_FLOOR)
    rctx.file("ffi_api_version", "%s.%s\n" % (version["XLA_FFI_API_MAJOR"], version["XLA_FFI_API_MINOR"]))
    rctx.file("BUILD.bazel", _BUILD)
    rctx.file("WORKSPACE", "")

xla_ffi_repository = repository_rule(
    implementation = _xla_ffi_repository_impl,
    attrs = {"_pins": attr.label(default = "//third_party:pins.bzl")},
)

def _xla_ffi_deps_impl(_mctx):
    xla_ffi_repository(name = "jaxext_xla_ffi")

xla_ffi_deps = module_extension(
    implementation = _xla_ffi_deps_impl,
    doc = "Creates @jaxext_xla_ffi (see xla_ffi_repository).",
)
