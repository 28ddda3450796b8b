"""Clebsch-Gordan coefficients of the real irreps of SO(3), in e3nn's basis and normalisation.

The complex (Condon-Shortley) coefficients <l1 m1 l2 m2 | l3 m3> come from Racah's formula in
exact rational arithmetic; they are divided by sqrt(2 l3 + 1) and carried to the real basis of
e3nn's irreps (the standard real form with an extra factor (-i)^l per irrep, which makes them
real). C[i, j, k] couples component i of l1 and j of l2 into k of l3; zero unless
|l1 - l2| <= l3 <= l1 + l2.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np


def _racah(l1: int, m1: int, l2: int, m2: int, l3: int, m3: int) -> float:
  if m1 + m2 != m3 or not abs(l1 - l2) <= l3 <= l1 + l2 or abs(m3) > l3:
    return 0.0
  f = math.factorial
  pre = Fraction((2 * l3 + 1) * f(l3 + l1 - l2) * f(l3 - l1 + l2) * f(l1 + l2 - l3),
                 f(l1 + l2 + l3 + 1))
  pre *= Fraction(f(l3 + m3) * f(l3 - m3) * f(l1 - m1) * f(l1 + m1) * f(l2 - m2) * f(l2 + m2))
  total = Fraction(0)
  for k in range(0, l1 + l2 - l3 + 1):
    den = [k, l1 + l2 - l3 - k, l1 - m1 - k, l2 + m2 - k, l3 - l2 + m1 + k, l3 - l1 - m2 + k]
    if min(den) < 0:
      continue
    term = Fraction((-1) ** k, math.prod(f(d) for d in den))
    total += term
  return float(total) * math.sqrt(float(pre))


def _real_basis(l: int) -> np.ndarray:
  """Q with real = Q @ complex (rows: real m = -l..l; columns: complex m = -l..l)."""
  q = np.zeros((2 * l + 1, 2 * l + 1), complex)
  s = 1 / math.sqrt(2)
  for m in range(-l, 0):
    q[l + m, l - m] = s
    q[l + m, l + m] = -1j * s
  q[l, l] = 1
  for m in range(1, l + 1):
    q[l + m, l + m] = (-1) ** m * s
    q[l + m, l - m] = 1j * (-1) ** m * s
  return (-1j) ** l * q


@functools.lru_cache(maxsize=None)
def clebsch_gordan(l1: int, l2: int, l3: int) -> np.ndarray:
  """(2l1+1, 2l2+1, 2l3+1) real coefficients (see the module docstring)."""
  c = np.zeros((2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1))
  for m1 in range(-l1, l1 + 1):
    for m2 in range(-l2, l2 + 1):
      m3 = m1 + m2
      if abs(m3) <= l3:
        c[l1 + m1, l2 + m2, l3 + m3] = _racah(l1, m1, l2, m2, l3, m3)
  c /= math.sqrt(2 * l3 + 1)
  q1, q2, q3 = _real_basis(l1), _real_basis(l2), _real_basis(l3)
  real = np.einsum("ij,kl,mn,ikn->jlm", q1, q2, np.conj(q3.T), c)
  assert np.abs(real.imag).max() < 1e-10
  out = np.real(real)
  out[np.abs(out) < 1e-15] = 0.0
  return out
