// CPU FFI handler of jaxext.equivariant.tensor_product (jaxext/kernels/tp.h), all four modes.
#ifndef JAXEXT_CPU_TP_CPU_H_
#define JAXEXT_CPU_TP_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// Operands: the three slots other than `mode` among (x, y, w, out), in that order, each (B, dim).
// Result: (B, dim of slot `mode`). Attributes: mode (i64), dims (i64[4]: x, y, w, out sizes),
// paths (i64[10 * P], tp::Path fields), cg_i, cg_j, cg_k (i64[]), cg_v (f64[]), n_paths,
// n_entries (i64; the arrays carry a placeholder when empty).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTensorProductCpu);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_TP_CPU_H_
