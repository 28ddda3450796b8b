"""jaxext's ops through jax.export: serialized for the CPU and CUDA together, or for CUDA alone
from a process that has no GPU (and, in a CPU-only build, no CUDA handlers).

* For ("cpu", "cuda"): the module holds both platforms' calls, survives serialization, and runs
  here giving what the jitted function gives.
* For ("cuda",) alone, lowered here: a child process whose CPU runs jaxext's CUDA handlers (the
  emulation, tests/cuda_emu) runs the deserialized module, against the CPU's values. That is the
  code a GPU would run, lowered where no GPU was (DOP853's CUDA handler is not emulated: its
  module's call is checked here, its execution by tools/gpu_checks.py).
* Shape-polymorphic exports, and the errors: a platform jaxext has no kernels for, a CPU-only
  Numba kernel exported for CUDA.
"""

import os
import pickle
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402
from jaxext import _ffi, ode  # noqa: E402
from jaxext import equivariant as eq  # noqa: E402

_IRREPS = ("8x0e+8x1o", "0e+1o+2e", "8x0e+8x1o+8x2e")


def _kepler(dtype):
  m = np.linspace(-7.0, 7.0, 33).astype(dtype)
  e = np.linspace(0.0, 0.95, 33).astype(dtype)
  value = lambda m, e: jnp.stack(jaxext.kepler(m, e))
  grad = jax.grad(lambda m, e: jnp.sum(jaxext.kepler(m, e)[0] * jnp.cos(m)), argnums=(0, 1))
  return [(value, (m, e)), (grad, (m, e))]


def _limb_dark():
  b = np.linspace(0.0, 1.3, 40)
  r = np.full(40, 0.1)
  u = np.array([0.4, 0.26])
  value = lambda b, r, u: jaxext.limb_dark_flux(b, r, u)
  grad = jax.grad(lambda b, r, u: jnp.sum(jaxext.limb_dark_flux(b, r, u) ** 2), argnums=(0, 1, 2))
  return [(value, (b, r, u)), (grad, (b, r, u))]


def _transit():
  t = np.linspace(-0.3, 0.3, 64)
  params = np.array([3.0, 0.0, 12.0, 0.3, 0.1])

  def curve(t, p):
    return jaxext.transit_light_curve(t, period=p[0], t0=p[1], a=p[2], impact=p[3], r=p[4],
                                      u=jnp.array([0.4, 0.26]))
  return [(curve, (t, params)), (jax.grad(lambda t, p: jnp.sum(curve(t, p)), argnums=1),
                                 (t, params))]


def _layer():
  nodes, edges = 10, 48
  rng = np.random.default_rng(7)
  snd = rng.integers(0, nodes, edges).astype(np.int32)
  rcv = rng.integers(0, nodes, edges).astype(np.int32)
  x = rng.normal(size=(nodes, 32))
  vec = rng.normal(size=(edges, 3))
  nw = sum(int(_IRREPS[0].split("+")[i1].split("x")[0]) for i1, _, _ in eq.paths(*_IRREPS))
  w = rng.normal(size=(edges, nw))

  def energy(x, w, vec):  # every equivariant op; through grad, every mode of the products
    sh = eq.spherical_harmonics("0e+1o+2e", vec)
    h = eq.conv(x, sh, w, snd, rcv, nodes, *_IRREPS)
    t = eq.tensor_product(eq.gather(x, snd), sh, w, *_IRREPS)
    return jnp.sum(h ** 2) + jnp.sum(eq.segment_sum(t, rcv, nodes) ** 3)
  return [(energy, (x, w, vec)), (jax.grad(energy, argnums=(0, 1, 2)), (x, w, vec))]


def _orbits():
  model = ode.models.earth(j2=True)
  r = np.array([7000.0, 7200.0, 7500.0])
  v = np.sqrt(ode.models.EARTH_MU / r)
  y0 = np.zeros((3, 6))
  y0[:, 0], y0[:, 4] = r, v
  run = lambda y0: ode.dop853(model, y0, (0.0, 3000.0), rtol=1e-10, atol=1e-9).y_final
  return [(run, (y0,)), (jax.grad(lambda y0: jnp.sum(run(y0)[:, :3] ** 2)), (y0,))]


