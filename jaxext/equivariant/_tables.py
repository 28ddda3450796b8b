"""Constants of the spherical harmonics kernel (jaxext/kernels/sph.h), computed once in NumPy.

norms(lmax): the factor of each component, sqrt((2l+1) (l-|m|)!/(l+|m|)!) (x sqrt(2) for m != 0).
derivatives(l): A with dY^l_i/dv_k = sum_j A[i, k, j] Y^(l-1)_j(v) (the derivative of a harmonic
  homogeneous polynomial of degree l is one of degree l - 1: a fixed linear map of Y^(l-1)), found
  by exact complex-step derivatives of the same recurrence at random points and least squares.
"""

from __future__ import annotations

import functools
import math

import numpy as np


def norms(lmax: int) -> np.ndarray:
  out = []
  for l in range(lmax + 1):
    for m in range(-l, l + 1):
      a = abs(m)
      k = math.sqrt((2 * l + 1) * math.factorial(l - a) / math.factorial(l + a))
      out.append(k * (math.sqrt(2.0) if m else 1.0))
  return np.asarray(out)


def solid_harmonics(lmax: int, v: np.ndarray) -> np.ndarray:
  """The kernel's recurrence in NumPy (complex inputs allowed): (P, 3) -> (P, (lmax+1)^2)."""
  X, Y, Z = v[:, 2], v[:, 0], v[:, 1]
  r2 = X * X + Y * Y + Z * Z
  c = {(0, 0): np.ones_like(X)}
  s = {(0, 0): np.zeros_like(X)}
  for l in range(1, lmax + 1):
    f = 2 * l - 1
    c[l, l] = f * (X * c[l - 1, l - 1] - Y * s[l - 1, l - 1])
    s[l, l] = f * (Y * c[l - 1, l - 1] + X * s[l - 1, l - 1])
    c[l, l - 1] = f * Z * c[l - 1, l - 1]
    s[l, l - 1] = f * Z * s[l - 1, l - 1]
    for m in range(l - 2, -1, -1):
      c[l, m] = (f * Z * c[l - 1, m] - (l + m - 1) * r2 * c[l - 2, m]) / (l - m)
      s[l, m] = (f * Z * s[l - 1, m] - (l + m - 1) * r2 * s[l - 2, m]) / (l - m)
  cols = [s[l, -m] if m < 0 else c[l, m] for l in range(lmax + 1) for m in range(-l, l + 1)]
  return np.stack(cols, axis=1) * norms(lmax)


@functools.lru_cache(maxsize=None)
def derivatives(l: int) -> np.ndarray:
  """(2l+1, 3, 2l-1) for l >= 1."""
  pts = np.random.default_rng(l).normal(size=(8 * (2 * l + 1), 3))
  lower = solid_harmonics(l - 1, pts)[:, (l - 1) ** 2:]
  a = np.empty((2 * l + 1, 3, 2 * l - 1))
  h = 1e-30
  for k in range(3):
    step = np.zeros(3, complex)
    step[k] = 1j * h
    d = solid_harmonics(l, pts.astype(complex) + step)[:, l * l:].imag / h
    sol = np.linalg.lstsq(lower, d, rcond=None)[0]  # (2l-1, 2l+1)
    a[:, k, :] = sol.T
  a[np.abs(a) < 1e-13] = 0.0  # exact zeros where the map has none
  return a
