"""What a user's type checker sees of jaxext's public API (checked by mypy in
//tests:typecheck_test, never run). `assert_type` lines fail the check if a signature's types
drift; the lines marked `# type: ignore[...]` are misuses the annotations must reject: under
`warn_unused_ignores` an ignore that nothing needed is itself an error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_type

import jax
import jax.numpy as jnp
import numpy as np

import jaxext
from jaxext import equivariant as eq
from jaxext import ode
from jaxext.equivariant import e3nn_ops

x = jnp.linspace(0.0, 1.0, 8)

# Kepler, limb darkening, transits: ArrayLike in, jax.Array out.
assert_type(jaxext.kepler(x, 0.3), tuple[jax.Array, jax.Array])
assert_type(jaxext.kepler(np.ones(3), np.array([0.1, 0.2, 0.3])), tuple[jax.Array, jax.Array])
assert_type(jaxext.limb_dark_flux(x, 0.1, jnp.array([0.4, 0.26])), jax.Array)
assert_type(jaxext.quadratic_limb_dark_flux(x, 0.1, 0.4, 0.26), jax.Array)
assert_type(jaxext.transit_light_curve(x, period=3.0, t0=0.0, a=10.0, r=0.1,
                                       u=jnp.array([0.4, 0.2]), impact=0.3), jax.Array)
assert_type(jaxext.sky_separation(x, period=3.0, t0=0.0, a=10.0, impact=0.3),
            tuple[jax.Array, jax.Array])
assert_type(jaxext.platforms(), dict[str, tuple[str, ...]])

u = jnp.array([0.4])
jaxext.kepler("0.5", 0.3)  # type: ignore[arg-type]
jaxext.kepler([0.5], 0.3)  # type: ignore[arg-type]  # as jax.numpy: arrays, not lists
jaxext.transit_light_curve(x, 3.0, 0.0, 10.0, 0.1, u)  # type: ignore[call-arg]  # keywords only
jaxext.transit_light_curve(x, period=3.0, t0=0.0, a=10.0, r=0.1, u=u,
                           oversample=7.5)  # type: ignore[arg-type]


# Numba kernels: the decorator's options are keywords with types.
@jaxext.numba_kernel(outputs=lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), vmap="elementwise")
def double(a: Any, out: Any) -> None:
  for i in range(a.shape[0]):
    out[i] = 2 * a[i]


jaxext.numba_kernel(outputs=lambda a: a, vmap="parallel")  # type: ignore[arg-type]
jaxext.numba_cuda_kernel(outputs=lambda a: a, block="256")  # type: ignore[arg-type]


# ODEs: a jax.numpy right-hand side, a Solution with typed fields and evaluate().
def decay(t: jax.Array, y: jax.Array, args: jax.Array) -> jax.Array:
  return -args * y


sol = ode.dop853(decay, jnp.ones((4, 1)), (0.0, 1.0), args=jnp.float32(0.5), dense=True)
assert_type(sol, ode.Solution)
assert_type(sol.y_final, jax.Array)
assert_type(sol.evaluate(0.5), jax.Array)
assert_type(ode.dop853(ode.models.earth(j2=True), jnp.ones((2, 6)), (0.0, 60.0)), ode.Solution)
assert_type(ode.rhs(lambda t, y, p, dydt: None), ode.Rhs)
assert_type(ode.event(terminal=True), Callable[[Callable[..., Any]], ode.Event])
assert_type(ode.models.altitude_event(100.0), ode.Event)

ode.dop853(decay, jnp.ones((4, 1)), (0.0, 1.0), max_steps="10")  # type: ignore[arg-type]
ode.dop853(decay, jnp.ones((4, 1)), (0.0, 1.0), first_step="0.1")  # type: ignore[arg-type]

# Equivariant ops: jax.Array in, jax.Array out (an e3nn_jax.IrrepsArray in gives one out).
v = jnp.ones((5, 3))
sh = eq.spherical_harmonics(2, v)
assert_type(sh, jax.Array)
assert_type(eq.tensor_product(jnp.ones((5, 4)), sh, jnp.ones((5, 4)), "4x0e", "2e", "4x2e"),
            jax.Array)
assert_type(eq.segment_sum(jnp.ones((5, 4)), jnp.zeros(5, int), 3), jax.Array)
assert_type(eq.gather(jnp.ones((5, 4)), jnp.zeros(2, int)), jax.Array)
assert_type(eq.conv(jnp.ones((5, 4)), sh, jnp.ones((6, 4)), jnp.zeros(6, int), jnp.zeros(6, int),
                    5, "4x0e", "2e", "4x2e"), jax.Array)
assert_type(eq.paths("4x0e", "2e", "4x2e"), list[tuple[int, int, int]])
e3nn_ops.tensor_product_conv(sh, sh, [0], [0], "3")  # type: ignore[arg-type]
