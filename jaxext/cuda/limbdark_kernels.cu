#include "jaxext/cuda/limbdark_kernels.h"

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/grid.h"
#include "jaxext/kernels/limbdark.h"

namespace jaxext {
namespace cuda {
namespace {

// One thread per point, the law rebuilt per thread (n^2 flops, negligible next to the integrals).
template <bool kGrad, typename T>
__global__ void LimbdarkKernel(const T* __restrict__ b, const T* __restrict__ r, int64_t rs,
                               const T* __restrict__ u, int order, int64_t per_group, int64_t n,
                               T* __restrict__ flux, T* __restrict__ dfdb, T* __restrict__ dfdr,
                               T* __restrict__ dfdu) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    limbdark::Law law;
    limbdark::MakeLaw(u + (i / per_group) * order, order, &law);
    limbdark::EvaluateAt<kGrad, T>(b, r, rs, law, i, flux, dfdb, dfdr, dfdu);
  }
}

// Second derivatives (limbdark::EvaluateHessian), same layout: outputs of the gradient kernel, then
// d2F/db2, d2F/db dr, d2F/dr2 and d2F/db du, d2F/dr du.
template <typename T>
__global__ void LimbdarkHessKernel(const T* __restrict__ b, const T* __restrict__ r, int64_t rs,
                                   const T* __restrict__ u, int order, int64_t per_group,
                                   int64_t n, T* __restrict__ flux, T* __restrict__ dfdb,
                                   T* __restrict__ dfdr, T* __restrict__ dfdu,
                                   T* __restrict__ hbb, T* __restrict__ hbr, T* __restrict__ hrr,
                                   T* __restrict__ hbu, T* __restrict__ hru) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) {
    limbdark::Law law;
    limbdark::MakeLaw(u + (i / per_group) * order, order, &law);
    limbdark::EvaluateHessianAt<T>(b, r, rs, law, i, flux, dfdb, dfdr, dfdu, hbb, hbr, hrr, hbu,
                                   hru);
  }
}

constexpr int kBlock = 128;

}  // namespace

template <typename T>
cudaError_t LaunchLimbdark(cudaStream_t stream, bool grad, const T* b, const T* r,
                           int64_t r_stride, const T* u, int order, int64_t per_group,
                           int64_t points, T* flux, T* dfdb, T* dfdr, T* dfdu) {
  if (points == 0) return cudaSuccess;
  if (grad) {
    LimbdarkKernel<true, T><<<GridBlocks(points, kBlock), kBlock, 0, stream>>>(
        b, r, r_stride, u, order, per_group, points, flux, dfdb, dfdr, dfdu);
  } else {
    LimbdarkKernel<false, T><<<GridBlocks(points, kBlock), kBlock, 0, stream>>>(
        b, r, r_stride, u, order, per_group, points, flux, dfdb, dfdr, dfdu);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchLimbdarkHessian(cudaStream_t stream, const T* b, const T* r, int64_t r_stride,
                                  const T* u, int order, int64_t per_group, int64_t points,
                                  T* flux, T* dfdb, T* dfdr, T* dfdu, T* hbb, T* hbr, T* hrr,
                                  T* hbu, T* hru) {
  if (points == 0) return cudaSuccess;
  LimbdarkHessKernel<T><<<GridBlocks(points, kBlock), kBlock, 0, stream>>>(
      b, r, r_stride, u, order, per_group, points, flux, dfdb, dfdr, dfdu, hbb, hbr, hrr, hbu,
      hru);
  return cudaGetLastError();
}

#define JAXEXT_INSTANTIATE(T)                                                                   \
  template cudaError_t LaunchLimbdark<T>(cudaStream_t, bool, const T*, const T*, int64_t,      \
                                         const T*, int, int64_t, int64_t, T*, T*, T*, T*);     \
  template cudaError_t LaunchLimbdarkHessian<T>(cudaStream_t, const T*, const T*, int64_t,     \
                                                const T*, int, int64_t, int64_t, T*, T*, T*,   \
                                                T*, T*, T*, T*, T*, T*);
JAXEXT_INSTANTIATE(float)
JAXEXT_INSTANTIATE(double)
#undef JAXEXT_INSTANTIATE

}  // namespace cuda
}  // namespace jaxext
