"""Numba kernels as JAX operations (CPU): see `jaxext.numba_bridge.kernel`.

Importing this package needs Numba (`pip install 'jaxext[numba]'`); the rest of jaxext does not.
"""

from jaxext.numba_bridge.kernel import NumbaKernel, numba_call_p, numba_kernel

__all__ = ["NumbaKernel", "numba_call_p", "numba_kernel"]
