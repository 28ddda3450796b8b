#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/common/ffi_helpers.h"
#include "jaxext/cuda/kepler_cuda.h"
#include "jaxext/kernels/kepler.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

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
  if (n == 0) return ffi::Error::Success();
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{1} << 20);
  KeplerKernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      mean_anomaly.typed_data(), eccentricity.typed_data(), sin_e->typed_data(),
      cos_e->typed_data(), n);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxext kepler: CUDA launch failed: ") +
                                cudaGetErrorString(err));
  }
  return ffi::Error::Success();
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
