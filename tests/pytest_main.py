"""Runs one test file under pytest, writing the JUnit report where Bazel asks for it."""

import os
import sys

import pytest

if __name__ == "__main__":
  args = [sys.argv[1], "-q", "-p", "no:cacheprovider", *sys.argv[2:]]
  xml = os.environ.get("XML_OUTPUT_FILE")
  if xml:
    args.append(f"--junitxml={xml}")
  sys.exit(pytest.main(args))
