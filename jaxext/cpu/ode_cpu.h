// CPU FFI handler of jaxext.ode.dop853: many trajectories, each integrated on its own (own step
// sizes, own events) by the DOP853 of jaxext/kernels/dop853.h, spread over XLA's thread pool.
//
// Right-hand sides: a built-in model (jaxext/kernels/orbit.h, constants in an attribute) or a
// function compiled by Numba (jaxext/ode/_native.py), known by content id in the registry of
// native functions (jaxext/cpu/native_registry.h), as Numba kernels are.
#ifndef JAXEXT_CPU_ODE_CPU_H_
#define JAXEXT_CPU_ODE_CPU_H_

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// Native signatures (T = float or double, as the integration's dtype; status: 0, or non-zero if
// the function raised):
//   right-hand side  void rhs(T t, const T* y, const T* p, T* dydt, int32_t* status)
//   event            T event(T t, const T* y, const T* p, int32_t* status)
// Operands: y0 (N, n), params (N, p), t_span (N, 2), t_eval (M,), all of one float dtype.
// Results: ys (N, M, n), t_final (N,), y_final (N, n), stats (N, 4) int32 (status, step attempts,
//   accepted steps, right-hand side evaluations), t_events (N, E, K), y_events (N, E, K, n),
//   event_counts (N, E) int32.
// Attributes: rhs_id (0: the built-in model `model`, f64[]), name (for errors), rtol, atol (f64[n]),
//   first_step, max_step (f64), max_steps (i64), n_events, and per event: event_kinds (0: |r| - c
//   with c in event_consts, 1: native function event_ids), event_directions, event_terminal
//   (terminal after that many occurrences; 0: never); jac_id (the user's Jacobian, native function
//   id), sensitivities (0/1: integrate the variational equations too), device_code (the CUDA
//   handler's: PTX of the user's functions; ignored here). Array attributes carry one placeholder
//   when there is nothing to say.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextDop853Cpu);

// How many times, in this process, a worker has run the built-in models in SIMD lanes (rather
// than one trajectory at a time: JAXEXT_ODE_SIMD=0, user functions, more than one parameter with
// sensitivities). For tests that compare the two paths.
int64_t OdeSimdLaneRuns();

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_ODE_CPU_H_
