// CUDA FFI handlers of jaxext.equivariant: spherical harmonics (jaxext/kernels/sph.h, one thread
// per vector) and the deterministic sorted segment sum (one thread per output element, adding its
// segment's rows in row order: no atomics, the same bits on every run). Same operands and
// attributes as the CPU handlers (jaxext/cpu/sph_cpu.h), except that the segment sum has a second
// result, an int32 flag: a GPU cannot raise, so ids found unsorted set it and make every sum NaN
// (the lowering drops the flag).
#ifndef JAXEXT_CUDA_SPH_CUDA_H_
#define JAXEXT_CUDA_SPH_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextSphCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextSegmentSumCuda);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_SPH_CUDA_H_
