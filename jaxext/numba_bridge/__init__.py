"""Numba kernels as JAX operations (CPU and CUDA): see `jaxext.numba_bridge.kernel`.

Importing this package needs Numba (`pip install 'jaxext[numba]'`); the rest of jaxext does not.
CUDA kernels need numba-cuda too (`jaxext[numba-cuda]`), imported when one is first compiled.
"""

from jaxext.numba_bridge.kernel import NumbaKernel, numba_call_p, numba_cuda_kernel, numba_kernel

__all__ = ["NumbaKernel", "numba_call_p", "numba_cuda_kernel", "numba_kernel"]
