"""jaxext's public API is typed (issue #33): every public function and method annotated on every
parameter and its return (or, where an e3nn_jax.IrrepsArray in gives one out, every overload);
mypy (pinned) passes over the package, the examples and tests/typing_usage.py (what a user's
checker sees: `assert_type`s and misuses it must reject); and mypy does reject a misuse."""

import inspect
import os
import pathlib
import typing

import mypy.api
import pytest

import jaxext
import public_api

ROOT = pathlib.Path(os.environ.get("JAXEXT_SOURCE_ROOT", "."))


def _public_functions():
  for name, obj in public_api.exported():
    if inspect.isfunction(obj) and obj.__module__.startswith("jaxext"):
      yield name, obj
  for cls in public_api.CLASSES:
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
      if not name.startswith("_") and fn.__module__.startswith("jaxext"):
        yield f"{cls.__module__}.{cls.__qualname__}.{name}", fn
  pytest.importorskip("numba")
  from jaxext.numba_bridge.kernel import NumbaKernel  # noqa: PLC0415
  for name in ("__call__", "defjvp", "defvjp"):  # what the API reference documents
    yield f"NumbaKernel.{name}", getattr(NumbaKernel, name)


PUBLIC = dict(_public_functions())


def test_the_public_api_is_found():
  for name in ["jaxext.kepler", "jaxext.transit_light_curve", "jaxext.numba_kernel",
               "jaxext.ode.dop853", "jaxext.ode.rhs", "jaxext.ode.models.earth",
               "jaxext.equivariant.conv", "jaxext.equivariant.e3nn_ops.tensor_product",
               "jaxext.ode.dop853.Solution.evaluate", "jaxext.ode.models.Atmosphere.density_at",
               "NumbaKernel.defvjp"]:
    assert name in PUBLIC, sorted(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_parameter_and_return_is_annotated(name):
  fn = PUBLIC[name]
  signatures = [inspect.signature(o) for o in typing.get_overloads(fn)] or [inspect.signature(fn)]
  for sig in signatures:
    missing = [p.name for p in sig.parameters.values()
               if p.annotation is inspect.Parameter.empty and p.name != "self"]
    assert not missing, f"{name}{sig}: parameters without a type: {missing}"
    assert sig.return_annotation is not inspect.Signature.empty, f"{name}{sig}: no return type"
  if fn is not jaxext.platforms:
    assert "**" not in str(signatures[0]) or name == "NumbaKernel.__call__", \
        f"{name}: options hidden in **kwargs"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return tmp_path_factory.mktemp("mypy_cache")  # jax's analysis, shared by the runs


def _mypy(*paths, cache):
  out, err, status = mypy.api.run(
      ["--config-file", str(ROOT / "mypy.ini"), "--cache-dir", str(cache),
       "--explicit-package-bases", *map(str, paths)])
  return status, out + err


def test_mypy_passes_over_the_package_examples_and_usage(cache):
  status, report = _mypy(ROOT / "jaxext", ROOT / "examples", ROOT / "tests" / "typing_usage.py",
                         cache=cache)
  assert status == 0, report


def test_mypy_rejects_a_misuse(tmp_path, cache):
  bad = tmp_path / "misuse.py"
  bad.write_text("import jaxext\nfrom jaxext import ode\n"
                 "flux = jaxext.limb_dark_flux('0.3', 0.1, 0.5)\n"
                 "sol = ode.dop853(lambda t, y, a: y, y0=1.0, t_span=(0, 1), max_steps=1.5)\n"
                 "sol.y_final.irreps\n")
  status, report = _mypy(bad, cache=cache)
  assert status == 1, report
  for line, code in [(3, "arg-type"), (4, "arg-type"), (5, "attr-defined")]:
    assert any(f"misuse.py:{line}: error" in r and f"[{code}]" in r for r in report.splitlines()), \
        (line, code, report)
