// Kernels for warp_sums_test.cc: jaxext/cuda/warp_sums.h's WarpSums against WarpSum, one value
// at a time, in one warp.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/warp_sums.h"

namespace jaxext_warp_sums_test {

using jaxext::cuda::WarpSum;
using jaxext::cuda::WarpSums;

// in: 32 lanes x K values (lane-major). sums[t]: WarpSums' sum of value t; writes[t]: how many
// lanes wrote it; reference[t]: WarpSum's, from lane 0.
template <typename T, int K>
__global__ void WarpSumsKernel(const T* in, T* sums, int32_t* writes, T* reference) {
  const int lane = threadIdx.x;
  T v[K];
  for (int t = 0; t < K; ++t) v[t] = in[lane * K + t];
  WarpSums(v, lane, [&](int t, T sum) {
    sums[t] = sum;
    writes[t] += 1;  // a race on a device; the emulation runs a warp's lanes one at a time
  });
  for (int t = 0; t < K; ++t) {
    const T s = WarpSum(v[t]);
    if (lane == 0) reference[t] = s;
  }
}

template <typename T, int K>
cudaError_t Launch(const T* in, T* sums, int32_t* writes, T* reference) {
  WarpSumsKernel<T, K><<<1, 32>>>(in, sums, writes, reference);
  return cudaGetLastError();
}

#define JAXEXT_WARP_SUMS_CASE(T, K) \
  template cudaError_t Launch<T, K>(const T*, T*, int32_t*, T*);
#define JAXEXT_WARP_SUMS_CASES(K) JAXEXT_WARP_SUMS_CASE(float, K) JAXEXT_WARP_SUMS_CASE(double, K)
// Every size of a product path's block (2l+1 squared and crossed, l <= 3), and around 32 and 64.
JAXEXT_WARP_SUMS_CASES(1)
JAXEXT_WARP_SUMS_CASES(2)
JAXEXT_WARP_SUMS_CASES(3)
JAXEXT_WARP_SUMS_CASES(5)
JAXEXT_WARP_SUMS_CASES(7)
JAXEXT_WARP_SUMS_CASES(9)
JAXEXT_WARP_SUMS_CASES(15)
JAXEXT_WARP_SUMS_CASES(21)
JAXEXT_WARP_SUMS_CASES(25)
JAXEXT_WARP_SUMS_CASES(31)
JAXEXT_WARP_SUMS_CASES(32)
JAXEXT_WARP_SUMS_CASES(33)
JAXEXT_WARP_SUMS_CASES(35)
JAXEXT_WARP_SUMS_CASES(49)
JAXEXT_WARP_SUMS_CASES(64)
JAXEXT_WARP_SUMS_CASES(70)

}  // namespace jaxext_warp_sums_test
