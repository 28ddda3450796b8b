"""Tests of jaxext.equivariant against e3nn-jax 0.21.0 (the conventions are e3nn's): spherical
harmonics number for number up to l = 8 in every normalisation, equivariance under random
rotations (e3nn's Wigner D matrices), derivatives to third order (check_grads) and against e3nn's
gradients; the deterministic segment sum against NumPy, bitwise across runs and thread counts,
its derivatives, vmap; argument errors."""

import os
import re
import subprocess
import sys

import e3nn_jax as e3nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

jax.config.update("jax_enable_x64", True)

from jaxext import equivariant as eq  # noqa: E402

IRREPS = ["0e", "1o", "2e", "0e+1o+2e+3o", "2x0e+1o+3x2e+5o+4e+6e", "1e+2e+3e", "7o+8e",
          "1y+2y+3y"]


@pytest.mark.parametrize("irreps", IRREPS)
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("normalization", ["component", "norm", "integral"])
def test_matches_e3nn(irreps, normalize, normalization):
  rng = np.random.default_rng(0)
  v = rng.normal(size=(7, 5, 3)) * rng.uniform(0.1, 3.0, size=(7, 5, 1))
  got = eq.spherical_harmonics(irreps, v, normalize=normalize, normalization=normalization)
  want = e3nn.spherical_harmonics(irreps, v, normalize=normalize,
                                  normalization=normalization).array
  assert got.shape == want.shape
  scale = max(1.0, float(np.abs(want).max()))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12 * scale)


def test_int_and_list_and_float32_and_zero_vector():
  """e3nn-jax's reading of an int (that degree alone), of a list or range (those degrees)."""
  rng = np.random.default_rng(1)
  v = rng.normal(size=(100, 3))
  for l in range(8):
    got = eq.spherical_harmonics(l, v)
    want = e3nn.spherical_harmonics(l, e3nn.IrrepsArray("1o", v), normalize=True).array
    assert got.shape == (100, 2 * l + 1)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12)
  got = eq.spherical_harmonics(range(7), v)
  want = e3nn.spherical_harmonics("0e+1o+2e+3o+4e+5o+6e", v, normalize=True).array
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12)
  got = eq.spherical_harmonics([2, 0], v)
  want = e3nn.spherical_harmonics("2e+0e", v, normalize=True).array
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12)
  got32 = eq.spherical_harmonics(range(7), v.astype(np.float32))
  assert got32.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(got32), np.asarray(eq.spherical_harmonics(range(7), v)),
                             atol=2e-5)
  zero = eq.spherical_harmonics("0e+1o+2e", np.zeros((1, 3)))
  np.testing.assert_allclose(np.asarray(zero),
                             np.asarray(e3nn.spherical_harmonics("0e+1o+2e", np.zeros((1, 3)),
                                                                 normalize=True).array))


def test_float32_large_vectors_and_empty_irreps():
  v = np.array([[400.0, -250.0, 300.0]])
  y32 = np.asarray(eq.spherical_harmonics(range(13), v.astype(np.float32), normalize=False))
  y64 = np.asarray(eq.spherical_harmonics(range(13), v, normalize=False))
  assert np.all(np.isfinite(y32))
  np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-5 * np.abs(y64).max())
  assert eq.spherical_harmonics("0x0e+0x1o", np.ones((4, 3))).shape == (4, 0)


def test_unit_norm_per_degree_on_the_sphere():
  v = np.random.default_rng(2).normal(size=(50, 3))
  y = np.asarray(eq.spherical_harmonics(range(9), v, normalization="component"))
  for l in range(9):
    np.testing.assert_allclose(np.sum(y[:, l * l:(l + 1) ** 2] ** 2, 1), 2 * l + 1, rtol=1e-12)


def test_equivariance_under_rotations():
  irreps = "0e+1o+2e+3o+4e+5o+6e"
  rng = np.random.default_rng(3)
  v = rng.normal(size=(20, 3))
  for _ in range(3):
    q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    q *= np.sign(np.linalg.det(q))  # a proper rotation
    d = np.asarray(e3nn.Irreps(irreps).D_from_matrix(q))
    lhs = np.asarray(eq.spherical_harmonics(irreps, v @ q.T))
    rhs = np.asarray(eq.spherical_harmonics(irreps, v)) @ d.T
    np.testing.assert_allclose(lhs, rhs, atol=1e-12)


@pytest.mark.parametrize("normalize", [True, False])
def test_derivatives_to_third_order(normalize):
  v = np.random.default_rng(4).normal(size=(4, 3))
  f = lambda x: eq.spherical_harmonics("0e+1o+2e+3o+4e", x, normalize=normalize)
  check_grads(f, (v,), order=3, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


def test_gradients_match_e3nn():
  rng = np.random.default_rng(5)
  v = rng.normal(size=(30, 3))
  w = rng.normal(size=(30, 49))
  ours = jax.grad(lambda x: jnp.sum(w * eq.spherical_harmonics(range(7), x)))(v)
  ref = jax.grad(lambda x: jnp.sum(w * e3nn.spherical_harmonics(
      "0e+1o+2e+3o+4e+5o+6e", x, normalize=True).array))(v)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), atol=1e-11)
  hess = jax.hessian(lambda x: jnp.sum(w[0] * eq.spherical_harmonics(range(7), x)))(v[0])
  hess_ref = jax.hessian(lambda x: jnp.sum(w[0] * e3nn.spherical_harmonics(
      "0e+1o+2e+3o+4e+5o+6e", x, normalize=True).array))(v[0])
  np.testing.assert_allclose(np.asarray(hess), np.asarray(hess_ref), atol=1e-10)


def test_jit_and_vmap():
  v = np.random.default_rng(6).normal(size=(3, 8, 3))
  direct = eq.spherical_harmonics(range(5), v)
  np.testing.assert_allclose(np.asarray(jax.jit(lambda x: eq.spherical_harmonics(range(5), x))(v)),
                             np.asarray(direct), rtol=1e-14, atol=1e-14)
  mapped = jax.vmap(lambda x: eq.spherical_harmonics(range(5), x), in_axes=1, out_axes=1)(v)
  # the normalisation (jnp) may fuse differently under vmap: equal to roundoff
  np.testing.assert_allclose(np.asarray(mapped), np.asarray(direct), rtol=1e-14, atol=1e-14)
  raw = eq.spherical_harmonics(range(5), v, normalize=False)  # the kernel alone: bit for bit
  mapped = jax.vmap(lambda x: eq.spherical_harmonics(range(5), x, normalize=False), in_axes=1,
                    out_axes=1)(v)
  np.testing.assert_array_equal(np.asarray(mapped), np.asarray(raw))
  # vectors stored (3, N): the batch axis is the last one
  cols = np.moveaxis(v[0], 0, 1)  # (3, 8)
  per_column = jax.vmap(lambda x: eq.spherical_harmonics(range(5), x, normalize=False), in_axes=1)(cols)
  np.testing.assert_array_equal(np.asarray(per_column), np.asarray(raw[0]))


@pytest.mark.parametrize("bad, error, match", [
    ("1x", ValueError, "irreps_out"),
    ("2o", ValueError, "even"),
    ("1o+3e", ValueError, "parity"),
    (13, ValueError, "l up to"),
    (-1, ValueError, "degrees"),
    (3.5, TypeError, "irreps"),
])
def test_bad_irreps(bad, error, match):
  with pytest.raises(error, match=match):
    eq.spherical_harmonics(bad, np.ones((2, 3)))


def test_bad_vectors_and_normalization():
  with pytest.raises(ValueError, match="vectors"):
    eq.spherical_harmonics(2, np.ones((2, 4)))
  with pytest.raises(TypeError, match="vectors"):
    eq.spherical_harmonics(2, np.ones((2, 3), complex))
  with pytest.raises(ValueError, match="normalization"):
    eq.spherical_harmonics(2, np.ones((2, 3)), normalization="unit")


# --- segment_sum --------------------------------------------------------------------------------

def reference_segment_sum(data, ids, n):
  out = np.zeros((n,) + data.shape[1:], data.dtype)
  ok = (ids >= 0) & (ids < n)
  np.add.at(out, ids[ok], data[ok])
  return out


@pytest.mark.parametrize("sorted_ids", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_segment_sum_matches_numpy(sorted_ids, dtype):
  rng = np.random.default_rng(7)
  ids = rng.integers(-2, 40, 500)  # some out of range, some segments empty
  if sorted_ids:
    ids = np.sort(ids)
  data = rng.normal(size=(500, 3, 4)).astype(dtype)
  got = eq.segment_sum(data, ids, 37, indices_are_sorted=sorted_ids)
  assert got.shape == (37, 3, 4) and got.dtype == dtype
  tol = 1e-5 if dtype == np.float32 else 1e-12
  np.testing.assert_allclose(np.asarray(got), reference_segment_sum(data, ids, 37), rtol=tol,
                             atol=tol)


def test_segment_sum_edge_cases():
  empty = eq.segment_sum(np.zeros((0, 5)), np.zeros(0, np.int32), 3)
  np.testing.assert_array_equal(np.asarray(empty), np.zeros((3, 5)))
  none = eq.segment_sum(np.ones((4, 2)), np.arange(4), 0)
  assert none.shape == (0, 2)
  with pytest.raises(Exception, match="not sorted"):
    jax.block_until_ready(eq.segment_sum(np.ones((3, 2)), np.array([2, 0, 1]), 3,
                                         indices_are_sorted=True))


_DETERMINISM = r"""
import os, sys
cpus = sys.argv[1]
if cpus != "all":  # before jax starts: XLA sizes its thread pool from the allowed CPUs
  os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
import hashlib, numpy as np, jax
jax.config.update("jax_enable_x64", True)
from jaxext import equivariant as eq
rng = np.random.default_rng(11)
ids = rng.integers(0, 20000, 200000)  # 20000 segments of 8 floats: many chunks per call
data = rng.normal(size=(200000, 8)) * 10.0 ** rng.uniform(-8, 8, (200000, 1))
out = np.asarray(eq.segment_sum(data, ids, 20000))
sys.stdout.write(hashlib.sha256(out.tobytes()).hexdigest())
"""


def test_segment_sum_is_bitwise_deterministic_across_runs_and_threads():
  outs = []
  for cpus in ("all", "0"):  # all CPUs (several pool threads) and one CPU (a one-thread pool)
    for _ in range(2):
      r = subprocess.run([sys.executable, "-c", _DETERMINISM, cpus], capture_output=True,
                         text=True, check=True)
      outs.append(r.stdout)
  assert len(set(outs)) == 1 and len(outs[0]) == 64, outs
  # ... and the values are those of summing each segment in row order
  rng = np.random.default_rng(12)
  ids = rng.integers(0, 5, 64)
  data = rng.normal(size=64) * 10.0 ** rng.uniform(-12, 12, 64)
  got = np.asarray(eq.segment_sum(data, ids, 5))
  for s in range(5):
    acc = 0.0
    for x in data[ids == s]:
      acc += x
    assert got[s] == acc


def test_segment_sum_unsorted_equals_sorted_bitwise_without_sorting_on_cpu():
  rng = np.random.default_rng(13)
  ids = rng.integers(-3, 50, 3000)  # unsorted, some out of range
  data = rng.normal(size=(3000, 7)) * 10.0 ** rng.uniform(-9, 9, (3000, 1))
  order = np.argsort(ids, kind="stable")  # each segment's rows keep their order
  got = np.asarray(eq.segment_sum(data, ids, 45))
  want = np.asarray(eq.segment_sum(data[order], ids[order], 45, indices_are_sorted=True))
  np.testing.assert_array_equal(got, want)
  # the CPU kernel groups the rows itself: no sort and no permuted copy of the data in the program
  hlo = jax.jit(lambda d: eq.segment_sum(d, ids, 45)).lower(data).as_text()
  assert "stablehlo.sort" not in hlo and "gather" not in hlo, hlo


# --- gather (deterministic transpose) -------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_values_and_gradients_equal_indexing(dtype):
  rng = np.random.default_rng(21)
  x = rng.normal(size=(40, 3, 5)).astype(dtype)
  idx = rng.integers(0, 40, (7, 30))  # any index shape; repeated rows
  got = eq.gather(x, idx)
  assert got.shape == (7, 30, 3, 5) and got.dtype == dtype
  np.testing.assert_array_equal(np.asarray(got), x[idx])
  w = rng.normal(size=(7, 30, 3, 5)).astype(dtype)
  ours = jax.grad(lambda a: jnp.sum(w * eq.gather(a, idx)))(x)
  ref = jax.grad(lambda a: jnp.sum(w * a[idx]))(x)
  tol = 1e-5 if dtype == np.float32 else 1e-13
  np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=tol, atol=tol)
  x64 = x.astype(np.float64)
  check_grads(lambda a: eq.gather(a, idx) ** 3, (x64,), order=2, modes=("fwd", "rev"))


