#include "jaxext/cuda/kepler_kernels.h"

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/grid.h"
#include "jaxext/kernels/kepler.h"

namespace jaxext {
namespace cuda {
namespace {

template <typename T>
__global__ void KeplerKernel(const T* __restrict__ m, const T* __restrict__ e, T* __restrict__ s,
                             T* __restrict__ c, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    kepler::solve<T>(m[i], e[i], s + i, c + i);
  }
}

constexpr int kBlock = 256;

}  // namespace

template <typename T>
cudaError_t LaunchKepler(cudaStream_t stream, const T* mean_anomaly, const T* eccentricity,
                         T* sin_e, T* cos_e, int64_t n) {
  if (n == 0) return cudaSuccess;
  KeplerKernel<<<GridBlocks(n, kBlock), kBlock, 0, stream>>>(mean_anomaly, eccentricity, sin_e,
                                                             cos_e, n);
  return cudaGetLastError();
}

template cudaError_t LaunchKepler<float>(cudaStream_t, const float*, const float*, float*, float*,
                                         int64_t);
template cudaError_t LaunchKepler<double>(cudaStream_t, const double*, const double*, double*,
                                          double*, int64_t);

}  // namespace cuda
}  // namespace jaxext
