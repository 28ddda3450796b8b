"""Eager evaluation of jaxext's primitives: one jitted bind per distinct set of parameters.

A primitive's impl runs when it is bound outside any trace (`jaxext.kepler(m, e)` on concrete
arrays). Compiling `prim.bind` with its parameters once and reusing that executable (jit then
caches per shape) keeps eager calls from retracing each time.
"""

from __future__ import annotations

import functools

import jax


def def_jit_impl(prim, maxsize: int = 256) -> None:
  """Defines `prim`'s impl as a cached `jax.jit` of its bind (parameters must be hashable)."""
  @functools.lru_cache(maxsize=maxsize)
  def jitted(params):
    return jax.jit(functools.partial(prim.bind, **dict(params)))

  prim.def_impl(lambda *args, **params: jitted(tuple(sorted(params.items())))(*args))