def _float_scatter_results(hlo):
  """The result types of the program's scatters of anything but integers (XLA's scatter-add of
  floats: its order of addition is unspecified, on GPUs it varies from run to run). Integer
  scatters (exact, so deterministic: the CUDA lowerings count rows with them) are not listed."""
  results = []
  for part in hlo.split('"stablehlo.scatter"')[1:]:
    signature = re.search(r"\}\) : \([^\n]*\) -> (tensor<[^>]*>)", part).group(1)
    element = signature[len("tensor<"):-1].split("x")[-1]  # tensor<20x4xf64>: f64
    if not re.fullmatch(r"u?i\d+", element):
      results.append(signature)
  return results


def test_gather_gradient_program_has_no_scatter():
  """The point of gather: its transpose (and segment_sum's, at every order) is jaxext's ordered
  sum, not XLA's scatter-add of floats (nondeterministic on GPUs)."""
  rng = np.random.default_rng(22)
  x, idx = rng.normal(size=(20, 4)), rng.integers(0, 20, 100)
  w = rng.normal(size=(100, 4))
  first = jax.jit(jax.grad(lambda a: jnp.sum(jnp.sin(eq.gather(a, idx)) * w)))
  second = jax.jit(jax.grad(lambda a: jnp.sum(first(a) ** 2)))
  third = jax.jit(jax.grad(lambda d: jnp.sum(jnp.cos(eq.segment_sum(d, idx, 20)) ** 2)))
  for fn, arg in ((first, x), (second, x), (third, w)):
    hlo = fn.lower(arg).as_text()
    assert not _float_scatter_results(hlo) and "jaxext_segment_sum" in hlo, hlo
    if not os.environ.get("JAXEXT_CUDA_EMULATION"):  # the CPU's lowering has no scatter at all
      assert "scatter" not in hlo, hlo
  indexing = jax.jit(jax.grad(lambda a: jnp.sum(jnp.sin(a[idx]) * w))).lower(x).as_text()
  # what the test guards against is really there otherwise
  assert _float_scatter_results(indexing) == ["tensor<20x4xf64>"]


def test_gather_out_of_range_vmap_and_errors():
  x = np.arange(12.0).reshape(6, 2)
  got = np.asarray(eq.gather(x, np.array([5, -1, 6, 0])))
  np.testing.assert_array_equal(got[[0, 3]], x[[5, 0]])
  assert np.isnan(got[[1, 2]]).all()  # no wrap-around, no clamping
  g = jax.grad(lambda a: jnp.nansum(eq.gather(a, np.array([5, -1, 6, 5]))))(x)
  np.testing.assert_array_equal(np.asarray(g), np.where(np.arange(6)[:, None] == 5, 2.0, 0.0)
                                * np.ones((6, 2)))
  xb = np.random.default_rng(23).normal(size=(3, 6, 2))
  ib = np.array([[0, 5, 5], [1, 1, 2], [3, 4, 0]])
  np.testing.assert_array_equal(np.asarray(jax.vmap(eq.gather)(xb, ib)),
                                np.stack([xb[b][ib[b]] for b in range(3)]))
  np.testing.assert_array_equal(np.asarray(jax.vmap(eq.gather, (0, None))(xb, ib[0])),
                                np.stack([xb[b][ib[0]] for b in range(3)]))
  with pytest.raises(TypeError, match="indices"):
    eq.gather(x, np.array([0.0, 1.0]))
  # An empty table: every index is out of range, so every row is NaN (jnp's take raised an
  # IndexError naming no argument); its gradient is empty.
  empty = np.zeros((0, 2))
  for f in (eq.gather, jax.jit(eq.gather)):
    got = np.asarray(f(empty, np.array([0, 3, -1])))
    assert got.shape == (3, 2) and np.isnan(got).all()
  assert jax.grad(lambda a: jnp.nansum(eq.gather(a, np.array([0]))))(empty).shape == (0, 2)
  with pytest.raises(ValueError, match="x"):
    eq.gather(np.float64(1.0), np.array([0]))
  with pytest.raises(TypeError, match="x"):
    eq.gather(np.ones((3, 2), bool), np.array([0]))


def test_indices_beyond_int32_never_wrap_onto_valid_rows():
  """int64 and uint32 indices past the int32 range are out of range, not cast onto a row
  (2**32 + 1 once gathered row 1): NaN rows for gather, dropped for segment_sum (sorted ids stay
  sorted), an error for conv; eagerly and under jit."""
  x = np.arange(12.0).reshape(6, 2)
  for idx in (np.array([2**32 + 1, 1, 2**31, -(2**32) + 1], np.int64),
              np.array([2**32 - 1, 1, 2**31, 2**31 + 1], np.uint32),
              np.array([2**64 - 1, 1, 2**63, 2**32 + 1], np.uint64)):
    for gather in (eq.gather, jax.jit(eq.gather)):
      got = np.asarray(gather(x, idx))
      np.testing.assert_array_equal(got[1], x[1])
      assert np.isnan(got[[0, 2, 3]]).all(), (idx.dtype, got)
  data = np.arange(10.0).reshape(5, 2)
  ids = np.array([0, 1, 1, 2**32, 2**32 + 2], np.int64)  # sorted
  want = np.array([data[0], data[1] + data[2], [0.0, 0.0]])
  for sorted_ids in (False, True):
    f = lambda d, i: eq.segment_sum(d, i, 3, indices_are_sorted=sorted_ids)
    np.testing.assert_array_equal(np.asarray(f(data, ids)), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(data, ids)), want)
  x, y, w, snd, rcv = _conv_inputs(30, 40, 35)
  for bad in (snd.astype(np.int64) + 2**32, rcv.astype(np.int64) - 2**32):
    s, r = (bad, rcv) if bad.dtype == np.int64 and bad[0] >= 2**32 else (snd, bad)
    with pytest.raises(Exception, match="outside the"):
      jax.block_until_ready(eq.conv(x, y, w, s, r, 30, *CONV_IRREPS))


def test_indices_beyond_int32_never_wrap_with_x64_off(tmp_path):
  """With x64 off jnp itself wraps NumPy int64 values to 32 bits; the ops clamp them first."""
  script = (
      "import numpy as np, jax\n"
      "from jaxext import equivariant as eq\n"
      "x = np.arange(12.0, dtype=np.float32).reshape(6, 2)\n"
      "g = np.asarray(eq.gather(x, np.array([2**32 + 1, 1, -(2**32) + 1], np.int64)))\n"
      "s = np.asarray(eq.segment_sum(x[:3], np.array([0, 2**32, 1], np.uint64), 2))\n"
      "print(np.isnan(g[0]).all(), (g[1] == x[1]).all(), np.isnan(g[2]).all(),\n"
      "      (s == np.array([x[0], x[2]])).all())\n")
  import subprocess
  import sys
  env = dict(os.environ, JAX_ENABLE_X64="0")
  out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  assert out.stdout.split() == ["True"] * 4, out.stdout + out.stderr


def test_segment_sum_gradient_drops_out_of_range_rows():
  ids = np.array([-1, 0, 0, 2, 5, -7])
  data = np.arange(12.0).reshape(6, 2)
  w = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
  ours = jax.grad(lambda d: jnp.sum(w * eq.segment_sum(d, ids, 3)))(data)
  ref = jax.grad(lambda d: jnp.sum(w * jax.ops.segment_sum(d, ids, 3)))(data)
  np.testing.assert_array_equal(np.asarray(ours), np.asarray(ref))
  assert np.all(np.asarray(ours)[[0, 4, 5]] == 0)


def test_segment_sum_derivatives_and_vmap():
  rng = np.random.default_rng(13)
  ids = rng.integers(0, 6, 30)
  data = rng.normal(size=(30, 2))
  f = lambda d: eq.segment_sum(d, ids, 6) ** 2
  check_grads(f, (data,), order=3, modes=("fwd", "rev"))
  batched = rng.normal(size=(4, 30, 2))
  got = jax.vmap(lambda d: eq.segment_sum(d, ids, 6))(batched)
  for b in range(4):
    np.testing.assert_allclose(np.asarray(got[b]), reference_segment_sum(batched[b], ids, 6),
                               atol=1e-12)
  id_batch = rng.integers(0, 6, (4, 30))
  got = jax.vmap(lambda d, i: eq.segment_sum(d, i, 6))(batched, id_batch)
  for b in range(4):
    np.testing.assert_allclose(np.asarray(got[b]),
                               reference_segment_sum(batched[b], id_batch[b], 6), atol=1e-12)


