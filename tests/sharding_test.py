"""Every op under jit sharding on 4 host devices: results equal the unsharded ones, the compiled
HLO has no all-gather or all-to-all (each device computes its own shard), and outputs keep the
input sharding; under vmap and grad too. A control checks that the HLO detector sees the
all-gather of a computation that does need one. Inside jax.shard_map (check_vma=True): every op
family's values and gradients, in and around the differentiation, equal the unsharded ones."""

import functools
import os
import re

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402

_GATHER = re.compile(r"\b(all-gather|all-to-all|collective-permute)\b")


@pytest.fixture(scope="module")
def mesh1():
  assert len(jax.devices()) == 4
  return Mesh(np.array(jax.devices()), ("x",))


@pytest.fixture(scope="module")
def explicit_mesh():  # shardings are part of the types (jax.sharding.AxisType.Explicit)
  return jax.make_mesh((4,), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))


@pytest.fixture(scope="module")
def mesh2():
  return Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))


def _compiled(fn, *args):
  return jax.jit(fn).lower(*args).compile()


def _assert_local(fn, *args):
  """No data movement between devices in the compiled program; returns the result."""
  text = _compiled(fn, *args).as_text()
  found = _GATHER.findall(text)
  assert not found, f"collectives {sorted(set(found))} in:\n{text[:3000]}"
  return jax.jit(fn)(*args)


_SMALL_IRREPS = ("4x0e+4x1o", "0e+1o", "4x0e+4x1o")


def _num_weights(ix, iy, io):
  """The product's weights per row: the x multiplicity of each path."""
  from jaxext import equivariant as eq
  return sum(int(ix.split("+")[i1].split("x")[0]) for i1, _, _ in eq.paths(ix, iy, io))


