"""The consumer's own JAX op `scale(x, factor) = factor * x` on its FFI handler (scale_cpu.cc):
registered with jax.ffi, called with jax.ffi.ffi_call, batched by vmap (the handler is
elementwise) and differentiated in reverse mode by a custom VJP (linear in x: the cotangent is
scaled by the same factor)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from scale import _scale_ops

for _name, _capsule in _scale_ops.registrations().items():
  jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def scale(x, factor: float):
  x = jnp.asarray(x)
  if x.dtype not in (jnp.float32, jnp.float64):
    raise TypeError(f"scale: x must be float32 or float64; got {x.dtype}")
  target = "consumer_scale_f32" if x.dtype == jnp.float32 else "consumer_scale_f64"
  call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(x.shape, x.dtype),
                          vmap_method="broadcast_all")
  return call(x, factor=np.float64(factor))


def _scale_fwd(x, factor):
  return scale(x, factor), None


def _scale_bwd(factor, _, g):
  return (scale(g, factor),)


scale.defvjp(_scale_fwd, _scale_bwd)