def test_segment_sum_bad_arguments():
  with pytest.raises(TypeError, match="segment_ids"):
    eq.segment_sum(np.ones((3, 2)), np.ones(3), 2)
  with pytest.raises(ValueError, match="segment_ids"):
    eq.segment_sum(np.ones((3, 2)), np.ones(4, np.int32), 2)
  with pytest.raises(ValueError, match="num_segments"):
    eq.segment_sum(np.ones((3, 2)), np.ones(3, np.int32), -1)
  with pytest.raises(TypeError, match="num_segments"):
    eq.segment_sum(np.ones((3, 2)), np.ones(3, np.int32), 2.5)


# --- tensor_product -----------------------------------------------------------------------------

import e3nn_reference  # noqa: E402
from jaxext.equivariant import _cg  # noqa: E402


def test_clebsch_gordan_equal_e3nn():
  for l1 in range(5):
    for l2 in range(5):
      for l3 in range(abs(l1 - l2), l1 + l2 + 1):
        np.testing.assert_allclose(_cg.clebsch_gordan(l1, l2, l3), e3nn.clebsch_gordan(l1, l2, l3),
                                   atol=1e-14)


def test_clebsch_gordan_orthogonal_to_rounding_up_to_l_14():
  """The coefficients as a (d1 d2, d3) matrix C: C^T C = I / (2 l3 + 1) (unitary coupling, e3nn's
  normalisation) to 1e-15 for inputs up to l = 7, so outputs up to l = 14; e3nn-jax's own
  coefficients are further off there (5e-12 at (7, 7, 14)), which bounds the agreement of outputs
  of degree > 7 with e3nn-jax (6e-10), not ours."""
  worst_e3nn = 0.0
  for l1 in range(8):
    for l2 in range(l1, 8):
      for l3 in range(l2 - l1, l1 + l2 + 1):
        want = np.eye(2 * l3 + 1) / (2 * l3 + 1)
        c = _cg.clebsch_gordan(l1, l2, l3).reshape(-1, 2 * l3 + 1)
        np.testing.assert_allclose(c.T @ c, want, atol=1e-15, err_msg=f"{(l1, l2, l3)}")
        ce = np.asarray(e3nn.clebsch_gordan(l1, l2, l3)).reshape(-1, 2 * l3 + 1)
        worst_e3nn = max(worst_e3nn, float(np.abs(ce.T @ ce - want).max()))
  assert worst_e3nn > 1e-13  # (the reference is the less exact one: this test can tell)


e3nn_tensor_product = e3nn_reference.tensor_product


TP_CASES = [
    ("2x0e+2x1o", "0e+1o", "2x0e+2x1o+2x1e+2x2e"),
    ("3x0e+3x1o+3x2e", "0e+1o+2e+3o", "3x0e+3x1o+3x2e+3x3o"),
    ("4x1o+4x2e", "1o+2e", "4x0e+4x1e+4x2e+4x3o"),
    ("2x0e+1x3o", "1o+3o", "2x1o+1x2e+1x4e+2x3o"),
]


def _tp_inputs(irreps_x, irreps_y, irreps_out, rows, seed):
  rng = np.random.default_rng(seed)
  nw = sum(e3nn.Irreps(irreps_x)[i1].mul for i1, _, _ in eq.paths(irreps_x, irreps_y, irreps_out))
  return (rng.normal(size=(rows, e3nn.Irreps(irreps_x).dim)),
          rng.normal(size=(rows, e3nn.Irreps(irreps_y).dim)), rng.normal(size=(rows, nw)))


@pytest.mark.parametrize("irreps", TP_CASES, ids=[c[0] for c in TP_CASES])
def test_tensor_product_matches_e3nn(irreps):
  x, y, w = _tp_inputs(*irreps, rows=6, seed=20)
  got = eq.tensor_product(x, y, w, *irreps)
  want = e3nn_tensor_product(x, y, w, *irreps)
  assert got.shape == want.shape
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12)


def test_tensor_product_equivariance():
  ix, iy, io = "3x0e+3x1o+3x2e", "0e+1o+2e+3o", "3x0e+3x1o+3x2e+3x3o"
  rng = np.random.default_rng(21)
  x, _, w = _tp_inputs(ix, iy, io, rows=5, seed=22)
  v = rng.normal(size=(5, 3))
  q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
  q *= np.sign(np.linalg.det(q))
  dx, do = (np.asarray(e3nn.Irreps(i).D_from_matrix(q)) for i in (ix, io))
  y = eq.spherical_harmonics(iy, v)
  y_rot = eq.spherical_harmonics(iy, v @ q.T)
  lhs = eq.tensor_product(x @ dx.T, y_rot, w, ix, iy, io)
  rhs = eq.tensor_product(x, y, w, ix, iy, io) @ do.T
  np.testing.assert_allclose(np.asarray(lhs), np.asarray(rhs), atol=1e-12)


def test_tensor_product_derivatives_to_third_order():
  irreps = ("2x0e+2x1o", "0e+1o+2e", "2x0e+2x1o+2x2e")
  x, y, w = _tp_inputs(*irreps, rows=3, seed=23)
  f = lambda a, b, c: jnp.sin(eq.tensor_product(a, b, c, *irreps))
  check_grads(f, (x, y, w), order=3, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
  ref_grad = jax.grad(lambda a, b, c: jnp.sum(jnp.sin(e3nn_tensor_product(a, b, c, *irreps))),
                      argnums=(0, 1, 2))(x, y, w)
  ours = jax.grad(lambda a, b, c: jnp.sum(f(a, b, c)), argnums=(0, 1, 2))(x, y, w)
  for g, r in zip(ours, ref_grad):
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=1e-12)


def test_tensor_product_broadcast_vmap_float32():
  irreps = ("2x0e+2x1o", "0e+1o", "2x0e+2x1o")
  x, y, w = _tp_inputs(*irreps, rows=8, seed=24)
  shared = eq.tensor_product(x, y[0], w[0], *irreps)  # y and w broadcast over the rows
  want = e3nn_tensor_product(x, np.broadcast_to(y[0], y.shape), np.broadcast_to(w[0], w.shape),
                             *irreps)
  np.testing.assert_allclose(np.asarray(shared), np.asarray(want), atol=1e-12)
  xs = np.stack([x, 2 * x + 1])
  batched = jax.vmap(lambda a: eq.tensor_product(a, y, w, *irreps))(xs)
  for b in range(2):
    np.testing.assert_allclose(np.asarray(batched[b]),
                               np.asarray(eq.tensor_product(xs[b], y, w, *irreps)), atol=1e-13)
  g = jax.vmap(jax.grad(lambda a, c: jnp.sum(eq.tensor_product(a, y, c, *irreps) ** 2),
                        argnums=(0, 1)), in_axes=(0, None))(xs, w)
  for b in range(2):
    gb = jax.grad(lambda a, c: jnp.sum(eq.tensor_product(a, y, c, *irreps) ** 2),
                  argnums=(0, 1))(xs[b], w)
    np.testing.assert_allclose(np.asarray(g[0][b]), np.asarray(gb[0]), atol=1e-12)
    np.testing.assert_allclose(np.asarray(g[1][b]), np.asarray(gb[1]), atol=1e-12)
  empty = eq.tensor_product(x[:0], y[:0], w[:0], *irreps)
  assert empty.shape == (0, 8)
  f32 = eq.tensor_product(x.astype(np.float32), y.astype(np.float32), w.astype(np.float32),
                          *irreps)
  assert f32.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(f32), np.asarray(eq.tensor_product(x, y, w, *irreps)),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(irreps_y="2x1o"), ValueError, "irreps_y"),
    (dict(irreps_x="2x0e+"), ValueError, "irreps_x"),
    (dict(x=np.ones((2, 5))), ValueError, "x must have"),
    (dict(weights=np.ones((2, 3))), ValueError, "weights"),
    (dict(y=np.ones((3, 4))), ValueError, "broadcast"),
    (dict(irreps_out="2x0e+3x1o"), ValueError, "multiplicity"),
])
def test_tensor_product_bad_arguments(kwargs, error, match):
  args = dict(x=np.ones((2, 8)), y=np.ones((2, 4)), weights=np.ones((2, 8)), irreps_x="2x0e+2x1o",
              irreps_y="0e+1o", irreps_out="2x0e+2x1o")
  args.update(kwargs)
  with pytest.raises(error, match=match):
    eq.tensor_product(args["x"], args["y"], args["weights"], args["irreps_x"], args["irreps_y"],
                      args["irreps_out"])


# --- conv -----------------------------------------------------------------------------------------

CONV_IRREPS = ("3x0e+3x1o+3x2e", "0e+1o+2e+3o", "3x0e+3x1o+3x2e")


def _graph(nodes, edges, seed, self_loops=True):
  rng = np.random.default_rng(seed)
  snd = rng.integers(0, nodes, edges)
  rcv = rng.integers(0, nodes, edges)
  if self_loops:
    rcv[:3] = snd[:3]
  return snd, rcv


def _conv_inputs(nodes, edges, seed):
  ix, iy, io = CONV_IRREPS
  rng = np.random.default_rng(seed)
  snd, rcv = _graph(nodes, edges, seed)
  x = rng.normal(size=(nodes, e3nn.Irreps(ix).dim))
  vec = rng.normal(size=(edges, 3))
  y = np.asarray(eq.spherical_harmonics(iy, vec))
  nw = sum(e3nn.Irreps(ix)[i1].mul for i1, _, _ in eq.paths(ix, iy, io))
  w = rng.normal(size=(edges, nw))
  return x, y, w, snd, rcv