def test_detector_sees_a_needed_all_gather(mesh1):
  x = jax.device_put(jnp.arange(16.0), NamedSharding(mesh1, P("x")))
  replicate = lambda v: jax.lax.with_sharding_constraint(jnp.sin(v), NamedSharding(mesh1, P()))
  with pytest.raises(AssertionError, match="all-gather"):
    _assert_local(replicate, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kepler_splits_along_its_axis(mesh1, dtype):
  rng = np.random.default_rng(0)
  m = rng.uniform(-10, 10, 4096).astype(dtype)
  e = rng.uniform(0, 0.95, 4096).astype(dtype)
  sh = NamedSharding(mesh1, P("x"))
  ms, es = jax.device_put(m, sh), jax.device_put(e, sh)
  s, c = _assert_local(jaxext.kepler, ms, es)
  s0, c0 = jaxext.kepler(m, e)
  np.testing.assert_array_equal(np.asarray(s), np.asarray(s0))
  np.testing.assert_array_equal(np.asarray(c), np.asarray(c0))
  assert s.sharding.is_equivalent_to(sh, 1) and c.sharding.is_equivalent_to(sh, 1)


def test_kepler_splits_along_any_axis(mesh1, mesh2):
  rng = np.random.default_rng(1)
  m = rng.uniform(-10, 10, (8, 64))
  e = rng.uniform(0, 0.9, (8, 64))
  for sh in (NamedSharding(mesh1, P(None, "x")), NamedSharding(mesh2, P("a", "b"))):
    s, _ = _assert_local(jaxext.kepler, jax.device_put(m, sh), jax.device_put(e, sh))
    np.testing.assert_array_equal(np.asarray(s), np.asarray(jaxext.kepler(m, e)[0]))
    assert s.sharding.is_equivalent_to(sh, 2)


def test_kepler_under_vmap_and_grad(mesh1):
  rng = np.random.default_rng(2)
  m = rng.uniform(-10, 10, (4, 256))
  e = rng.uniform(0, 0.9, (4, 256))
  sh = NamedSharding(mesh1, P("x"))
  ms, es = jax.device_put(m, sh), jax.device_put(e, sh)
  v = _assert_local(jax.vmap(lambda a, b: jaxext.kepler(a, b)[0]), ms, es)
  np.testing.assert_array_equal(np.asarray(v), np.asarray(jaxext.kepler(m, e)[0]))
  g = _assert_local(jax.vmap(jax.grad(lambda a, b: jaxext.kepler(a, b)[0].sum())), ms, es)
  np.testing.assert_allclose(np.asarray(g),
                             np.asarray(jax.vmap(jax.grad(
                                 lambda a, b: jaxext.kepler(a, b)[0].sum()))(m, e)), rtol=1e-14)


def _limbdark_inputs(rng, nlc=4, npts=512):
  b = rng.uniform(0, 1.2, (nlc, npts))
  # one quadratic law per light curve: u of shape (nlc, 1, 2) (leading axes right-aligned)
  u = np.stack([rng.uniform(0.1, 0.5, nlc), rng.uniform(0.0, 0.3, nlc)], -1)[:, None, :]
  return b, u


@pytest.mark.parametrize("r_kind", ["scalar", "per_point"])
def test_limb_dark_flux_splits_points_and_light_curves(mesh2, r_kind):
  rng = np.random.default_rng(3)
  b, u = _limbdark_inputs(rng)
  r = 0.1 if r_kind == "scalar" else rng.uniform(0.05, 0.2, b.shape)
  shb = NamedSharding(mesh2, P("a", "b"))
  shu = NamedSharding(mesh2, P("a", None, None))
  args = [jax.device_put(b, shb), r if r_kind == "scalar" else jax.device_put(r, shb),
          jax.device_put(u, shu)]
  f = _assert_local(jaxext.limb_dark_flux, *args)
  np.testing.assert_array_equal(np.asarray(f), np.asarray(jaxext.limb_dark_flux(b, r, u)))
  assert f.sharding.is_equivalent_to(shb, 2)


def test_limb_dark_flux_gradients_stay_local(mesh2):
  rng = np.random.default_rng(4)
  b, u = _limbdark_inputs(rng)
  r = rng.uniform(0.05, 0.2, b.shape)
  shb = NamedSharding(mesh2, P("a", "b"))
  args = (jax.device_put(b, shb), jax.device_put(r, shb),
          jax.device_put(u, NamedSharding(mesh2, P("a", None, None))))
  # Per-point derivatives (no reduction across devices): fully local.
  jac = lambda b, r, u: jax.vmap(jax.vmap(jax.grad(jaxext.limb_dark_flux, argnums=(0, 1)),
                                          in_axes=(0, 0, None)))(b, r, u[:, 0])
  db, dr = _assert_local(jac, *args)
  db0, dr0 = jac(b, r, u)
  np.testing.assert_allclose(np.asarray(db), np.asarray(db0), rtol=1e-13)
  np.testing.assert_allclose(np.asarray(dr), np.asarray(dr0), rtol=1e-13)


def test_transit_light_curve_splits_times(mesh1):
  t = np.linspace(-0.3, 0.3, 4096)
  sh = NamedSharding(mesh1, P("x"))
  kw = dict(period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1, u=np.array([0.4, 0.26]))
  f = _assert_local(lambda t: jaxext.transit_light_curve(t, **kw), jax.device_put(t, sh))
  np.testing.assert_allclose(np.asarray(f), np.asarray(jaxext.transit_light_curve(t, **kw)),
                             rtol=0, atol=1e-15)
  assert f.sharding.is_equivalent_to(sh, 1)


def test_transit_light_curves_split_along_curves_and_times(mesh2):
  """Four light curves (per-curve period, radius and law) of 4096 times on a 2 x 2 mesh, and the
  gradient of each curve's chi-square with respect to its own parameters: no gathers (the
  gradient's sum over each curve's times, split over two devices, is one all-reduce). The flux is
  bitwise that of the unsharded call: long enough for the CPU kernel's flux series, which each
  shard uses as the unsharded call does."""
  t = np.linspace(-0.3, 0.3, 4096)
  periods = np.array([[2.5], [3.0], [3.5], [4.0]])
  radii = np.array([[0.05], [0.1], [0.15], [0.2]])
  u = np.array([[[0.4, 0.26]], [[0.3, 0.2]], [[0.5, 0.1]], [[0.2, 0.3]]])
  tt = np.broadcast_to(t, (4, 4096))
  sh = NamedSharding(mesh2, P("a", "b"))
  shp = NamedSharding(mesh2, P("a", None))
  model = lambda t, period, r, u: jaxext.transit_light_curve(
      t, period=period, t0=0.0, a=10.0, impact=0.3, r=r, u=u, ecc=0.1, omega=0.5)
  args = (jax.device_put(tt, sh), jax.device_put(periods, shp), jax.device_put(radii, shp),
          jax.device_put(u, NamedSharding(mesh2, P("a", None, None))))
  f = _assert_local(model, *args)
  np.testing.assert_array_equal(np.asarray(f), np.asarray(model(tt, periods, radii, u)))
  assert f.sharding.is_equivalent_to(sh, 2)
  per_curve = lambda t, period, r, u: jax.vmap(jax.grad(
      lambda t, p, r, u: jnp.sum((model(t, p, r, u) - 0.99) ** 2), argnums=(1, 2)))(
          t, period, r, u)
  gp, gr = _assert_local(per_curve, *args)  # sums over the split times: an all-reduce only
  gp0, gr0 = per_curve(tt, periods, radii, u)
  np.testing.assert_allclose(np.asarray(gp), np.asarray(gp0), rtol=1e-12)
  np.testing.assert_allclose(np.asarray(gr), np.asarray(gr0), rtol=1e-12)


like = lambda x, *_, **__: jax.ShapeDtypeStruct(x.shape, x.dtype)


@jaxext.numba_kernel(outputs=like, vmap="elementwise")
def _axpy(x, y, out, alpha):
  for i in range(x.shape[0]):
    out[i] = alpha * x[i] + y[i]


@jaxext.numba_kernel(outputs=like, vmap="sequential")
def _prefix_sum(x, out):
  acc = x[0] - x[0]
  for i in range(x.shape[0]):
    acc += x[i]
    out[i] = acc


def test_numba_elementwise_kernel_splits_rows(mesh1):
  rng = np.random.default_rng(5)
  x, y = rng.normal(size=(2, 1024, 3))
  sh = NamedSharding(mesh1, P("x"))
  f = lambda a, b: _axpy(a, b, alpha=0.5)
  z = _assert_local(f, jax.device_put(x, sh), jax.device_put(y, sh))
  np.testing.assert_allclose(np.asarray(z), 0.5 * x + y, rtol=1e-15)
  assert z.sharding.is_equivalent_to(sh, 2)


def test_numba_sequential_kernel_splits_vmapped_batch(mesh1):
  rng = np.random.default_rng(6)
  x = rng.normal(size=(8, 300))
  sh = NamedSharding(mesh1, P("x"))
  z = _assert_local(jax.vmap(_prefix_sum), jax.device_put(x, sh))
  np.testing.assert_allclose(np.asarray(z), np.cumsum(x, -1), rtol=1e-12)
  assert z.sharding.is_equivalent_to(sh, 2)


def test_numba_sequential_kernel_runs_whole_when_sharded(mesh1):
  # A row-coupled kernel cannot be split along its own axis: the result is still right.
  x = np.random.default_rng(7).normal(size=1024)
  z = jax.jit(_prefix_sum)(jax.device_put(x, NamedSharding(mesh1, P("x"))))
  np.testing.assert_allclose(np.asarray(z), np.cumsum(x), rtol=1e-12)


def test_dop853_splits_trajectories(mesh1):
  from jaxext import ode
  rng = np.random.default_rng(7)
  alt = rng.uniform(300, 2000, 16)
  r = ode.models.EARTH_RADIUS + alt
  v = np.sqrt(ode.models.EARTH_MU / r)
  inc = rng.uniform(0, np.pi, 16)
  y0 = np.stack([r, 0 * r, 0 * r, 0 * r, v * np.cos(inc), v * np.sin(inc)], axis=1)
  b = rng.uniform(0.005, 0.02, (16, 1))
  te = np.linspace(0.0, 3600.0, 5)
  model = ode.models.earth(j2=True, drag=True)
  run = lambda y, p: ode.dop853(model, y, (0.0, 3600.0), p, t_eval=te, rtol=1e-9, atol=1e-9,
                                events=[ode.models.altitude_event(100.0)])
  sh = NamedSharding(mesh1, P("x"))
  sol = _assert_local(run, jax.device_put(y0, sh), jax.device_put(b, sh))
  ref = run(y0, b)
  for got, want in zip(sol, ref):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert sol.ys.sharding.is_equivalent_to(NamedSharding(mesh1, P("x", None, None)), 3)
  assert sol.status.sharding.is_equivalent_to(sh, 1)


def test_dop853_python_event_derivatives_split_trajectories(mesh1):
  # Derivatives through a Python event (its gradient and the Python right-hand side evaluated by
  # Numba over the event rows): per trajectory, so they stay on each device's trajectories.
  import math
  from jaxext import ode

  def rhs(t, y, p, dydt):
    dydt[0] = y[1]
    dydt[1] = -p[0] * math.sin(y[0])

  def jacobian(t, y, p, dfdy, dfdp):
    dfdy[0, 1] = 1.0
    dfdy[1, 0] = -p[0] * math.cos(y[0])
    dfdp[1, 0] = -math.sin(y[0])

  def gradient(t, y, p, dgdy, dgdp):
    dgdy[0] = 1.0
    return 0.0

  pendulum = ode.rhs(rhs, jacobian=jacobian)
  crossing = ode.event(lambda t, y, p: y[0], gradient=gradient)
  rng = np.random.default_rng(9)
  y0 = np.stack([rng.uniform(0.2, 1.0, 16), np.zeros(16)], axis=1)
  g = rng.uniform(1.0, 2.0, (16, 1))

  def tangents(y, p):
    run = lambda y, p: ode.dop853(pendulum, y, (0.0, 10.0), p, rtol=1e-10, atol=1e-10,
                                  events=[crossing], event_slots=3).t_events
    return jax.jvp(run, (y, p), (jnp.ones_like(y), jnp.ones_like(p)))[1]

  sh = NamedSharding(mesh1, P("x"))
  got = _assert_local(tangents, jax.device_put(y0, sh), jax.device_put(g, sh))
  want = tangents(y0, g)
  assert np.isfinite(np.asarray(want)).all() and np.abs(np.asarray(want)).max() > 0
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_spherical_harmonics_split_along_vectors(mesh1):
  from jaxext import equivariant as eq
  v = np.random.default_rng(8).normal(size=(64, 3))
  sh = NamedSharding(mesh1, P("x"))
  y = _assert_local(lambda x: eq.spherical_harmonics(range(4), x, normalize=False), jax.device_put(v, sh))
  np.testing.assert_array_equal(np.asarray(y), np.asarray(eq.spherical_harmonics(range(4), v,
                                                                                  normalize=False)))
  assert y.sharding.is_equivalent_to(NamedSharding(mesh1, P("x", None)), 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensor_product_and_its_gradients_split_rows(mesh1, dtype):
  # The product and its x, y, w cotangents (on CUDA the y and w ones from one call) per row
  # shard: no collectives, the unsharded bits, the rows' sharding kept.
  from jaxext import equivariant as eq
  ix, iy, io = "8x0e+8x1o+4x2e", "0e+1o+2e", "8x0e+8x1o+8x2e"
  rng = np.random.default_rng(9)
  rows = 64
  nw = _num_weights(ix, iy, io)
  x, y, w = (rng.normal(size=(rows, d)).astype(dtype) for d in (52, 9, nw))
  ct = rng.normal(size=(rows, 72)).astype(dtype)
  sh = NamedSharding(mesh1, P("x", None))
  put = lambda *a: [jax.device_put(v, sh) for v in a]
  f = lambda a, b, c: eq.tensor_product(a, b, c, ix, iy, io)
  out = _assert_local(f, *put(x, y, w))
  np.testing.assert_array_equal(np.asarray(out), np.asarray(jax.jit(f)(x, y, w)))
  assert out.sharding.is_equivalent_to(sh, 2)
  loss = lambda a, b, c, d: jnp.sum(d * f(a, b, c))
  for argnums in ((1, 2), (0, 1, 2)):
    grad = jax.grad(loss, argnums=argnums)
    if os.environ.get("JAXEXT_CUDA_EMULATION"):  # the CUDA path: y and w in one call
      text = _compiled(grad, *put(x, y, w, ct)).as_text()  # (after partitioning)
      assert text.count('custom_call_target="jaxext_tensor_product_edge_cts"') == 1, text
    got = _assert_local(grad, *put(x, y, w, ct))
    for g, want in zip(got, jax.jit(grad)(x, y, w, ct)):
      np.testing.assert_array_equal(np.asarray(g), np.asarray(want))
      assert g.sharding.is_equivalent_to(sh, 2)



# --- Operands sharded differently ------------------------------------------------------------------
# A split operand beside a replicated one (or one split along other mesh axes): each device's call
# must get matching blocks of every operand (XLA slices the replicated one locally; no collective).
# Before, each call got the operands' blocks as they came: a runtime error (kepler: "all operands
# and results must have the same number of elements"), a partitioner error, or for a Numba kernel
# wrong values.

@jaxext.numba_kernel(outputs=like, vmap="elementwise")
def _axpy2(x, y, out):
  for i in range(x.shape[0]):
    out[i] = 2 * x[i] + y[i]


@jaxext.numba_kernel(outputs=like, vmap="sequential")
def _dot_prefix(x, y, out):
  acc = x[0] - x[0]
  for i in range(x.shape[0]):
    acc += x[i] * y[i]
    out[i] = acc


def _mixed_cases():
  from jaxext import equivariant as eq
  from jaxext import ode
  rng = np.random.default_rng(14)
  m, e = rng.uniform(0, 6, 64), rng.uniform(0, 0.9, 64)
  b, r = rng.uniform(0, 1.2, 64), rng.uniform(0.05, 0.2, 64)
  u = jnp.array([0.4, 0.2])
  t, periods = np.tile(np.linspace(-0.2, 0.2, 64), (4, 1)), np.array([[2.5], [3.0], [3.5], [4.0]])
  curve = lambda t, p: jaxext.transit_light_curve(t, period=p, t0=0.0, a=10.0, impact=0.3, r=0.1,
                                                  u=u)
  ix, iy, io = _SMALL_IRREPS
  nw = _num_weights(ix, iy, io)
  x, y, w = rng.normal(size=(64, 16)), rng.normal(size=(64, 4)), rng.normal(size=(64, nw))
  tp = lambda x, y, w: eq.tensor_product(x, y, w, ix, iy, io)
  y0 = np.stack([rng.uniform(0.2, 1.0, 8), np.zeros(8)], axis=1)
  decay = lambda y, c: ode.dop853(lambda t, y, c: -c[0] * y, y, (0.0, 1.0), args=c, args_axes=0,
                                  rtol=1e-10, atol=1e-10).y_final
  split, whole = P("x"), P()
  grad = lambda f, n: jax.grad(lambda *a: _sum_outputs(f(*a)) ** 2, argnums=tuple(range(n)))
  return {
      "kepler": (jaxext.kepler, (m, e), (split, whole)),
      "kepler_grad": (grad(jaxext.kepler, 2), (m, e), (whole, split)),
      "limb_dark_flux": (lambda b, r: jaxext.limb_dark_flux(b, r, u), (b, r), (whole, split)),
      "limb_dark_flux_grad": (grad(lambda b, r: jaxext.limb_dark_flux(b, r, u), 2), (b, r),
                              (split, whole)),
      "transit_light_curve": (curve, (t, periods), (split, whole)),
      "transit_light_curve_grad": (grad(curve, 2), (t, periods), (split, whole)),
      "tensor_product": (tp, (x, y, w), (split, whole, whole)),
      "tensor_product_grad": (grad(tp, 3), (x, y, w), (whole, split, whole)),
      "dop853": (decay, (y0, rng.uniform(0.5, 1.5, (8, 1))), (split, whole)),
      "numba_elementwise": (_axpy2, (m, e), (split, whole)),
      "numba_vmapped": (jax.vmap(_dot_prefix), (m.reshape(8, 8), e.reshape(8, 8)), (split, whole)),
  }


@pytest.mark.parametrize("case", list(_mixed_cases()))
def test_split_beside_replicated_operands(mesh1, case):
  fn, args, specs = _mixed_cases()[case]
  got = _assert_local(fn, *(jax.device_put(a, NamedSharding(mesh1, s))
                            for a, s in zip(args, specs)))
  for g, want in zip(jax.tree.leaves(got), jax.tree.leaves(jax.jit(fn)(*args))):
    np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-12, atol=1e-12)


def test_operands_split_along_different_mesh_axes(mesh2):
  # b split (a, b), r split the other way round (b, a): r is resharded to match, the values hold.
  rng = np.random.default_rng(15)
  b, r = rng.uniform(0, 1.2, (4, 64)), rng.uniform(0.05, 0.2, (4, 64))
  f = lambda b, r: jaxext.limb_dark_flux(b, r, jnp.array([0.4, 0.2]))
  got = jax.jit(f)(jax.device_put(b, NamedSharding(mesh2, P("a", "b"))),
                   jax.device_put(r, NamedSharding(mesh2, P("b", "a"))))
  np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(f)(b, r)))


