"""Irreps strings in e3nn's notation: "64x0e+64x1o+2e" -> ((64, 0, 1), (64, 1, -1), (1, 2, 1))."""

from __future__ import annotations

import re

import numpy as np

_TERM = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(\d+)\s*([eoy])\s*$")


def parse(irreps, what: str = "irreps") -> tuple[tuple[int, int, int], ...]:
  """(multiplicity, l, parity) per term; parity 1 (e), -1 (o); "y" means (-1)^l (as e3nn).

  `irreps`: a string, (mul, l, parity) triples, or an e3nn_jax.Irreps (duck-typed: no import)."""
  if isinstance(irreps, str):
    text = irreps.strip()
    if not text:
      return ()
    terms = []
    for part in text.split("+"):
      m = _TERM.match(part)
      if m is None:
        raise ValueError(f"{what}: cannot read {part.strip()!r} in {irreps!r} (expected terms such "
                         "as '64x0e', '1o', '2e' joined by '+')")
      mul = int(m.group(1)) if m.group(1) is not None else 1
      l = int(m.group(2))
      p = {"e": 1, "o": -1, "y": (-1) ** l}[m.group(3)]
      terms.append((mul, l, p))
    return tuple(terms)
  items = _e3nn_items(irreps)
  if items is not None:  # e3nn_jax.Irreps (duck-typed): (mul, ir) items, ir.l and ir.p
    irreps = tuple((t.mul, t.ir.l, t.ir.p) for t in items)
  one = _one_term(irreps)
  if one is not None:  # an e3nn_jax.MulIrrep or Irrep
    irreps = (one,)
  if isinstance(irreps, (tuple, list)):
    # As e3nn_jax.Irreps reads a list: irreps strings, Irrep and MulIrrep objects, (mul, ir)
    # pairs (ir a string, an Irrep or an (l, parity) pair), or (mul, l, parity) triples.
    terms = []
    for t in irreps:
      one = _one_term(t)
      if isinstance(t, str):
        terms.extend(parse(t, what))
      elif one is not None:
        terms.append(one)
      elif isinstance(t, (tuple, list)) and len(t) == 3 and all(_is_int(v) for v in t):
        terms.append((int(t[0]), int(t[1]), int(t[2])))
      elif isinstance(t, (tuple, list)) and len(t) == 2 and _is_int(t[0]):
        ir = t[1]
        inner = (parse(ir, what) if isinstance(ir, str) else
                 [_one_term(ir) or ((1, int(ir[0]), int(ir[1])) if isinstance(ir, (tuple, list))
                                    and len(ir) == 2 and all(_is_int(v) for v in ir) else None)])
        if len(inner) != 1 or inner[0] is None or inner[0][0] != 1:
          raise ValueError(f"{what}: cannot read {t!r} as (multiplicity, irrep) in {irreps!r}")
        terms.append((int(t[0]),) + tuple(inner[0][1:]))
      else:
        raise TypeError(f"{what}: cannot read {t!r} in {irreps!r} (expected irreps strings, "
                        "Irrep or MulIrrep objects, (multiplicity, irrep) pairs or (multiplicity, "
                        "l, parity) triples)")
    if any(mul < 0 or l < 0 or p not in (-1, 1) for mul, l, p in terms):
      raise ValueError(f"{what}: (multiplicity >= 0, l >= 0, parity +-1) per term; got {irreps!r}")
    return tuple(terms)
  raise TypeError(f"{what} must be an irreps string such as '64x0e+64x1o' or an e3nn_jax.Irreps; "
                  f"got {irreps!r}")


def _is_int(v) -> bool:
  return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _one_term(t):
  """(mul, l, parity) of an e3nn_jax.MulIrrep or Irrep (duck-typed), else None."""
  if isinstance(t, (str, bytes, tuple, list)):
    return None
  if hasattr(t, "mul") and hasattr(t, "ir") and hasattr(t.ir, "l") and hasattr(t.ir, "p"):
    return (int(t.mul), int(t.ir.l), int(t.ir.p))
  if hasattr(t, "l") and hasattr(t, "p"):
    return (1, int(t.l), int(t.p))
  return None


def _e3nn_items(obj):
  """The (mul, ir) items of an e3nn_jax.Irreps-like object, read once (an iterator is consumed
  here, and its items are what parse reads), or None for anything else."""
  if isinstance(obj, (str, bytes)) or not hasattr(obj, "__iter__") or hasattr(obj, "array") or (
      hasattr(obj, "shape")):  # (an array, an IrrepsArray: never iterated here)
    return None
  try:
    items = list(obj)
  except TypeError:
    return None
  if not all(hasattr(t, "mul") and hasattr(t, "ir") and hasattr(t.ir, "l") and hasattr(t.ir, "p")
             for t in items):
    return None
  return items if items or type(obj).__name__ == "Irreps" else None


def dim(terms) -> int:
  return sum(mul * (2 * l + 1) for mul, l, _ in terms)


def to_string(terms) -> str:
  return "+".join(f"{mul}x{l}{'e' if p == 1 else 'o'}" for mul, l, p in terms)