def test_conv_equals_unfused_e3nn():
  nodes, edges = 12, 60
  x, y, w, snd, rcv = _conv_inputs(nodes, edges, 30)
  got = eq.conv(x, y, w, snd, rcv, nodes, *CONV_IRREPS)
  messages = e3nn_tensor_product(x[snd], y, w, *CONV_IRREPS)
  want = jax.ops.segment_sum(messages, rcv, nodes)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12)
  # isolated nodes get zero; an empty graph gives zeros
  isolated = np.setdiff1d(np.arange(nodes), rcv)
  assert np.all(np.asarray(got)[isolated] == 0)
  empty = eq.conv(x, y[:0], w[:0], snd[:0], rcv[:0], nodes, *CONV_IRREPS)
  np.testing.assert_array_equal(np.asarray(empty), 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_conv_long_runs_are_cut_into_tasks_and_added_back(dtype):
  # A node's run of more than 128 edges (jaxext/kernels/conv_tasks.h) is cut into tasks added back
  # in order. Receivers and senders with 0, 1, 127, 128, 129, 256, 257 and 1500 edges (one task, a
  # full second, a one-edge second, many), plus jax-md's padding: 700 edges from and to one dummy
  # node. The reference: e3nn-jax's unfused product, segment-summed, in float64; forward, the x
  # cotangent (the runs by sender), factored weights, jit, and bits equal from run to run.
  ix, iy, io = CONV_IRREPS
  counts = [0, 1, 127, 128, 129, 256, 257, 1500]
  nodes = len(counts) + 1
  rng = np.random.default_rng(70)
  rcv = np.concatenate([np.repeat(np.arange(len(counts)), counts), np.full(700, nodes - 1)])
  snd = np.concatenate([rng.permutation(np.repeat(np.arange(len(counts)), counts)),
                        np.full(700, nodes - 1)])
  perm = rng.permutation(rcv.size)
  snd, rcv = snd[perm], rcv[perm]
  edges = rcv.size
  x = rng.normal(size=(nodes, e3nn.Irreps(ix).dim))
  y = np.asarray(eq.spherical_harmonics(iy, rng.normal(size=(edges, 3))))
  nw = sum(e3nn.Irreps(ix)[i1].mul for i1, _, _ in eq.paths(ix, iy, io))
  w = rng.normal(size=(edges, nw))
  h, kernel = rng.normal(size=(edges, 3)), rng.normal(size=(3, nw))
  xs, ys, ws, hs, ks = (np.asarray(v, dtype) for v in (x, y, w, h, kernel))
  f64 = lambda v: jnp.asarray(v, jnp.float64)
  ref = lambda a, b, c: jax.ops.segment_sum(
      e3nn_tensor_product(f64(a)[snd], f64(b), f64(c), ix, iy, io), rcv, nodes)
  # float32: the sums of 1500 terms of size ~10 lose ~1e-4 (relative 1e-6 of their magnitude)
  tol = dict(atol=1e-11, rtol=1e-12) if dtype == np.float64 else dict(atol=2e-3, rtol=2e-5)
  conv = lambda a, b, c: eq.conv(a, b, c, snd, rcv, nodes, ix, iy, io)
  want = ref(xs, ys, ws)
  assert np.abs(np.asarray(want)[-2]).max() > 10  # the 1500-edge node: a real sum
  got = conv(xs, ys, ws)
  np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want), **tol)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(conv)(xs, ys, ws)))
  np.testing.assert_array_equal(np.asarray(got), np.asarray(conv(xs, ys, ws)))
  assert np.all(np.asarray(got)[0] == 0)  # no edges
  # the x cotangent walks the runs by sender
  ct = rng.normal(size=got.shape).astype(dtype)
  gx = jax.grad(lambda a: jnp.sum(conv(a, ys, ws) * ct))(xs)
  gx_ref = jax.grad(lambda a: jnp.sum(ref(a, ys, ws) * ct))(f64(xs))
  np.testing.assert_allclose(np.asarray(gx, np.float64), np.asarray(gx_ref), **tol)
  # factored weights (made per task, in chunks of 48 edges)
  fact = eq.conv(xs, ys, hs, snd, rcv, nodes, ix, iy, io, edge_weights_kernel=ks)
  np.testing.assert_allclose(np.asarray(fact, np.float64), np.asarray(ref(xs, ys, f64(hs) @ f64(ks))),
                             **tol)


def test_cuda_lowerings_tasks_are_conv_tasks_h():
  # The CUDA lowering makes the node rows' tasks in jax.numpy (conv.node_tasks); the CPU handler
  # makes them in C++. Against a count written out here: one task per run of at most 128 edges
  # (empty ones too), ceil(run / 128) otherwise; and never more extra tasks than edges // 128
  # (the partial rows the lowering allocates).
  conv_module = sys.modules["jaxext.equivariant.conv"]
  assert conv_module.TASK_EDGES == 128
  rng = np.random.default_rng(71)
  for runs in ([0], [5], [0, 0, 3], [127, 128, 129, 256, 257, 1500, 0, 1],
               list(rng.integers(0, 400, 50)), list(rng.integers(120, 140, 30))):
    ranges = np.concatenate([[0], np.cumsum(runs)]).astype(np.int32)
    want = np.concatenate([[0], np.cumsum([1 if n <= 128 else -(-n // 128) for n in runs])])
    got = np.asarray(jax.jit(conv_module.node_tasks)(jnp.asarray(ranges)))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    assert got[-1] - len(runs) <= ranges[-1] // 128


def test_conv_derivatives_to_third_order_and_against_e3nn():
  nodes, edges = 5, 14
  x, y, w, snd, rcv = _conv_inputs(nodes, edges, 31)
  f = lambda a, b, c: jnp.tanh(eq.conv(a, b, c, snd, rcv, nodes, *CONV_IRREPS))
  # Finite differences to second order; the third order (where differences of differences lose
  # too many digits at these magnitudes) exactly against autodiff of the unfused e3nn reference.
  check_grads(f, (x, y, w), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
  ref = lambda a, b, c: jnp.tanh(jax.ops.segment_sum(
      e3nn_tensor_product(a[snd], b, c, *CONV_IRREPS), rcv, nodes))
  g = jax.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2))(x, y, w)
  g_ref = jax.grad(lambda *a: jnp.sum(ref(*a) ** 2), argnums=(0, 1, 2))(x, y, w)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-11)
  rng = np.random.default_rng(35)
  t = tuple(rng.normal(size=v.shape) for v in (x, y, w))

  def third(fun):  # d^3/ds^3 of sum(fun(p + s t)) at s = 0, by reverse over forward over forward
    scalar = lambda s: jnp.sum(fun(*(p + s * d for p, d in zip((x, y, w), t))))
    d1 = lambda s: jax.jvp(scalar, (s,), (1.0,))[1]
    d2 = lambda s: jax.jvp(d1, (s,), (1.0,))[1]
    return jax.grad(d2)(0.0)
  assert float(third(f)) == pytest.approx(float(third(ref)), rel=1e-10)


def test_conv_forces_and_their_gradient():
  # energy of a tiny model: conv over edge harmonics of positions; forces = -dE/dpos, and the
  # gradient of a force loss with respect to the weights (second order through the kernels)
  nodes, edges = 6, 20
  x, _, w, snd, rcv = _conv_inputs(nodes, edges, 32)
  pos = np.random.default_rng(33).normal(size=(nodes, 3))
  ix, iy, io = CONV_IRREPS

  def energy(p, weights, fused=True):
    vec = p[rcv] - p[snd] + 0.1  # no zero-length edges (self-loops)
    y = eq.spherical_harmonics(iy, vec)
    if fused:
      m = eq.conv(x, y, weights, snd, rcv, nodes, ix, iy, io)
    else:
      m = jax.ops.segment_sum(e3nn_tensor_product(x[snd], y, weights, ix, iy, io), rcv, nodes)
    return jnp.sum(m[:, :3] ** 2)

  forces = lambda p, wt, fused: -jax.grad(energy)(p, wt, fused)
  np.testing.assert_allclose(np.asarray(forces(pos, w, True)), np.asarray(forces(pos, w, False)),
                             atol=1e-10)
  loss = lambda wt, fused: jnp.sum(forces(pos, wt, fused) ** 2)
  np.testing.assert_allclose(np.asarray(jax.grad(loss)(w, True)),
                             np.asarray(jax.grad(loss)(w, False)), atol=1e-9)


def test_conv_is_deterministic_and_checks_indices():
  x, y, w, snd, rcv = _conv_inputs(30, 400, 34)
  a = np.asarray(eq.conv(x, y, w, snd, rcv, 30, *CONV_IRREPS))
  b = np.asarray(jax.jit(lambda *z: eq.conv(*z, snd, rcv, 30, *CONV_IRREPS))(x, y, w))
  np.testing.assert_array_equal(a, b)
  bad = rcv.copy()
  bad[5] = 30
  with pytest.raises(Exception, match="outside the nodes"):
    jax.block_until_ready(eq.conv(x, y, w, snd, bad, 30, *CONV_IRREPS))
  with pytest.raises(ValueError, match="edge_weights"):
    eq.conv(x, y, w[:-1], snd, rcv, 30, *CONV_IRREPS)
  with pytest.raises(TypeError, match="senders"):
    eq.conv(x, y, w, snd.astype(float), rcv, 30, *CONV_IRREPS)
  with pytest.raises(ValueError, match="num_nodes"):
    eq.conv(x, y, w, snd, rcv, -1, *CONV_IRREPS)


def test_exported_conv_p_refuses_inconsistent_graph_operands():
  """conv_p is public: bound with edge orders or ranges that do not describe senders/receivers
  (out of range, decreasing, not ending at the edge count, listing another node's edges), the
  handler raises instead of reading outside its buffers (a segfault before), under jit too."""
  import importlib
  cm = importlib.import_module("jaxext.equivariant.conv")
  from jaxext.equivariant import _irreps
  x, y, w, snd, rcv = _conv_inputs(12, 40, 36)
  key = tuple(_irreps.parse(i) for i in CONV_IRREPS)
  graph = [np.asarray(g) for g in cm._graph(jnp.asarray(snd, jnp.int32), jnp.asarray(rcv, jnp.int32),
                                            12, 12)]
  bind = lambda *g: eq.conv_p.bind(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w), *g,
                                   mode=cm.OUT, key=key)
  ref = np.asarray(eq.conv(x, y, w, snd, rcv, 12, *CONV_IRREPS))
  np.testing.assert_array_equal(np.asarray(bind(*graph)), ref)  # consistent: the same numbers
  short = [g.copy() for g in graph]
  short[1] = short[1][:-1]  # receivers one short
  with pytest.raises(Exception, match="jaxext equivariant.conv"):
    jax.block_until_ready(bind(*short))
  for slot in (2, 4):  # edges by receiver / by sender
    bad = [g.copy() for g in graph]
    bad[slot][3] = 10**6  # an edge that does not exist
    must_raise = [bad]
    bad = [g.copy() for g in graph]
    bad[slot + 1][-1] = 10**6  # ranges past the edges
    must_raise.append(bad)
    bad = [g.copy() for g in graph]
    bad[slot + 1][2] = bad[slot + 1][1] - 1  # decreasing
    must_raise.append(bad)
    bad = [g.copy() for g in graph]
    bad[slot] = bad[slot][:-1]  # one entry short
    must_raise.append(bad)
    bad = [g.copy() for g in graph]
    bad[slot + 1][1] = 10**6  # a middle range past the edges (its end is checked later)
    must_raise.append(bad)
    bad = [g.copy() for g in graph]
    first = int(np.flatnonzero(np.diff(graph[slot + 1]) >= 2)[0])  # a node with two edges
    bad[slot][graph[slot + 1][first] + 1] = bad[slot][graph[slot + 1][first]]  # an edge twice
    must_raise.append(bad)
    for v in must_raise:
      for call in (bind, jax.jit(bind)):
        with pytest.raises(Exception, match="jaxext equivariant.conv"):
          jax.block_until_ready(call(*v))
    # Edges of two different nodes swapped: each range then lists an edge of another node.
    order, ranges = graph[slot], graph[slot + 1]
    i = int(np.flatnonzero(np.diff(ranges) > 0)[0])  # the first node with an edge
    j = int(ranges[i + 1])  # the first edge of a later node
    bad = [g.copy() for g in graph]
    bad[slot][[ranges[i], j]] = order[[j, ranges[i]]]
    with pytest.raises(Exception, match="only those"):
      jax.block_until_ready(bind(*bad))


def test_conv_and_product_calls_in_flight_together():
  # The handlers return a future and their chunks run later on XLA's pool: many calls dispatched
  # without waiting (two executables interleaved) must each give what a lone, waited-for call
  # gives. (A chunk once read the handler's returned stack frame; that race showed up in
  # gpu_checks_test's second-order gradients, less reliably here.)
  x, _, w, snd, rcv = _conv_inputs(30, 400, 36)
  pos = np.random.default_rng(37).normal(size=(30, 3))
  y = eq.spherical_harmonics(CONV_IRREPS[1], pos[rcv] - pos[snd])

  def energy(pos, x, w):  # a second-order gradient: many more kernels after each conv
    sh = eq.spherical_harmonics(CONV_IRREPS[1], pos[rcv] - pos[snd])
    return jnp.sum(eq.conv(x, sh, w, snd, rcv, 30, *CONV_IRREPS) ** 2)

  grad = jax.jit(jax.grad(lambda p, x, w: jnp.sum(jax.grad(energy)(p, x, w) ** 2),
                          argnums=(0, 1, 2)))
  prod = jax.jit(lambda x, y, w: eq.tensor_product(x, y, w, *CONV_IRREPS))
  want_g = [np.asarray(g) for g in grad(pos, x, w)]
  want_p = np.asarray(prod(x[snd], y, w))
  flights = [(grad(pos, x, w), prod(x[snd], y, w)) for _ in range(24)]
  for g, p in flights:
    for got, want in zip(g, want_g):
      np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(p), want_p)


def test_conv_vmap_with_batched_graphs_and_grad():
  graphs = [_conv_inputs(8, 30, 50 + s) for s in range(2)]
  stack = lambda k: np.stack([g[k] for g in graphs])
  f = lambda a, b, c, s_, r_: eq.conv(a, b, c, s_, r_, 8, *CONV_IRREPS)
  out = jax.vmap(f)(*(stack(k) for k in range(5)))
  loss = lambda a, b, c, s_, r_: jnp.sum(f(a, b, c, s_, r_) ** 2)
  g = jax.vmap(jax.grad(loss, argnums=(0, 2)))(*(stack(k) for k in range(5)))
  for b, gr in enumerate(graphs):
    np.testing.assert_allclose(np.asarray(out[b]), np.asarray(f(*gr)), atol=1e-13)
    gx, gw = jax.grad(loss, argnums=(0, 2))(*gr)
    np.testing.assert_allclose(np.asarray(g[0][b]), np.asarray(gx), atol=1e-11)
    np.testing.assert_allclose(np.asarray(g[1][b]), np.asarray(gw), atol=1e-11)


def test_conv_vmap_over_graphs():
  xs, ys, ws = [], [], []
  for s in range(3):
    x, y, w, _, _ = _conv_inputs(8, 30, 40 + s)
    xs.append(x); ys.append(y); ws.append(w)
  _, _, _, snd, rcv = _conv_inputs(8, 30, 40)
  out = jax.vmap(lambda a, b, c: eq.conv(a, b, c, snd, rcv, 8, *CONV_IRREPS))(
      np.stack(xs), np.stack(ys), np.stack(ws))
  for s in range(3):
    np.testing.assert_allclose(np.asarray(out[s]),
                               np.asarray(eq.conv(xs[s], ys[s], ws[s], snd, rcv, 8, *CONV_IRREPS)),
                               atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k, irreps", [
    (1, CONV_IRREPS),  # 39 weights: 16 + 16 + 7 columns (float64), 32 + 7 (float32)
    (7, ("8x0e+8x1o+8x2e", "0e+1o+2e", "8x0e+8x1o+8x2e")),  # 88: 5 x 16 + 8, 2 x 32 + 3 x 8
    (0, CONV_IRREPS),  # no hidden units: zero weights
])
def test_conv_factored_weights_equal_the_product_made_first(dtype, k, irreps):
  # edge_weights_kernel: the weights are edge_weights @ kernel, made per receiver by the CPU
  # kernel in chunks of 48 edges. Receivers with 0, 1, 47, 48, 49 and 100 edges (the chunk's
  # edges), the reference e3nn-jax's unfused product of weights made in float64 by numpy.
  ix, iy, io = irreps
  counts = [0, 1, 47, 48, 49, 100]
  rcv = np.repeat(np.arange(len(counts)), counts)
  edges, nodes = rcv.size, len(counts)
  rng = np.random.default_rng(60 + k)
  rcv = rng.permutation(rcv)
  snd = rng.integers(0, nodes, edges)
  x = rng.normal(size=(nodes, e3nn.Irreps(ix).dim))
  y = np.asarray(eq.spherical_harmonics(iy, rng.normal(size=(edges, 3))))
  nw = sum(e3nn.Irreps(ix)[i1].mul for i1, _, _ in eq.paths(ix, iy, io))
  h, kernel = rng.normal(size=(edges, k)), rng.normal(size=(k, nw))
  cast = lambda *a: [np.asarray(v, dtype) for v in a]
  xs, ys, hs, ks = cast(x, y, h, kernel)
  w = hs.astype(np.float64) @ ks.astype(np.float64)
  tol = 1e-12 if dtype == np.float64 else 2e-5
  for norm in (None, "norm"):
    want = jax.ops.segment_sum(e3nn_tensor_product(
        xs.astype(np.float64)[snd], ys.astype(np.float64), w, ix, iy, io,
        irrep_normalization=norm), rcv, nodes)
    f = lambda a, b, c, d: eq.conv(a, b, c, snd, rcv, nodes, ix, iy, io,
                                   irrep_normalization=norm, edge_weights_kernel=d)
    for got in (f(xs, ys, hs, ks), jax.jit(f)(xs, ys, hs, ks)):
      assert got.dtype == dtype
      np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want),
                                 atol=tol * float(np.max(np.abs(want))))
    assert np.all(np.asarray(got)[0] == 0)  # the receiver without edges
    if k == 0:
      assert np.all(np.asarray(got) == 0)
      continue
    # vmap over the hidden layer (a batch of radial networks' outputs), and over x and kernel
    scale = float(np.max(np.abs(want)))
    both = jax.vmap(f, in_axes=(None, None, 0, None))(xs, ys, np.stack([hs, 2 * hs]), ks)
    for b, factor in enumerate((1, 2)):
      np.testing.assert_allclose(np.asarray(both[b], np.float64), factor * np.asarray(want),
                                 atol=factor * tol * scale)
    both = jax.vmap(f, in_axes=(0, None, None, 0))(np.stack([xs, -xs]), ys, hs,
                                                   np.stack([3 * ks, ks]))
    for b, factor in enumerate((3, -1)):
      np.testing.assert_allclose(np.asarray(both[b], np.float64), factor * np.asarray(want),
                                 atol=3 * tol * scale)


