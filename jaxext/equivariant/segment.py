"""Deterministic segment sums: rows added in order, no atomics (jaxext/cpu/sph_cpu.cc).

`segment_sum_p(data, ids, sorted=...)` takes ids in any order (sorted=False) or promised ascending
(sorted=True: checked). On the CPU the kernel adds unsorted rows to their segments in one pass
over the data (no sort, no permuted copy); on CUDA, whose kernel needs sorted ids, the lowering
sorts first (a stable argsort and a gather), and a segment of more than 128 rows is summed in
pieces of 128 rows side by side, the pieces' sums then added in order (a hub segment, such as
the padding of jax-md's or jraph's graphs, is not one thread's walk). The primitive is linear in
`data`: its JVP is itself on the tangents and its transpose a gather, so derivatives of every
order work.
"""

from __future__ import annotations

import functools
from typing import overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxext import _eager
from jaxext import _ffi
from jaxext import _jax_compat as compat
from jaxext import _sharding
from jaxext._validation import (int32_indices, integer_operand, kernel_float, rows_operand,
                                static_count)
from jaxext.equivariant import _e3nn
from jaxext.equivariant.conv import TASK_EDGES, node_tasks, run_ranges
from jaxext.equivariant._e3nn import IrrepsArray

__all__ = ["segment_sum", "segment_sum_p"]

segment_sum_p = compat.Primitive("jaxext_segment_sum")


@overload
def segment_sum(data: jax.Array, segment_ids: ArrayLike, num_segments: int,
                indices_are_sorted: bool = False) -> jax.Array: ...
@overload
def segment_sum(data: IrrepsArray, segment_ids: ArrayLike, num_segments: int,
                indices_are_sorted: bool = False) -> IrrepsArray: ...
def segment_sum(data, segment_ids, num_segments, indices_are_sorted=False):
  """out[s] = sum of data[i] over the rows i with segment_ids[i] == s, for s < num_segments.

  Deterministic: the rows of a segment are added in their order in `data`, the same bits on
  every run, for any number of threads and whether or not the ids came sorted (on CUDA, a
  segment of more than 128 rows is added in pieces of 128 rows, each in order, then the pieces'
  sums in order: a padding or hub segment runs in parallel). Ids outside
  [0, num_segments) are dropped (as jax.ops.segment_sum does). With indices_are_sorted=True the
  ids must be sorted ascending (checked by the kernel: an unsorted input raises on the CPU and
  makes every sum NaN on CUDA, where a kernel cannot raise).

  Args:
    data: (E, ...) float32 or float64, or an e3nn_jax.IrrepsArray (the result is then one of the
      same irreps).
    segment_ids: (E,) integers (any integer dtype).
    num_segments: static int >= 0 (or a symbolic size under a shape-polymorphic jax.export).
  """
  like = _e3nn.first_irreps_array(data)
  data, terms = _e3nn.unwrap(data, "data")
  data = rows_operand(data, "data")
  ids = integer_operand(segment_ids, "segment_ids")
  if ids.shape != data.shape[:1]:
    raise ValueError(f"segment_ids must have shape ({data.shape[0]},) like data's rows; got "
                     f"{ids.shape}")
  num_segments = static_count(num_segments, "num_segments")
  data, ids = _sharding.whole(data, int32_indices(ids))
  return _e3nn.wrap(like, terms, segment_sum_p.bind(data, ids, num_segments=num_segments,
                                                    sorted=bool(indices_are_sorted)))


def _abstract_eval(data, ids, *, num_segments, sorted):
  if data.ndim < 1 or not kernel_float(data.dtype):
    raise TypeError(f"segment_sum_p: data must be float32 or float64 with a leading axis of rows; "
                    f"got {data.dtype}{list(data.shape)}")
  if ids.shape != data.shape[:1] or np.dtype(ids.dtype) != np.dtype(np.int32):
    raise TypeError(f"segment_sum_p: segment ids must be int32 of shape ({data.shape[0]},); got "
                    f"{ids.dtype}{list(ids.shape)}")
  # An int, or a symbolic dimension (gather's transpose passes x's row count, symbolic under a
  # shape-polymorphic jax.export): refused are what can be neither.
  if isinstance(num_segments, (bool, float, complex, str, bytes, type(None))) or \
      (isinstance(num_segments, int) and num_segments < 0):
    raise TypeError(f"segment_sum_p: num_segments must be an int >= 0; got {num_segments!r}")
  if not isinstance(sorted, bool):
    raise TypeError(f"segment_sum_p: sorted must be a bool; got {sorted!r}")
  return jax.core.ShapedArray((num_segments,) + data.shape[1:], data.dtype)


