"""A day in the life of a LEO debris cloud: 10,000 fragments propagated at once with J2 and drag.

    tools/bazel run //examples:debris_cloud [-- --fragments 10000 --hours 24 --out debris.png]

Fragments of a break-up spread over low Earth orbit (perigee altitudes 130-1500 km, e <= 0.02,
random orientations) with area-to-mass ratios from compact pieces to thin foil (ballistic
coefficients B = C_d A / m, log-uniform 0.005-0.5 m^2/kg). `jaxext.ode.dop853` integrates all of
them with the built-in C++ model (two-body + J2 + drag in a co-rotating exponential atmosphere),
each with its own adaptive steps, and a terminal altitude event at 100 km marks the ones that
re-enter. The figure (matplotlib; PNG or PDF, by the --out suffix) shows the altitude
distribution before and after; the survivors' altitudes are the radius minus the Earth's
equatorial radius at the end of the day.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np
from matplotlib.figure import Figure

from jaxext import ode

MODEL = ode.models.earth(j2=True, drag=True)
REENTRY_ALTITUDE = 100.0  # km


def fragments(count: int, seed: int = 0):
  """(y0 (N, 6) km and km/s, B (N, 1) m^2/kg) of a cloud of fragments."""
  rng = np.random.default_rng(seed)
  re, mu = ode.models.EARTH_RADIUS, ode.models.EARTH_MU
  perigee = re + rng.uniform(130.0, 1500.0, count)
  e = rng.uniform(0.0, 0.02, count)
  a = perigee / (1 - e)
  inc = np.arccos(rng.uniform(-1, 1, count))
  raan, argp, nu = rng.uniform(0, 2 * np.pi, (3, count))
  p = a * (1 - e * e)
  r = p / (1 + e * np.cos(nu))
  pos_pf = np.stack([r * np.cos(nu), r * np.sin(nu), 0 * r], 1)
  vel_pf = np.sqrt(mu / p)[:, None] * np.stack([-np.sin(nu), e + np.cos(nu), 0 * r], 1)
  co, so, ci, si, cw, sw = (np.cos(raan), np.sin(raan), np.cos(inc), np.sin(inc), np.cos(argp),
                            np.sin(argp))
  rot = np.stack([np.stack([co * cw - so * sw * ci, -co * sw - so * cw * ci, so * si], 1),
                  np.stack([so * cw + co * sw * ci, -so * sw + co * cw * ci, -co * si], 1),
                  np.stack([sw * si, cw * si, ci], 1)], 1)
  y0 = np.concatenate([np.einsum("nij,nj->ni", rot, pos_pf), np.einsum("nij,nj->ni", rot, vel_pf)],
                      axis=1)
  b = np.exp(rng.uniform(np.log(0.005), np.log(0.5), (count, 1)))
  return y0, b


def propagate(y0, b, hours: float, rtol: float = 1e-9, atol: float = 1e-9):
  run = jax.jit(lambda y, p: ode.dop853(
      MODEL, y, (0.0, hours * 3600.0), p, rtol=rtol, atol=atol,
      events=[ode.models.altitude_event(REENTRY_ALTITUDE)]))
  return run(y0, b)


def altitudes(states) -> np.ndarray:
  return np.linalg.norm(np.asarray(states)[:, :3], axis=1) - ode.models.EARTH_RADIUS


def draw(before: np.ndarray, after: np.ndarray, hours: float, reentered: int) -> Figure:
  """Histograms of the fragments' altitudes [km] before and after `hours` (a matplotlib Figure;
  `.savefig(path)` writes it)."""
  fig = Figure(figsize=(7.2, 4.0), layout="constrained")
  ax = fig.subplots()
  bins = np.linspace(0.0, 1600.0, 65).tolist()
  ax.hist([before, after], bins, color=["0.6", "C0"], label=["before", f"after {hours:g} h"])
  ax.set_xlabel("altitude [km]")
  ax.set_ylabel("fragments per 25 km")
  ax.legend(title=f"re-entered: {reentered}")
  return fig


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--fragments", type=int, default=10_000)
  p.add_argument("--hours", type=float, default=24.0)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", default=None, help="figure path, .png or .pdf (default: debris_cloud.png in the working "
                 "directory, or in BUILD_WORKSPACE_DIRECTORY under `bazel run`)")
  args = p.parse_args(argv)
  jax.config.update("jax_enable_x64", True)
  out = args.out or os.path.join(os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."),
                                 "debris_cloud.png")
  y0, b = fragments(args.fragments, args.seed)
  t0 = time.perf_counter()
  sol = jax.block_until_ready(propagate(y0, b, args.hours))
  elapsed = time.perf_counter() - t0
  status = np.asarray(sol.status)
  decayed = status == ode.Status.EVENT
  failed = status < 0
  print(f"{args.fragments} fragments, {args.hours:g} h, two-body + J2 + drag, rtol = atol = 1e-9: "
        f"{elapsed:.2f} s including compilation ({np.asarray(sol.n_accepted).sum():,} accepted "
        f"steps, {np.asarray(sol.n_rhs).sum():,} right-hand side evaluations)")
  if failed.any():
    print(f"{failed.sum()} trajectories failed (status {sorted(set(status[failed]))})",
          file=sys.stderr)
    return 1
  t_hit = np.asarray(sol.t_final)[decayed] / 3600.0
  print(f"{decayed.sum()} re-entered (crossed {REENTRY_ALTITUDE:g} km)" + (
      f", after {t_hit.min():.1f}-{t_hit.max():.1f} h (median {np.median(t_hit):.1f} h); "
      f"their median B = {np.median(b[decayed]):.3f} m^2/kg vs {np.median(b[~decayed]):.3f} for "
      "the survivors" if decayed.any() else ""))
  before, after = altitudes(y0), altitudes(sol.y_final)[~decayed]
  draw(before, after, args.hours, int(decayed.sum())).savefig(out, dpi=100)
  print(f"wrote {out}: altitude distribution before and after")
  return 0


if __name__ == "__main__":
  sys.exit(main())