def test_conv_factored_weights_derivatives_to_third_order():
  nodes, edges, k = 5, 14, 3
  x, y, w, snd, rcv = _conv_inputs(nodes, edges, 36)
  rng = np.random.default_rng(37)
  h, kernel = rng.normal(size=(edges, k)), rng.normal(size=(k, w.shape[1])) / 2
  f = lambda a, b, c, d: jnp.tanh(eq.conv(a, b, c, snd, rcv, nodes, *CONV_IRREPS,
                                          edge_weights_kernel=d))
  check_grads(f, (x, y, h, kernel), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)
  ref = lambda a, b, c, d: jnp.tanh(jax.ops.segment_sum(
      e3nn_tensor_product(a[snd], b, c @ d, *CONV_IRREPS), rcv, nodes))
  args = (x, y, h, kernel)
  g = jax.jit(jax.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2, 3)))(*args)
  g_ref = jax.grad(lambda *a: jnp.sum(ref(*a) ** 2), argnums=(0, 1, 2, 3))(*args)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-11)
  t = tuple(rng.normal(size=np.shape(v)) for v in args)

  def third(fun):  # d^3/ds^3 of sum(fun(p + s t)) at s = 0, by reverse over forward over forward
    scalar = lambda s: jnp.sum(fun(*(p + s * d for p, d in zip(args, t))))
    d1 = lambda s: jax.jvp(scalar, (s,), (1.0,))[1]
    d2 = lambda s: jax.jvp(d1, (s,), (1.0,))[1]
    return jax.grad(d2)(0.0)
  assert float(third(f)) == pytest.approx(float(third(ref)), rel=1e-10)


