"""Finding a periodic orbit by shooting, with the right-hand side in plain jax.numpy.

    bazel run //examples:periodic_orbit            # writes periodic_orbit.png

The restricted three-body problem (Earth and Moon, rotating frame) has Arenstorf's periodic orbit
through x0 = 0.994 on the x axis. Starting from a rough guess of its initial velocity vy0 and
period T, Newton's method finds both, from the orbit's symmetry: at T / 2 it crosses the x axis at
right angles (y = vx = 0). The Jacobian of (y, vx)(T / 2) with respect to vy0 and to T comes from
jax.jacfwd through jaxext.ode.dop853 (the variational equations, and dy/dt1 = f(t1, y(t1)) for the
period), with no derivative written by hand. Many guesses at once would be one call too: trajectories are independent.
"""

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

jax.config.update("jax_enable_x64", True)

from jaxext import ode  # noqa: E402

MU = 0.012277471  # the Moon's share of the mass
X0 = 0.994
VY0_TRUE = -2.00158510637908252240537862224  # Hairer, Norsett & Wanner
T_TRUE = 17.0652165601579625588917206249


def three_body(t, y, mu):
  """dy/dt of the restricted three-body problem in the rotating frame; y = (x, y, vx, vy)."""
  x, yy, vx, vy = y
  d1 = jnp.hypot(x + mu, yy) ** 3        # to the Earth
  d2 = jnp.hypot(x - (1 - mu), yy) ** 3  # to the Moon
  return jnp.stack([vx, vy,
                    x + 2 * vy - (1 - mu) * (x + mu) / d1 - mu * (x - (1 - mu)) / d2,
                    yy - 2 * vx - (1 - mu) * yy / d1 - mu * yy / d2])


def state(vy0):
  return jnp.stack([X0, 0.0, 0.0, vy0])


def residual(z):
  """(y, vx) at half the period T from z = (vy0, T): zero for an orbit symmetric about the x axis
  (it leaves the axis at right angles and comes back to it at right angles after T / 2, so the
  second half mirrors the first and y(T) = y(0))."""
  vy0, period = z
  sol = ode.dop853(three_body, state(vy0)[None], (0.0, period / 2), args=MU, rtol=1e-12,
                   atol=1e-12)
  return sol.y_final[0, jnp.array([1, 2])]


def shoot(z, steps=12, tol=1e-11):
  """Newton's method on residual(z) = 0; returns the iterates."""
  jac = jax.jit(jax.jacfwd(residual))
  res = jax.jit(residual)
  path = [np.asarray(z)]
  for _ in range(steps):
    r = res(z)
    if float(jnp.linalg.norm(r)) < tol:
      break
    dz = jnp.linalg.solve(jac(z), -r)
    z = z + dz
    path.append(np.asarray(z))
  return path


def orbit(vy0, period, points=2000):
  sol = ode.dop853(three_body, state(vy0)[None], (0.0, period), args=MU, rtol=1e-12, atol=1e-12,
                   t_eval=jnp.linspace(0.0, period, points))
  return np.asarray(sol.ys[0])


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--vy0", type=float, default=-2.0, help="initial guess of vy(0)")
  p.add_argument("--period", type=float, default=17.0, help="initial guess of the period")
  p.add_argument("--out", default=None, help="figure path, .png or .pdf (default: periodic_orbit.png here)")
  args = p.parse_args(argv)
  t = time.perf_counter()
  path = shoot(jnp.array([args.vy0, args.period]))
  vy0, period = path[-1]
  print(f"{len(path) - 1} Newton steps in {time.perf_counter() - t:.1f} s: vy0 = {vy0:.15f} "
        f"(published {VY0_TRUE:.15f}), T = {period:.13f} (published {T_TRUE:.13f})")
  for k, (a, b) in enumerate(path):
    print(f"  iterate {k}: vy0 = {a:.15f}, T = {b:.13f}, "
          f"|(y, vx)(T / 2)| = {float(jnp.linalg.norm(residual(jnp.array([a, b])))):.2e}")
  out = args.out or os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()),
                                 "periodic_orbit.png")
  draw(orbit(*path[0]), orbit(vy0, period)).savefig(out, dpi=100)
  print(f"wrote {out}")
  return path


def draw(guess, found):
  """The initial guess over one period and the periodic orbit found, in the rotating frame, with
  the Earth and the Moon (a matplotlib Figure; `.savefig(path)` writes it)."""
  fig = Figure(figsize=(7.6, 6.2), layout="constrained")
  ax = fig.subplots()
  ax.plot(guess[:, 0], guess[:, 1], color="C1", lw=1, label="initial guess over one period")
  ax.plot(found[:, 0], found[:, 1], color="C0", lw=2, label="periodic orbit found")
  ax.plot([-MU], [0.0], "o", color="k", ms=8, label="Earth")
  ax.plot([1 - MU], [0.0], "o", color="0.5", ms=4, label="Moon")
  ax.set_aspect("equal")
  ax.set_xlabel("x [Earth-Moon distances]")
  ax.set_ylabel("y (rotating frame)")
  ax.legend(loc="upper right", fontsize="small")
  return fig


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  main()
