"""Independent reference for the limbdark op: the occulted flux integrated over circles centred on
the star (each circle's arc inside the occultor is elementary), the radial integral by mpmath's
tanh-sinh quadrature with the kinks (|b - r|, b + r) as breakpoints. The kernel uses a different
decomposition (Green's theorem on the occultor's boundary, elliptic integrals, recurrences).

Shared by tests/limbdark_test.py and benchmarks/limbdark_bench.py.
"""

import mpmath as mp


def relative_flux_mp(b, r, u):
  """1 - occulted / total flux for the law 1 - sum_j u_j (1 - mu)^j, as an mpf at the current
  mpmath precision (inputs may be floats or mpfs)."""
  b, r = mp.mpf(b), mp.mpf(r)
  u = [mp.mpf(x) for x in u]

  def intensity(rho):
    mu = mp.sqrt(1 - rho * rho)
    return 1 - sum(uj * (1 - mu) ** (j + 1) for j, uj in enumerate(u))

  def half_angle(rho):  # half of the arc of the circle |x| = rho that lies inside the occultor
    if b == 0:
      return mp.pi if rho < r else mp.mpf(0)
    c = (rho * rho + b * b - r * r) / (2 * b * rho)
    return mp.pi if c <= -1 else (mp.mpf(0) if c >= 1 else mp.acos(c))

  pts = sorted({mp.mpf(0), min(abs(b - r), mp.mpf(1)), min(b + r, mp.mpf(1)), mp.mpf(1)})
  occ = mp.quad(lambda rho: 2 * rho * intensity(rho) * half_angle(rho), pts)
  total = mp.quad(lambda rho: 2 * mp.pi * rho * intensity(rho), [0, 1])
  return 1 - occ / total


def relative_flux(b, r, u, dps=30):
  """relative_flux_mp at `dps` digits, rounded to a float."""
  with mp.workdps(dps):
    return float(relative_flux_mp(float(b), float(r), [float(x) for x in u]))
