"""The debris-cloud example: it runs, fragments with more drag re-enter first, re-entries sit on
the 100 km sphere, survivors are checked against scipy's DOP853 with an independent NumPy model,
and the figure (its histograms, the PNG decoded back)."""


import jax
import matplotlib.image
import numpy as np
import scipy.integrate

jax.config.update("jax_enable_x64", True)

from examples import debris_cloud  # noqa: E402
from jaxext import ode  # noqa: E402


def _numpy_model(b):
  """Two-body + J2 + drag written out again in NumPy (density from the model's own table)."""
  m = debris_cloud.MODEL
  atm = m.atmosphere

  def f(t, y):
    r, v = y[:3], y[3:]
    rn = np.linalg.norm(r)
    z2 = (r[2] / rn) ** 2
    k = 1.5 * m.j2 * m.mu * m.radius ** 2 / rn ** 5
    a = -m.mu * r / rn ** 3 - k * r * np.array([1 - 5 * z2, 1 - 5 * z2, 3 - 5 * z2])
    vrel = v - np.cross([0.0, 0.0, m.rotation], r)
    a -= 0.5 * b * atm.density_at(rn - m.radius) * 1000.0 * np.linalg.norm(vrel) * vrel
    return np.concatenate([v, a])
  return f


def test_cloud_decays_by_drag_and_matches_scipy():
  y0, b = debris_cloud.fragments(200, seed=3)
  sol = debris_cloud.propagate(y0, b, hours=12.0)
  status = np.asarray(sol.status)
  assert set(status.tolist()) <= {0, 1}
  decayed = status == 1
  assert 0 < decayed.sum() < 200
  # re-entries on the 100 km sphere, before the end
  r = np.linalg.norm(np.asarray(sol.y_final)[decayed, :3], axis=1)
  np.testing.assert_allclose(r - ode.models.EARTH_RADIUS, 100.0, atol=1e-6)
  assert np.all(np.asarray(sol.t_final)[decayed] < 12 * 3600)
  # drag decides: low perigee and high B re-enter
  perigee = debris_cloud.altitudes(y0)
  assert np.median(b[decayed]) > np.median(b[~decayed])
  assert np.median(perigee[decayed]) < np.median(perigee[~decayed])
  for j in np.flatnonzero(~decayed)[:3]:
    ref = scipy.integrate.solve_ivp(_numpy_model(b[j, 0]), (0.0, 12 * 3600.0), y0[j],
                                    method="DOP853", rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(sol.y_final)[j, :3], ref.y[:3, -1], atol=1e-3)  # 1 m
  # a re-entry time against scipy's event location
  j = int(np.flatnonzero(decayed)[0])
  event = lambda t, y: np.linalg.norm(y[:3]) - ode.models.EARTH_RADIUS - 100.0
  event.terminal, event.direction = True, -1
  ref = scipy.integrate.solve_ivp(_numpy_model(b[j, 0]), (0.0, 12 * 3600.0), y0[j],
                                  method="DOP853", rtol=1e-10, atol=1e-10, events=[event])
  assert abs(float(sol.t_final[j]) - ref.t_events[0][0]) < 1.0  # s, over hours of decay


def test_main_writes_png(tmp_path):
  out = tmp_path / "cloud.png"
  assert debris_cloud.main(["--fragments", "300", "--hours", "6", "--out", str(out)]) == 0
  img = matplotlib.image.imread(out)
  assert img.shape == (400, 720, 4)
  assert len(np.unique(img[..., :3].reshape(-1, 3), axis=0)) > 5  # bars of both series, text, axes


def test_figure_histograms():
  rng = np.random.default_rng(1)
  before, after = rng.uniform(100, 1500, 500), rng.uniform(300, 1500, 400)
  fig = debris_cloud.draw(before, after, 24, 100)
  (ax,) = fig.axes
  heights = [[p.get_height() for p in c] for c in ax.containers]
  edges = np.linspace(0.0, 1600.0, 65)
  np.testing.assert_array_equal(heights[0], np.histogram(before, edges)[0])
  np.testing.assert_array_equal(heights[1], np.histogram(after, edges)[0])
  legend = ax.get_legend()
  assert legend.get_title().get_text() == "re-entered: 100"
  assert [t.get_text() for t in legend.get_texts()] == ["before", "after 24 h"]
  assert ax.get_xlabel() == "altitude [km]"
