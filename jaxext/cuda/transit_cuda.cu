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

// One thread per point: its light curve's law and orbit, then its sub-exposures one by one.
template <bool kGrad, typename T>
__global__ void TransitKernel(const T* __restrict__ t, const T* __restrict__ q,
                              const T* __restrict__ u, int order, int oversample,
                              int64_t per_group, int64_t n, T* __restrict__ flux,
                              T* __restrict__ dq, T* __restrict__ du) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t g = i / per_group;
    limbdark::Law law;
    limbdark::MakeLaw(u + g * order, order, &law);
    transit::Orbit orbit;
    transit::MakeOrbit(q + g * kQ, law, &orbit);
    const double r = orbit.q[transit::kRadius];
    const double ti = static_cast<double>(t[i]);
    double acc_f = 0.0, acc_q[kQ], acc_u[limbdark::kMaxOrder];
    if (kGrad) {
      for (int m = 0; m < kQ; ++m) acc_q[m] = 0.0;
      for (int m = 0; m < order; ++m) acc_u[m] = 0.0;
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
      double f, fb = 0.0, fr = 0.0, fu[limbdark::kMaxOrder];
      limbdark::Evaluate<kGrad>(b, r, law, &f, &fb, &fr, fu);
      acc_f += f;
      if (kGrad) {
        for (int m = 0; m < kQ; ++m) acc_q[m] += fb * db[m];
        acc_q[transit::kRadius] += fr;
        for (int m = 0; m < order; ++m) acc_u[m] += fu[m];
      }
    }
    const double inv_k = 1.0 / oversample;
    flux[i] = static_cast<T>(acc_f * inv_k);
    if (kGrad) {
      for (int m = 0; m < kQ; ++m) dq[i * kQ + m] = static_cast<T>(acc_q[m] * inv_k);
      for (int m = 0; m < order; ++m) du[i * order + m] = static_cast<T>(acc_u[m] * inv_k);
    }
  }
}

constexpr int kBlock = 128;

template <bool kGrad, typename T>
ffi::Error Launch(cudaStream_t stream, const TransitShape& shape, const T* t, const T* q,
                  const T* u, T* flux, T* dq, T* du) {
  if (shape.points == 0) return ffi::Error::Success();
  const int64_t blocks = std::min<int64_t>((shape.points + kBlock - 1) / kBlock, int64_t{1} << 20);
  TransitKernel<kGrad, T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      t, q, u, shape.order, shape.oversample, shape.per_group, shape.points, flux, dq, du);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxext transit: CUDA launch failed: ") +
                                cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

template <ffi::DataType dtype>
ffi::Error TransitImpl(cudaStream_t stream, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                       ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux, int64_t oversample) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, flux->element_count(), nullptr, &shape);
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return Launch<false, T>(stream, shape, t.typed_data(), q.typed_data(), u.typed_data(),
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
  return Launch<true, T>(stream, shape, t.typed_data(), q.typed_data(), u.typed_data(),
                         flux->typed_data(), dq->typed_data(), du->typed_data());
}

}  // namespace

#define JAXEXT_TRANSIT_CUDA_BINDING(T)          \
  ffi::Ffi::Bind()                              \
      .Ctx<ffi::PlatformStream<cudaStream_t>>() \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

#define JAXEXT_TRANSIT_GRAD_CUDA_BINDING(T) \
  JAXEXT_TRANSIT_CUDA_BINDING(T)            \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCudaF32, TransitImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_CUDA_BINDING(F32).Attr<int64_t>("oversample"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCudaF64, TransitImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_CUDA_BINDING(F64).Attr<int64_t>("oversample"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCudaF32, TransitGradImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_GRAD_CUDA_BINDING(F32).Attr<int64_t>("oversample"),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCudaF64, TransitGradImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_GRAD_CUDA_BINDING(F64).Attr<int64_t>("oversample"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
