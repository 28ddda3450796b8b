"""Irreps strings in e3nn's notation: "64x0e+64x1o+2e" -> ((64, 0, 1), (64, 1, -1), (1, 2, 1))."""

from __future__ import annotations

import re

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
  if isinstance(irreps, (tuple, list)) and all(
      isinstance(t, (tuple, list)) and len(t) == 3 for t in irreps):
    triples = tuple((int(a), int(b), int(c)) for a, b, c in irreps)
    if any(mul < 0 or l < 0 or p not in (-1, 1) for mul, l, p in triples):
      raise ValueError(f"{what}: (multiplicity >= 0, l >= 0, parity +-1) per term; got {irreps!r}")
    return triples
  raise TypeError(f"{what} must be an irreps string such as '64x0e+64x1o' or an e3nn_jax.Irreps; "
                  f"got {irreps!r}")


def _e3nn_items(obj):
  """The (mul, ir) items of an e3nn_jax.Irreps-like object, read once (an iterator is consumed
  here, and its items are what parse reads), or None for anything else."""
  if isinstance(obj, (str, bytes)) or not hasattr(obj, "__iter__"):
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
