"""The Gray-Scott example: its Numba stencil kernel against the jnp step (one step on random
fields, and a whole vmapped run of every regime), and the PNG it writes (decoded back)."""


import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from examples import figure, gray_scott  # noqa: E402


def test_one_step_matches_jnp():
  rng = np.random.default_rng(3)
  u, v = rng.uniform(0, 1, (2, 37, 23))  # odd, non-square: both wrap-arounds exercised
  f, k = np.float64(0.03), np.float64(0.06)
  got = jax.jit(lambda a, b: gray_scott.step(a, b, f, k, du=0.2, dv=0.1, dt=0.7))(u, v)
  want = gray_scott.step_jnp(u, v, f, k, du=0.2, dv=0.1, dt=0.7)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-14, atol=1e-15)


def test_vmapped_run_matches_jnp_and_makes_patterns():
  ours = gray_scott.run_regimes(48, 400, seed=1)
  ref = gray_scott.run_regimes(48, 400, seed=1, use_kernel=False)
  np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)
  assert ours.shape == (len(gray_scott.REGIMES), 48, 48)
  assert np.all(np.isfinite(ours)) and np.all(ours.std(axis=(1, 2)) > 1e-3)  # not uniform
  assert not np.allclose(ours[0], ours[1])  # regimes differ


def test_main_writes_png(tmp_path):
  out = tmp_path / "gs.png"
  assert gray_scott.main(["--size", "40", "--steps", "200", "--out", str(out)]) == 0
  img = figure.read_png(out)
  n = len(gray_scott.REGIMES)
  assert img.shape == (40, 40 * n + 4 * (n - 1), 3)
  assert np.all(img[:, 40:44] == 255)  # the gap between the first two panels
  assert len(np.unique(img[:, :40].reshape(-1, 3), axis=0)) > 10  # a picture, not a flat panel


@pytest.mark.parametrize("field", [np.zeros((3, 3)), np.arange(6.0).reshape(2, 3)])
def test_colorize_range(field):
  rgb = gray_scott.colorize(field)
  assert rgb.dtype == np.uint8 and rgb.shape == field.shape + (3,)
