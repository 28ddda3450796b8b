"""jaxext's public API as the tests read it: the modules users import and the names each exports
(`__all__`), and the public classes whose methods users call. One definition for the annotation
check (typecheck_test) and the API reference's coverage check (readme_test)."""

import jaxext
from jaxext import equivariant, ode
from jaxext.equivariant import e3nn_ops

try:  # optional: flax (no CPython 3.15 wheels of its tensorstore dependency)
  from jaxext.equivariant import flax as equivariant_flax
except ImportError:
  equivariant_flax = None
try:  # optional: jax-md (the same)
  from jaxext.equivariant import jax_md as equivariant_jax_md
except ImportError:
  equivariant_jax_md = None

MODULES = (jaxext, ode, ode.models, equivariant, e3nn_ops) + tuple(
    m for m in (equivariant_flax, equivariant_jax_md) if m)
CLASSES = (ode.Solution, ode.Rhs, ode.Event, ode.models.Model, ode.models.Atmosphere) + (
    (equivariant_flax.MessagePassing,) if equivariant_flax else ())


def exported():
  """(qualified name, object) of every name a public module exports."""
  for module in MODULES:
    for name in module.__all__:
      yield f"{module.__name__}.{name}", getattr(module, name)
