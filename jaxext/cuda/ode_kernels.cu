#include "jaxext/cuda/ode_kernels.h"

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/kernels/dop853.h"
#include "jaxext/kernels/orbit.h"

namespace jaxext {
namespace cuda {
namespace {

template <typename T>
struct ModelRhs {
  const orbit::Model<T>* model;
  const T* p;
  __host__ __device__ bool operator()(T t, const T* y, T* f) const {
    (*model)(t, y, p, f);
    return true;
  }
};

// f, df/dy and df/dp by dual numbers (orbit.h) and the variational equations (dop853.h).
template <typename T>
struct ModelVariational {
  const orbit::Model<T>* model;
  const T* p;
  int np;
  __host__ __device__ bool operator()(T t, const T* y, T* f) const {
    T dfdy[kN * kN], dfdp[kN * kMaxParams];
    model->Jacobian(t, y, p, np, f, dfdy, dfdp);
    dop853::Sensitivities<T>(kN, np, dfdy, dfdp, y + kN, f + kN);
    return true;
  }
};

// Radius events; none at all (known at compile time) when kOn is false.
template <typename T, bool kOn = true>
struct RadiusEvents {
  const Dop853Config<T>* config;
  __host__ __device__ int size() const { return kOn ? config->n_events : 0; }
  __host__ __device__ int direction(int e) const { return config->direction[e]; }
  __host__ __device__ int64_t max_count(int e) const { return config->terminal[e]; }
  __host__ __device__ bool value(int e, T, const T* y, T* g) const {
    *g = sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2]) - config->radius[e];
    return true;
  }
};

// One thread per trajectory. Without sensitivities the state size is static, so that the
// integrator's loops unroll and its stages K[0..15] (an array of their own, always indexed by
// constants) live in registers. kDense: t_eval points, events or kept steps (dense=S), hence the
// dense output; without them (known at compile time) that code is gone and the rest fits the
// register cap of __launch_bounds__ (168 registers: 6 blocks of 64 threads per SM). On an H100,
// 1e6 LEO orbits (1 day, J2 + drag, 1e-9) took 96 ms this way, against 113 ms uncapped (232
// registers) and 327 ms with the whole workspace in local memory, bit for bit the same results;
// with the dense output (5 t_eval points and an event) the cap cost nothing measurable (337 ms
// against 358 ms uncapped). The kept steps' code (dense=S, a run-time branch here since
// 2026-11-26) left that case as it was: gpu_checks' set at 1e6, 0.44 us per trajectory (0.43).
template <typename T, bool kDense>
__global__ void __launch_bounds__(64, 6)
    Dop853Kernel(const __grid_constant__ Dop853Config<T> config, int64_t count, int64_t np, int64_t m,
                 int64_t kslots, const T* __restrict__ y0, const T* __restrict__ params,
                 const T* __restrict__ span, const T* __restrict__ t_eval, T* ys, T* t_final,
                 T* y_final, int32_t* stats, T* t_events, T* y_events, int32_t* counts,
                 int64_t dense_steps, T* dense_t, T* dense_f) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= count) return;
  T stages[dop853::kExtended * kN];
  T work[dop853::WorkspaceSize(kN) - dop853::kExtended * kN];
  T start[kN];
  const T* p = params + j * np;
  bool params_finite = true;
  for (int64_t k = 0; k < np; ++k) params_finite = params_finite && dop853::Finite(p[k]);
  for (int i = 0; i < kN; ++i) start[i] = y0[j * kN + i];
  const dop853::Settings<T> settings{config.rtol, config.atol, config.first_step, config.max_step,
                                     config.max_steps};
  const int64_t ne = kDense ? config.n_events : 0;
  dop853::Outputs<T> out{t_eval,       kDense ? m : 0,
                         ys + j * m * kN, kslots,
                         t_events + j * ne * kslots, y_events + j * ne * kslots * kN,
                         counts + j * ne, t_final + j,
                         y_final + j * kN, stats + j * 4};
  if (kDense && dense_steps > 0) {  // trajectory-minor (the lowering's result layout)
    out.dense_steps = dense_steps;
    out.dense_t = dense_t + j;
    out.dense_f = dense_f + j;
    out.dense_stride = count;
  }
  RadiusEvents<T, kDense> events{&config};
  ModelRhs<T> rhs{&config.model, p};
  dop853::Integrator<T, ModelRhs<T>, RadiusEvents<T, kDense>, kN> integrator(
      rhs, events, kN, kN, settings, stages, work);
  integrator.Run(span[2 * j], span[2 * j + 1], start, params_finite, out);
}

