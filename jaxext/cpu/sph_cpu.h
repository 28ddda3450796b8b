// CPU FFI handlers of jaxext.equivariant: spherical harmonics (jaxext/kernels/sph.h) and the
// deterministic sorted segment sum.
#ifndef JAXEXT_CPU_SPH_CPU_H_
#define JAXEXT_CPU_SPH_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// vectors (M, 3) -> Y (M, (lmax+1)^2); attributes lmax (i64), norms (f64[(lmax+1)^2]).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextSphCpu);

// data (E, F), segment_ids (E,) int32 -> out (S, F): out[s] = sum of the rows with id s, added
// in row order (the same bits for any thread count). Ids outside [0, S) are dropped. Attribute
// sorted (i64): 1 = the ids are promised ascending (checked: an error otherwise); 0 = any order
// (one pass over the rows, each added to its segment: no sort).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextSegmentSumCpu);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_SPH_CPU_H_
