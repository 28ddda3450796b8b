"""Trace-time argument checks shared by every op: clear errors that name the offending argument."""

from __future__ import annotations

import operator

from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

_SUPPORTED = (np.dtype(np.float32), np.dtype(np.float64))


def kernel_float(dtype) -> bool:
  """Whether the kernels compute in `dtype` (float32 or float64): the primitives' own check."""
  return np.dtype(dtype) in _SUPPORTED


def static_int(v) -> bool:
  """Whether `v` is a Python int parameter (not a bool): the primitives' check of theirs."""
  return isinstance(v, int) and not isinstance(v, bool)


def float_operand(x: Any, name: str) -> jax.Array:
  """Converts `x` to an array of a floating dtype, or raises TypeError naming `name`.

  Integers are promoted to JAX's default float; float16/bfloat16 to float32. Booleans, complex
  numbers and non-numeric types are refused.
  """
  if x is None:
    raise TypeError(f"{name} must be a real floating-point array; got None")
  if isinstance(x, (list, tuple)):
    try:
      x = jnp.asarray(x)
    except (TypeError, ValueError) as err:
      raise TypeError(f"{name} must be a real floating-point array; got {type(x).__name__} "
                      "that does not convert to a numeric array") from err
  try:
    dtype = np.dtype(jnp.result_type(x))
  except TypeError as err:
    raise TypeError(f"{name} must be a real floating-point array; got {type(x).__name__}") from err
  if dtype == np.bool_:
    raise TypeError(f"{name} must be a real floating-point array; got dtype bool")
  if jnp.issubdtype(dtype, jnp.complexfloating):
    raise TypeError(f"{name} must be real; got complex dtype {dtype}")
  if jnp.issubdtype(dtype, jnp.integer):
    return jnp.asarray(x, dtype=jnp.result_type(float))
  if not jnp.issubdtype(dtype, jnp.floating):
    raise TypeError(f"{name} must be a real floating-point array; got dtype {dtype}")
  if dtype not in _SUPPORTED:
    return jnp.asarray(x, dtype=jnp.float32)
  return jnp.asarray(x)


def rows_operand(x: Any, name: str) -> jax.Array:
  """`float_operand` of an array with a leading axis of rows, or ValueError naming `name`."""
  x = float_operand(x, name)
  if x.ndim < 1:
    raise ValueError(f"{name} must have a leading axis of rows; got shape {x.shape}")
  return x


def static_count(value, name: str) -> int:
  """`value` as a static int >= 0 (a count of nodes, segments, outputs), or a TypeError /
  ValueError naming it. A symbolic dimension (an array's size under a shape-polymorphic
  jax.export, e.g. `x.shape[0]`) is taken as it is."""
  if jax.export.is_symbolic_dim(value):
    return cast(int, value)  # (jax types shapes' sizes as ints too)
  try:
    n = operator.index(value)
  except TypeError:
    raise TypeError(f"{name} must be a static int; got {value!r}") from None
  if n < 0:
    raise ValueError(f"{name} must be >= 0; got {n}")
  return n


def float_result_dtype(*operands):
  """The dtype a float op returns for these operands (as e3nn-jax's do): their common floating
  dtype, bfloat16 and float16 kept (the kernels compute in float32 then); JAX's default float for
  integers. Lists and scalars count as what jnp.asarray makes of them."""
  dtype = jnp.result_type(*(a if hasattr(a, "dtype") else jnp.asarray(a) for a in operands))
  return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def int32_indices(ids):
  """Integer indices as the int32 the kernels take. A cast alone would wrap int64 or uint32
  values beyond the int32 range onto valid rows (2**32 + 1 -> 1); instead they are clamped to
  int32's own range, where they stay outside every index range (a bound is at most 2**31 - 1),
  in order (sorted ids stay sorted); every other value is kept, so that an error quotes it. NumPy
  ids give NumPy int32, jax ids jax int32."""
  xp = np if isinstance(ids, np.ndarray) else jnp
  info = jnp.iinfo(ids.dtype)  # (ml_dtypes' too: int4, uint4)
  if info.min >= -(2**31) and info.max < 2**31:
    return ids.astype(np.int32)
  return xp.clip(ids, max(info.min, -(2**31)), min(info.max, 2**31 - 1)).astype(np.int32)


def integer_operand(x: Any, name: str) -> jax.Array:
  """`x` as an array of an integer dtype, or TypeError naming `name`."""
  x64 = jax.dtypes.canonicalize_dtype(np.int64) == np.int64  # jax_enable_x64, as every jax types it
  if not isinstance(x, jax.Array) and not x64:
    # With x64 off jnp would wrap NumPy's 64-bit (and uint32) values to 32 bits (2**32 + 1 -> 1):
    # clamped to int32's range instead, values beyond it stay outside every index range, in order.
    try:
      a = np.asarray(x)
    except (TypeError, ValueError):
      a = None
    if a is not None and np.issubdtype(a.dtype, np.integer) and (
        a.dtype.itemsize > 4 or a.dtype == np.uint32):
      info = np.iinfo(a.dtype)
      x = np.clip(a, max(info.min, -(2**31)), min(info.max, 2**31 - 1)).astype(np.int32)
  x = jnp.asarray(x)
  if not jnp.issubdtype(x.dtype, jnp.integer):
    raise TypeError(f"{name} must be integers; got dtype {x.dtype}")
  return x
