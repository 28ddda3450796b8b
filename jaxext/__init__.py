"""jaxext: custom JAX operations in C++ and CUDA, exposed through XLA's FFI.

    import jaxext
    sin_E, cos_E = jaxext.kepler(mean_anomaly, eccentricity)
"""

from jaxext import _ffi
from jaxext.kepler import kepler, kepler_p
from jaxext.version import __version__

_ffi.register_all()

__all__ = ["__version__", "kepler", "kepler_p"]
