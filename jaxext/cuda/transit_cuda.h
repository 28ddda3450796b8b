// CUDA FFI handlers of the fused transit light-curve op (see jaxext/kernels/transit.h).
#ifndef JAXEXT_CUDA_TRANSIT_CUDA_H_
#define JAXEXT_CUDA_TRANSIT_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

// As the CPU handlers (jaxext/cpu/transit_cpu.h).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitCudaF64);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitGradCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitGradCudaF64);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitLinCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitLinCudaF64);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitVjpCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitVjpCudaF64);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_TRANSIT_CUDA_H_
