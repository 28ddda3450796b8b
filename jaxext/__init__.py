"""jaxext: custom JAX operations in C++ and CUDA, exposed through XLA's FFI.

    import jaxext
    sin_E, cos_E = jaxext.kepler(mean_anomaly, eccentricity)
    flux = jaxext.limb_dark_flux(b, r, u)               # occultation of a limb-darkened star
    flux = jaxext.transit_light_curve(t, period=..., t0=..., a=..., impact=..., r=..., u=...)
"""

from jaxext import _ffi
from jaxext.kepler import kepler, kepler_p
from jaxext.limbdark import limb_dark_flux, limbdark_p, quadratic_limb_dark_flux
from jaxext.transit import sky_separation, transit_light_curve
from jaxext.version import __version__

_ffi.register_all()

__all__ = [
    "__version__",
    "kepler",
    "kepler_p",
    "limb_dark_flux",
    "limbdark_p",
    "quadratic_limb_dark_flux",
    "sky_separation",
    "transit_light_curve",
]
