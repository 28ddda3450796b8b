"""jaxext's CPU handlers: the extension module `_cpu_ops`, or (macOS) the plain library
`jaxext_cpu_handlers.so` (jaxext/_ffi.py)."""
