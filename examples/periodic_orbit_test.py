"""The periodic-orbit example: Newton's method converges quadratically to Arenstorf's published
initial velocity and period; scipy's DOP853, with the model written again in NumPy, confirms that
the orbit found closes on itself after one period; the figure shows both orbits."""

import os
import tempfile

import jax
import matplotlib.image
import numpy as np
import scipy.integrate

jax.config.update("jax_enable_x64", True)

from examples import periodic_orbit  # noqa: E402


def _numpy_rhs(t, y, mu=periodic_orbit.MU):
  x, yy, vx, vy = y
  d1 = ((x + mu) ** 2 + yy ** 2) ** 1.5
  d2 = ((x - 1 + mu) ** 2 + yy ** 2) ** 1.5
  return [vx, vy, x + 2 * vy - (1 - mu) * (x + mu) / d1 - mu * (x - 1 + mu) / d2,
          yy - 2 * vx - (1 - mu) * yy / d1 - mu * yy / d2]


def test_shooting_finds_the_published_orbit():
  out = os.path.join(os.environ.get("TEST_TMPDIR", tempfile.gettempdir()), "orbit.png")
  path = periodic_orbit.main(["--out", out])
  vy0, period = path[-1]
  assert abs(vy0 - periodic_orbit.VY0_TRUE) < 1e-10
  assert abs(period - periodic_orbit.T_TRUE) < 1e-9
  assert len(path) <= 6
  errors = [abs(v - periodic_orbit.VY0_TRUE) for v, _ in path[:-1]]
  assert errors[-1] < errors[-2] ** 1.5  # quadratic convergence (Newton with exact Jacobians)
  ref = scipy.integrate.solve_ivp(_numpy_rhs, (0.0, period), [periodic_orbit.X0, 0.0, 0.0, vy0],
                                  method="DOP853", rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(ref.y[:, -1], [periodic_orbit.X0, 0.0, 0.0, vy0], atol=1e-6)
  img = matplotlib.image.imread(out)
  assert img.shape == (620, 760, 4) and (img[..., :3] < 1).any()


def test_figure_shows_both_orbits_and_the_bodies():
  circle = np.stack([np.cos(np.linspace(0, 6.3, 50)), np.sin(np.linspace(0, 6.3, 50))], 1)
  fig = periodic_orbit.draw(0.5 * circle, circle)
  (ax,) = fig.axes
  labels = [t.get_text() for t in ax.get_legend().get_texts()]
  assert labels == ["initial guess over one period", "periodic orbit found", "Earth", "Moon"]
  np.testing.assert_array_equal(ax.lines[1].get_xydata(), circle)
  assert ax.lines[3].get_xdata()[0] == 1 - periodic_orbit.MU
