// CUDA FFI handler of jaxext.equivariant.tensor_product, all four modes (see tp_kernels.h for
// the kernels): same operands, result and attributes as the CPU handler (jaxext/cpu/tp_cpu.h). The
// initialize stage copies the product's tables to the device.
#ifndef JAXEXT_CUDA_TP_CUDA_H_
#define JAXEXT_CUDA_TP_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTensorProductCudaInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTensorProductCuda);
// jaxext_tensor_product_edge_cts: the y and w cotangents of a product together (one kernel reads
// each row's x and result cotangent once for both); attributes those of mode y.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTensorProductEdgeCtsCudaInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTensorProductEdgeCtsCuda);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_TP_CUDA_H_
