"""Real spherical harmonics with e3nn-jax's conventions (jaxext/kernels/sph.h on the CPU).

The primitive `sph_p` evaluates the harmonic polynomials Y^0..Y^lmax of vectors (no normalisation
of the vectors) in one pass. Its JVP uses the primitive's own output: the derivative of Y^l is a
fixed linear map of Y^(l-1) (jaxext/equivariant/_tables.py), so derivatives of every order are
the same kernel plus small contractions. It is element-wise over the vectors' leading axes
(vmap folds in; sharding splits them).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import float_operand, float_result_dtype, static_int
from jaxext.equivariant import _e3nn, _irreps, _tables
from jaxext.equivariant._e3nn import IrrepsArray, IrrepsLike

__all__ = ["spherical_harmonics", "sph_p"]

MAX_L = 12  # jaxext/kernels/sph.h kMaxL

sph_p = compat.Primitive("jaxext_sph")


@overload
def spherical_harmonics(irreps_out: IrrepsLike | int | Sequence[int], vectors: jax.Array,
                        normalize: bool = True, normalization: str | None = None) -> jax.Array: ...
@overload
def spherical_harmonics(irreps_out: IrrepsLike | int | Sequence[int], vectors: IrrepsArray,
                        normalize: bool = True, normalization: str | None = None) -> IrrepsArray: ...
def spherical_harmonics(irreps_out, vectors, normalize=True, normalization=None):
  """Real spherical harmonics of `vectors`, as `e3nn_jax.spherical_harmonics(...)`.

  Args:
    irreps_out: as e3nn-jax reads it: an int l (that degree alone: 2 gives the 5 components of
      l = 2), a sequence of ints (those degrees, e.g. `range(lmax + 1)` for every l <= lmax), an
      irreps string such as "0e+1o+2e+3o" or an e3nn_jax.Irreps (multiplicities repeat a block;
      even l must be "e" and the odd l share one parity, as e3nn requires). Degrees given as ints
      take the parity of the vectors: (-1)^l for plain arrays and "1o" IrrepsArrays, even for
      "1e" ones.
    vectors: (..., 3) float32 or float64 (bfloat16 and float16: computed in float32, returned
      in their dtype), or an e3nn_jax.IrrepsArray of irreps "1o" or "1e".
    normalize: restrict to the unit sphere (vectors divided by their norm; zero vectors give
      zero harmonics for l >= 1, as in e3nn).
    normalization: "component" (sum_m (Y^l_m)^2 = 2l+1 on the sphere; e3nn's default),
      "norm" (= 1) or "integral" (unit integral over the sphere); unset, e3nn_jax.config's
      "spherical_harmonics_normalization" when e3nn_jax is imported, else "component".

  Returns:
    (..., dim) in the order of the irreps, each block m = -l..l; an IrrepsArray of those irreps
    (in the vectors' class) when `vectors` is one.
  """
  like = _e3nn.first_irreps_array(vectors)
  parity = -1
  if like is not None:
    vectors, own = _e3nn.unwrap(vectors, "vectors")
    if own not in (((1, 1, -1),), ((1, 1, 1),)):
      raise ValueError(f"vectors: an IrrepsArray of irreps '1o' or '1e' (one vector); got "
                       f"{_irreps.to_string(own)!r}")
    parity = own[0][2]
  terms = _terms(irreps_out, parity)
  if like is not None and any(l % 2 == 1 and p != parity for _, l, p in terms):
    raise ValueError(f"irreps_out: {_irreps.to_string(terms)!r} has odd l of the other parity "
                     f"than the vectors ({_irreps.to_string(own)!r}), as e3nn-jax refuses")
  if normalization is None:
    normalization = _e3nn.config("spherical_harmonics_normalization", "component")
  if normalization not in ("component", "norm", "integral"):
    raise ValueError(f"normalization must be 'component', 'norm' or 'integral'; got "
                     f"{normalization!r}")
  x = float_operand(vectors, "vectors")
  # bfloat16 and float16 vectors: harmonics computed in float32, returned in their dtype (as
  # e3nn-jax returns them)
  want = float_result_dtype(vectors)
  if x.ndim < 1 or x.shape[-1] != 3:
    raise ValueError(f"vectors must have shape (..., 3); got {x.shape}")
  if _irreps.dim(terms) == 0:
    return _e3nn.wrap(like, terms, jnp.zeros(x.shape[:-1] + (0,), want))
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
  return _e3nn.wrap(like, terms, jnp.concatenate(blocks, axis=-1).astype(want))


def _terms(irreps_out, parity=-1):
  """(1, l, parity**l) per degree given as ints; irreps (strings, e3nn Irreps) as written."""
  degrees = None
  if isinstance(irreps_out, (int, np.integer)) and not isinstance(irreps_out, bool):
    degrees = [int(irreps_out)]
  elif isinstance(irreps_out, range) or (
      isinstance(irreps_out, (list, tuple)) and all(
          isinstance(l, (int, np.integer)) and not isinstance(l, bool) for l in irreps_out)):
    degrees = [int(l) for l in irreps_out]
  if degrees is not None:
    if any(l < 0 for l in degrees):
      raise ValueError(f"irreps_out: degrees must be >= 0; got {irreps_out!r}")
    terms = tuple((1, l, parity ** l) for l in degrees)
  else:
    terms = _irreps.parse(irreps_out, "irreps_out")
    if any(l % 2 == 0 and p != 1 for _, l, p in terms):
      raise ValueError(f"irreps_out: spherical harmonics of even l are even ('e'); got "
                       f"{irreps_out!r}")
    if len({p for _, l, p in terms if l % 2 == 1}) > 1:
      raise ValueError(f"irreps_out: the odd l must share one parity; got {irreps_out!r}")
  if any(l > MAX_L for _, l, _ in terms):
    raise ValueError(f"irreps_out: l up to {MAX_L}; got {irreps_out!r}")
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
  _ffi.require(platform, "jaxext.equivariant.spherical_harmonics")
  def result_types(xs):
    return (jax.ShapeDtypeStruct(xs.shape[:-1] + ((lmax + 1) ** 2,), xs.dtype),)

  return _sharding.lower(
      ctx, (x,), _sharding.ffi_per_shard("jaxext_sph", result_types, lmax=np.int64(lmax),
                                         norms=_tables.norms(lmax)),
      *sph_p.factors(*ctx.avals_in, lmax=lmax))


def _factors(x, *, lmax):
  lead = _sharding.elementwise(x.ndim - 1)  # along the vectors' leading axes
  return [lead + (None,)], [lead + (None,)]


_sharding.def_factors(sph_p, _factors)


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
