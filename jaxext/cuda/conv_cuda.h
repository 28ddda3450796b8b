// CUDA FFI handlers of jaxext.equivariant.conv: all four modes (see tp_kernels.h for the
// kernels): same operands, result and attributes as the CPU handler (jaxext/cpu/conv_cpu.h). The
// initialize stage copies the product's tables to the device. An edge whose sender or receiver is
// out of range makes the whole result NaN instead of the CPU's error (a GPU cannot raise).
#ifndef JAXEXT_CUDA_CONV_CUDA_H_
#define JAXEXT_CUDA_CONV_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvCudaInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvCuda);
// jaxext_conv_edge_cts: the edge harmonics' and weights' cotangents of a convolution together
// (operands x, y, w, the result's cotangent, the graph; results dy, dw; the attributes of mode y).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvEdgeCtsCudaInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvEdgeCtsCuda);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_CONV_CUDA_H_
