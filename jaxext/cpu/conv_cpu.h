// CPU FFI handler of jaxext.equivariant.conv: the tensor product of jaxext/kernels/tp.h fused
// with the gather of sender features and the sum over each receiver's edges.
#ifndef JAXEXT_CPU_CONV_CPU_H_
#define JAXEXT_CPU_CONV_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// Slots: x (sender nodes, S x dx), y (edges, E x dy), w (edges, E x dw), out (receiver nodes,
// R x dout). Operands: the three slots other than `mode` (in slot order), then senders (E),
// receivers (E), the edges sorted by receiver (E) with each receiver's range (R + 1), and the
// edges sorted by sender (E) with each sender's range (S + 1), all int32. Result: slot `mode`.
// Node results add their edges in that sorted order (deterministic); edge results are per edge.
// Attributes as jaxext_tensor_product.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvCpu);
// The result with the edge weights given as a radial network's last layer: w = h @ kernel.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvFactoredCpu);
// Its cotangents with respect to x, y, h and kernel from the result's cotangent, in one walk over
// the edges by sender. Operands: x, y, h (E x k), kernel (k x dw), the result's cotangent
// (R x dout), then the graph as above. Results: dx, dy, dh, dkernel, each either its full shape
// or empty (not asked for). Attributes as jaxext_tensor_product (mode unused).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextConvFactoredBwdCpu);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_CONV_CPU_H_
