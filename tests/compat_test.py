"""jaxext/_jax_compat.py against the jax it runs with (CI runs this under every jax set).

The gates are checked by behaviour: a toy primitive registered only through the compat layer must
see what vmap and jvp really pass, so a jax release that changes the conventions fails here first,
with the name of the helper to fix.
"""

import os
import re

# two host devices for the shard_map test's mesh (a mesh axis of size 1 may be dropped from types)
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=2")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.extend.core import Primitive  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402  (after enabling x64)
from jaxext import _jax_compat as compat  # noqa: E402

seen = {}

toy_p = Primitive("jaxext_compat_test_toy")  # toy(x, y) = x * y, element-wise; eager only


def _toy_batch(args, dims):
  seen["dims"] = dims
  x, y = args
  size = compat.batch_size(args, dims)
  x = compat.batch_axis_to_front(x, dims[0], size)
  y = compat.batch_axis_to_front(y, dims[1], size)
  return toy_p.bind(x, y), 0


def _toy_jvp(primals, tangents):
  seen["zero"] = tuple(compat.is_zero_tangent(t) for t in tangents)
  x, y = primals
  dx, dy = (compat.instantiate_zeros(t) for t in tangents)
  return toy_p.bind(x, y), dx * y + x * dy


toy_p.def_abstract_eval(lambda x, y: jax.core.ShapedArray(x.shape, x.dtype))
toy_p.def_impl(lambda x, y: np.asarray(x) * np.asarray(y))
compat.register_batching(toy_p, _toy_batch)
compat.register_jvp(toy_p, _toy_jvp)


def test_version_parsing():
  assert compat._parse_version("0.12.0.1") == (0, 12, 0)
  assert compat._parse_version("0.10.0") == (0, 10, 0)
  assert compat._parse_version("0.13.0.dev20270101") == (0, 13, 0)
  assert compat._parse_version("1.0") == (1, 0, 0)
  with pytest.raises(RuntimeError, match="cannot parse"):
    compat._parse_version("nightly")
  assert compat.JAX_VERSION == compat._parse_version(jax.__version__)
  assert compat.JAX_VERSION >= (0, 10, 0)


def test_vmap_passes_not_mapped_for_unbatched_operands():
  x = jnp.arange(6.0).reshape(3, 2)
  y = jnp.array([10.0, 20.0])
  got = jax.vmap(toy_p.bind, in_axes=(0, None))(x, y)
  assert seen["dims"] == (0, compat.NOT_MAPPED)
  assert compat.is_mapped(seen["dims"][0]) and not compat.is_mapped(seen["dims"][1])
  np.testing.assert_array_equal(got, np.asarray(x) * np.asarray(y))
  # Batch axis not in front, and the other operand unmapped.
  got = jax.vmap(toy_p.bind, in_axes=(None, 1))(y, x.T)
  assert seen["dims"] == (compat.NOT_MAPPED, 1)
  np.testing.assert_array_equal(got, np.asarray(x) * np.asarray(y))


def test_batch_axis_to_front():
  x = jnp.arange(24.0).reshape(2, 3, 4)
  np.testing.assert_array_equal(compat.batch_axis_to_front(x, 2, 4), np.moveaxis(np.asarray(x), 2, 0))
  b = compat.batch_axis_to_front(x, compat.NOT_MAPPED, 5)
  assert b.shape == (5, 2, 3, 4)
  np.testing.assert_array_equal(b[3], x)


def test_jvp_sees_symbolic_zero_tangents():
  x, y = 3.0, 4.0
  assert jax.grad(toy_p.bind, argnums=0)(x, y) == 4.0
  assert seen["zero"] == (False, True)
  assert jax.grad(toy_p.bind, argnums=1)(x, y) == 3.0
  assert seen["zero"] == (True, False)


def test_no_jax_internals_outside_the_compat_module():
  pkg = os.path.dirname(jaxext.__file__)
  internal = re.compile(r"^\s*(from|import)\s+jax\.(interpreters|_src|lib)\b|jax\._src\.", re.M)
  offenders = []
  for root, _, files in os.walk(pkg):
    for f in files:
      if f.endswith(".py") and f != "_jax_compat.py":
        path = os.path.join(root, f)
        with open(path) as fh:
          if internal.search(fh.read()):
            offenders.append(os.path.relpath(path, pkg))
  assert not offenders, f"jax internals used outside jaxext/_jax_compat.py: {offenders}"


def test_every_op_is_vmappable():
  """The user-visible regression of jax 0.12: vmap of each op raised AttributeError."""
  m = jnp.linspace(-3, 3, 6).reshape(2, 3)
  s, _ = jax.vmap(jaxext.kepler, in_axes=(0, None))(m, 0.5)
  np.testing.assert_array_equal(s, jaxext.kepler(m, 0.5)[0])
  b = jnp.linspace(0, 1.2, 6).reshape(2, 3)
  f = jax.vmap(jaxext.limb_dark_flux, in_axes=(0, None, None))(b, 0.1, jnp.array([0.4, 0.2]))
  np.testing.assert_array_equal(f, jaxext.limb_dark_flux(b, 0.1, jnp.array([0.4, 0.2])))


def test_shard_map_sees_results_vary_as_their_operands():
  """compat.varying_axes reads jax's record of the manual axes a value varies over, and
  compat.Primitive keeps it: a result of a block varies, one of replicated operands does not (a
  jax that moves the record fails here; //tests:sharding_test has the gradients)."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("i",))
  P = jax.sharding.PartitionSpec
  axes = {}

  def body(m, e):
    s_block, _ = jaxext.kepler(m, e)
    s_whole, _ = jaxext.kepler(e, e)
    axes.update(m=compat.varying_axes(jax.typeof(m)), e=compat.varying_axes(jax.typeof(e)),
                block=compat.varying_axes(jax.typeof(s_block)),
                whole=compat.varying_axes(jax.typeof(s_whole)))
    return s_block

  m = jnp.linspace(0.0, 6.0, 8)
  assert len(jax.devices()) == 2
  run = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"),
                              check_vma=True))
  np.testing.assert_array_equal(run(m, jnp.full(4, 0.3)), jaxext.kepler(m, 0.3)[0])
  assert axes == {"m": {"i"}, "e": set(), "block": {"i"}, "whole": set()}


def test_every_primitive_is_typed_for_shard_map():
  """Every primitive jaxext defines is a compat.Primitive (a plain jax.extend one would type its
  results invariant inside shard_map and break gradients there)."""
  import importlib  # noqa: PLC0415
  import pkgutil  # noqa: PLC0415
  found = {}
  for info in pkgutil.walk_packages(jaxext.__path__, "jaxext."):
    try:
      module = importlib.import_module(info.name)
    except ImportError:  # an optional dependency's module (numba-cuda)
      continue
    for value in vars(module).values():
      if isinstance(value, Primitive):
        found[value.name] = isinstance(value, compat.Primitive)
  assert len(found) >= 15, sorted(found)
  assert all(found.values()), sorted(name for name, ok in found.items() if not ok)
