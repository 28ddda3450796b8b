"""@jaxext_batman: batman's pinned source distribution (benchmark anchor; see //third_party:pins.bzl)."""

load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")
load("//third_party:pins.bzl", "BATMAN")

def batman_repository(name = "jaxext_batman"):
    http_archive(
        name = name,
        urls = [BATMAN["url"]],
        sha256 = BATMAN["sha256"],
        strip_prefix = BATMAN["strip_prefix"],
        build_file = Label("//third_party/batman:batman.BUILD"),
    )

def _benchmark_deps_impl(_mctx):
    batman_repository()

benchmark_deps = module_extension(
    implementation = _benchmark_deps_impl,
    doc = "Creates @jaxext_batman (fetched only when //benchmarks:limbdark or :transit is built).",
)
