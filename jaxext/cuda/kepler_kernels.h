// The Kepler op's CUDA kernel (kepler_kernels.cu), launched by its handler (kepler_cuda.cc).
//
// Like every *_kernels.h here, plain types only: the .cu half is compiled by nvcc (with its own
// host compiler) and uses no C++ runtime, so that it links into a library whose C++ runtime is
// another toolchain's (the wheels': zig's clang with libc++).
#ifndef JAXEXT_CUDA_KEPLER_KERNELS_H_
#define JAXEXT_CUDA_KEPLER_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace jaxext {
namespace cuda {

// sin E, cos E of n points on `stream`; T = float / double. Returns the launch's status.
template <typename T>
cudaError_t LaunchKepler(cudaStream_t stream, const T* mean_anomaly, const T* eccentricity,
                         T* sin_e, T* cos_e, int64_t n);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_KEPLER_KERNELS_H_
