#include "jaxext/cuda/transit_kernels.h"

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/grid.h"
#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/transit.h"

namespace jaxext {
namespace cuda {
namespace {

constexpr int kQ = transit::kNumParams;

// Flux of one point and, if kGrad, its derivatives dflux/dq (fq) and dflux/du (fu), averaged
// over its sub-exposures.
template <bool kGrad>
__device__ double PointFlux(const transit::Orbit& orbit, const limbdark::Law& law, double ti,
                            int oversample, double* fq, double* fu) {
  const int order = law.order;
  const double r = orbit.q[transit::kRadius];
  double acc_f = 0.0;
  if (kGrad) {
    for (int m = 0; m < kQ; ++m) fq[m] = 0.0;
    for (int m = 0; m < order; ++m) fu[m] = 0.0;
  }
  for (int k = 0; k < oversample; ++k) {
    bool active;
    double db[kGrad ? kQ : 1];
    const double b = transit::Separation<kGrad>(orbit, ti, transit::Offset(k, oversample),
                                                &active, kGrad ? db : nullptr);
    if (!active) {
      acc_f += 1.0;
      continue;
    }
    double f, fb = 0.0, fr = 0.0, fuk[limbdark::kMaxOrder];
    limbdark::Evaluate<kGrad>(b, r, law, &f, &fb, &fr, fuk);
    acc_f += f;
    if (kGrad) {
      for (int m = 0; m < kQ; ++m) fq[m] += fb * db[m];
      fq[transit::kRadius] += fr;
      for (int m = 0; m < order; ++m) fu[m] += fuk[m];
    }
  }
  const double inv_k = 1.0 / oversample;
  if (kGrad) {
    for (int m = 0; m < kQ; ++m) fq[m] *= inv_k;
    for (int m = 0; m < order; ++m) fu[m] *= inv_k;
  }
  return acc_f * inv_k;
}

// One thread per point: its light curve's law and orbit, then its sub-exposures one by one.
// kMode 0: flux; 1: flux and per-point derivatives; 2: the tangent for (tt, tq, tu).
template <int kMode, typename T>
__global__ void TransitKernel(const T* __restrict__ t, const T* __restrict__ q,
                              const T* __restrict__ u, int order, int oversample,
                              int64_t per_group, int64_t n, T* __restrict__ flux,
                              T* __restrict__ dq, T* __restrict__ du, const T* __restrict__ tt,
                              const T* __restrict__ tq, const T* __restrict__ tu) {
  constexpr bool kGrad = kMode != 0;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t g = i / per_group;
    limbdark::Law law;
    limbdark::MakeLaw(u + g * order, order, &law);
    transit::Orbit orbit;
    transit::MakeOrbit(q + g * kQ, law, &orbit);
    double fq[kQ], fu[limbdark::kMaxOrder];
    const double f = PointFlux<kGrad>(orbit, law, static_cast<double>(t[i]), oversample, fq, fu);
    if (kMode == 2) {
      double acc = -fq[transit::kT0] * static_cast<double>(tt[i]);
      for (int m = 0; m < kQ; ++m) acc += fq[m] * static_cast<double>(tq[g * kQ + m]);
      for (int m = 0; m < order; ++m) acc += fu[m] * static_cast<double>(tu[g * order + m]);
      flux[i] = static_cast<T>(acc);
      continue;
    }
    flux[i] = static_cast<T>(f);
    if (kMode == 1) {
      for (int m = 0; m < kQ; ++m) dq[i * kQ + m] = static_cast<T>(fq[m]);
      for (int m = 0; m < order; ++m) du[i * order + m] = static_cast<T>(fu[m]);
    }
  }
}

constexpr int kVjpThreads = 128;

// Reverse mode: one thread block per (light curve, block of points); each thread sums
// ct * dflux/dq over its points, then the block adds the threads' sums in a fixed order
// (deterministic).
template <typename T>
__global__ void TransitVjpKernel(const T* __restrict__ t, const T* __restrict__ q,
                                 const T* __restrict__ u, const T* __restrict__ ct, int order,
                                 int oversample, int64_t per_group, int64_t block,
                                 int64_t blocks, T* __restrict__ ct_t, T* __restrict__ sq,
                                 T* __restrict__ su) {
  __shared__ double partial[kVjpThreads][kQ + limbdark::kMaxOrder];
  const int64_t unit = blockIdx.x;
  const int64_t g = unit / blocks, b = unit - g * blocks;
  const int64_t begin = g * per_group + b * block;
  const int64_t end = min((g + 1) * per_group, begin + block);
  limbdark::Law law;
  limbdark::MakeLaw(u + g * order, order, &law);
  transit::Orbit orbit;
  transit::MakeOrbit(q + g * kQ, law, &orbit);
  double acc[kQ + limbdark::kMaxOrder];
  for (int m = 0; m < kQ + order; ++m) acc[m] = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    double fq[kQ], fu[limbdark::kMaxOrder];
    PointFlux<true>(orbit, law, static_cast<double>(t[i]), oversample, fq, fu);
    const double c = static_cast<double>(ct[i]);
    ct_t[i] = static_cast<T>(-c * fq[transit::kT0]);
    for (int m = 0; m < kQ; ++m) acc[m] += c * fq[m];
    for (int m = 0; m < order; ++m) acc[kQ + m] += c * fu[m];
  }
  for (int m = 0; m < kQ + order; ++m) partial[threadIdx.x][m] = acc[m];
  __syncthreads();
  for (int m = threadIdx.x; m < kQ + order; m += blockDim.x) {
    double sum = 0.0;
    for (int j = 0; j < kVjpThreads; ++j) sum += partial[j][m];
    if (m < kQ) {
      sq[unit * kQ + m] = static_cast<T>(sum);
    } else {
      su[unit * order + (m - kQ)] = static_cast<T>(sum);
    }
  }
}

constexpr int kBlock = 128;

}  // namespace

