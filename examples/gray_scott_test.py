"""The Gray-Scott example: its Numba stencil kernel against the jnp step (one step on random
fields, and a whole vmapped run of every regime), and the figure it draws (panels, colour bar,
the PNG decoded back, the PDF)."""


import jax
import matplotlib.image
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

from examples import gray_scott  # noqa: E402


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
  img = matplotlib.image.imread(out)
  n = len(gray_scott.REGIMES)
  assert img.shape == (340, 100 * (3 * n + 1), 4)
  assert len(np.unique(img[..., :3].reshape(-1, 3), axis=0)) > 50  # fields, not flat panels


def test_figure_panels_share_one_colour_scale(tmp_path):
  rng = np.random.default_rng(0)
  v = rng.uniform(0.0, 0.4, (len(gray_scott.REGIMES), 12, 12))
  v[2] += 0.3  # one regime's field higher than the rest: the scale is the common range
  fig = gray_scott.draw(v, 100)
  panels, bar = fig.axes[:-1], fig.axes[-1]
  assert len(panels) == len(gray_scott.REGIMES) and bar.get_ylabel() == "V"
  for ax, field, (name, f, k) in zip(panels, v, gray_scott.REGIMES):
    (im,) = ax.get_images()
    np.testing.assert_array_equal(im.get_array(), field)
    assert im.get_clim() == (v.min(), v.max())
    assert ax.get_title() == f"{name}: F = {f}, k = {k}"
  fig.savefig(tmp_path / "gs.pdf")
  assert (tmp_path / "gs.pdf").read_bytes().startswith(b"%PDF")
