"""e3nn-jax's array type, duck-typed (e3nn_jax is never imported here).

An `IrrepsArray` (anything with `.irreps` and `.array`) given to an op of jaxext.equivariant is
read as its array, its irreps standing in for (or checked against) the op's irreps argument; the
result is an IrrepsArray of the same class when an input was one. `Irreps` objects are read by
`_irreps.parse`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TypeAlias

from jaxext.equivariant import _irreps

# The static types of e3nn-jax's objects as jaxext's signatures name them. e3nn-jax ships no type
# information, so a type checker sees its objects as Any: these aliases document, and overloads
# keep a plain jax.Array in -> jax.Array out precise.
IrrepsArray: TypeAlias = Any
Irreps: TypeAlias = Any
# An irreps argument: a string such as "64x0e+64x1o", (multiplicity, l, parity) triples, or an
# e3nn_jax.Irreps.
IrrepsLike: TypeAlias = str | Sequence[tuple[int, int, int]] | Irreps


def is_irreps_array(x) -> bool:
  """e3nn-jax's IrrepsArray, duck-typed: `.irreps`, `.array` and `.chunks` (the per-irrep views
  only e3nn's mul_ir layout has; cuequivariance's RepArray, in its own layouts, is not one).

  `chunks` is looked up on the class, never read: e3nn-jax computes it on first reading and
  keeps it on the object, and an object first read inside a jit or scan of ours would keep that
  trace's values, which the caller's next use outside it would find (UnexpectedTracerError)."""
  if isinstance(x, type):
    return False
  try:
    return (hasattr(type(x), "chunks") or "chunks" in getattr(x, "__dict__", {})) and (
        hasattr(x, "irreps") and hasattr(x, "array"))
  except Exception:  # noqa: BLE001 - a property that raises: not an IrrepsArray
    return False


def unwrap(x, what: str, irreps=None, irreps_what: str | None = None):
  """(array, irreps terms or None): an IrrepsArray's array and irreps; `irreps` (the op's own
  argument, may be None) must agree with the array's irreps when both are given."""
  if not is_irreps_array(x):
    terms = None if irreps is None else _irreps.parse(irreps, irreps_what or "irreps")
    return x, terms
  own = _irreps.parse(x.irreps, f"{what}.irreps")
  if irreps is not None:
    given = _irreps.parse(irreps, irreps_what or "irreps")
    if given != own:
      raise ValueError(f"{irreps_what or 'irreps'} is {_irreps.to_string(given)!r} but {what} is "
                       f"an IrrepsArray of {_irreps.to_string(own)!r}")
  return x.array, own


def wrap(like, terms, array):
  """`array` as an IrrepsArray of `terms` in the class of the IrrepsArray `like`, or as is."""
  if like is None:
    return array
  return type(like)(type(like.irreps)(_irreps.to_string(terms)), array)


def first_irreps_array(*xs):
  return next((x for x in xs if is_irreps_array(x)), None)


def config(name: str, default):
  """e3nn-jax's global `config(name)` when e3nn_jax has been imported (never imported here)."""
  module = sys.modules.get("e3nn_jax")
  if module is None or not hasattr(module, "config"):
    return default
  try:
    return module.config(name)
  except Exception:  # noqa: BLE001 - an older e3nn-jax without that option
    return default
