"""jaxext.ode: batched ODE integration, one independent adaptive trajectory per lane.

    import jaxext.ode as ode
    model = ode.models.earth(j2=True, drag=True)              # built-in (C++) right-hand side
    sol = ode.dop853(model, y0, (0.0, 86400.0), params=B[:, None], t_eval=ts,
                     rtol=1e-9, atol=1e-9, events=[ode.models.altitude_event(150.0)])

    @ode.rhs                                                  # or a Python one (Numba-compiled)
    def oscillator(t, y, p, dydt):
        dydt[0] = y[1]
        dydt[1] = -p[0] * y[0]
"""

from jaxext.ode import models
from jaxext.ode.dop853 import Solution, Status, dop853, dop853_p
from jaxext.ode.functions import Event, Rhs, event, rhs

__all__ = ["Event", "Rhs", "Solution", "Status", "dop853", "dop853_p", "event", "models", "rhs"]
