#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/common/limbdark_shapes.h"
#include "jaxext/cuda/launch.h"
#include "jaxext/cuda/limbdark_cuda.h"
#include "jaxext/cuda/limbdark_kernels.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

template <bool kGrad, typename T>
ffi::Error Launch(cudaStream_t stream, const LimbdarkShape& shape, const T* b, const T* r,
                  const T* u, T* flux, T* dfdb, T* dfdr, T* dfdu) {
  return LaunchStatus("jaxext limbdark",
                      LaunchLimbdark<T>(stream, kGrad, b, r, shape.r_stride, u, shape.order,
                                        shape.per_group, shape.points, flux, dfdb, dfdr, dfdu));
}

template <ffi::DataType dtype>
ffi::Error LimbdarkImpl(cudaStream_t stream, ffi::Buffer<dtype> b, ffi::Buffer<dtype> r,
                        ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux) {
  LimbdarkShape shape;
  if (ffi::Error err = GetLimbdarkShape(b.element_count(), r.element_count(), u.dimensions(),
                                        flux->element_count(), nullptr, &shape);
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return Launch<false, T>(stream, shape, b.typed_data(), r.typed_data(), u.typed_data(),
                          flux->typed_data(), nullptr, nullptr, nullptr);
}

template <ffi::DataType dtype>
ffi::Error LimbdarkGradImpl(cudaStream_t stream, ffi::Buffer<dtype> b, ffi::Buffer<dtype> r,
                            ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux,
                            ffi::ResultBuffer<dtype> dfdb, ffi::ResultBuffer<dtype> dfdr,
                            ffi::ResultBuffer<dtype> dfdu) {
  LimbdarkShape shape;
  const size_t grad_counts[] = {dfdb->element_count(), dfdr->element_count(),
                                dfdu->element_count()};
  if (ffi::Error err = GetLimbdarkShape(b.element_count(), r.element_count(), u.dimensions(),
                                        flux->element_count(), grad_counts, &shape);
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return Launch<true, T>(stream, shape, b.typed_data(), r.typed_data(), u.typed_data(),
                         flux->typed_data(), dfdb->typed_data(), dfdr->typed_data(),
                         dfdu->typed_data());
}

template <ffi::DataType dtype>
ffi::Error LimbdarkHessImpl(cudaStream_t stream, ffi::Buffer<dtype> b, ffi::Buffer<dtype> r,
                            ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux,
                            ffi::ResultBuffer<dtype> dfdb, ffi::ResultBuffer<dtype> dfdr,
                            ffi::ResultBuffer<dtype> dfdu, ffi::ResultBuffer<dtype> hbb,
                            ffi::ResultBuffer<dtype> hbr, ffi::ResultBuffer<dtype> hrr,
                            ffi::ResultBuffer<dtype> hbu, ffi::ResultBuffer<dtype> hru) {
  LimbdarkShape shape;
  const size_t grad_counts[] = {dfdb->element_count(), dfdr->element_count(),
                                dfdu->element_count()};
  if (ffi::Error err = GetLimbdarkShape(b.element_count(), r.element_count(), u.dimensions(),
                                        flux->element_count(), grad_counts, &shape);
      err.failure()) {
    return err;
  }
  const size_t points = b.element_count(), coefs = points * static_cast<size_t>(shape.order);
  if (ffi::Error err = CheckElementCounts("limbdark", points,
                                          {hbb->element_count(), hbr->element_count(),
                                           hrr->element_count()});
      err.failure()) {
    return err;
  }
  if (ffi::Error err = CheckElementCounts("limbdark", coefs,
                                          {hbu->element_count(), hru->element_count()});
      err.failure()) {
    return err;
  }
  using T = ffi::NativeType<dtype>;
  return LaunchStatus(
      "jaxext limbdark",
      LaunchLimbdarkHessian<T>(stream, b.typed_data(), r.typed_data(), shape.r_stride,
                               u.typed_data(), shape.order, shape.per_group, shape.points,
                               flux->typed_data(), dfdb->typed_data(), dfdr->typed_data(),
                               dfdu->typed_data(), hbb->typed_data(), hbr->typed_data(),
                               hrr->typed_data(), hbu->typed_data(), hru->typed_data()));
}

}  // namespace

#define JAXEXT_LIMBDARK_CUDA_BINDING(T)         \
  ffi::Ffi::Bind()                              \
      .Ctx<ffi::PlatformStream<cudaStream_t>>() \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

#define JAXEXT_LIMBDARK_GRAD_CUDA_BINDING(T) \
  JAXEXT_LIMBDARK_CUDA_BINDING(T)            \
      .Ret<ffi::Buffer<ffi::DataType::T>>()  \
      .Ret<ffi::Buffer<ffi::DataType::T>>()  \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

#define JAXEXT_LIMBDARK_HESS_CUDA_BINDING(T) \
  JAXEXT_LIMBDARK_GRAD_CUDA_BINDING(T)       \
      .Ret<ffi::Buffer<ffi::DataType::T>>()  \
      .Ret<ffi::Buffer<ffi::DataType::T>>()  \
      .Ret<ffi::Buffer<ffi::DataType::T>>()  \
      .Ret<ffi::Buffer<ffi::DataType::T>>()  \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkCudaF32, LimbdarkImpl<ffi::DataType::F32>,
                              JAXEXT_LIMBDARK_CUDA_BINDING(F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkCudaF64, LimbdarkImpl<ffi::DataType::F64>,
                              JAXEXT_LIMBDARK_CUDA_BINDING(F64),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkGradCudaF32, LimbdarkGradImpl<ffi::DataType::F32>,
                              JAXEXT_LIMBDARK_GRAD_CUDA_BINDING(F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkGradCudaF64, LimbdarkGradImpl<ffi::DataType::F64>,
                              JAXEXT_LIMBDARK_GRAD_CUDA_BINDING(F64),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkHessCudaF32, LimbdarkHessImpl<ffi::DataType::F32>,
                              JAXEXT_LIMBDARK_HESS_CUDA_BINDING(F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkHessCudaF64, LimbdarkHessImpl<ffi::DataType::F64>,
                              JAXEXT_LIMBDARK_HESS_CUDA_BINDING(F64),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
