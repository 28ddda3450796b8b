"""jaxext.platforms(): which platforms each op runs on in this installation, checked against the
registered handlers and by running every op it lists for the CPU; optional dependencies missing
give the ImportError naming the extra that installs them (issue #33)."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxext
from jaxext import _ffi
from jaxext import equivariant as eq
from jaxext import ode

jax.config.update("jax_enable_x64", True)


def test_every_op_names_known_targets():
  known = set(_ffi._SYMBOLS) | set(_ffi._STAGED_SYMBOLS)
  for op, (targets, _) in _ffi._OPS.items():
    assert targets and set(targets) <= known, (op, set(targets) - known)


def test_cpu_ops_are_listed_and_cuda_only_with_its_handlers():
  got = jaxext.platforms()
  assert set(got) == set(_ffi._OPS)
  cuda = "CUDA" in _ffi.register_all()
  for op, where in got.items():
    if op == "numba_cuda_kernel":
      assert "cpu" not in where
    else:
      assert "cpu" in where, (op, where)
    assert ("cuda" in where) <= cuda, (op, where)


@jax.jit
def _double(x):
  return _double_kernel(x)


@jaxext.numba_kernel(outputs=lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype))
def _double_kernel(x, out):
  for i in range(x.shape[0]):
    out[i] = 2 * x[i]


RUN_ON_CPU = {
    "kepler": lambda: jaxext.kepler(jnp.array([1.0]), 0.1)[0],
    "limb_dark_flux": lambda: jax.hessian(lambda b: jaxext.limb_dark_flux(b, 0.1, jnp.array(
        [0.4, 0.2])))(0.5),
    "quadratic_limb_dark_flux": lambda: jaxext.quadratic_limb_dark_flux(0.5, 0.1, 0.4, 0.2),
    "transit_light_curve": lambda: jax.grad(lambda a: jaxext.transit_light_curve(
        jnp.array([0.0, 0.1]), period=3.0, t0=0.0, a=a, impact=0.2, r=0.1,
        u=jnp.array([0.4])).sum())(10.0),
    "numba_kernel": lambda: _double(jnp.arange(3.0)),
    "ode.dop853": lambda: ode.dop853(ode.models.two_body(1.0), jnp.array(
        [[1.0, 0, 0, 0, 1.0, 0]]), (0.0, 1.0)).y_final,
    "equivariant.spherical_harmonics": lambda: eq.spherical_harmonics(2, jnp.ones((2, 3))),
    "equivariant.tensor_product": lambda: eq.tensor_product(
        jnp.ones((2, 1)), jnp.ones((2, 1)), jnp.ones((2, 1)), "0e", "0e", "0e"),
    "equivariant.segment_sum": lambda: eq.segment_sum(jnp.ones((3, 2)), jnp.array([0, 1, 1]), 2),
    "equivariant.conv": lambda: eq.conv(jnp.ones((2, 1)), jnp.ones((3, 1)), jnp.ones((3, 1)),
                                        jnp.array([0, 1, 1]), jnp.array([1, 0, 1]), 2, "0e",
                                        "0e", "0e"),
}


@pytest.mark.parametrize("op", sorted(RUN_ON_CPU))
def test_what_is_listed_for_the_cpu_runs_there(op):
  assert "cpu" in jaxext.platforms()[op]
  out = np.asarray(RUN_ON_CPU[op]())
  assert np.all(np.isfinite(out))


def test_a_missing_optional_dependency_unlists_its_op(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "numba" else real(name, *a))
  got = jaxext.platforms()
  assert got["numba_kernel"] == () and "cpu" in got["kepler"]


def test_numba_cuda_missing_asks_for_the_extra(monkeypatch):
  from jaxext.numba_bridge import compile_cuda
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "numba_cuda" else real(name, *a))
  with pytest.raises(ImportError, match=r"pip install 'jaxext\[numba-cuda\]'"):
    compile_cuda._import_numba_cuda()
  assert "numba_cuda_kernel" in jaxext.platforms() and jaxext.platforms()["numba_cuda_kernel"] == ()


def test_the_numba_decorators_show_their_keywords():
  """help(jaxext.numba_kernel) names every option (it showed `(outputs, **options)`), and they are
  the implementation's own."""
  import inspect

  from jaxext.numba_bridge import kernel
  for public, impl in ((jaxext.numba_kernel, kernel.numba_kernel),
                       (jaxext.numba_cuda_kernel, kernel.numba_cuda_kernel)):
    shown = inspect.signature(public).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in shown.values())
    assert list(shown) == list(inspect.signature(impl).parameters)
    assert all(shown[k].default == p.default
               for k, p in inspect.signature(impl).parameters.items())
