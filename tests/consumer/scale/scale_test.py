"""The consumer's own FFI op next to jaxext's: both under jit, vmap and grad in one computation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxext
from scale.scale import scale

jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scale_under_jit_and_vmap(dtype):
  x = np.linspace(-2.0, 3.0, 12, dtype=dtype).reshape(3, 4)
  y = jax.jit(lambda x: scale(x, 2.5))(x)
  assert y.dtype == dtype
  np.testing.assert_array_equal(y, (2.5 * x.astype(np.float64)).astype(dtype))
  np.testing.assert_array_equal(jax.vmap(lambda r: scale(r, -1.0))(x), -x)


def test_scale_composes_with_jaxext_under_grad():
  # d/dM of 3 sin E(M, e) = 3 cos E / (1 - e cos E) (implicit differentiation of Kepler's equation)
  f = jax.jit(jax.grad(lambda m: scale(jaxext.kepler(m, 0.3)[0], 3.0)))
  m = 1.2
  sin_e, cos_e = jaxext.kepler(m, 0.3)
  np.testing.assert_allclose(f(m), 3.0 * cos_e / (1 - 0.3 * cos_e), rtol=1e-13)
  batched = jax.vmap(jax.grad(lambda m: jnp.sum(scale(jaxext.kepler(m, 0.3)[0], 3.0))))
  np.testing.assert_allclose(batched(jnp.array([m, m])), [f(m), f(m)], rtol=1e-13)


def test_scale_refuses_integers():
  with pytest.raises(TypeError, match="float32 or float64"):
    scale(jnp.arange(3), 2.0)