CASES = {
    "kepler_f32": _kepler(np.float32)[0], "kepler_f64": _kepler(np.float64)[0],
    "kepler_grad": _kepler(np.float64)[1],
    "limb_dark_flux": _limb_dark()[0], "limb_dark_flux_grad": _limb_dark()[1],
    "transit": _transit()[0], "transit_grad": _transit()[1],
    "layer": _layer()[0], "layer_grad": _layer()[1],
    "dop853": _orbits()[0], "dop853_grad": _orbits()[1],
}


def _export(fn, args, platforms, extra_checks=()):
  exported = jax.export.export(
      jax.jit(fn), platforms=platforms,
      disabled_checks=[*jaxext.disabled_checks(), *extra_checks])(*args)
  return jax.export.deserialize(exported.serialize())


def _targets(exported):
  return set(re.findall(r"custom_call @(jaxext_\w+)\(", exported.mlir_module()))


def _calls(exported):
  return len(re.findall(r"custom_call @jaxext_\w+\(", exported.mlir_module()))


def _leaves(tree):
  return [np.asarray(a) for a in jax.tree.leaves(tree)]


@pytest.mark.parametrize("case", CASES)
def test_exported_for_cpu_and_cuda_runs_here(case):
  fn, args = CASES[case]
  both = _export(fn, args, ("cpu", "cuda"))
  assert both.platforms == ("cpu", "cuda")
  # Both platforms' calls are in the module, one branch each: as many calls as the two
  # single-platform modules hold together, the CUDA-only targets among them (the layer's edge
  # cotangents).
  cpu, cuda = _export(fn, args, ("cpu",)), _export(fn, args, ("cuda",))
  assert _targets(cpu) and _targets(both) == _targets(cpu) | _targets(cuda)
  assert _calls(both) == _calls(cpu) + _calls(cuda) and "stablehlo.case" in both.mlir_module()
  if case == "layer_grad":
    assert _targets(cuda) - _targets(cpu) == {"jaxext_conv_edge_cts",
                                              "jaxext_tensor_product_edge_cts"}
  want = jax.jit(fn)(*args)
  got = both.call(*args)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(_leaves(got), _leaves(want)):
    assert g.dtype == w.dtype and g.shape == w.shape
    # The CPU's branch is the CPU's code, which XLA compiles on its own inside the conditional:
    # the jax.numpy around the calls may fuse otherwise (the layer's gradient: 2e-16 of its
    # largest value).
    tol = 8 * np.finfo(w.dtype).eps
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.max(np.abs(w)))


_CHILD = textwrap.dedent("""
    import pickle, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import jaxext
    from jaxext import _ffi
    cases = pickle.load(open(sys.argv[1], "rb"))
    registered = _ffi.register_all()
    # the emulation registers the CUDA handlers, every one a declared CUDA target
    assert set(registered) == {"CUDA"}, registered
    assert set(registered["CUDA"]) <= set(_ffi.declared_targets("CUDA")), registered
    # the CPU, which this process runs, has no handlers of its own here: lowering for it raises
    assert _ffi.lowering_targets("cpu") is None
    try:
      _ffi.require("cpu", "jaxext.kepler")
      raise AssertionError("require did not raise")
    except NotImplementedError as err:
      assert "jaxext.kepler has no cpu kernel" in str(err), err
    out = {}
    for name, (blob, args) in cases.items():
      exported = jax.export.deserialize(blob)
      assert exported.platforms == ("cuda",), exported.platforms
      out[name] = [np.asarray(a) for a in jax.tree.leaves(exported.call(*args))]
    pickle.dump(out, open(sys.argv[2], "wb"))
""")

# CUDA kernels against the CPU's: other summation orders and contractions.
_RTOL = {"kepler_f32": 2e-6}


