"""Runs the transit_fit example for two noise realisations; each must recover every parameter."""

import pytest

from examples import transit_fit


@pytest.mark.parametrize("seed", [7, 11])
def test_example_recovers_parameters(seed):
  assert transit_fit.main(["--check", "--seed", str(seed)]) == 0