# --- Inside jax.shard_map, with jax's default check_vma=True ---------------------------------------
# There every value's type says which manual mesh axes it varies over, and differentiation checks
# that a cotangent varies as its primal does. jaxext's primitives type their results as varying
# over their operands' axes (jaxext/_jax_compat.py: Primitive): each shard's gradients are its own
# and a replicated operand's gradient is whole (the transpose of jax's invariant-to-varying cast
# is the psum), the unsharded gradients; a result typed invariant would fail the check (before:
# "Expected cotangent type float64[16]{V:x} but got float64[16]").

def _sum_outputs(out):
  return sum(jnp.sum(o) for o in jax.tree.leaves(out))


def _check_in_shard_map(mesh, fn, args, in_specs, *, reduce=False, eager=False, rtol=1e-12):
  """fn's results and the gradient of their sum with respect to every float operand, computed in
  shard_map (row blocks P("x"); P() operands replicated) inside and outside the differentiation,
  equal the unsharded ones. reduce: fn's rows are partial sums over the shard's rows (a segment
  sum over its edges), added up with a psum."""
  body = (lambda *a: jax.lax.psum(fn(*a), "x")) if reduce else fn
  out_spec = P() if reduce else P("x")
  floats = tuple(i for i, a in enumerate(args) if np.issubdtype(np.asarray(a).dtype, np.floating))
  specs = tuple(in_specs[i] for i in floats)
  sm = lambda f, outs: jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=outs,
                                     check_vma=True)
  run = (lambda f: f) if eager else jax.jit
  close = lambda got, want: [np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol,
                                                        atol=rtol)
                             for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
  close(run(sm(body, out_spec))(*args), fn(*args))
  want = jax.grad(lambda *a: _sum_outputs(fn(*a)), argnums=floats)(*args)
  assert all(np.abs(np.asarray(w)).max() > 0 for w in want)
  inside = jax.grad(lambda *a: _sum_outputs(fn(*a)), argnums=floats)
  close(run(sm(inside, specs))(*args), want)
  outside = jax.grad(lambda *a: _sum_outputs(sm(body, out_spec)(*a)), argnums=floats)
  close(run(outside)(*args), want)


