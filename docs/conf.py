"""Sphinx configuration of jaxext's manual and API reference (`tools/bazel build //docs:html`).

The pages are Markdown (MyST), as README.md; the API reference is autodoc over the installed
package (its docstrings, Google style, read by napoleon). Built offline, warnings as errors."""

import jaxext

project = "jaxext"
author = "the jaxext authors"
copyright = "2026, the jaxext authors"  # noqa: A001 - Sphinx's name
release = version = jaxext.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "BUILD.bazel", "build_html.py"]

myst_heading_anchors = 3
highlight_language = "none"  # plain ``` blocks (directory trees, output) are not lexed

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_type_aliases = {
    "ArrayLike": "ArrayLike",
    "IrrepsArray": "IrrepsArray",
    "IrrepsLike": "IrrepsLike",
    "OutputsFn": "OutputsFn",
    "GridSpec": "GridSpec",
    "VmapMode": "VmapMode",
}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"jaxext {release}"
html_theme_options = {"description": "Custom JAX operations in C++ and CUDA, through XLA's FFI"}


def _alias_names(app, what, name, obj, options, signature, return_annotation):
  """Sphinx writes a type alias inside a union as `TypeAliasForwardRef('ArrayLike')`: its name."""
  import re  # noqa: PLC0415

  def clean(text):
    return None if text is None else re.sub(r"TypeAliasForwardRef\('([^']+)'\)", r"\1", text)
  return clean(signature), clean(return_annotation)


def setup(app):
  app.connect("autodoc-process-signature", _alias_names)
