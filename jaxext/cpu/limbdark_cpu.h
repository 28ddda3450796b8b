// CPU FFI handlers of the limb-darkened occultation op (see jaxext/kernels/limbdark.h for the math).
#ifndef JAXEXT_CPU_LIMBDARK_CPU_H_
#define JAXEXT_CPU_LIMBDARK_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// (b[P], r[P], u[G, n]) -> flux[P], T = float32 / float64. Point i uses row i / (P / G) of u.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkCpuF64);
// Same inputs -> (flux[P], dflux/db[P], dflux/dr[P], dflux/du[P, n]).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkGradCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkGradCpuF64);
// Same inputs -> the gradient form's outputs, then d2flux/db2, d2flux/db dr, d2flux/dr2 [P] and
// d2flux/db du, d2flux/dr du [P, n].
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkHessCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkHessCpuF64);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_LIMBDARK_CPU_H_
