"""jaxext: custom JAX operations in C++ and CUDA, exposed through XLA's FFI.

    import jaxext
    sin_E, cos_E = jaxext.kepler(mean_anomaly, eccentricity)
    flux = jaxext.limb_dark_flux(b, r, u)               # occultation of a limb-darkened star
    flux = jaxext.transit_light_curve(t, period=..., t0=..., a=..., impact=..., r=..., u=...)

    @jaxext.numba_kernel(outputs=lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype))
    def double(x, out):                                 # a Numba kernel as a JAX op (needs numba)
        for i in range(x.shape[0]):
            out[i] = 2 * x[i]

    @jaxext.numba_cuda_kernel(outputs=lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype))
    def double_gpu(x, out):                             # the same for CUDA (needs numba-cuda)
        i = numba.cuda.grid(1)
        if i < x.shape[0]:
            out[i] = 2 * x[i]

    sol = jaxext.ode.dop853(jaxext.ode.models.earth(j2=True), y0, (0.0, 86400.0))  # many orbits
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jaxext import _ffi
from jaxext import equivariant
from jaxext import ode
from jaxext.kepler import kepler, kepler_p
from jaxext.limbdark import limb_dark_flux, limbdark_p, quadratic_limb_dark_flux
from jaxext.transit import sky_separation, transit_light_curve
from jaxext.version import __version__

if TYPE_CHECKING:
  from jaxext.numba_bridge.kernel import GridSpec, NumbaKernel, OutputsFn, VmapMode

_ffi.register_all()
platforms = _ffi.platforms
disabled_checks = _ffi.disabled_checks


def _numba_bridge(what: str, extra: str):
  """jaxext.numba_bridge.kernel, imported on first use (Numba is an optional dependency)."""
  try:
    from jaxext.numba_bridge import kernel
  except ImportError as err:
    raise ImportError(f"jaxext.{what} needs Numba, which is not importable ({err}); "
                      f"install it with: pip install 'jaxext[{extra}]'") from err
  return kernel


def numba_kernel(outputs: OutputsFn, *, vmap: VmapMode = "sequential", name: str | None = None,
                 boundscheck: bool = False) -> Callable[[Callable[..., None]], NumbaKernel]:
  """Decorator: a Numba-compatible function as a JAX operation (jaxext.numba_bridge.kernel).

  Args:
    outputs: callable (inputs...) -> a jax.ShapeDtypeStruct or a tuple of them.
    vmap: "sequential" (one call per batch slice) or "elementwise" (the batch folds into the
      first axis).
    name: for error messages (default: the function's name).
    boundscheck: compile with Numba's bounds checking (NUMBA_BOUNDSCHECK is honoured too).

  Needs Numba (`pip install 'jaxext[numba]'`), imported on first use: the rest of jaxext works
  without it.
  """
  return _numba_bridge("numba_kernel", "numba").numba_kernel(
      outputs, vmap=vmap, name=name, boundscheck=boundscheck)


def numba_cuda_kernel(outputs: OutputsFn, *, grid: GridSpec | None = None,
                      block: int | tuple[int, ...] = 256, shared_mem: int = 0,
                      vmap: VmapMode = "sequential", name: str | None = None,
                      fastmath: bool = False) -> Callable[[Callable[..., None]], NumbaKernel]:
  """Decorator: a numba.cuda kernel as a JAX operation on CUDA devices
  (jaxext.numba_bridge.kernel.numba_cuda_kernel).

  Args:
    outputs, vmap, name: as numba_kernel's.
    grid: blocks per launch: an int, a tuple of up to 3 ints, or a callable of the inputs and
      parameters (default: enough 1-D blocks for the largest output).
    block: threads per block, an int or a tuple of up to 3 ints (at most 1024 in all).
    shared_mem: bytes of dynamic shared memory per block.
    fastmath: numba-cuda's fastmath flag.

  Needs Numba and numba-cuda (`pip install 'jaxext[numba-cuda]'`), imported on first use.
  """
  return _numba_bridge("numba_cuda_kernel", "numba-cuda").numba_cuda_kernel(
      outputs, grid=grid, block=block, shared_mem=shared_mem, vmap=vmap, name=name,
      fastmath=fastmath)


__all__ = [
    "__version__",
    "disabled_checks",
    "equivariant",
    "kepler",
    "kepler_p",
    "limb_dark_flux",
    "limbdark_p",
    "numba_cuda_kernel",
    "numba_kernel",
    "ode",
    "platforms",
    "quadratic_limb_dark_flux",
    "sky_separation",
    "transit_light_curve",
]
