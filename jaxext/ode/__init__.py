"""jaxext.ode: batched ODE integration, one independent adaptive trajectory per lane.

    import jaxext.ode as ode

    def lorenz(t, y, args):                                   # jax.numpy, one trajectory
        sigma, rho, beta = args
        return jnp.stack([sigma * (y[1] - y[0]), y[0] * (rho - y[2]) - y[1],
                          y[0] * y[1] - beta * y[2]])
    sol = ode.dop853(lorenz, y0, (0.0, 2.0), args=(10.0, 28.0, 8 / 3), dense=True)
    sol.evaluate(1.5)                                         # (N, 3), scipy's sol.sol(t)

    model = ode.models.earth(j2=True, drag=True)              # built-in (C++) right-hand side
    sol = ode.dop853(model, y0, (0.0, 86400.0), params=B[:, None], t_eval=ts,
                     rtol=1e-9, atol=1e-9, events=[ode.models.altitude_event(150.0)])

    @ode.rhs                                                  # or Numba, writing dy/dt
    def oscillator(t, y, p, dydt):
        dydt[0] = y[1]
        dydt[1] = -p[0] * y[0]
"""

from jaxext.ode import models
from jaxext.ode.dop853 import Solution, Status, dop853, dop853_p
from jaxext.ode.functions import Event, Rhs, event, rhs

__all__ = ["Event", "Rhs", "Solution", "Status", "dop853", "dop853_p", "event", "models", "rhs"]
