// CPU FFI handlers of the Kepler op (typed XLA FFI; see jaxext/kernels/kepler.h for the math).
#ifndef JAXEXT_CPU_KEPLER_CPU_H_
#define JAXEXT_CPU_KEPLER_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// (mean_anomaly[T], eccentricity[T]) -> (sin_E[T], cos_E[T]), same shape, T = float32 / float64.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextKeplerCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextKeplerCpuF64);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_KEPLER_CPU_H_