def test_exported_for_cuda_here_runs_on_the_cuda_handlers(tmp_path):
  emu = os.environ.get("JAXEXT_TEST_EMU_HANDLERS")
  if not emu:
    pytest.skip("needs JAXEXT_TEST_EMU_HANDLERS (tests/BUILD.bazel gives it)")
  # Lowered for CUDA in this process, which has no GPU; the platform check is turned off only to
  # run it on the emulation, whose devices are CPUs.
  platform = jax.export.DisabledSafetyCheck.platform()
  cases, want = {}, {}
  for name, (fn, args) in CASES.items():
    if name.startswith("dop853"):
      continue
    exported = _export(fn, args, ("cuda",), [platform])
    assert exported.platforms == ("cuda",)
    cases[name] = (exported.serialize(), args)
    want[name] = _leaves(jax.jit(fn)(*args))
  # Shape-polymorphic modules, each run at two sizes: the CUDA lowering sizes the graph's tasks
  # and partial rows (runs of more than 128 edges are cut) and the block sums from the symbols.
  for name, sizes in (("graph_grad", [(5, 17), (4, 900)]),  # (~225 edges a node)
                      ("transit_grad", [(5, 1), (9000, 1)])):  # (3 blocks of points)
    fn, specs, make = _polymorphic_cases()[name]
    blob = _export(fn, specs, ("cuda",), [platform]).serialize()
    for n, e in sizes:
      args = make(n, e)
      cases[f"{name}_{n}_{e}"] = (blob, args)
      want[f"{name}_{n}_{e}"] = _leaves(jax.jit(fn)(*args))
  with open(tmp_path / "cases.pkl", "wb") as f:
    pickle.dump(cases, f)
  env = dict(os.environ, JAXEXT_CUDA_EMULATION=os.path.abspath(emu))
  run = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "cases.pkl"),
                        str(tmp_path / "out.pkl")], env=env, capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 0, run.stdout + run.stderr
  with open(tmp_path / "out.pkl", "rb") as f:
    got = pickle.load(f)
  assert set(got) == set(want)
  for name in want:
    assert len(got[name]) == len(want[name]), name
    for g, w in zip(got[name], want[name]):
      assert g.dtype == w.dtype and g.shape == w.shape, name
      rtol = _RTOL.get(name, 1e-12)
      np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.max(np.abs(w)), err_msg=name)


def test_disabled_checks_name_every_target():
  names = {c.is_custom_call() for c in jaxext.disabled_checks()}
  assert names == set(_ffi.declared_targets("cpu")) | set(_ffi.declared_targets("CUDA"))
  # the declared CPU targets are this build's own, one for one
  assert set(_ffi.register_all()["cpu"]) == set(_ffi.declared_targets("cpu"))
  assert {"jaxext_conv_edge_cts", "jaxext_numba_cuda_call"} <= set(_ffi.declared_targets("CUDA"))
  # without them jax refuses to serialize the calls
  with pytest.raises(ValueError, match="jaxext_kepler_f64"):
    jax.export.export(jax.jit(CASES["kepler_f64"][0]))(*CASES["kepler_f64"][1])


def _graph_loss(x, vectors, w, senders, receivers):
  # the node count from x's shape: symbolic under a shape-polymorphic export
  sh = eq.spherical_harmonics("0e+1o+2e", vectors)
  h = eq.conv(x, sh, w, senders, receivers, x.shape[0], *_IRREPS)
  t = eq.tensor_product(eq.gather(x, senders), sh, w, *_IRREPS)
  return jnp.sum(h ** 2) + jnp.sum(eq.segment_sum(t, receivers, x.shape[0]) ** 2)


def _e3nn_loss(x, vectors, senders, receivers):
  from jaxext.equivariant import e3nn_ops  # noqa: PLC0415
  e3nn = pytest.importorskip("e3nn_jax")
  xs = e3nn.IrrepsArray(_IRREPS[0], x)
  sh = e3nn_ops.spherical_harmonics("0e+1o+2e", e3nn.IrrepsArray("1o", vectors), normalize=True)
  h = e3nn_ops.tensor_product_conv(xs, sh, senders, receivers, x.shape[0], filter_ir_out="0e+1o")
  m = e3nn_ops.scatter_sum(xs[senders], dst=receivers, output_size=x.shape[0])
  return jnp.sum(h.array ** 2) + jnp.sum(m.array ** 3)


