"""Imports jaxext as a dependency of another Bazel repository and runs it under jit and grad."""

import math

import jax

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402

s, c = jax.jit(jaxext.kepler)(0.5, 0.1)
E = math.atan2(float(s), float(c))
assert abs(E - 0.1 * math.sin(E) - 0.5) < 1e-15, (float(s), float(c))
g = jax.grad(lambda m: jaxext.kepler(m, 0.1)[0])(0.5)
assert abs(float(g) - math.cos(E) / (1 - 0.1 * math.cos(E))) < 1e-14
f = jaxext.limb_dark_flux(jax.numpy.array([0.0, 2.0]), 0.1, jax.numpy.array([0.4, 0.26]))
assert 0.98 < float(f[0]) < 0.99 and float(f[1]) == 1.0, f
print("jaxext", jaxext.__version__, "from", jaxext.__file__, "ok")
