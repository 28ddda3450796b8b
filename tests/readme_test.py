"""Every Python code block of README.md and of the manual's pages (docs/*.md) runs as written
(sybil): page by page, each page's blocks in order in one namespace, as a reader would paste them
one after another; the blocks check their own results with `assert`. Four host devices (BUILD's
XLA_FLAGS) for the sharding blocks, as their comments tell a reader. A block that needs what this
machine lacks (a GPU build) says so with a sybil `skip` comment, and is skipped only then."""

import os
import pathlib

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

PAGES = [pathlib.Path(p) for p in os.environ["JAXEXT_DOC_PAGES"].split()]
_SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])
DOCUMENTS = {p.name: _SYBIL.parse(p) for p in PAGES}
EXAMPLES = [(name, e) for name, doc in DOCUMENTS.items() for e in doc]


def test_the_pages_are_found():
  names = set(DOCUMENTS)
  assert {"README.md", "api.md", "ode.md", "numba.md", "equivariant.md", "astronomy.md"} <= names
  assert len([e for e in EXAMPLES if e[0] == "README.md"]) >= 5
  assert len([e for e in EXAMPLES if e[0] == "api.md"]) >= 8


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{n}:{e.line}" for n, e in EXAMPLES])
def test_block(example):
  example[1].evaluate()


def test_the_api_reference_documents_every_public_name():
  import re  # noqa: PLC0415

  import types  # noqa: PLC0415

  import public_api  # noqa: PLC0415
  api = next(p for p in PAGES if p.name == "api.md").read_text()
  documented = set(re.findall(r"\.\. auto(?:function|class):: ([\w.]+)", api))
  members = re.search(r"automodule:: jaxext\.equivariant\.e3nn_ops\n\s+:members: (.*)", api)
  documented |= {f"jaxext.equivariant.e3nn_ops.{m.strip()}" for m in members.group(1).split(",")}
  missing = []
  for name, obj in public_api.exported():
    if callable(obj) and not name.endswith("_p") and not isinstance(obj, types.ModuleType):
      if name not in documented:
        missing.append(name)
  assert not missing, missing