segment_sum_p.def_abstract_eval(_abstract_eval)


_eager.def_jit_impl(segment_sum_p)


def _lowering(ctx, data, ids, *, num_segments, sorted, platform):
  _ffi.require(platform, "jaxext.equivariant.segment_sum")
  (aval, _) = ctx.avals_in
  out = jax.ShapeDtypeStruct((num_segments,) + aval.shape[1:], aval.dtype)
  if platform == "cpu":
    call = jax.ffi.ffi_call("jaxext_segment_sum", out)
    return compat.lower_fun(lambda d, i: (call(d, i, sorted=np.int64(sorted)),),
                            multiple_results=True)(ctx, data, ids)
  # CUDA: each segment's rows found from the ids, a segment of more than TASK_EDGES rows cut into
  # pieces summed side by side and joined in order (jaxext/kernels/conv_tasks.h: jax-md's padding
  # and any hub segment would otherwise be one thread's walk); a second result flags ids found
  # unsorted (the sums are NaN then: a GPU cannot raise), a third holds the cut pieces' sums.
  e = ctx.avals_in[1].shape[0]
  flag = jax.ShapeDtypeStruct((1,), jnp.int32)
  partial = jax.ShapeDtypeStruct((e // TASK_EDGES,) + aval.shape[1:], aval.dtype)
  call = jax.ffi.ffi_call("jaxext_segment_sum", (out, flag, partial))

  def cuda(d, i):
    if not sorted:  # the kernel needs ascending ids: a stable sort keeps each segment's row order
      order = jnp.argsort(i, stable=True)
      d, i = d[order], i[order]
    ranges = sorted_ranges(i, num_segments)
    return (call(d, i, ranges, node_tasks(ranges), task_rows=np.int64(TASK_EDGES))[0],)

  return compat.lower_fun(cuda, multiple_results=True)(ctx, data, ids)


def sorted_ranges(ids, num_segments):
  """Segment s's rows, ranges[s] .. ranges[s + 1] (num_segments + 1 int32 entries), of ids sorted
  ascending: the rows before them have ids below 0, those after them ids from num_segments on
  (conv's run ranges, shifted past the rows with negative ids)."""
  return jnp.sum(ids < 0, dtype=jnp.int32) + run_ranges(ids, num_segments)


compat.register_lowering(segment_sum_p, functools.partial(_lowering, platform="cpu"), "cpu")
compat.register_lowering(segment_sum_p, functools.partial(_lowering, platform="CUDA"), "cuda")


def _jvp(primals, tangents, *, num_segments, sorted):
  data, ids = primals
  ddata, _ = tangents
  out = segment_sum_p.bind(data, ids, num_segments=num_segments, sorted=sorted)
  if compat.is_zero_tangent(ddata):
    return out, jnp.zeros_like(out)
  return out, segment_sum_p.bind(ddata, ids, num_segments=num_segments, sorted=sorted)


def _transpose(ct, data, ids, *, num_segments, sorted):
  assert compat.is_undefined_primal(data) and not compat.is_undefined_primal(ids)
  ct = compat.instantiate_zeros(ct)
  # The transpose is a row gather (gather_p, whose own transpose is this sum again: derivatives
  # of every order stay deterministic); rows the sum dropped (ids outside [0, num_segments)) get
  # zero cotangents.
  from jaxext.equivariant.gather import gather_p
  valid = (ids >= 0) & (ids < num_segments)
  rows = gather_p.bind(ct, jnp.where(valid, ids, 0))
  return jnp.where(valid.reshape(valid.shape + (1,) * (rows.ndim - 1)), rows, 0), None


compat.register_jvp(segment_sum_p, _jvp)
compat.register_transpose(segment_sum_p, _transpose)


def _batch(args, dims, *, num_segments, sorted):
  (data, ids), (dd, di) = args, dims
  if not compat.is_mapped(di):  # shared ids: the batch axis becomes a feature axis
    data = jnp.moveaxis(data, dd, 1)
    return segment_sum_p.bind(data, ids, num_segments=num_segments, sorted=sorted), 1
  size = compat.batch_size(args, dims)
  data = compat.batch_axis_to_front(data, dd, size)
  ids = compat.batch_axis_to_front(ids, di, size)
  out = jax.lax.map(
      lambda a: segment_sum_p.bind(a[0], a[1], num_segments=num_segments, sorted=sorted),
      (data, ids))
  return out, 0


compat.register_batching(segment_sum_p, _batch)
