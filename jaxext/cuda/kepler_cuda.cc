#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/common/ffi_helpers.h"
#include "jaxext/cuda/kepler_cuda.h"
#include "jaxext/cuda/kepler_kernels.h"
#include "jaxext/cuda/launch.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

// Launches on XLA's stream and returns launch errors as FFI errors. No host synchronisation, no
// allocation and the same launch on every call: safe to capture into CUDA graphs.
template <ffi::DataType dtype>
ffi::Error KeplerImpl(cudaStream_t stream, ffi::Buffer<dtype> mean_anomaly,
                      ffi::Buffer<dtype> eccentricity, ffi::ResultBuffer<dtype> sin_e,
                      ffi::ResultBuffer<dtype> cos_e) {
  const int64_t n = static_cast<int64_t>(mean_anomaly.element_count());
  if (ffi::Error err = CheckElementCounts(
          "kepler", mean_anomaly.element_count(),
          {eccentricity.element_count(), sin_e->element_count(), cos_e->element_count()});
      err.failure()) {
    return err;
  }
  return LaunchStatus("jaxext kepler",
                      LaunchKepler(stream, mean_anomaly.typed_data(), eccentricity.typed_data(),
                                   sin_e->typed_data(), cos_e->typed_data(), n));
}

}  // namespace

#define JAXEXT_KEPLER_CUDA_BINDING(T)                  \
  ffi::Ffi::Bind()                                     \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()        \
      .Arg<ffi::Buffer<ffi::DataType::T>>()            \
      .Arg<ffi::Buffer<ffi::DataType::T>>()            \
      .Ret<ffi::Buffer<ffi::DataType::T>>()            \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextKeplerCudaF32, KeplerImpl<ffi::DataType::F32>,
                              JAXEXT_KEPLER_CUDA_BINDING(F32),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextKeplerCudaF64, KeplerImpl<ffi::DataType::F64>,
                              JAXEXT_KEPLER_CUDA_BINDING(F64),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