@pytest.mark.parametrize("dtype, k", [(np.float64, 5), (np.float32, 5), (np.float64, 64)])
def test_conv_factored_weights_cotangents_in_one_walk_by_sender(dtype, k):
  # Differentiated, the factored result's cotangents of x, y, h and kernel come from one handler
  # that walks each sender's edges in chunks of 48 (jaxext_conv_factored_bwd: the weights made
  # per chunk, their cotangent contracted with the kernel and with h at once), so that no
  # (edges x weights) array is made. Senders with 0, 1, 47, 48, 49, 100 edges, and 129 and
  # 300 (runs cut into tasks of 128 edges, conv_tasks.h); every subset of cotangents asked for;
  # against e3nn-jax's unfused product with the weights made first, in float64.
  ix, iy, io = "8x0e+8x1o+8x2e", "0e+1o+2e", "8x0e+8x1o+8x2e"  # 88 weights
  counts = [0, 1, 47, 48, 49, 100, 129, 300]
  rng = np.random.default_rng(70)
  snd = rng.permutation(np.repeat(np.arange(len(counts)), counts))
  edges, nodes = snd.size, len(counts)  # k: a hidden layer narrower and wider than a chunk
  rcv = rng.integers(0, nodes, edges)
  x = rng.normal(size=(nodes, e3nn.Irreps(ix).dim))
  y = np.asarray(eq.spherical_harmonics(iy, rng.normal(size=(edges, 3))))
  h, kernel = rng.normal(size=(edges, k)), rng.normal(size=(k, 88)) / np.sqrt(3 * k)
  ct = rng.normal(size=(nodes, e3nn.Irreps(io).dim))
  args = [np.asarray(v, dtype) for v in (x, y, h, kernel)]
  f = lambda a, b, c, d: jnp.sum(jnp.asarray(ct, dtype) * eq.conv(
      a, b, c, snd, rcv, nodes, ix, iy, io, edge_weights_kernel=d))
  ref = lambda a, b, c, d: jnp.sum(ct * jax.ops.segment_sum(
      e3nn_tensor_product(a[snd], b, c @ d, ix, iy, io), rcv, nodes))
  want = jax.grad(ref, argnums=(0, 1, 2, 3))(*(v.astype(np.float64) for v in args))
  tol = 1e-12 if dtype == np.float64 else 3e-5
  for argnums in ((0,), (1,), (2,), (0, 1), (1, 2), (0, 1, 2), (0, 1, 2, 3), (3,), (2, 3)):
    g = jax.jit(jax.grad(f, argnums=argnums))(*args)
    for q, got in zip(argnums, g):
      assert got.dtype == dtype
      scale = float(np.max(np.abs(want[q])))
      np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want[q]),
                                 atol=tol * scale, err_msg=f"argnums {argnums}, operand {q}")
    assert np.all(np.asarray(g[0])[0] == 0) if argnums[0] == 0 else True  # sender w/o edges
    jaxpr = str(jax.make_jaxpr(jax.grad(f, argnums=argnums))(*args)).replace(" ", "")
    hlo = jax.jit(jax.grad(f, argnums=argnums)).lower(*args).as_text()
    # forces and training gradients: the CPU's one walk, no (edges x weights) array anywhere
    assert "jaxext_conv_bwd" in jaxpr and f"[{edges},88]" not in jaxpr
    assert "@jaxext_conv_factored_bwd(" in hlo and f"tensor<{edges}x88x" not in hlo
  # forward mode (the tangent's composition) and vmap of the cotangents
  t = [np.asarray(rng.normal(size=v.shape), dtype) for v in args]
  _, jvp = jax.jvp(f, tuple(args), tuple(t))
  _, jvp_ref = jax.jvp(ref, tuple(v.astype(np.float64) for v in args),
                       tuple(v.astype(np.float64) for v in t))
  assert float(jvp) == pytest.approx(float(jvp_ref), rel=1e-10 if dtype == np.float64 else 1e-4)
  g = jax.jit(jax.vmap(jax.grad(f, argnums=(0, 1, 2)), in_axes=(0, None, None, None)))(
      np.stack([args[0], 2 * args[0]]), *args[1:])
  for b, factor in enumerate((1, 2)):
    for q in range(3):
      expect = np.asarray(want[q]) * (factor if q else 1)
      np.testing.assert_allclose(np.asarray(g[q][b], np.float64), expect,
                                 atol=2 * tol * float(np.max(np.abs(want[q]))))


def test_products_bound_with_mixed_dtypes_raise():
  # the handlers read every operand in the result's dtype: a direct bind mixing float32 and
  # float64 is refused when traced (it would read past a float32 buffer as doubles)
  conv_module = sys.modules["jaxext.equivariant.conv"]
  from jaxext.equivariant import _irreps
  x, y, w, snd, rcv = _conv_inputs(6, 20, 39)
  key = tuple(_irreps.parse(i) for i in CONV_IRREPS)
  graph = conv_module._graph(jnp.asarray(snd, jnp.int32), jnp.asarray(rcv, jnp.int32), 6, 6)
  w32 = np.asarray(w, np.float32)
  with pytest.raises(TypeError, match="share one dtype"):
    eq.conv_p.bind(x, y, w32, *graph, mode=3, key=key)
  with pytest.raises(TypeError, match="share one dtype"):
    eq.tp_p.bind(x[snd], y, w32, mode=3, key=key)
  with pytest.raises(TypeError, match="share one dtype"):
    conv_module._conv_factored_p.bind(x, y, np.ones((20, 2), np.float32),
                                      np.ones((2, w.shape[1])), *graph, key=key)


def test_conv_factored_weights_bad_arguments():
  x, y, w, snd, rcv = _conv_inputs(6, 20, 38)
  h, kernel = np.ones((20, 4)), np.ones((4, w.shape[1]))
  with pytest.raises(ValueError, match="edge_weights_kernel must have shape"):
    eq.conv(x, y, h, snd, rcv, 6, *CONV_IRREPS, edge_weights_kernel=kernel[:, 1:])
  with pytest.raises(ValueError, match="edge_weights must have shape"):
    eq.conv(x, y, h[:, 1:], snd, rcv, 6, *CONV_IRREPS, edge_weights_kernel=kernel)
  with pytest.raises(ValueError, match="edge_weights has 19 rows"):
    eq.conv(x, y, h[1:], snd, rcv, 6, *CONV_IRREPS, edge_weights_kernel=kernel)
  with pytest.raises(TypeError, match="edge_weights_kernel"):
    eq.conv(x, y, h, snd, rcv, 6, *CONV_IRREPS, edge_weights_kernel="k")
  # the forward pass binds the factored primitive: no (edges x weights) array in its jaxpr
  jaxpr = str(jax.make_jaxpr(lambda a, b: eq.conv(x, y, a, snd, rcv, 6, *CONV_IRREPS,
                                                  edge_weights_kernel=b))(h, kernel))
  assert "jaxext_conv_factored" in jaxpr and f"[20,{w.shape[1]}]" not in jaxpr.replace(" ", "")


def test_conv_graph_ranges_equal_searchsorted():
  """conv()'s graph: the ranges (running sums of per-node edge counts) equal searchsorted over
  the stably sorted ids for ids in range, including empty nodes and no edges; with an id out of
  range the last range falls short of the edge count (what both handlers test)."""
  conv_module = sys.modules["jaxext.equivariant.conv"]
  rng = np.random.default_rng(5)
  for e, n_send, n_recv in ((0, 3, 2), (1, 1, 1), (40, 5, 30), (500, 64, 3)):
    snd = rng.integers(0, n_send, e).astype(np.int32)
    rcv = rng.integers(0, n_recv, e).astype(np.int32)
    graph = [np.asarray(g) for g in jax.jit(conv_module._graph, static_argnums=(2, 3))(
        snd, rcv, n_send, n_recv)]
    for ids, n, perm, ranges in ((rcv, n_recv, graph[2], graph[3]),
                                 (snd, n_send, graph[4], graph[5])):
      np.testing.assert_array_equal(perm, np.argsort(ids, kind="stable"))
      np.testing.assert_array_equal(ranges, np.searchsorted(ids[perm], np.arange(n + 1)))
  for bad in (-1, 7):
    rcv = np.array([0, 1, bad, 2], np.int32)
    ranges = np.asarray(conv_module._graph(jnp.zeros(4, jnp.int32), rcv, 1, 3)[3])
    assert ranges[0] == 0 and ranges[-1] == 3, ranges


def test_conv_graph_of_data_is_sorted_by_numpy_equal_to_the_traced_one():
  """Ids that are data (NumPy, lists, jax arrays closed over) are sorted once by NumPy and enter
  the computation as constants: no sort for XLA to fold while compiling (seconds at 1e5 edges).
  The graph is the traced path's, entry for entry, out-of-range and beyond-int32 ids included;
  the results are the same whichever path made the graph."""
  conv_module = sys.modules["jaxext.equivariant.conv"]
  rng = np.random.default_rng(6)
  traced = jax.jit(conv_module.edge_graph, static_argnums=(2, 3, 4))
  cases = [(0, 3, 2, np.int32), (1, 1, 1, np.int64), (40, 5, 30, np.int32),
           (500, 64, 3, np.int64), (7, 0, 4, np.int32)]
  for e, n_send, n_recv, dt in cases:
    snd = rng.integers(-2, n_send + 2, e).astype(dt)
    rcv = rng.integers(-2, n_recv + 2, e).astype(dt)
    if dt == np.int64 and e:
      snd[0], rcv[-1] = 2 ** 32 + 1, -(2 ** 40)  # would wrap onto node 1 / 0 if cast
    for snd_in, rcv_in in ((snd, rcv), (list(snd), list(rcv)) if e else (snd, rcv)):
      host = conv_module.edge_graph(snd_in, rcv_in, e, n_send, n_recv)
      assert all(isinstance(g, np.ndarray) and g.dtype == np.int32 for g in host)
      for a, b in zip(host, traced(snd, rcv, e, n_send, n_recv)):
        np.testing.assert_array_equal(a, np.asarray(b))
  x, y, w, snd, rcv = _conv_inputs(10, 40, 8)
  closed = jax.jit(lambda x: eq.conv(x, y, w, snd, rcv, 10, *CONV_IRREPS))
  snd_jax, rcv_jax = jnp.asarray(snd), jnp.asarray(rcv)
  closed_jax = jax.jit(lambda x: eq.conv(x, y, w, snd_jax, rcv_jax, 10, *CONV_IRREPS))
  as_args = jax.jit(lambda x, s, r: eq.conv(x, y, w, s, r, 10, *CONV_IRREPS))
  for f in (closed, closed_jax):
    assert " sort" not in str(jax.make_jaxpr(f)(x)) and "sort" not in f.lower(x).as_text()
  assert " sort" in str(jax.make_jaxpr(as_args)(x, snd, rcv))
  want = np.asarray(as_args(x, snd, rcv))
  for f in (closed, closed_jax):
    np.testing.assert_array_equal(np.asarray(f(x)), want)
  g = jax.grad(lambda x: jnp.sum(closed(x) ** 2))(x)
  np.testing.assert_array_equal(
      np.asarray(g), np.asarray(jax.grad(lambda x: jnp.sum(as_args(x, snd, rcv) ** 2))(x)))
  bad = np.array(rcv, np.int64)
  bad[3] = 12  # quoted as it is (int64 ids were clamped to the node count before)
  for ids in (bad, jnp.asarray(bad)):
    with pytest.raises(Exception, match="receiver 12 outside the"):
      jax.block_until_ready(jax.jit(lambda x, r: eq.conv(x, y, w, snd, r, 10, *CONV_IRREPS))(
          x, ids))
    with pytest.raises(Exception, match="receiver 12 outside the"):
      jax.block_until_ready(jax.jit(lambda x: eq.conv(x, y, w, snd, ids, 10, *CONV_IRREPS))(x))


