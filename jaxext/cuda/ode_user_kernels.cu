// Device code of jaxext.ode.dop853 with user functions (see ode_user_kernels.h): compiled as
// relocatable device code once per precision (JAXEXT_ODE_USER_T = float or double), calling the
// user's `jaxext_ode_user`, which only exists once the handler links it in at run time.
#include <cstdint>

#include "jaxext/cuda/ode_user_kernels.h"
#include "jaxext/kernels/dop853.h"

#ifndef JAXEXT_ODE_USER_T
#error "compile with -DJAXEXT_ODE_USER_T=float or double"
#endif

using T = JAXEXT_ODE_USER_T;

// Numba's calling convention: status returned, the function's value through the first pointer.
extern "C" __device__ int jaxext_ode_user(T* result, int op, T t, const T* y, const T* p, T* out,
                                          T* out2);

namespace jaxext {
namespace cuda {
namespace ode_user {
namespace {

constexpr int kRhs = 0, kJacobian = 1, kEvent0 = 2;

struct UserRhs {
  const T* p;
  __device__ bool operator()(T t, const T* y, T* f) const {
    T unused;
    return jaxext_ode_user(&unused, kRhs, t, y, p, f, nullptr) == 0;
  }
};

// f with the variational equations of the sensitivities (dop853::Sensitivities); dfdy and dfdp
// are zeroed before each call, so entries the user's Jacobian leaves alone are zero.
struct UserVariational {
  const T* p;
  int n, np;
  T* dfdy;  // n x n
  T* dfdp;  // n x np
  __device__ bool operator()(T t, const T* y, T* f) const {
    T unused;
    if (jaxext_ode_user(&unused, kRhs, t, y, p, f, nullptr) != 0) return false;
    for (int i = 0; i < n * n; ++i) dfdy[i] = T(0);
    for (int i = 0; i < n * np; ++i) dfdp[i] = T(0);
    if (jaxext_ode_user(&unused, kJacobian, t, y, p, dfdy, dfdp) != 0) return false;
    dop853::Sensitivities<T>(n, np, dfdy, dfdp, y + n, f + n);
    return true;
  }
};

struct UserEvents {
  const Args<T>* args;
  const T* p;
  __device__ int size() const { return args->n_events; }
  __device__ int direction(int e) const { return args->direction[e]; }
  __device__ int64_t max_count(int e) const { return args->terminal[e]; }
  __device__ bool value(int e, T t, const T* y, T* g) const {
    if (args->kinds[e] == 0) {
      *g = sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2]) - args->radius[e];
      return true;
    }
    return jaxext_ode_user(g, kEvent0 + e, t, y, p, nullptr, nullptr) == 0;
  }
};

template <int kMaxAug, bool kSensitivities>
__device__ void Integrate(const Args<T>& a) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= a.count) return;
  const int n = static_cast<int>(a.n), np = static_cast<int>(a.np);
  const int cols = n + np;
  const int n_aug = kSensitivities ? n + n * cols : n;
  T work[(dop853::kExtended + dop853::kDense + 5) * kMaxAug + 2 * dop853::kMaxEvents];
  T start[kMaxAug];
  const T* p = a.params + j * np;
  bool params_finite = true;
  for (int k = 0; k < np; ++k) params_finite = params_finite && dop853::Finite(p[k]);
  for (int i = 0; i < n; ++i) start[i] = a.y0[j * n + i];
  for (int i = 0; i < n_aug - n; ++i) start[n + i] = (i % cols == i / cols) ? T(1) : T(0);
  const dop853::Settings<T> settings{a.rtol, a.atol, a.first_step, a.max_step, a.max_steps};
  const int64_t ne = a.n_events, m = a.m, ks = a.kslots;
  dop853::Outputs<T> out{a.t_eval,
                         m,
                         a.ys + j * m * n_aug,
                         ks,
                         a.t_events + j * ne * ks,
                         a.y_events + j * ne * ks * n_aug,
                         a.counts + j * ne,
                         a.t_final + j,
                         a.y_final + j * n_aug,
                         a.stats + j * 4};
  if (a.dense_steps > 0) {  // trajectory-minor (the lowering's result layout)
    out.dense_steps = a.dense_steps;
    out.dense_t = a.dense_t + j;
    out.dense_f = a.dense_f + j;
    out.dense_stride = a.count;
  }
  UserEvents events{&a, p};
  if constexpr (kSensitivities) {
    T scratch[kMaxAug];  // n^2 + n np = n_aug - n <= kMaxAug
    UserVariational rhs{p, n, np, scratch, scratch + n * n};
    dop853::Integrator<T, UserVariational, UserEvents> integrator(rhs, events, n_aug, n, settings,
                                                                  work);
    integrator.Run(a.span[2 * j], a.span[2 * j + 1], start, params_finite, out);
  } else {
    UserRhs rhs{p};
    dop853::Integrator<T, UserRhs, UserEvents> integrator(rhs, events, n, n, settings, work);
    integrator.Run(a.span[2 * j], a.span[2 * j + 1], start, params_finite, out);
  }
}

}  // namespace
}  // namespace ode_user
}  // namespace cuda
}  // namespace jaxext

// The kernels, by name (ode_user_kernels.h): one per bound in kStateBounds / kSensitivityBounds.
// The argument stays in parameter memory (__grid_constant__: its address is taken, no copy).
#define JAXEXT_ODE_USER_KERNEL(bound)                                                    \
  extern "C" __global__ void __launch_bounds__(jaxext::cuda::ode_user::kBlock)           \
      jaxext_dop853_user_##bound(const __grid_constant__ jaxext::cuda::ode_user::Args<T> a) { \
    jaxext::cuda::ode_user::Integrate<bound, false>(a);                                  \
  }
#define JAXEXT_ODE_USER_SENS_KERNEL(bound)                                               \
  extern "C" __global__ void __launch_bounds__(jaxext::cuda::ode_user::kBlock)           \
      jaxext_dop853_user_sens_##bound(                                                   \
          const __grid_constant__ jaxext::cuda::ode_user::Args<T> a) {                    \
    jaxext::cuda::ode_user::Integrate<bound, true>(a);                                   \
  }

JAXEXT_ODE_USER_KERNEL(8)
JAXEXT_ODE_USER_KERNEL(16)
JAXEXT_ODE_USER_KERNEL(32)
JAXEXT_ODE_USER_KERNEL(64)
JAXEXT_ODE_USER_SENS_KERNEL(16)
JAXEXT_ODE_USER_SENS_KERNEL(32)
JAXEXT_ODE_USER_SENS_KERNEL(64)
JAXEXT_ODE_USER_SENS_KERNEL(128)
JAXEXT_ODE_USER_SENS_KERNEL(256)