// With sensitivities (6 + 6 (6 + np) components): the workspace stays in local memory.
template <typename T>
__global__ void Dop853SensitivityKernel(const __grid_constant__ Dop853Config<T> config, int64_t count,
                                        int64_t np, int64_t m, int64_t kslots,
                                        const T* __restrict__ y0, const T* __restrict__ params,
                                        const T* __restrict__ span, const T* __restrict__ t_eval,
                                        T* ys, T* t_final, T* y_final, int32_t* stats,
                                        T* t_events, T* y_events, int32_t* counts,
                                        int64_t dense_steps, T* dense_t, T* dense_f) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= count) return;
  const int cols = kN + static_cast<int>(np);
  const int n_aug = kN + kN * cols;
  T work[dop853::WorkspaceSize(kMaxAug)];
  T start[kMaxAug];
  const T* p = params + j * np;
  bool params_finite = true;
  for (int64_t k = 0; k < np; ++k) params_finite = params_finite && dop853::Finite(p[k]);
  for (int i = 0; i < kN; ++i) start[i] = y0[j * kN + i];
  for (int i = 0; i < n_aug - kN; ++i) start[kN + i] = (i % cols == i / cols) ? T(1) : T(0);
  const dop853::Settings<T> settings{config.rtol, config.atol, config.first_step, config.max_step,
                                     config.max_steps};
  const int64_t ne = config.n_events;
  dop853::Outputs<T> out{t_eval,       m,
                         ys + j * m * n_aug, kslots,
                         t_events + j * ne * kslots, y_events + j * ne * kslots * n_aug,
                         counts + j * ne, t_final + j,
                         y_final + j * n_aug, stats + j * 4};
  if (dense_steps > 0) {  // trajectory-minor (the lowering's result layout)
    out.dense_steps = dense_steps;
    out.dense_t = dense_t + j;
    out.dense_f = dense_f + j;
    out.dense_stride = count;
  }
  RadiusEvents<T> events{&config};
  ModelVariational<T> rhs{&config.model, p, static_cast<int>(np)};
  dop853::Integrator<T, ModelVariational<T>, RadiusEvents<T>> integrator(rhs, events, n_aug, kN,
                                                                         settings, work);
  integrator.Run(span[2 * j], span[2 * j + 1], start, params_finite, out);
}

constexpr int kBlock = 64;  // Dop853Kernel's __launch_bounds__

}  // namespace

template <typename T>
cudaError_t LaunchDop853(cudaStream_t stream, const Dop853Config<T>& config,
                         const Dop853Buffers<T>& b, bool sensitivities) {
  if (b.count == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((b.count + kBlock - 1) / kBlock);
  auto args = [&](auto kernel) {
    kernel<<<blocks, kBlock, 0, stream>>>(config, b.count, b.np, b.m, b.kslots, b.y0, b.params,
                                          b.span, b.t_eval, b.ys, b.t_final, b.y_final, b.stats,
                                          b.t_events, b.y_events, b.counts, b.dense_steps,
                                          b.dense_t, b.dense_f);
  };
  if (sensitivities) {
    args(Dop853SensitivityKernel<T>);
  } else if (b.m > 0 || config.n_events > 0 || b.dense_steps > 0) {
    args(Dop853Kernel<T, true>);
  } else {
    args(Dop853Kernel<T, false>);
  }
  return cudaGetLastError();
}

template cudaError_t LaunchDop853<float>(cudaStream_t, const Dop853Config<float>&,
                                         const Dop853Buffers<float>&, bool);
template cudaError_t LaunchDop853<double>(cudaStream_t, const Dop853Config<double>&,
                                          const Dop853Buffers<double>&, bool);

}  // namespace cuda
}  // namespace jaxext
