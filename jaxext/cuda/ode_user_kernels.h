// jaxext.ode.dop853 on CUDA with user right-hand sides: what the handler (ode_cuda.cc) and the
// device code linked with the user's functions at run time (ode_user_kernels.cu) agree on.
//
// The user's Python functions are compiled by numba-cuda (jaxext/ode/_native_cuda.py) into one
// device function with Numba's calling convention,
//
//   int jaxext_ode_user(T* result, int op, T t, T* y, T* p, T* out, T* out2)
//
// op 0: the right-hand side, dy/dt into out (n); op 1: its Jacobians df/dy into out (n x n) and
// df/dp into out2 (n x np); op 2 + e: event e's value into *result. It returns 0, or non-zero when
// the user's function raised. ode_user_kernels.cu is compiled once per T as relocatable device
// code (a fatbin embedded in the handler library) calling that function; the handler links the
// two with the driver's JIT linker, once per (CUDA context, user functions), and launches one
// thread per trajectory.
#ifndef JAXEXT_CUDA_ODE_USER_KERNELS_H_
#define JAXEXT_CUDA_ODE_USER_KERNELS_H_

#include <cstdint>

#include "jaxext/kernels/dop853.h"

namespace jaxext {
namespace cuda {
namespace ode_user {

// State components whose tolerances the kernel arguments carry.
constexpr int kMaxState = 64;
// The integrator's workspace lives in each thread's local memory, sized at compile time: one
// kernel per bound on the augmented state size (the state alone, or with its sensitivities).
constexpr int kStateBounds[] = {8, 16, 32, 64};
constexpr int kSensitivityBounds[] = {16, 32, 64, 128, 256};
constexpr int kBlock = 64;  // threads per block: a large local footprint per thread

// The kernel's single argument (passed by value; well under the 4 KiB of kernel parameters).
template <typename T>
struct Args {
  int64_t count, n, np, m, kslots;
  const T* y0;       // count x n
  const T* params;   // count x np
  const T* span;     // count x 2
  const T* t_eval;   // m
  T* ys;             // count x m x n_aug
  T* t_final;        // count
  T* y_final;        // count x n_aug
  int32_t* stats;    // count x 4
  T* t_events;       // count x n_events x kslots
  T* y_events;       // count x n_events x kslots x n_aug
  int32_t* counts;   // count x n_events
  int64_t dense_steps;  // 0: no dense output; else dense_t and dense_f as in dop853::Outputs,
  T* dense_t;        // (dense_steps + 1) x count  trajectory-minor (dense_stride = count)
  T* dense_f;        // dense_steps x (kDense + 1) x n_aug x count
  T rtol[kMaxState], atol[kMaxState];
  T first_step, max_step;
  int64_t max_steps;
  int32_t n_events;
  int32_t kinds[dop853::kMaxEvents];       // 0: built-in radius event, 1: the user's event
  int32_t direction[dop853::kMaxEvents];
  T radius[dop853::kMaxEvents];
  int64_t terminal[dop853::kMaxEvents];
};

// The kernels' names, "jaxext_dop853_user_<bound>" and "jaxext_dop853_user_sens_<bound>".
inline const char* KernelPrefix(bool sensitivities) {
  return sensitivities ? "jaxext_dop853_user_sens_" : "jaxext_dop853_user_";
}

}  // namespace ode_user
}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_ODE_USER_KERNELS_H_
