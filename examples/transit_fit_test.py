"""Runs the transit_fit example for two noise realisations; each must recover every parameter and
write a figure whose pixels show the data, the model and the residuals; the figure's labels and
legend, and its PDF form."""

import matplotlib.image
import numpy as np
import pytest

from examples import transit_fit


def _near(rgb, colour, tol=12):
  return np.all(np.abs(rgb - np.asarray(colour, float)) <= tol, axis=-1)


@pytest.mark.parametrize("seed", [7, 11])
def test_example_recovers_parameters(seed, tmp_path):
  out = tmp_path / "fit.png"
  assert transit_fit.main(["--check", "--seed", str(seed), "--out", str(out)]) == 0
  img = matplotlib.image.imread(out)
  assert img.shape == (560, 760, 4)
  rgb = img[..., :3] * 255
  red, grey = _near(rgb, (214, 39, 40)), _near(rgb, (153, 153, 153))  # matplotlib's C3, "0.6"
  assert red.sum() > 1500 and grey.sum() > 3000  # a model curve and thousands of data points
  # The model dips in the middle of the upper panel: its lowest red pixel is in the middle third
  # of the width (the data span about -3.9 to 3.3 hours around mid-transit).
  rows, cols = np.nonzero(red[:350])
  assert 760 / 3 < cols[np.argmax(rows)] < 2 * 760 / 3


def test_figure_labels_legend_and_pdf(tmp_path):
  t = np.linspace(-0.15, 0.15, 200)
  theta = np.asarray(transit_fit.TRUTH)
  y = np.asarray(transit_fit.model(theta, t))
  fig = transit_fit.draw(t, y, theta, 300e-6)
  top, bottom = fig.axes
  assert top.get_ylabel() == "relative flux" and bottom.get_ylabel() == "residuals [ppm]"
  assert bottom.get_xlabel() == "hours from mid-transit"
  assert [x.get_text() for x in top.get_legend().get_texts()] == ["data (σ = 300 ppm)", "best fit"]
  np.testing.assert_allclose(bottom.lines[0].get_ydata(), 0.0, atol=1e-9)  # noise-free residuals
  fig.savefig(tmp_path / "fit.pdf")
  assert (tmp_path / "fit.pdf").read_bytes().startswith(b"%PDF")