def test_conv_binds_its_own_primitive_and_conv_p_stays_checked():
  """conv() binds an unexported primitive whose CUDA lowering skips the graph check (its graphs
  are consistent by construction), also in every derivative; conv_p, the exported one, keeps
  the check. Both give the same numbers."""
  conv_module = sys.modules["jaxext.equivariant.conv"]
  built = conv_module._conv_built_p
  assert built is not eq.conv_p and "_conv_built_p" not in eq.__all__
  x, y, w, snd, rcv = _conv_inputs(10, 40, 8)
  f = lambda x, y, w: jnp.sum(eq.conv(x, y, w, snd, rcv, 10, *CONV_IRREPS) ** 2)
  second = jax.grad(lambda x, y, w: jnp.sum(jax.grad(f)(x, y, w) ** 2), argnums=(0, 1, 2))
  jaxpr = str(jax.make_jaxpr(second)(x, y, w))
  assert built.name in jaxpr and re.search(r"\bjaxext_conv\[", jaxpr) is None
  from jaxext.equivariant import _irreps
  key = tuple(_irreps.parse(i) for i in CONV_IRREPS)
  graph = conv_module._graph(jnp.asarray(snd, jnp.int32), jnp.asarray(rcv, jnp.int32), 10, 10)
  np.testing.assert_array_equal(
      np.asarray(eq.conv_p.bind(*map(jnp.asarray, (x, y, w)), *graph, mode=3, key=key)),
      np.asarray(built.bind(*map(jnp.asarray, (x, y, w)), *graph, mode=3, key=key)))
  # (The CUDA lowerings themselves, checked and not: test_cuda_lowering.)


def test_harmonics_jvp_contracts_at_full_precision():
  """The harmonics' JVP contracts with its derivative tables at Precision.HIGHEST: on GPUs a
  default-precision float32 contraction may run in TF32 (10-bit mantissas; float32 forces lost
  ~1e-4 on an H200 before)."""
  v = jnp.ones((4, 3), jnp.float32)
  jaxpr = str(jax.make_jaxpr(lambda v, t: jax.jvp(
      lambda v: eq.spherical_harmonics("0e+1o+2e+3o", v), (v,), (t,)))(v, v))
  precisions = re.findall(r"dot_general\[.*?precision=(\S+)", jaxpr, flags=re.S)
  assert precisions and all("HIGHEST" in p for p in precisions), precisions


def test_graph_check_of_the_cuda_lowering_agrees_with_the_cpu_handler():
  """conv's CUDA lowering checks a directly bound graph in jax.numpy (a kernel cannot raise; an
  inconsistent graph gives NaN instead of reads out of bounds): its verdict must be the CPU
  handler's on valid graphs and on graphs with one entry changed or an order shuffled."""
  conv_module = sys.modules["jaxext.equivariant.conv"]
  key = (((1, 0, 1),), ((1, 0, 1),), ((1, 0, 1),))
  rng = np.random.default_rng(77)
  verdicts = set()
  for case in range(120):
    n_send, n_recv, e = (int(rng.integers(1, 5)) for _ in range(3))
    snd = rng.integers(0, n_send, e).astype(np.int32)
    rcv = rng.integers(0, n_recv, e).astype(np.int32)
    graph = [np.array(g) for g in conv_module._graph(jnp.asarray(snd), jnp.asarray(rcv),
                                                        n_send, n_recv)]
    if case % 4:  # one entry off, or an order shuffled
      g = graph[int(rng.integers(6))]
      g[int(rng.integers(g.size))] += int(rng.choice([-2, -1, 1, 2, 100]))
      if rng.random() < 0.3:
        rng.shuffle(graph[int(rng.choice([2, 4]))])
    ok = bool(conv_module.graph_is_consistent(*map(jnp.asarray, graph)))
    operands = (np.ones((n_send, 1)), np.ones((e, 1)), np.ones((e, 1)))
    try:
      out = jax.jit(lambda *a: eq.conv_p.bind(*a, mode=3, key=key))(*operands, *graph)
      np.asarray(out)
      raised = False
    except Exception:  # noqa: BLE001 (the handler's InvalidArgument)
      raised = True
    assert ok != raised, (case, [g.tolist() for g in graph])
    verdicts.add(ok)
  assert verdicts == {True, False}


# --- CUDA lowering (built with --config=cuda; execution is checked by tools/gpu_checks.py) ------

_TARGETS = ("jaxext_sph", "jaxext_segment_sum", "jaxext_tensor_product", "jaxext_conv",
            "jaxext_conv_edge_cts", "jaxext_tensor_product_edge_cts")


def _export_cuda(fn, *args):
  specs = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in args]
  exported = jax.export.export(
      jax.jit(fn), platforms=("cuda",),
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(t) for t in _TARGETS])(*specs)
  return exported.mlir_module()


def test_cuda_lowering():
  nodes, edges = 12, 60
  x, _, w, snd, rcv = _conv_inputs(nodes, edges, 32)
  vec = np.random.default_rng(33).normal(size=(edges, 3))

  def energy(x, w, vec):  # every op, and through grad every mode of the products
    sh = eq.spherical_harmonics("0e+1o+2e+3o", vec)
    h = eq.conv(x, sh, w, snd, rcv, nodes, *CONV_IRREPS)
    t = eq.tensor_product(x[snd], sh, w, *CONV_IRREPS)
    return jnp.sum(h ** 2) + jnp.sum(eq.segment_sum(t, rcv, nodes) ** 3)

  grad = jax.grad(energy, argnums=(0, 1, 2))
  # A CPU-only build lowers for CUDA too (for jax.export), with every CUDA target of the version.
  text = _export_cuda(grad, x, w, vec)
  for target in _TARGETS:
    assert f"@{target}" in text, target
  # the node rows' tasks: a tenth operand, the cut size as an attribute, and a second result
  # for the pieces' partial rows (edges // 128 of them: none for these 60 edges) in the node
  # modes, an empty one in the edge modes
  conv_lines = [line for line in text.splitlines() if "@jaxext_conv(" in line]
  assert conv_lines
  for line in conv_lines:
    operands = re.search(r"@jaxext_conv\(([^()]*)\)", line).group(1)
    assert operands.count("%") == 10, line
    assert "task_edges = 128" in line, line
    assert re.search(r"-> \(tensor<\d+x\d+xf64>, tensor<0x\d+xf64>\)", line), line
  ops = ("conv", "conv_edge_cts", "tensor_product", "tensor_product_edge_cts")
  calls = re.findall(r"@jaxext_(\w+)\(.*?mode = (\d+)", text)
  modes = {op: {int(m) for o, m in calls if o == op} for op in ops}
  # out, and the x, y, w cotangents; each product's y and w cotangents in one call (its mode
  # says y)
  assert modes == {"conv": {0, 3}, "conv_edge_cts": {1}, "tensor_product": {0, 3},
                   "tensor_product_edge_cts": {1}}, modes
  for op in ("conv_edge_cts", "tensor_product_edge_cts"):
    edge_cts = [line for line in text.splitlines() if f"@jaxext_{op}(" in line]
    assert len(edge_cts) == 1 and re.search(
        r"-> \(tensor<60x16xf64>, tensor<60x\d+xf64>\)", edge_cts[0]), edge_cts
  # The segment sum on CUDA: the ids, each segment's row range and tasks (segments + 1 each),
  # the task size as an attribute; results: the sums, the unsorted-ids flag and the cut pieces'
  # partial rows (60 // 128 = 0 of them), the last two dropped by the lowering.
  seg = [line for line in text.splitlines() if "@jaxext_segment_sum(" in line]
  assert seg
  for line in seg:
    assert re.search(r"@jaxext_segment_sum\(([^()]*)\)", line).group(1).count("%") == 4, line
    assert "task_rows = 128" in line, line
    assert re.search(r"-> \(tensor<12x\d+xf64>, tensor<1xi32>, tensor<0x\d+xf64>\)", line), line
  # conv_p (exported) checks a bound graph in jax.numpy before its kernel (scatter-adds among
  # them); conv()'s own primitive, on graphs it built itself, lowers to the kernel alone.
  conv_module = sys.modules["jaxext.equivariant.conv"]
  from jaxext.equivariant import _irreps
  key = tuple(_irreps.parse(i) for i in CONV_IRREPS)
  graph = [np.asarray(g) for g in conv_module._graph(jnp.asarray(snd, jnp.int32),
                                                      jnp.asarray(rcv, jnp.int32), nodes, nodes)]
  sh = np.asarray(eq.spherical_harmonics("0e+1o+2e+3o", vec))
  for prim, checks in ((eq.conv_p, True), (conv_module._conv_built_p, False)):
    text = _export_cuda(lambda *a, prim=prim: prim.bind(*a, mode=3, key=key), x, sh, w, *graph)
    assert "@jaxext_conv(" in text
    assert ("stablehlo.scatter" in text) == checks, prim
  # factored weights: on CUDA the weights' matrix product, then the kernel (no CPU target)
  hidden, kernel = np.ones((edges, 4)), np.ones((4, w.shape[1]))
  text = _export_cuda(lambda a, b: eq.conv(x, sh, a, snd, rcv, nodes, *CONV_IRREPS,
                                           edge_weights_kernel=b), hidden, kernel)
  assert "@jaxext_conv(" in text and "stablehlo.dot_general" in text
  assert "jaxext_conv_factored" not in text
  # and differentiated (the cotangents' composition: modes x, y and w, then w's with the kernel)
  text = _export_cuda(jax.grad(lambda a, b, v: jnp.sum(eq.conv(
      v, sh, a, snd, rcv, nodes, *CONV_IRREPS, edge_weights_kernel=b) ** 2), argnums=(0, 1, 2)),
      hidden, kernel, x)
  modes = {int(m) for m in re.findall(r"@jaxext_conv\(.*?mode = (\d+)", text)}
  assert modes == {0, 2, 3} and "jaxext_conv_factored" not in text, modes


# --- e3nn-jax's types: Irreps and IrrepsArray in, IrrepsArray out (#32) ---------------------

def test_irreps_objects_are_read_as_their_strings():
  ix, iy, io = "5x0e+3x1o+2x2e", "0e+1o+2e", "5x0e+3x1o+2x2e"
  rng = np.random.default_rng(41)
  x = rng.normal(size=(9, e3nn.Irreps(ix).dim))
  y = rng.normal(size=(30, e3nn.Irreps(iy).dim))
  nw = sum(e3nn.Irreps(ix)[i].mul for i, _, _ in eq.paths(e3nn.Irreps(ix), iy, io))
  w = rng.normal(size=(30, nw))
  snd, rcv = rng.integers(0, 9, 30), rng.integers(0, 9, 30)
  objs = [e3nn.Irreps(i) for i in (ix, iy, io)]
  np.testing.assert_array_equal(
      np.asarray(eq.tensor_product(x[snd], y, w, *objs)),
      np.asarray(eq.tensor_product(x[snd], y, w, ix, iy, io)))
  np.testing.assert_array_equal(np.asarray(eq.conv(x, y, w, snd, rcv, 9, *objs)),
                                np.asarray(eq.conv(x, y, w, snd, rcv, 9, ix, iy, io)))
  v = rng.normal(size=(6, 3))
  np.testing.assert_array_equal(np.asarray(eq.spherical_harmonics(e3nn.Irreps("0e+1o+2e"), v)),
                                np.asarray(eq.spherical_harmonics("0e+1o+2e", v)))
  assert eq.paths(*objs) == eq.paths(ix, iy, io)
  # An iterator of (mul, ir) items is read once, not taken for empty irreps.
  t = eq.tensor_product(x[snd], y, w, iter(e3nn.Irreps(ix)), iy, (m for m in e3nn.Irreps(io)))
  np.testing.assert_array_equal(np.asarray(t), np.asarray(eq.tensor_product(x[snd], y, w, ix, iy,
                                                                            io)))
  with pytest.raises(TypeError, match="irreps_out"):
    eq.tensor_product(x[snd], y, w, ix, iy, np.ones(3))


