// The limb-darkening op's CUDA kernels (limbdark_kernels.cu), launched by its handlers
// (limbdark_cuda.cc). Plain types only (see kepler_kernels.h).
#ifndef JAXEXT_CUDA_LIMBDARK_KERNELS_H_
#define JAXEXT_CUDA_LIMBDARK_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace jaxext {
namespace cuda {

// The occulted flux of `points` points (b[i], r[i * r_stride]; the law's `order` coefficients u
// per group of `per_group` points), and with `grad` its derivatives; T = float / double.
template <typename T>
cudaError_t LaunchLimbdark(cudaStream_t stream, bool grad, const T* b, const T* r,
                           int64_t r_stride, const T* u, int order, int64_t per_group,
                           int64_t points, T* flux, T* dfdb, T* dfdr, T* dfdu);

// The same with the second derivatives d2F/db2, d2F/db dr, d2F/dr2, d2F/db du, d2F/dr du.
template <typename T>
cudaError_t LaunchLimbdarkHessian(cudaStream_t stream, const T* b, const T* r, int64_t r_stride,
                                  const T* u, int order, int64_t per_group, int64_t points,
                                  T* flux, T* dfdb, T* dfdr, T* dfdu, T* hbb, T* hbr, T* hrr,
                                  T* hbu, T* hru);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_LIMBDARK_KERNELS_H_