def _transit_curve(t, p):
  return jaxext.transit_light_curve(t, period=p[0], t0=p[1], a=12.0, impact=0.3, r=0.1,
                                    u=jnp.array([0.4, 0.26]))


_CONST_IDS = np.random.default_rng(4).integers(0, 3, (2, 17)).astype(np.int32)


def _polymorphic_cases():
  """name: (function, its argument specs in the symbols n (nodes, points) and e (edges), and
  arguments for given n and e)."""
  n, e = jax.export.symbolic_shape("n, e")
  f64 = lambda *shape: jax.ShapeDtypeStruct(shape, np.float64)
  i32 = lambda *shape: jax.ShapeDtypeStruct(shape, np.int32)
  nw = CASES["layer"][1][1].shape[1]
  rng = np.random.default_rng(3)
  ids = lambda nodes, edges: rng.integers(0, nodes, edges).astype(np.int32)
  kepler = CASES["kepler_grad"][0]
  return {
      "kepler_grad": (kepler, (f64(n), f64(n)),
                      lambda n, e: (np.linspace(0.0, 6.0, n), np.full(n, 0.3))),
      "transit": (_transit_curve, (f64(n), f64(2)),
                  lambda n, e: (np.linspace(-0.3, 0.3, n), np.array([3.0, 0.01]))),
      "transit_grad": (jax.grad(lambda t, p: jnp.sum(_transit_curve(t, p) ** 2), argnums=(0, 1)),
                       (f64(n), f64(2)),
                       lambda n, e: (np.linspace(-0.3, 0.3, n), np.array([3.0, 0.01]))),
      "graph_grad": (jax.grad(_graph_loss, argnums=(0, 1, 2)),
                     (f64(n, 32), f64(e, 3), f64(e, nw), i32(e), i32(e)),
                     lambda n, e: (rng.normal(size=(n, 32)), rng.normal(size=(e, 3)),
                                   rng.normal(size=(e, nw)), ids(n, e), ids(n, e))),
      # a graph given as constants (ids in [0, 3)) with the node count symbolic
      "constant_graph_grad": (
          jax.grad(lambda x, v, w: _graph_loss(x, v, w, _CONST_IDS[0], _CONST_IDS[1]),
                   argnums=(0, 1, 2)), (f64(n, 32), f64(17, 3), f64(17, nw)),
          lambda n, e: (rng.normal(size=(n, 32)), rng.normal(size=(17, 3)),
                        rng.normal(size=(17, nw)))),
      "e3nn_grad": (jax.grad(_e3nn_loss, argnums=(0, 1)), (f64(n, 32), f64(e, 3), i32(e), i32(e)),
                    lambda n, e: (rng.normal(size=(n, 32)), rng.normal(size=(e, 3)), ids(n, e),
                                  ids(n, e))),
  }


@pytest.mark.parametrize("case", ["kepler_grad", "transit", "transit_grad", "graph_grad",
                                  "constant_graph_grad", "e3nn_grad"])
def test_shape_polymorphic_export_for_cpu_and_cuda(case):
  # One export for any number of points, or of nodes and edges (an MD potential's atoms and
  # neighbour list): counts given as x.shape[0] are symbolic there too.
  fn, specs, make = _polymorphic_cases()[case]
  exported = _export(fn, specs, ("cpu", "cuda"))
  if case == "graph_grad":
    assert {"jaxext_conv", "jaxext_segment_sum", "jaxext_tensor_product"} <= _targets(exported)
  if case == "transit":
    assert "flux_series = 0" in exported.mlir_module()
  sizes = [(5, 17), (12, 300), (3, 1)] + [(5000, 1)] * case.startswith("transit")
  for n, e in sizes:
    args = make(n, e)
    got, want = exported.call(*args), jax.jit(fn)(*args)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(_leaves(got), _leaves(want)):
      assert g.shape == w.shape, (case, n, e)
      # XLA compiles the reductions around the calls for symbolic sizes otherwise (and transit
      # takes the exact occultation at any size, the series from 4096 points when the size is
      # known: ~1e-15 apart)
      tol = 64 * np.finfo(w.dtype).eps
      np.testing.assert_allclose(g, w, rtol=tol, atol=tol * np.max(np.abs(w)),
                                 err_msg=f"{case} n={n} e={e}")


