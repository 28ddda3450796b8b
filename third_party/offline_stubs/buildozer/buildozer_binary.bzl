"""The module extension Bazel's tools module uses (`buildozer_binary`, its repository of the same
name): an empty repository here. Nothing jaxext builds runs buildozer; `bazel mod graph` and other
commands that evaluate every extension need it to exist."""

def _empty_repo_impl(rctx):
    rctx.file("BUILD.bazel", "# Empty stand-in (third_party/offline_stubs/README.md).\n")

_empty_repo = repository_rule(implementation = _empty_repo_impl)

def _buildozer_binary_impl(_mctx):
    _empty_repo(name = "buildozer_binary")

buildozer_binary = module_extension(implementation = _buildozer_binary_impl)
