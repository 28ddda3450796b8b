"""@jaxext_auditwheel: auditwheel and its imports (pure Python), unpacked into `site/`.

`python -m auditwheel` runs with `site/` on PYTHONPATH, under any CPython >= 3.10 (the build's own
interpreter): //:wheel's platform tag is the one it computes from the extension modules
(tools/build_wheel.py), and tests/wheel_test.py asks it again about the finished wheel.

* `:site`                     every file of `site/` (inputs of the actions that run it);
* `site/AUDITWHEEL_SITE`      a file naming the pinned versions; its directory is what goes on
                              PYTHONPATH.
"""

load("//third_party:pins.bzl", "AUDITWHEEL")

_BUILD = """\
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "site",
    srcs = glob(["site/**"]),
)

exports_files(["site/AUDITWHEEL_SITE"])
"""

def _auditwheel_repository_impl(rctx):
    for name in sorted(AUDITWHEEL):
        version, url, sha256 = AUDITWHEEL[name]
        rctx.download_and_extract(url = url, sha256 = sha256, type = "zip", output = "site")
    rctx.file("site/AUDITWHEEL_SITE", " ".join(
        ["%s==%s" % (n, AUDITWHEEL[n][0]) for n in sorted(AUDITWHEEL)],
    ) + "\n")
    rctx.file("BUILD.bazel", _BUILD)
    rctx.file("WORKSPACE", "")

auditwheel_repository = repository_rule(
    implementation = _auditwheel_repository_impl,
    attrs = {"_pins": attr.label(default = "//third_party:pins.bzl")},
)

def _auditwheel_deps_impl(_mctx):
    auditwheel_repository(name = "jaxext_auditwheel")

auditwheel_deps = module_extension(
    implementation = _auditwheel_deps_impl,
    doc = "Creates @jaxext_auditwheel (see auditwheel_repository).",
)
