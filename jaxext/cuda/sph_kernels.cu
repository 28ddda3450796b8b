#include "jaxext/cuda/sph_kernels.h"

#include <cstdint>
#include <limits>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/grid.h"
#include "jaxext/kernels/sph.h"

namespace jaxext {
namespace cuda {
namespace {

constexpr int kBlock = 256;

// The normalisations, by value (at most 169 doubles).
struct Norms {
  double v[sph::Size(sph::kMaxL)];
};

// The recurrence runs in double for either dtype, as on the CPU (float32 would overflow at high l).
template <typename T>
__global__ void SphKernel(const T* __restrict__ v, T* __restrict__ y, int64_t m, int lmax,
                          Norms norms) {
  const int size = sph::Size(lmax);
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  double row[sph::Size(sph::kMaxL)];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m;
       i += stride) {
    sph::SolidHarmonics<double>(lmax, v[3 * i], v[3 * i + 1], v[3 * i + 2], norms.v, row);
    for (int k = 0; k < size; ++k) y[i * size + k] = static_cast<T>(row[k]);
  }
}

// flag = 1 if the ids are not sorted ascending (the flag was zeroed before).
__global__ void CheckSortedKernel(const int32_t* __restrict__ id, int64_t e, int32_t* flag) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = 1 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < e;
       i += stride) {
    if (id[i] < id[i - 1]) *flag = 1;
  }
}

// out[s, k] = sum over the rows of segment s, in row order; NaN everywhere if *flag is set.
template <typename T>
__global__ void SegmentSumKernel(const T* __restrict__ x, const int32_t* __restrict__ id, int64_t e,
                                 int64_t segments, int64_t f, const int32_t* __restrict__ flag,
                                 T* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const bool unsorted = *flag != 0;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < segments * f;
       q += stride) {
    if (unsorted) {
      y[q] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const int64_t s = q / f, k = q % f;
    int64_t lo = 0, hi = e;  // the first row with id >= s
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (id[mid] < s) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    T acc = T(0);
    for (int64_t row = lo; row < e && id[row] == s; ++row) acc += x[row * f + k];
    y[q] = acc;
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchSphericalHarmonics(cudaStream_t stream, const T* v, T* y, int64_t m, int lmax,
                                     const double* norms) {
  if (m == 0) return cudaSuccess;
  Norms n{};
  for (int i = 0; i < sph::Size(lmax); ++i) n.v[i] = norms[i];
  SphKernel<T><<<GridBlocks(m, kBlock), kBlock, 0, stream>>>(v, y, m, lmax, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSegmentSum(cudaStream_t stream, const T* x, const int32_t* ids, int64_t e,
                             int64_t segments, int64_t f, int32_t* flag, T* y) {
  if (e > 1) CheckSortedKernel<<<GridBlocks(e, kBlock), kBlock, 0, stream>>>(ids, e, flag);
  if (segments * f > 0) {
    SegmentSumKernel<T><<<GridBlocks(segments * f, kBlock), kBlock, 0, stream>>>(
        x, ids, e, segments, f, flag, y);
  }
  return cudaGetLastError();
}

#define JAXEXT_INSTANTIATE(T)                                                                  \
  template cudaError_t LaunchSphericalHarmonics<T>(cudaStream_t, const T*, T*, int64_t, int,  \
                                                   const double*);                            \
  template cudaError_t LaunchSegmentSum<T>(cudaStream_t, const T*, const int32_t*, int64_t,   \
                                           int64_t, int64_t, int32_t*, T*);
JAXEXT_INSTANTIATE(float)
JAXEXT_INSTANTIATE(double)
#undef JAXEXT_INSTANTIATE

}  // namespace cuda
}  // namespace jaxext
