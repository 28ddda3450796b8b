"""The jaxext version: the one place it is set (the wheel and MODULE.bazel are checked against it)."""

__version__ = "0.1.0"