def test_shard_map_results_vary_as_their_operands(mesh1):
  # A result computed from a shard varies over the mesh axis: check_vma refuses to return it as
  # replicated (out_specs=P()), which would silently keep the first device's block; one of
  # replicated operands is replicated and may be.
  m = np.linspace(0.0, 6.0, 64)
  sm = lambda f, i, o: jax.jit(jax.shard_map(f, mesh=mesh1, in_specs=i, out_specs=o,
                                             check_vma=True))
  with pytest.raises(ValueError, match="out_specs"):
    sm(lambda m: jaxext.kepler(m, 0.3)[0], P("x"), P())(m)
  np.testing.assert_array_equal(np.asarray(sm(lambda m: jaxext.kepler(m, 0.3)[0], P(), P())(m)),
                                np.asarray(jaxext.kepler(m, 0.3)[0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shard_map_kepler_and_light_curves(mesh1, dtype):
  rng = np.random.default_rng(11)
  rtol = 1e-5 if dtype == np.float32 else 1e-12
  m = rng.uniform(0, 6, 64).astype(dtype)
  e = np.array([0.4], dtype)  # one eccentricity, replicated: its gradient sums every device's
  _check_in_shard_map(mesh1, jaxext.kepler, (m, e), (P("x"), P()), rtol=rtol)
  b, r = rng.uniform(0, 1.2, 64).astype(dtype), rng.uniform(0.05, 0.2, 64).astype(dtype)
  u = np.array([0.4, 0.26], dtype)
  _check_in_shard_map(mesh1, jaxext.limb_dark_flux, (b, r, u), (P("x"), P("x"), P()), rtol=rtol)
  t = np.linspace(-0.2, 0.2, 64).astype(dtype)
  curve = lambda t, r: jaxext.transit_light_curve(t, period=3.0, t0=0.0, a=10.0, impact=0.3, r=r,
                                                  u=u)
  _check_in_shard_map(mesh1, curve, (t, np.asarray(0.1, dtype)), (P("x"), P()), rtol=rtol)
  # second derivatives under vmap, per shard
  d2 = jax.vmap(jax.grad(jax.grad(lambda m, e: jaxext.kepler(m, e)[0])), (0, None))
  got = jax.jit(jax.shard_map(d2, mesh=mesh1, in_specs=(P("x"), P()), out_specs=P("x"),
                              check_vma=True))(m, e[0])
  np.testing.assert_allclose(np.asarray(got), np.asarray(d2(m, e[0])), rtol=rtol)


@jaxext.numba_kernel(outputs=like, vmap="elementwise")
def _cube(x, out):
  for i in range(x.shape[0]):
    out[i] = x[i] * x[i] * x[i]


@_cube.defjvp
def _cube_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return (_cube(x),), (3 * x * x * t,)


@jaxext.numba_kernel(outputs=like, vmap="elementwise")
def _mul(x, c, out):
  for i in range(x.shape[0]):
    out[i] = x[i] * c[i]


_mul.defvjp(lambda x, c: (_mul(x, c), (x, c)),
            lambda res, cts: (cts[0] * res[1], cts[0] * res[0]))


def test_shard_map_numba_vjp_rule_with_a_replicated_operand(mesh1):
  # The vjp rule's cotangent for c is made from the device's block of x: the devices' add up.
  rng = np.random.default_rng(16)
  x, c = rng.normal(size=64), rng.normal(size=16)
  loss = lambda x, c: jnp.sum(_mul(x, c) ** 2)
  got = jax.jit(jax.shard_map(jax.grad(loss, (0, 1)), mesh=mesh1, in_specs=(P("x"), P()),
                              out_specs=(P("x"), P()), check_vma=True))(x, c)
  want = jax.grad(lambda x, c: sum(loss(x[16 * k:16 * (k + 1)], c) for k in range(4)), (0, 1))(x, c)
  for g, w in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-13)


def test_shard_map_numba_kernel_and_dop853(mesh1):
  from jaxext import ode
  rng = np.random.default_rng(12)
  _check_in_shard_map(mesh1, _cube, (rng.normal(size=64),), (P("x"),))
  y0 = np.stack([rng.uniform(0.2, 1.0, 8), rng.uniform(-1, 1, 8)], axis=1)
  damping = np.asarray(0.3)  # replicated args: its gradient sums every device's trajectories
  oscillator = lambda t, y, c: jnp.stack([y[1], -y[0] - c * y[1]])
  run = lambda y, c: ode.dop853(oscillator, y, (0.0, 2.0), args=c, t_eval=jnp.array([1.0, 2.0]),
                                rtol=1e-11, atol=1e-11).ys
  _check_in_shard_map(mesh1, run, (y0, damping), (P("x"), P()), rtol=1e-9)
  # Unjitted: the eager shard_map's trace is current while the right-hand side's Jacobian is
  # made for the sensitivities (its constants folded outside it)
  _check_in_shard_map(mesh1, run, (y0, damping), (P("x"), P()), eager=True, rtol=1e-9)


@pytest.mark.parametrize("case", ["spherical_harmonics", "tensor_product", "segment_sum",
                                  "gather", "conv"])
def test_shard_map_equivariant_edges_split(mesh1, case):
  # A graph's edges split over the devices, its node features replicated (the usual way to
  # spread a message-passing layer): each device's messages summed into the nodes, then a psum.
  from jaxext import equivariant as eq
  rng = np.random.default_rng(13)
  ix, iy, io = "4x0e+4x1o+2x2e", "0e+1o+2e", "4x0e+4x1o+2x2e"
  nw = _num_weights(ix, iy, io)
  nodes, edges = 8, 64
  x = rng.normal(size=(nodes, 26))
  y, w = rng.normal(size=(edges, 9)), rng.normal(size=(edges, nw))
  senders, receivers = rng.integers(0, nodes, edges), rng.integers(0, nodes, edges)
  e, n = P("x"), P()
  check = functools.partial(_check_in_shard_map, mesh1)
  if case == "spherical_harmonics":
    check(lambda v: eq.spherical_harmonics(range(4), v, normalize=True),
          (rng.normal(size=(edges, 3)),), (e,))
  elif case == "tensor_product":  # per-edge rows, one weight vector shared (replicated)
    check(lambda a, b, c: eq.tensor_product(a, b, c, ix, iy, io),
          (rng.normal(size=(edges, 26)), y, w[0]), (e, e, n))
  elif case == "segment_sum":
    check(lambda d, s: eq.segment_sum(d, s, nodes), (w, receivers), (e, e), reduce=True)
  elif case == "gather":
    check(eq.gather, (x, senders), (n, e))
  else:
    check(lambda a, b, c, s, r: eq.conv(a, b, c, s, r, nodes, ix, iy, io),
          (x, y, w, senders, receivers), (n, e, e, e, e), reduce=True)


def test_shard_map_over_some_mesh_axes(mesh2):
  # shard_map manual along "a" only ("b" left to the partitioner): each device group's call is
  # lowered directly (before: the partitioner's callback failed on shardings without a mesh).
  rng = np.random.default_rng(17)
  m, e = rng.uniform(0, 6, (8, 8)), rng.uniform(0, 0.9, (8, 8))
  body = lambda m, e: jaxext.kepler(m, e)[0]
  f = jax.jit(jax.shard_map(body, mesh=mesh2, in_specs=(P("a"), P("a")), out_specs=P("a"),
                            axis_names={"a"}))
  sh = NamedSharding(mesh2, P("a", "b"))
  np.testing.assert_array_equal(np.asarray(f(jax.device_put(m, sh), jax.device_put(e, sh))),
                                np.asarray(jaxext.kepler(m, e)[0]))
  g = jax.jit(jax.grad(lambda m, e: jnp.sum(jax.shard_map(
      body, mesh=mesh2, in_specs=(P("a"), P("a")), out_specs=P("a"), axis_names={"a"})(m, e)),
      argnums=(0, 1)))
  for got, want in zip(g(m, e), jax.grad(lambda m, e: jnp.sum(body(m, e)), argnums=(0, 1))(m, e)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-13)


# --- Explicit sharding (jax.sharding.AxisType.Explicit: shardings are part of the types) ----------
# A result's type is split along the op's factors as its operands are, as jax.numpy's are (before,
# every result was typed replicated, and XLA gathered it onto every device).

def _explicit_cases():
  from jaxext import equivariant as eq
  from jaxext import ode
  rng = np.random.default_rng(18)
  u = jnp.array([0.4, 0.2])
  ix, iy, io = _SMALL_IRREPS
  nw = _num_weights(ix, iy, io)
  tp = lambda x, y, w: eq.tensor_product(x, y, w, ix, iy, io)
  curve = lambda t: jaxext.transit_light_curve(t, period=3.0, t0=0.0, a=10.0, impact=0.3, r=0.1,
                                               u=u)
  decay = lambda y: ode.dop853(lambda t, y, c: -c * y, y, (0.0, 1.0), args=0.7, rtol=1e-10,
                               atol=1e-10).y_final
  total = lambda f: jax.grad(lambda *a: _sum_outputs(f(*a)) ** 2, argnums=0)
  m, e = rng.uniform(0, 6, 64), rng.uniform(0, 0.9, 64)
  x, y, w = rng.normal(size=(64, 16)), rng.normal(size=(64, 4)), rng.normal(size=(64, nw))
  return {  # fn, operands (each split along its first axis), each result's expected spec
      "kepler": (jaxext.kepler, (m, e), [P("x"), P("x")]),
      "kepler_grad": (total(jaxext.kepler), (m, e), [P("x")]),
      "limb_dark_flux": (lambda b: jaxext.limb_dark_flux(b, 0.1, u), (m / 5,), [P("x")]),
      "transit_light_curve": (curve, (np.linspace(-0.2, 0.2, 64),), [P("x")]),
      "transit_light_curve_grad": (total(curve), (np.linspace(-0.2, 0.2, 64),), [P("x")]),
      "spherical_harmonics": (lambda v: eq.spherical_harmonics(range(3), v, normalize=True),
                              (y[:, 1:],), [P("x", None)]),
      "tensor_product": (tp, (x, y, w), [P("x", None)]),
      "tensor_product_grad": (total(tp), (x, y, w), [P("x", None)]),
      "dop853": (decay, (rng.uniform(0.5, 1.5, (8, 2)),), [P("x", None)]),
      "numba_elementwise": (_axpy2, (m, e), [P("x")]),
  }


@pytest.mark.parametrize("case", list(_explicit_cases()))
def test_explicit_sharding_types_results_split(explicit_mesh, case):
  fn, args, specs = _explicit_cases()[case]
  want = jax.jit(fn)(*args)
  with jax.set_mesh(explicit_mesh):
    split = [jax.device_put(a, P("x")) for a in args]
    got = _assert_local(fn, *split)
    types = jax.eval_shape(fn, *split)
  for g, t, w, spec in zip(jax.tree.leaves(got), jax.tree.leaves(types), jax.tree.leaves(want),
                           specs):
    assert t.sharding.spec == spec, (t, spec)
    assert g.sharding.spec == spec, (g.sharding, spec)
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)


def _run_explicit(mesh, fn, args, specs, loss):
  """fn and the gradient of loss with respect to every float operand, jitted on the operands put
  with `specs` on the explicit mesh: (the operands as put, the float operands' indices, results,
  gradients, and both unsharded)."""
  floats = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
  grad = jax.grad(loss, argnums=floats)
  with jax.set_mesh(mesh):
    put = [jax.device_put(a, s) for a, s in zip(args, specs)]
    out, grads = jax.jit(fn)(*put), jax.jit(grad)(*put)
  return put, floats, out, grads, jax.jit(fn)(*args), jax.jit(grad)(*args)


def _assert_typed_as(cotangent, operand):
  """The gradient's sharding is its operand's type (jax requires a cotangent to be typed so)."""
  full = lambda spec: tuple(spec) + (None,) * (cotangent.ndim - len(spec))
  assert full(cotangent.sharding.spec) == full(jax.typeof(operand).sharding.spec), (
      cotangent.sharding, operand.sharding)


@pytest.mark.parametrize("case", ["segment_sum", "gather", "conv"])
def test_explicit_sharding_graph_ops(explicit_mesh, case):
  # A graph's ops need every row on every device: split operands are replicated first (before,
  # jax refused their sorts and indexing), the results are typed replicated, and each gradient is
  # typed as its operand.
  from jaxext import equivariant as eq
  rng = np.random.default_rng(19)
  ix, iy, io = _SMALL_IRREPS
  nw = _num_weights(ix, iy, io)
  x, y, w = rng.normal(size=(8, 16)), rng.normal(size=(64, 4)), rng.normal(size=(64, nw))
  senders, receivers = rng.integers(0, 8, 64), rng.integers(0, 8, 64)
  split, whole = P("x"), P()
  fn, args, specs = {
      "segment_sum": (lambda d, i: eq.segment_sum(d, i, 8), (w, receivers), (split, split)),
      "gather": (eq.gather, (x, senders), (whole, split)),
      "conv": (lambda x, y, w, s, r: eq.conv(x, y, w, s, r, 8, ix, iy, io),
               (x, y, w, senders, receivers), (whole, split, split, split, split)),
  }[case]
  put, floats, out, grads, want, want_grads = _run_explicit(
      explicit_mesh, fn, args, specs, lambda *a: jnp.sum(fn(*a) ** 2))
  assert all(e is None for e in out.sharding.spec)
  np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-12)
  for i, g, w in zip(floats, grads, want_grads):
    _assert_typed_as(g, put[i])
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12)