@pytest.mark.parametrize("vec_irreps", ["1o", "1e"])
def test_spherical_harmonics_of_irreps_arrays_equal_e3nn(vec_irreps):
  """An IrrepsArray of vectors gives an IrrepsArray with e3nn-jax's irreps and numbers, for an
  int (one degree), a list, and an Irreps; the parity of int degrees follows the vectors'."""
  v = e3nn.IrrepsArray(vec_irreps, np.random.default_rng(42).normal(size=(11, 3)))
  for arg in (0, 3, [1, 2], [0, 1, 2, 3, 4], "0e+1o+2e" if vec_irreps == "1o" else "0e+1e+2e"):
    got = eq.spherical_harmonics(arg, v)
    want = e3nn.spherical_harmonics(arg, v, normalize=True)
    assert isinstance(got, e3nn.IrrepsArray) and got.irreps == want.irreps, (arg, got)
    np.testing.assert_allclose(np.asarray(got.array), np.asarray(want.array), atol=1e-12)
  with pytest.raises(ValueError, match="vectors"):
    eq.spherical_harmonics(2, e3nn.IrrepsArray("2x1o", np.ones((3, 6))))
  other = "0e+1e" if vec_irreps == "1o" else "0e+1o"  # odd l of the other parity: e3nn refuses
  with pytest.raises(ValueError):
    e3nn.spherical_harmonics(other, v, normalize=True)
  with pytest.raises(ValueError, match="parity"):
    eq.spherical_harmonics(other, v)


def test_tensor_product_and_conv_take_and_give_irreps_arrays():
  """IrrepsArrays in (their irreps standing in for the irreps arguments), IrrepsArrays of
  irreps_out out, equal to the plain call and to e3nn-jax; also under jit and grad (an
  IrrepsArray is a pytree), and segment_sum / gather keep the irreps."""
  ix, iy, io = "4x0e+4x1o+4x2e", "0e+1o+2e+3o", "4x0e+4x1o+4x2e"
  rng = np.random.default_rng(43)
  n, e = 8, 36
  x = e3nn.IrrepsArray(ix, rng.normal(size=(n, e3nn.Irreps(ix).dim)))
  vec = rng.normal(size=(e, 3))
  sh = eq.spherical_harmonics(e3nn.Irreps(iy), e3nn.IrrepsArray("1o", vec))
  assert isinstance(sh, e3nn.IrrepsArray) and sh.irreps == e3nn.Irreps(iy)
  w = rng.normal(size=(e, 4 * 13))
  snd, rcv = rng.integers(0, n, e), rng.integers(0, n, e)
  xs = eq.gather(x, snd)
  assert isinstance(xs, e3nn.IrrepsArray) and xs.irreps == x.irreps
  t = eq.tensor_product(xs, sh, w, irreps_out=io)
  assert isinstance(t, e3nn.IrrepsArray) and t.irreps == e3nn.Irreps(io)
  plain = eq.tensor_product(x.array[snd], sh.array, w, ix, iy, io)
  np.testing.assert_array_equal(np.asarray(t.array), np.asarray(plain))
  ref = e3nn_reference.tensor_product(x.array[snd], sh.array, w, ix, iy, io)
  np.testing.assert_allclose(np.asarray(t.array), np.asarray(ref), atol=1e-12)
  m = eq.conv(x, sh, w, snd, rcv, n, irreps_out=io)
  assert isinstance(m, e3nn.IrrepsArray) and m.irreps == e3nn.Irreps(io)
  seg = eq.segment_sum(t, rcv, n)
  assert isinstance(seg, e3nn.IrrepsArray) and seg.irreps == e3nn.Irreps(io)
  np.testing.assert_allclose(np.asarray(m.array), np.asarray(seg.array), atol=1e-12)
  jitted = jax.jit(lambda x, sh, w: eq.conv(x, sh, w, snd, rcv, n, irreps_out=io))(x, sh, w)
  assert isinstance(jitted, e3nn.IrrepsArray)
  np.testing.assert_allclose(np.asarray(jitted.array), np.asarray(m.array), atol=1e-13)
  g = jax.grad(lambda x: jnp.sum(eq.conv(x, sh, w, snd, rcv, n, irreps_out=io).array ** 2))(x)
  g_plain = jax.grad(lambda a: jnp.sum(eq.conv(a, sh.array, w, snd, rcv, n, ix, iy, io) ** 2))(
      x.array)
  assert isinstance(g, e3nn.IrrepsArray)
  np.testing.assert_allclose(np.asarray(g.array), np.asarray(g_plain), atol=1e-12)


def test_irreps_arguments_must_agree_with_irreps_arrays():
  x = e3nn.IrrepsArray("2x0e+2x1o", np.ones((3, 8)))
  y = e3nn.IrrepsArray("0e+1o", np.ones((3, 4)))
  w = np.ones((3, 8))
  with pytest.raises(ValueError, match="irreps_x"):
    eq.tensor_product(x, y, w, "2x0e+2x1e", None, "2x0e+2x1o")
  with pytest.raises(TypeError, match="irreps_out is required"):
    eq.tensor_product(x, y, w)
  with pytest.raises(TypeError, match="irreps_x is required"):
    eq.tensor_product(x.array, y, w, irreps_out="2x0e+2x1o")
  with pytest.raises(ValueError, match="irreps_sh"):
    eq.conv(x, y, w, [0, 1, 2], [0, 1, 2], 3, irreps_sh="0e+1e", irreps_out="2x0e+2x1o")


@pytest.mark.parametrize("irrep_normalization", ["component", "norm", "none"])
@pytest.mark.parametrize("path_normalization", ["element", "path"])  # no effect at y mult. 1
@pytest.mark.parametrize("gradient_normalization", ["element", "path", 0.3])
def test_normalisations_equal_e3nn(irrep_normalization, path_normalization,
                                   gradient_normalization):
  """e3nn-jax's three normalisation options, per call: the product, its gradients in x, y and
  w, and the fused conv (against the segment sum of the product), equal to e3nn-jax's legacy
  FunctionalTensorProduct with the same options."""
  ix, iy, io = "3x0e+2x1o+2x2e", "0e+1o+2e+3o", "3x0e+2x1o+2x2e"
  opts = dict(irrep_normalization=irrep_normalization, path_normalization=path_normalization,
              gradient_normalization=gradient_normalization)
  rng = np.random.default_rng(44)
  rows = 9
  x = rng.normal(size=(rows, e3nn.Irreps(ix).dim))
  y = rng.normal(size=(rows, e3nn.Irreps(iy).dim))
  w = rng.normal(size=(rows, sum(e3nn.Irreps(ix)[i].mul for i, _, _ in eq.paths(ix, iy, io))))
  got = eq.tensor_product(x, y, w, ix, iy, io, **opts)
  want = e3nn_reference.tensor_product(x, y, w, ix, iy, io, **opts)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-12)
  loss = lambda f: lambda x, y, w: jnp.sum(jnp.sin(f(x, y, w)))
  g = jax.grad(loss(lambda x, y, w: eq.tensor_product(x, y, w, ix, iy, io, **opts)),
               argnums=(0, 1, 2))(x, y, w)
  g_ref = jax.grad(loss(lambda x, y, w: e3nn_reference.tensor_product(x, y, w, ix, iy, io,
                                                                      **opts)),
                   argnums=(0, 1, 2))(x, y, w)
  for a, b in zip(g, g_ref):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-12)
  snd, rcv = rng.integers(0, rows, rows), rng.integers(0, 4, rows)
  m = eq.conv(x, y, w, snd, rcv, 4, ix, iy, io, **opts)
  ref = jax.ops.segment_sum(e3nn_reference.tensor_product(x[snd], y, w, ix, iy, io, **opts), rcv,
                            4)
  np.testing.assert_allclose(np.asarray(m), np.asarray(ref), atol=1e-12)


def test_e3nn_config_is_followed_and_bad_options_named():
  """Unset options follow e3nn_jax.config (as e3nn-jax's own products do); bad values raise
  naming the option."""
  ix, iy, io = "2x0e+2x1o", "0e+1o", "2x0e+2x1o"
  rng = np.random.default_rng(45)
  x, y, w = rng.normal(size=(5, 8)), rng.normal(size=(5, 4)), rng.normal(size=(5, 8))
  v = rng.normal(size=(5, 3))
  default = np.asarray(eq.tensor_product(x, y, w, ix, iy, io))
  saved = {k: e3nn.config(k) for k in ("irrep_normalization", "gradient_normalization",
                                       "spherical_harmonics_normalization")}
  try:
    e3nn.config("irrep_normalization", "norm")
    e3nn.config("gradient_normalization", "element")
    e3nn.config("spherical_harmonics_normalization", "norm")
    got = np.asarray(eq.tensor_product(x, y, w, ix, iy, io))
    np.testing.assert_allclose(got, np.asarray(e3nn_reference.tensor_product(x, y, w, ix, iy, io)),
                               atol=1e-12)
    assert np.abs(got - default).max() > 0.1
    np.testing.assert_allclose(np.asarray(eq.spherical_harmonics("0e+1o+2e", v)),
                               np.asarray(e3nn.spherical_harmonics("0e+1o+2e", v, True).array),
                               atol=1e-12)
  finally:
    for k, val in saved.items():
      e3nn.config(k, val)
  np.testing.assert_array_equal(np.asarray(eq.tensor_product(x, y, w, ix, iy, io)), default)
  for name, bad in (("irrep_normalization", "unit"), ("path_normalization", float("nan")),
                    ("gradient_normalization", "edge")):
    with pytest.raises(ValueError, match=name):
      eq.tensor_product(x, y, w, ix, iy, io, **{name: bad})
    with pytest.raises(ValueError, match=name):
      eq.conv(x, y, w, [0] * 5, [0] * 5, 1, ix, iy, io, **{name: bad})
