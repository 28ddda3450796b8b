// The transit light curve's CUDA kernels (transit_kernels.cu), launched by its handlers
// (transit_cuda.cc). Plain types only (see kepler_kernels.h).
#ifndef JAXEXT_CUDA_TRANSIT_KERNELS_H_
#define JAXEXT_CUDA_TRANSIT_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/common/transit_shape.h"

namespace jaxext {
namespace cuda {

// mode 0: flux; 1: flux and per-point derivatives dq (points x kNumParams), du (points x order);
// 2: the tangent of the flux for (tt, tq, tu), into flux. T = float / double.
template <typename T>
cudaError_t LaunchTransit(cudaStream_t stream, int mode, const TransitShape& g, const T* t,
                          const T* q, const T* u, T* flux, T* dq, T* du, const T* tt,
                          const T* tq, const T* tu);

// Reverse mode: ct_t per point; per (light curve, block of `block` points, `blocks` per curve)
// the sums sq (x kNumParams) and su (x order), added in a fixed order (deterministic).
template <typename T>
cudaError_t LaunchTransitVjp(cudaStream_t stream, const TransitShape& g, int64_t block,
                             int64_t blocks, const T* t, const T* q, const T* u,
                             const T* ct, T* ct_t, T* sq, T* su);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_TRANSIT_KERNELS_H_
