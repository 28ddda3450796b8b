// jaxext.ode.dop853's CUDA kernels for the built-in models (ode_kernels.cu), launched by its
// handler (ode_cuda.cc). Plain types only (see kepler_kernels.h). The kernels for user
// right-hand sides are ode_user_kernels.cu's, linked at run time.
#ifndef JAXEXT_CUDA_ODE_KERNELS_H_
#define JAXEXT_CUDA_ODE_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/kernels/dop853.h"
#include "jaxext/kernels/orbit.h"

namespace jaxext {
namespace cuda {

constexpr int kN = orbit::kStateSize;
constexpr int kMaxParams = 2;                       // sensitivities: at most 2 parameter columns
constexpr int kMaxAug = kN + kN * (kN + kMaxParams);  // state + sensitivities

// Everything a thread needs besides the buffers, passed by value as the kernel's argument, read in
// place (__grid_constant__): without it, taking the model's address made every thread copy the
// whole struct (atmosphere table included) to local memory (ncu on an H100: 3.4 KB of stack).
template <typename T>
struct Dop853Config {
  orbit::Model<T> model;
  T rtol[kN], atol[kN];
  T first_step, max_step;
  int64_t max_steps;
  int n_events;
  T radius[dop853::kMaxEvents];
  int direction[dop853::kMaxEvents];
  int64_t terminal[dop853::kMaxEvents];
};

// The operands and results (as jaxext/common/dop853_binding.h describes them): count
// trajectories, np parameters each, m t_eval points, kslots event slots, dense_steps kept steps.
template <typename T>
struct Dop853Buffers {
  int64_t count, np, m, kslots, dense_steps;
  const T *y0, *params, *span, *t_eval;
  T *ys, *t_final, *y_final;
  int32_t* stats;
  T *t_events, *y_events;
  int32_t* counts;
  T *dense_t, *dense_f;  // null without kept steps
};

// One thread per trajectory; with `sensitivities` the variational equations too. T = float /
// double.
template <typename T>
cudaError_t LaunchDop853(cudaStream_t stream, const Dop853Config<T>& config,
                         const Dop853Buffers<T>& b, bool sensitivities);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_ODE_KERNELS_H_
