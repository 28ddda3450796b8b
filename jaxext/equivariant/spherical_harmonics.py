"""Real spherical harmonics with e3nn-jax's conventions (jaxext/kernels/sph.h on the CPU).

The primitive `sph_p` evaluates the harmonic polynomials Y^0..Y^lmax of vectors (no normalisation
of the vectors) in one pass. Its JVP uses the primitive's own output: the derivative of Y^l is a
fixed linear map of Y^(l-1) (jaxext/equivariant/_tables.py), so derivatives of every order are
the same kernel plus small contractions. It is element-wise over the vectors' leading axes
(vmap folds in; sharding splits them).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand, static_int
from jaxext.equivariant import _irreps, _tables

__all__ = ["spherical_harmonics", "sph_p"]

MAX_L = 12  # jaxext/kernels/sph.h kMaxL

sph_p = Primitive("jaxext_sph")


def spherical_harmonics(lmax_or_irreps, vectors, normalize: bool = True,
                        normalization: str = "component"):
  """Real spherical harmonics of `vectors`, as `e3nn_jax.spherical_harmonics(...).array`.

  Args:
    lmax_or_irreps: an int lmax (all l = 0..lmax, parities (-1)^l; note: e3nn-jax reads an int as
      the single degree l), a sequence of ints (those degrees), or an
      irreps string such as "0e+1o+2e+3o" (multiplicities repeat a block; even l must be "e" and
      the odd l share one parity, as e3nn requires).
    vectors: (..., 3) float32 or float64.
    normalize: restrict to the unit sphere (vectors divided by their norm; zero vectors give
      zero harmonics for l >= 1, as in e3nn).
    normalization: "component" (sum_m (Y^l_m)^2 = 2l+1 on the sphere; e3nn's default),
      "norm" (= 1) or "integral" (unit integral over the sphere).

  Returns:
    (..., dim) in the order of the irreps, each block m = -l..l.
  """
  terms = _terms(lmax_or_irreps)
  if normalization not in ("component", "norm", "integral"):
    raise ValueError(f"normalization must be 'component', 'norm' or 'integral'; got "
                     f"{normalization!r}")
  x = float_operand(vectors, "vectors")
  if x.ndim < 1 or x.shape[-1] != 3:
    raise ValueError(f"vectors must have shape (..., 3); got {x.shape}")
  if _irreps.dim(terms) == 0:
    return jnp.zeros(x.shape[:-1] + (0,), x.dtype)
  if normalize:
    r2 = jnp.sum(x * x, axis=-1, keepdims=True)
    x = x / jnp.sqrt(jnp.where(r2 == 0, 1, r2))
  lmax = max(l for _, l, _ in terms)
  y = sph_p.bind(x, lmax=lmax)
  blocks = []
  for mul, l, _ in terms:
    block = y[..., l * l:(l + 1) ** 2]
    if normalization == "norm":
      block = block / np.sqrt(2 * l + 1)
    elif normalization == "integral":
      block = block / np.sqrt(4 * np.pi)
    blocks.extend([block] * mul)
  return jnp.concatenate(blocks, axis=-1)


def _terms(lmax_or_irreps):
  if isinstance(lmax_or_irreps, (int, np.integer)) and not isinstance(lmax_or_irreps, bool):
    ls = list(range(int(lmax_or_irreps) + 1))
    if int(lmax_or_irreps) < 0:
      raise ValueError(f"lmax_or_irreps: lmax must be >= 0; got {lmax_or_irreps}")
    terms = tuple((1, l, (-1) ** l) for l in ls)
  elif isinstance(lmax_or_irreps, (list, tuple)) and all(
      isinstance(l, (int, np.integer)) for l in lmax_or_irreps):
    if any(l < 0 for l in lmax_or_irreps):
      raise ValueError(f"lmax_or_irreps: degrees must be >= 0; got {lmax_or_irreps}")
    terms = tuple((1, int(l), (-1) ** int(l)) for l in lmax_or_irreps)
  else:
    terms = _irreps.parse(lmax_or_irreps, "lmax_or_irreps")
    if any(l % 2 == 0 and p != 1 for _, l, p in terms):
      raise ValueError(f"lmax_or_irreps: spherical harmonics of even l are even ('e'); got "
                       f"{lmax_or_irreps!r}")
    if len({p for _, l, p in terms if l % 2 == 1}) > 1:
      raise ValueError(f"lmax_or_irreps: the odd l must share one parity; got {lmax_or_irreps!r}")
  if any(l > MAX_L for _, l, _ in terms):
    raise ValueError(f"lmax_or_irreps: l up to {MAX_L}; got {lmax_or_irreps!r}")
  return terms


def _abstract_eval(x, *, lmax):
  if not static_int(lmax) or not 0 <= lmax <= MAX_L:
    raise TypeError(f"sph_p: lmax must be an int in [0, {MAX_L}]; got {lmax!r}")
  if x.shape[-1:] != (3,):
    raise TypeError(f"sph_p expects (..., 3) vectors; got {x.shape}")
  return jax.core.ShapedArray(x.shape[:-1] + ((lmax + 1) ** 2,), x.dtype)


sph_p.def_abstract_eval(_abstract_eval)


_eager.def_jit_impl(sph_p)


def _lowering(ctx, x, *, lmax, platform):
  if platform not in _ffi.register_all():
    raise NotImplementedError(f"jaxext.equivariant.spherical_harmonics has no {platform} kernel "
                              "in this build")
  (aval,) = ctx.avals_in
  lead = _sharding.elementwise(aval.ndim - 1)

  def result_types(xs):
    return (jax.ShapeDtypeStruct(xs.shape[:-1] + ((lmax + 1) ** 2,), xs.dtype),)

  return _sharding.lower(
      ctx, (x,), _sharding.ffi_per_shard("jaxext_sph", result_types, lmax=np.int64(lmax),
                                         norms=_tables.norms(lmax)),
      [lead + (None,)], [lead + (None,)])


compat.register_lowering(sph_p, functools.partial(_lowering, platform="cpu"), "cpu",
                         partitioned=True)
compat.register_lowering(sph_p, functools.partial(_lowering, platform="CUDA"), "cuda",
                         partitioned=True)


def _jvp(primals, tangents, *, lmax):
  (x,), (dx,) = primals, tangents
  y = sph_p.bind(x, lmax=lmax)
  dx = compat.instantiate_zeros(dx)
  parts = [jnp.zeros(y.shape[:-1] + (1,), y.dtype)]
  for l in range(1, lmax + 1):
    a = jnp.asarray(_tables.derivatives(l), y.dtype)
    # HIGHEST: on GPUs a default-precision float32 contraction may run in TF32 (10-bit
    # mantissas), which cost float32 forces ~1e-4 of relative accuracy.
    parts.append(jnp.einsum("...j,ikj,...k->...i", y[..., (l - 1) ** 2:l * l], a, dx,
                            precision=jax.lax.Precision.HIGHEST))
  return y, jnp.concatenate(parts, axis=-1)


compat.register_jvp(sph_p, _jvp)


def _batch(args, dims, *, lmax):
  (x,), (d,) = args, dims
  if d == x.ndim - 1:  # the vector axis itself is mapped: put the batch axis first
    x = jnp.moveaxis(x, d, 0)
    d = 0
  return sph_p.bind(x, lmax=lmax), d


compat.register_batching(sph_p, _batch)
