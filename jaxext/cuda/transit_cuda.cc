#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/common/transit_shapes.h"
#include "jaxext/cuda/launch.h"
#include "jaxext/cuda/transit_cuda.h"
#include "jaxext/cuda/transit_kernels.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

template <int kMode, typename T>
ffi::Error Launch(cudaStream_t stream, const TransitShape& shape, const T* t, const T* q,
                  const T* u, T* flux, T* dq, T* du, const T* tt = nullptr,
                  const T* tq = nullptr, const T* tu = nullptr) {
  return LaunchStatus("jaxext transit", LaunchTransit<T>(stream, kMode, shape, t, q, u,
                                                         flux, dq, du, tt, tq, tu));
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
  int64_t blocks = 0;
  if (ffi::Error err = GetTransitVjpBlocks(shape, block, t.element_count(), ct.element_count(),
                                           ct_q->element_count(), ct_u->element_count(), &blocks);
      err.failure()) {
    return err;
  }
  if (shape.groups * blocks > (int64_t{1} << 31) - 1) {
    return ffi::Error::InvalidArgument("jaxext transit: too many blocks of points");
  }
  using T = ffi::NativeType<dtype>;
  return LaunchStatus("jaxext transit",
                      LaunchTransitVjp<T>(stream, shape, block, blocks, t.typed_data(),
                                          q.typed_data(), u.typed_data(), ct.typed_data(),
                                          ct_t->typed_data(), ct_q->typed_data(),
                                          ct_u->typed_data()));
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
