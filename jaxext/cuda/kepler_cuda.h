// CUDA FFI handlers of the Kepler op (typed XLA FFI; see jaxext/kernels/kepler.h for the math).
#ifndef JAXEXT_CUDA_KEPLER_CUDA_H_
#define JAXEXT_CUDA_KEPLER_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

// (mean_anomaly[T], eccentricity[T]) -> (sin_E[T], cos_E[T]) on XLA's stream; T = f32 / f64.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextKeplerCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextKeplerCudaF64);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_KEPLER_CUDA_H_
