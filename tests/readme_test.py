"""Every Python code block of README.md runs as written (sybil): in order, in one namespace, as a
reader would paste them one after another; the blocks check their own results with `assert`.
Four host devices (BUILD's XLA_FLAGS) for the sharding block, as its comment tells a reader."""

import os
import pathlib

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

README = pathlib.Path(os.environ["JAXEXT_README"])
EXAMPLES = list(Sybil(parsers=[PythonCodeBlockParser(), SkipParser()]).parse(README))


def test_the_readme_has_python_blocks():
  assert len(EXAMPLES) >= 6, [e.line for e in EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"README.md:{e.line}" for e in EXAMPLES])
def test_readme_block(example):
  example.evaluate()
