"""jaxext's public API as the tests read it: the modules users import and the names each exports
(`__all__`), and the public classes whose methods users call. One definition for the annotation
check (typecheck_test) and the API reference's coverage check (readme_test)."""

import jaxext
from jaxext import equivariant, ode
from jaxext.equivariant import e3nn_ops

MODULES = (jaxext, ode, ode.models, equivariant, e3nn_ops)
CLASSES = (ode.Solution, ode.Rhs, ode.Event, ode.models.Model, ode.models.Atmosphere)


def exported():
  """(qualified name, object) of every name a public module exports."""
  for module in MODULES:
    for name in module.__all__:
      yield f"{module.__name__}.{name}", getattr(module, name)
