"""Built-in right-hand sides of jaxext.ode (C++: jaxext/kernels/orbit.h): Earth orbits.

State (x, y, z, vx, vy, vz) in an Earth-centred inertial frame with z along the rotation axis, in
**km and km/s**, time in **s** (mu in km^3/s^2, radii and altitudes in km). Any other consistent
length/time units work for the gravity terms if mu and the radius are given in them; drag converts
density x ballistic coefficient (1/m) with `meters_per_unit` (1000 for km).

    model = jaxext.ode.models.earth(j2=True, drag=True)   # two-body + J2 + exponential drag
    sol = jaxext.ode.dop853(model, y0, (0.0, 86400.0), params=B[:, None], ...)

Drag needs one parameter per trajectory: the ballistic coefficient B = C_d A / m in m^2/kg
(params[:, 0]). The air co-rotates with the Earth; the altitude is |r| - radius (spherical Earth).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from jaxext.ode.functions import Event

__all__ = ["EARTH_J2", "EARTH_J3", "EARTH_J4", "EARTH_MU", "EARTH_RADIUS", "EARTH_ROTATION",
           "EXPONENTIAL_ATMOSPHERE", "Atmosphere", "Model", "altitude_event", "earth",
           "radius_event", "two_body"]

EARTH_MU = 398600.4418          # km^3/s^2 (WGS-84 / EGM96)
EARTH_RADIUS = 6378.137         # km, equatorial (WGS-84)
EARTH_J2 = 1.08262668e-3        # unnormalised zonal harmonics (EGM96)
EARTH_J3 = -2.53265649e-6
EARTH_J4 = -1.61962159e-6
EARTH_ROTATION = 7.292115e-5    # rad/s


@dataclasses.dataclass(frozen=True)
class Atmosphere:
  """Piecewise exponential density: rho0[b] exp(-(h - base[b]) / scale_height[b]) in the band with
  the largest base <= h (the first band below its base). Altitudes in km, density in kg/m^3."""
  base_altitude: tuple[float, ...]
  density: tuple[float, ...]
  scale_height: tuple[float, ...]

  def __post_init__(self):
    n = len(self.base_altitude)
    if not 1 <= n <= 32 or len(self.density) != n or len(self.scale_height) != n:
      raise ValueError("an Atmosphere has 1 to 32 bands, with one base altitude, density and "
                       "scale height each")
    if any(b2 <= b1 for b1, b2 in zip(self.base_altitude, self.base_altitude[1:])):
      raise ValueError("Atmosphere base altitudes must increase")
    if min(self.density) <= 0 or min(self.scale_height) <= 0:
      raise ValueError("Atmosphere densities and scale heights must be positive")

  def density_at(self, altitude: ArrayLike) -> np.ndarray:
    """The density (kg/m^3) at altitudes in km, in NumPy (the model's own formula)."""
    h = np.asarray(altitude, np.float64)
    base = np.asarray(self.base_altitude)
    b = np.clip(np.searchsorted(base, h, side="right") - 1, 0, len(base) - 1)
    return np.asarray(self.density)[b] * np.exp((base[b] - h) / np.asarray(self.scale_height)[b])


# Vallado, Fundamentals of Astrodynamics and Applications (4th ed., 2013), Table 8-4: the exponential
# atmosphere, 0 to 1000 km (above 1000 km the last band continues).
EXPONENTIAL_ATMOSPHERE = Atmosphere(
    base_altitude=(0, 25, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 180, 200, 250,
                   300, 350, 400, 450, 500, 600, 700, 800, 900, 1000),
    density=(1.225, 3.899e-2, 1.774e-2, 3.972e-3, 1.057e-3, 3.206e-4, 8.770e-5, 1.905e-5,
             3.396e-6, 5.297e-7, 9.661e-8, 2.438e-8, 8.484e-9, 3.845e-9, 2.070e-9, 5.464e-10,
             2.789e-10, 7.248e-11, 2.418e-11, 9.518e-12, 3.725e-12, 1.585e-12, 6.967e-13,
             1.454e-13, 3.614e-14, 1.170e-14, 5.245e-15, 3.019e-15),
    scale_height=(7.249, 6.349, 6.682, 7.554, 8.382, 7.714, 6.549, 5.799, 5.382, 5.877, 7.263,
                  9.473, 12.636, 16.149, 22.523, 29.740, 37.105, 45.546, 53.628, 53.298, 58.515,
                  60.828, 63.822, 71.835, 88.667, 124.64, 181.05, 268.00),
)


@dataclasses.dataclass(frozen=True)
class Model:
  """An orbit model: central gravity, optional zonal harmonics J2-J4, optional drag."""
  mu: float = EARTH_MU
  radius: float = EARTH_RADIUS
  j2: float = 0.0
  j3: float = 0.0
  j4: float = 0.0
  atmosphere: Atmosphere | None = None
  rotation: float = EARTH_ROTATION   # rad per time unit: the air's co-rotation
  meters_per_unit: float = 1000.0    # length unit in metres (drag only)
  name: str = "orbit model"

  state_size = 6

  def __post_init__(self):
    for field in ("mu", "radius", "j2", "j3", "j4", "rotation", "meters_per_unit"):
      v = getattr(self, field)
      if not np.isfinite(v):
        raise ValueError(f"Model.{field} must be finite; got {v!r}")
    if self.mu <= 0 or self.radius <= 0 or self.meters_per_unit <= 0:
      raise ValueError("Model.mu, radius and meters_per_unit must be positive")

  @property
  def num_params(self) -> int:
    """Parameters per trajectory: 1 (the ballistic coefficient, m^2/kg) with drag, else 0."""
    return 1 if self.atmosphere is not None else 0

  def constants(self) -> np.ndarray:
    """The array jaxext/kernels/orbit.h decodes."""
    atm = self.atmosphere
    bands = [] if atm is None else [*atm.base_altitude, *atm.density, *atm.scale_height]
    return np.asarray([self.mu, self.radius, self.j2, self.j3, self.j4,
                       float(atm is not None), self.meters_per_unit, self.rotation,
                       0 if atm is None else len(atm.base_altitude), *bands], np.float64)


def rhs_from_constants(constants, y, p):
  """dy/dt of the model whose `Model.constants()` are `constants`, in jax.numpy, the formulas of
  jaxext/kernels/orbit.h: y (..., 6), p (..., >= num_params). For derivatives at events (where
  the solution's tangent needs f); the integrator itself runs the C++ model."""
  import jax.numpy as jnp  # only here: the module is imported without jax by its NumPy users

  c = [float(v) for v in constants]
  mu, radius, j2, j3, j4, drag, meters_per_unit, omega, bands = c[:9]
  x, yy, z = y[..., 0], y[..., 1], y[..., 2]
  r2 = x * x + yy * yy + z * z
  r = jnp.sqrt(r2)
  mu_r3 = mu / (r2 * r)
  ax, ay, az = -mu_r3 * x, -mu_r3 * yy, -mu_r3 * z
  if j2 or j3 or j4:
    zr2 = z * z * (1 / r2)
    rr = radius / r
    mu_r3_rr2 = mu_r3 * rr * rr
    if j2:
      f = -1.5 * j2 * mu_r3_rr2
      q = 1 - 5 * zr2
      ax, ay, az = ax + f * x * q, ay + f * yy * q, az + f * z * (q + 2)
    if j3:
      f = -2.5 * j3 * mu_r3_rr2 * rr / r
      q = z * (3 - 7 * zr2)
      ax, ay = ax + f * x * q, ay + f * yy * q
      az = az + f * r2 * (6 * zr2 - 7 * zr2 * zr2 - 0.6)
    if j4:
      f = j4 * mu_r3_rr2 * rr * rr * 0.125
      ax = ax + 15 * f * x * (1 - 14 * zr2 + 21 * zr2 * zr2)
      ay = ay + 15 * f * yy * (1 - 14 * zr2 + 21 * zr2 * zr2)
      az = az + 5 * f * z * (15 - 70 * zr2 + 63 * zr2 * zr2)
  if drag:
    nb = int(bands)
    base = jnp.asarray(c[9:9 + nb], y.dtype)
    rho0 = jnp.asarray(c[9 + nb:9 + 2 * nb], y.dtype)
    scale = jnp.asarray(c[9 + 2 * nb:9 + 3 * nb], y.dtype)
    h = r - radius
    b = jnp.clip(jnp.searchsorted(base, h, side="right") - 1, 0, nb - 1)
    rho = rho0[b] * jnp.exp((base[b] - h) * (1 / scale[b]))  # orbit.h multiplies by 1 / H
    vx, vy, vz = y[..., 3] + omega * yy, y[..., 4] - omega * x, y[..., 5]
    k = -(meters_per_unit / 2) * p[..., 0] * rho * jnp.sqrt(vx * vx + vy * vy + vz * vz)
    ax, ay, az = ax + k * vx, ay + k * vy, az + k * vz
  return jnp.stack([y[..., 3], y[..., 4], y[..., 5], ax, ay, az], axis=-1)


def two_body(mu: float = EARTH_MU) -> Model:
  """Keplerian motion about a point mass (km, s by default)."""
  return Model(mu=mu, name="two-body")


def earth(*, j2: bool = True, j3: bool = False, j4: bool = False, drag: bool = False,
          atmosphere: Atmosphere = EXPONENTIAL_ATMOSPHERE) -> Model:
  """The Earth in km and s: two-body, the chosen zonal harmonics, optionally drag (one parameter per
  trajectory: B = C_d A / m in m^2/kg)."""
  parts = ["two-body"] + [n for n, on in (("J2", j2), ("J3", j3), ("J4", j4)) if on]
  return Model(j2=EARTH_J2 if j2 else 0.0, j3=EARTH_J3 if j3 else 0.0,
               j4=EARTH_J4 if j4 else 0.0, atmosphere=atmosphere if drag else None,
               name=" + ".join(parts + (["drag"] if drag else [])))


def radius_event(radius: float, *, terminal: bool | int = False, direction: int = 0) -> Event:
  """The built-in event g = norm(r) - radius (r = y[0:3]), evaluated in C++ (no Numba needed)."""
  if not np.isfinite(radius):
    raise ValueError(f"radius_event: radius must be finite; got {radius!r}")
  return Event(fn=None, radius=float(radius), terminal=terminal, direction=direction,
               name=f"|r| = {radius:g}")


def altitude_event(altitude: float, *, radius: float = EARTH_RADIUS, terminal: bool | int = True,
                   direction: int = -1) -> Event:
  """Descending through an altitude above a spherical Earth (decay): g = norm(r) - (radius +
  altitude), terminal by default."""
  return radius_event(radius + altitude, terminal=terminal, direction=direction)
