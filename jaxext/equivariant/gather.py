"""Row gathers whose derivatives stay deterministic: the transpose is jaxext's segment_sum.

    xs = jaxext.equivariant.gather(x, senders)      # x[senders]
    vec = gather(pos, receivers) - gather(pos, senders)

`x[senders]` is an XLA gather, deterministic; its transpose (every reverse-mode derivative of a
model that gathers node rows by edge) is XLA's scatter-add, which on a GPU adds colliding rows in
an order that changes from run to run. `gather_p`'s transpose is instead `segment_sum_p`, which
adds each row's contributions in edge order (jaxext/cpu/sph_cpu.cc, jaxext/cuda/sph_kernels.cu), and
segment_sum's transpose is `gather_p`: derivatives of every order stay bitwise reproducible
without `XLA_FLAGS=--xla_gpu_deterministic_ops=true`. The forward is XLA's own gather on every
platform.
"""

from __future__ import annotations

from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import int32_indices, integer_operand, kernel_float, rows_operand
from jaxext.equivariant import _e3nn
from jaxext.equivariant._e3nn import IrrepsArray

__all__ = ["gather", "gather_p"]

gather_p = compat.Primitive("jaxext_gather")


@overload
def gather(x: jax.Array, indices: ArrayLike) -> jax.Array: ...
@overload
def gather(x: IrrepsArray, indices: ArrayLike) -> IrrepsArray: ...
def gather(x, indices):
  """x[indices] along the first axis, with a deterministic transpose (see the module docstring).

  Args:
    x: (N, ...) float32 or float64 rows, or an e3nn_jax.IrrepsArray (the result is then one of
      the same irreps).
    indices: integer array of any shape (any integer dtype), each in [0, N).

  Returns:
    indices.shape + x.shape[1:]. An index outside [0, N) gives a row of NaN (no wrap-around of
    negative indices) and no gradient.
  """
  like = _e3nn.first_irreps_array(x)
  x, terms = _e3nn.unwrap(x, "x")
  x = rows_operand(x, "x")
  idx = integer_operand(indices, "indices")
  x, idx = _sharding.whole(x, idx)
  flat = gather_p.bind(x, int32_indices(idx.reshape(-1)))
  return _e3nn.wrap(like, terms, flat.reshape(idx.shape + x.shape[1:]))


def _gather(x, idx):
  """The forward: XLA's gather, NaN rows for indices outside [0, N)."""
  if x.shape[0] == 0:  # an empty table: every index is out of range
    return jnp.full(idx.shape + x.shape[1:], jnp.nan, x.dtype)
  valid = (idx >= 0) & (idx < x.shape[0])
  rows = jnp.take(x, jnp.where(valid, idx, 0), axis=0)
  return jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - 1)), rows, jnp.nan)


def _abstract_eval(x, idx):
  if x.ndim < 1 or not kernel_float(x.dtype):
    raise TypeError(f"gather_p: x must be float32 or float64 with a leading axis of rows; got "
                    f"{x.dtype}{list(x.shape)}")
  if idx.ndim != 1 or np.dtype(idx.dtype) != np.dtype(np.int32):
    raise TypeError(f"gather_p: indices must be 1-D int32; got {idx.dtype}{list(idx.shape)}")
  return jax.core.ShapedArray(idx.shape + x.shape[1:], x.dtype)


gather_p.def_abstract_eval(_abstract_eval)
_eager.def_jit_impl(gather_p)
compat.register_lowering(gather_p, compat.lower_fun(_gather, multiple_results=False), None)


def _jvp(primals, tangents):
  x, idx = primals
  dx, _ = tangents
  out = gather_p.bind(x, idx)
  if compat.is_zero_tangent(dx):
    return out, jnp.zeros_like(out)
  return out, gather_p.bind(dx, idx)


def _transpose(ct, x, idx):
  assert compat.is_undefined_primal(x) and not compat.is_undefined_primal(idx)
  from jaxext.equivariant.segment import segment_sum_p  # segment imports this module
  n = compat.undefined_primal_aval(x).shape[0]
  ct = compat.instantiate_zeros(ct)
  # Rows for indices outside [0, N) got no x: segment_sum drops their cotangents.
  return segment_sum_p.bind(ct, idx, num_segments=n, sorted=False), None


compat.register_jvp(gather_p, _jvp)
compat.register_transpose(gather_p, _transpose)


def _batch(args, dims):
  (x, idx), (dx, di) = args, dims
  if not compat.is_mapped(di):  # shared indices: the batch axis becomes a feature axis
    return gather_p.bind(jnp.moveaxis(x, dx, 1), idx), 1
  size = compat.batch_size(args, dims)
  x = compat.batch_axis_to_front(x, dx, size)
  idx = compat.batch_axis_to_front(idx, di, size)
  return jax.lax.map(lambda a: gather_p.bind(a[0], a[1]), (x, idx)), 0


compat.register_batching(gather_p, _batch)
