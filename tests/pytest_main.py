"""Runs one test file under pytest, writing the JUnit report where Bazel asks for it."""

import os
import sys

import pytest

if __name__ == "__main__":
  args = [sys.argv[1], "-q", "-p", "no:cacheprovider", *sys.argv[2:]]
  # `bazel test --test_filter=EXPR`: pytest's -k EXPR (test names, their classes and the file).
  only = os.environ.get("TESTBRIDGE_TEST_ONLY")
  if only:
    args += ["-k", only]
  xml = os.environ.get("XML_OUTPUT_FILE")
  if xml:
    args.append(f"--junitxml={xml}")
  sys.exit(pytest.main(args))
