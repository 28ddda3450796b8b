// The CUDA kernels of jaxext.equivariant's spherical harmonics and sorted segment sum
// (sph_kernels.cu), launched by their handlers (sph_cuda.cc). Plain types only (see
// kepler_kernels.h).
#ifndef JAXEXT_CUDA_SPH_KERNELS_H_
#define JAXEXT_CUDA_SPH_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace jaxext {
namespace cuda {

// y (m x (lmax + 1)^2) = the harmonics of the m vectors v (m x 3), with the (lmax + 1)^2
// normalisations `norms` (host memory, copied into the launch); T = float / double.
template <typename T>
cudaError_t LaunchSphericalHarmonics(cudaStream_t stream, const T* v, T* y, int64_t m, int lmax,
                                     const double* norms);

// y (segments x f) = the sums of the rows of x (e x f) by their ids (sorted ascending, int32):
// segment s's rows are ranges[s] .. ranges[s + 1] (segments + 1 entries; rows with ids outside
// [0, segments) lie outside them), cut into the tasks `tasks` of at most task_rows rows
// (jaxext/kernels/conv_tasks.h's running counts, segments + 1 entries), the pieces of a cut
// segment summed into `partial` (partial_rows x f) and joined in order. *flag (device memory,
// zeroed by the caller on `stream`) is set to 1 and y filled with NaN if the ids are unsorted,
// to 2 (NaN too) if the ranges and tasks are not such rows and counts: nothing is then read or
// written out of bounds, whatever the caller passed.
template <typename T>
cudaError_t LaunchSegmentSum(cudaStream_t stream, const T* x, const int32_t* ids,
                             const int32_t* ranges, const int32_t* tasks, int64_t e,
                             int64_t segments, int64_t f, int64_t partial_rows, int64_t task_rows,
                             int32_t* flag, T* partial, T* y);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_SPH_KERNELS_H_
