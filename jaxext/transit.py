"""Transit light curves: a Keplerian orbit (`jaxext.kepler`) and the occultation op (`jaxext.limbdark`).

    flux = jaxext.transit_light_curve(t, period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1,
                                      u=(0.4, 0.25), ecc=0.1, omega=0.5, texp=0.02)

Conventions (those of batman and jaxoplanet): the observer looks down the +z axis; the planet
transits (passes in front of the star) at time t0, when its true anomaly is f = pi/2 - omega; the
impact parameter is the sky-projected distance at that moment,
    impact = a cos(i) (1 - e^2) / (1 + e sin(omega)),
in units of the stellar radius, as is the semi-major axis a. The planet is dark: only transits
(planet in front, z > 0) dim the star; secondary eclipses are not modelled.

Every argument may be a JAX value: the model is differentiable in all of them (jit, grad, vmap).
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxext._validation import float_operand
from jaxext.kepler import kepler
from jaxext.limbdark import limb_dark_flux

__all__ = ["sky_separation", "transit_light_curve"]


def _safe_sqrt(x):
  positive = x > 0
  return jnp.where(positive, jnp.sqrt(jnp.where(positive, x, 1)), 0)


def sky_separation(t, *, period, t0, a, impact=None, inclination=None, ecc=0.0, omega=0.0):
  """Sky-projected planet-star distance (stellar radii) and whether the planet is in front.

  Give exactly one of `impact` (impact parameter) and `inclination` (radians).
  Returns (separation, in_front), each of the broadcast shape of the inputs.
  """
  if (impact is None) == (inclination is None):
    raise ValueError("give exactly one of impact and inclination")
  t = float_operand(t, "t")
  period = float_operand(period, "period")
  t0 = float_operand(t0, "t0")
  a = float_operand(a, "a")
  ecc = float_operand(ecc, "ecc")
  omega = float_operand(omega, "omega")
  sin_w, cos_w = jnp.sin(omega), jnp.cos(omega)
  if inclination is not None:
    cos_i = jnp.cos(float_operand(inclination, "inclination"))
  else:
    cos_i = float_operand(impact, "impact") * (1 + ecc * sin_w) / (a * (1 - ecc**2))
  sin_i = jnp.sqrt(jnp.maximum(1 - cos_i**2, 0))

  # Time of periastron from the time of transit: f = pi/2 - omega at t0.
  f_tr = 0.5 * jnp.pi - omega
  e_tr = 2 * jnp.arctan2(jnp.sqrt(1 - ecc) * jnp.sin(0.5 * f_tr),
                         jnp.sqrt(1 + ecc) * jnp.cos(0.5 * f_tr))
  m_tr = e_tr - ecc * jnp.sin(e_tr)
  mean_anomaly = 2 * jnp.pi * (t - t0) / period + m_tr

  sin_e, cos_e = kepler(mean_anomaly, ecc)
  denom = 1 - ecc * cos_e
  cos_f = (cos_e - ecc) / denom
  sin_f = jnp.sqrt(1 - ecc**2) * sin_e / denom
  dist = a * denom
  # Angle from the ascending node: omega + f.
  sin_wf = sin_w * cos_f + cos_w * sin_f
  cos_wf = cos_w * cos_f - sin_w * sin_f
  x = -dist * cos_wf
  y = -dist * sin_wf * cos_i
  z = dist * sin_wf * sin_i
  return _safe_sqrt(x * x + y * y), z > 0


def transit_light_curve(t, *, period, t0, a, r, u, impact=None, inclination=None, ecc=0.0,
                        omega=0.0, texp=None, oversample=7):
  """Relative flux of a star with polynomial limb darkening transited by a dark planet.

  Args:
    t: observation times (any shape).
    period, t0: orbital period and time of mid-transit (same unit as t).
    a: semi-major axis in stellar radii.
    r: planet radius in stellar radii.
    u: limb-darkening coefficients (u_1..u_n), e.g. (u1, u2) for the quadratic law.
    impact / inclination: exactly one of them (inclination in radians).
    ecc, omega: eccentricity (0 <= ecc < 1) and argument of periastron (radians).
    texp: exposure time; if given, each flux is the mean over the exposure, computed with
      `oversample` (odd) evenly spaced sub-exposure midpoints.

  Returns:
    The flux at each time, of t's shape (1 out of transit).
  """
  t = float_operand(t, "t")
  u = float_operand(u, "u")
  if u.ndim != 1:
    raise ValueError(f"u must be a vector of coefficients (u_1..u_n); got shape {u.shape}")
  orbit = dict(period=period, t0=t0, a=a, impact=impact, inclination=inclination, ecc=ecc,
               omega=omega)
  if texp is None:
    sep, front = sky_separation(t, **orbit)
    return jnp.where(front, limb_dark_flux(sep, r, u), 1)
  if not isinstance(oversample, int) or oversample < 1 or oversample % 2 == 0:
    raise ValueError(f"oversample must be a positive odd integer; got {oversample!r}")
  texp = float_operand(texp, "texp")
  offsets = (jnp.arange(oversample, dtype=t.dtype) + 0.5) / oversample - 0.5
  ts = t[..., None] + texp * offsets
  sep, front = sky_separation(ts, **orbit)
  return jnp.mean(jnp.where(front, limb_dark_flux(sep, r, u), 1), axis=-1)
