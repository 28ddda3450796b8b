"""Runs the transit_fit example for two noise realisations; each must recover every parameter and
write a PNG whose pixels show the data, the model and the residuals."""

import numpy as np
import pytest

from examples import figure, transit_fit


@pytest.mark.parametrize("seed", [7, 11])
def test_example_recovers_parameters(seed, tmp_path):
  out = str(tmp_path / "fit.png")
  assert transit_fit.main(["--check", "--seed", str(seed), "--out", out]) == 0
  img = figure.read_png(out)
  assert img.shape == (560, 760, 3)
  red = (img[..., 0] > 180) & (img[..., 1] < 80) & (img[..., 2] < 80)
  grey = (img[..., 0] == 150) & (img[..., 1] == 150) & (img[..., 2] == 150)
  assert red.sum() > 1500 and grey.sum() > 3000  # a model curve and thousands of data points
  # The model dips in the middle of the upper panel: its lowest red pixel is near the centre.
  rows, cols = np.nonzero(red[:350, 100:740])
  assert abs(cols[np.argmax(rows)] - 320) < 60