template <typename T>
cudaError_t LaunchTransit(cudaStream_t stream, int mode, const TransitShape& g, const T* t,
                          const T* q, const T* u, T* flux, T* dq, T* du, const T* tt,
                          const T* tq, const T* tu) {
  if (g.points == 0) return cudaSuccess;
  const unsigned blocks = GridBlocks(g.points, kBlock);
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kBlock, 0, stream>>>(t, q, u, g.order, g.oversample, g.per_group, g.points,
                                          flux, dq, du, tt, tq, tu);
  };
  if (mode == 0) {
    launch(TransitKernel<0, T>);
  } else if (mode == 1) {
    launch(TransitKernel<1, T>);
  } else {
    launch(TransitKernel<2, T>);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTransitVjp(cudaStream_t stream, const TransitShape& g, int64_t block,
                             int64_t blocks, const T* t, const T* q, const T* u,
                             const T* ct, T* ct_t, T* sq, T* su) {
  const int64_t units = g.groups * blocks;
  if (units == 0) return cudaSuccess;
  TransitVjpKernel<T><<<static_cast<unsigned>(units), kVjpThreads, 0, stream>>>(
      t, q, u, ct, g.order, g.oversample, g.per_group, block, blocks, ct_t, sq, su);
  return cudaGetLastError();
}

#define JAXEXT_INSTANTIATE(T)                                                                  \
  template cudaError_t LaunchTransit<T>(cudaStream_t, int, const TransitShape&, const T*,     \
                                        const T*, const T*, T*, T*, T*, const T*, const T*,   \
                                        const T*);                                            \
  template cudaError_t LaunchTransitVjp<T>(cudaStream_t, const TransitShape&, int64_t,        \
                                           int64_t, const T*, const T*, const T*,             \
                                           const T*, T*, T*, T*);
JAXEXT_INSTANTIATE(float)
JAXEXT_INSTANTIATE(double)
#undef JAXEXT_INSTANTIATE

}  // namespace cuda
}  // namespace jaxext