@pytest.mark.parametrize("case", ["limb_dark_flux_grad", "transit_grad", "layer_grad"])
def test_sharded_export(case):
  # jit sharding inside an export: the module cannot hold custom partitioning's callbacks, so the
  # calls run whole on each device, their operands gathered; the values are the unsharded ones.
  fn, args = CASES[case]
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
  spec = lambda a: jax.sharding.PartitionSpec("x" if np.shape(a)[0] % 4 == 0 else None)
  shardings = [jax.sharding.NamedSharding(mesh, spec(a)) for a in args]
  assert any(s.spec != jax.sharding.PartitionSpec(None) for s in shardings)
  args = [jax.device_put(a, s) for a, s in zip(args, shardings)]
  exported = _export(jax.jit(fn, in_shardings=shardings), args, ("cpu", "cuda"))
  assert exported.nr_devices == 4
  got, want = exported.call(*args), jax.jit(fn)(*args)
  for g, w in zip(_leaves(got), _leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-14 * np.max(np.abs(w)))


def test_shard_map_export():
  # inside jax.shard_map each device's call takes its block, exported as when jitted
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("x",))
  P = jax.sharding.PartitionSpec
  b, r, u = CASES["limb_dark_flux"][1]
  fn = jax.shard_map(lambda b, r: jaxext.limb_dark_flux(b, r, u), mesh=mesh,
                     in_specs=(P("x"), P("x")), out_specs=P("x"))
  b, r = (jax.device_put(a, jax.sharding.NamedSharding(mesh, P("x"))) for a in (b, r))
  exported = _export(fn, (b, r), ("cpu", "cuda"))
  assert exported.nr_devices == 4 and not re.search("all.gather", exported.mlir_module())
  np.testing.assert_array_equal(exported.call(b, r), jax.jit(fn)(b, r))
  np.testing.assert_allclose(exported.call(b, r), jaxext.limb_dark_flux(b, r, u), rtol=1e-15)


def test_platform_without_jaxext_kernels_is_named():
  fn, args = CASES["kepler_f64"]
  with pytest.raises(NotImplementedError, match="rocm"):
    jax.export.export(jax.jit(fn), platforms=("rocm",),
                      disabled_checks=jaxext.disabled_checks())(*args)
  with pytest.raises(NotImplementedError, match="rocm"):
    jax.export.export(jax.jit(fn), platforms=("cpu", "rocm"),
                      disabled_checks=jaxext.disabled_checks())(*args)


def test_cpu_numba_kernel_exported_for_cuda_says_it_is_a_cpu_kernel():
  pytest.importorskip("numba")

  @jaxext.numba_kernel(outputs=lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype))
  def double(x, out):
    for i in range(x.shape[0]):
      out[i] = 2 * x[i]
  x = np.arange(4.0)
  for platforms in (("cuda",), ("cpu", "cuda")):
    with pytest.raises(NotImplementedError, match="CPU kernel"):
      _export(double, (x,), platforms)
  np.testing.assert_array_equal(_export(double, (x,), ("cpu",)).call(x), 2 * x)


def test_python_right_hand_side_exported_for_cuda_needs_numba_cuda():
  # A Python right-hand side on CUDA is compiled by numba-cuda as the module is lowered; without
  # it (or without the CUDA libraries it loads) the export says what to install.
  run = lambda y0: ode.dop853(lambda t, y, k: jnp.stack([y[1], -k * y[0]]), y0, (0.0, 1.0),
                              args=2.0).y_final
  y0 = np.ones((2, 2))
  try:
    from jaxext.numba_bridge import compile_cuda
    compile_cuda._import_numba_cuda()
  except ImportError:
    with pytest.raises(ImportError, match=r"numba-cuda.*jaxext\[numba-cuda\]"):
      _export(run, (y0,), ("cpu", "cuda"))
    return
  exported = _export(run, (y0,), ("cpu", "cuda"))  # a --config=cuda build has the toolkit
  assert _targets(exported) == {"jaxext_dop853"} and 'device_code = ""' not in exported.mlir_module()