def _explicit_mixed_cases():
  from jaxext import equivariant as eq
  from jaxext import ode
  rng = np.random.default_rng(20)
  u = jnp.array([0.4, 0.2])
  ix, iy, io = _SMALL_IRREPS
  nw = _num_weights(ix, iy, io)
  t = np.tile(np.linspace(-0.2, 0.2, 16), (4, 1))
  periods = np.array([[2.5], [3.0], [3.5], [4.0]])
  curve = lambda t, p: jaxext.transit_light_curve(t, period=p, t0=0.0, a=10.0, impact=0.3, r=0.1,
                                                  u=u)
  decay = lambda y, c: ode.dop853(lambda t, y, c: -c * y, y, (0.0, 1.0), args=c, rtol=1e-10,
                                  atol=1e-10).y_final
  x, y = rng.normal(size=(64, 16)), rng.normal(size=(64, 4))
  split, whole = P("x"), P()
  return {  # fn, operands, their specs: the gradient with respect to every float operand
      "kepler": (jaxext.kepler, (rng.uniform(0, 6, 64), rng.uniform(0, 0.9, 64)), (split, whole)),
      "limb_dark_flux": (lambda b, r: jaxext.limb_dark_flux(b, r, u),
                         (rng.uniform(0, 1.2, 64), rng.uniform(0.05, 0.2, 64)), (whole, split)),
      "transit_curves_split": (curve, (t, periods), (split, whole)),
      "transit_times_split": (curve, (t, periods), (P(None, "x"), whole)),
      "transit_periods_split": (curve, (t, periods), (whole, split)),
      "tensor_product_shared_weights": (lambda a, b, c: eq.tensor_product(a, b, c, ix, iy, io),
                                        (x, y, rng.normal(size=nw)), (split, split, whole)),
      "dop853": (decay, (rng.uniform(0.5, 1.5, (8, 2)), np.asarray(0.7)), (split, whole)),
      "segment_sum_vmapped": (jax.vmap(lambda d: eq.segment_sum(d, np.arange(16) % 4, 4)),
                              (rng.normal(size=(8, 16, 3)),), (split,)),
      "gather_vmapped": (jax.vmap(lambda a: eq.gather(a, np.arange(16) % 4)),
                         (rng.normal(size=(8, 4, 3)),), (split,)),
  }


@pytest.mark.parametrize("case", list(_explicit_mixed_cases()))
def test_explicit_sharding_mixed_operands(explicit_mesh, case):
  # Operands split and replicated side by side (or batched graph ops split along the batch):
  # values and gradients as unsharded, each gradient typed as its operand (jax requires it).
  fn, args, specs = _explicit_mixed_cases()[case]
  put, _, out, grads, want, want_grads = _run_explicit(
      explicit_mesh, fn, args, specs, lambda *a: _sum_outputs(fn(*a)) ** 2)
  for g, w in zip(jax.tree.leaves(out), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-12)
  for a, g, w in zip(put, grads, want_grads):
    _assert_typed_as(g, a)
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)
