// How a CUDA handler (the .cc half of an op) reports what its kernels' launcher (the .cu half,
// which returns a plain cudaError_t and uses no C++ runtime) returned.
#ifndef JAXEXT_CUDA_LAUNCH_H_
#define JAXEXT_CUDA_LAUNCH_H_

#include <string>
#include <string_view>

#include <cuda_runtime_api.h>

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

inline xla::ffi::Error LaunchStatus(std::string_view op, cudaError_t err) {
  if (err == cudaSuccess) return xla::ffi::Error::Success();
  return xla::ffi::Error::Internal(std::string(op) + ": CUDA launch failed: " +
                                   cudaGetErrorString(err));
}

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_LAUNCH_H_
