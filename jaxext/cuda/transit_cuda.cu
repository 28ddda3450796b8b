#include <algorithm>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "jaxext/common/transit_shapes.h"
#include "jaxext/cuda/transit_cuda.h"
#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/transit.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

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

ffi::Error LaunchError() {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxext transit: CUDA launch failed: ") +
                                cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

template <int kMode, typename T>
ffi::Error Launch(cudaStream_t stream, const TransitShape& shape, const T* t, const T* q,
                  const T* u, T* flux, T* dq, T* du, const T* tt = nullptr,
                  const T* tq = nullptr, const T* tu = nullptr) {
  if (shape.points == 0) return ffi::Error::Success();
  const int64_t blocks = std::min<int64_t>((shape.points + kBlock - 1) / kBlock, int64_t{1} << 20);
  TransitKernel<kMode, T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      t, q, u, shape.order, shape.oversample, shape.per_group, shape.points, flux, dq, du, tt,
      tq, tu);
  return LaunchError();
}

template <ffi::DataType dtype>
ffi::Error TransitImpl(cudaStream_t stream, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                       ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux, int64_t oversample,
                       int64_t /*flux_series: the exact occultation per point here*/) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, flux->element_count(), nullptr, &shape);
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return Launch<0, T>(stream, shape, t.typed_data(), q.typed_data(), u.typed_data(),
                      flux->typed_data(), nullptr, nullptr);
}

template <ffi::DataType dtype>
ffi::Error TransitGradImpl(cudaStream_t stream, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                           ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux,
                           ffi::ResultBuffer<dtype> dq, ffi::ResultBuffer<dtype> du,
                           int64_t oversample) {
  TransitShape shape;
  const size_t grad_counts[] = {dq->element_count(), du->element_count()};
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, flux->element_count(), grad_counts, &shape);
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return Launch<1, T>(stream, shape, t.typed_data(), q.typed_data(), u.typed_data(),
                      flux->typed_data(), dq->typed_data(), du->typed_data());
}

template <ffi::DataType dtype>
ffi::Error TransitLinImpl(cudaStream_t stream, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                          ffi::Buffer<dtype> u, ffi::Buffer<dtype> tt, ffi::Buffer<dtype> tq,
                          ffi::Buffer<dtype> tu, ffi::ResultBuffer<dtype> out,
                          int64_t oversample) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, out->element_count(), nullptr, &shape);
      err.failure()) {
    return err;
  }
  if (ffi::Error err = CheckTransitTangents(t.element_count(), q.element_count(),
                                            u.element_count(), tt.element_count(),
                                            tq.element_count(), tu.element_count());
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return Launch<2, T>(stream, shape, t.typed_data(), q.typed_data(), u.typed_data(),
                      out->typed_data(), nullptr, nullptr, tt.typed_data(), tq.typed_data(),
                      tu.typed_data());
}

template <ffi::DataType dtype>
ffi::Error TransitVjpImpl(cudaStream_t stream, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                          ffi::Buffer<dtype> u, ffi::Buffer<dtype> ct,
                          ffi::ResultBuffer<dtype> ct_t, ffi::ResultBuffer<dtype> ct_q,
                          ffi::ResultBuffer<dtype> ct_u, int64_t oversample, int64_t block) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, ct_t->element_count(), nullptr, &shape);
      err.failure()) {
    return err;
  }
  int64_t blocks;
  if (ffi::Error err = GetTransitVjpBlocks(shape, block, t.element_count(), ct.element_count(),
                                           ct_q->element_count(), ct_u->element_count(), &blocks);
      err.failure()) {
    return err;
  }
  const int64_t units = shape.groups * blocks;
  if (units == 0) return ffi::Error::Success();
  if (units > (int64_t{1} << 31) - 1) {
    return ffi::Error::InvalidArgument("jaxext transit: too many blocks of points");
  }
  using T = ffi::NativeType<dtype>;
  TransitVjpKernel<T><<<static_cast<unsigned>(units), kVjpThreads, 0, stream>>>(
      t.typed_data(), q.typed_data(), u.typed_data(), ct.typed_data(), shape.order,
      shape.oversample, shape.per_group, block, blocks, ct_t->typed_data(), ct_q->typed_data(),
      ct_u->typed_data());
  return LaunchError();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCudaF32, TransitImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_BINDING(ffi::PlatformStream<cudaStream_t>, F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCudaF64, TransitImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_BINDING(ffi::PlatformStream<cudaStream_t>, F64),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCudaF32, TransitGradImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_GRAD_BINDING(ffi::PlatformStream<cudaStream_t>, F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCudaF64, TransitGradImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_GRAD_BINDING(ffi::PlatformStream<cudaStream_t>, F64),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitLinCudaF32, TransitLinImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_LIN_BINDING(ffi::PlatformStream<cudaStream_t>, F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitLinCudaF64, TransitLinImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_LIN_BINDING(ffi::PlatformStream<cudaStream_t>, F64),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitVjpCudaF32, TransitVjpImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_VJP_BINDING(ffi::PlatformStream<cudaStream_t>, F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitVjpCudaF64, TransitVjpImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_VJP_BINDING(ffi::PlatformStream<cudaStream_t>, F64),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
