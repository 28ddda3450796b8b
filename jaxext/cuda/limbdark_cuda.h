// CUDA FFI handlers of the limb-darkened occultation op (see jaxext/kernels/limbdark.h for the math).
#ifndef JAXEXT_CUDA_LIMBDARK_CUDA_H_
#define JAXEXT_CUDA_LIMBDARK_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

// (b[P], r[P], u[G, n]) -> flux[P], T = float32 / float64. Point i uses row i / (P / G) of u.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkCudaF64);
// Same inputs -> (flux[P], dflux/db[P], dflux/dr[P], dflux/du[P, n]).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkGradCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkGradCudaF64);
// Same inputs -> the gradient form's outputs, then d2flux/db2, d2flux/db dr, d2flux/dr2 [P] and
// d2flux/db du, d2flux/dr du [P, n].
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkHessCudaF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextLimbdarkHessCudaF64);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_LIMBDARK_CUDA_H_
