// CPU FFI handlers of the fused transit light-curve op (see jaxext/kernels/transit.h).
#ifndef JAXEXT_CPU_TRANSIT_CPU_H_
#define JAXEXT_CPU_TRANSIT_CPU_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// (t[P], q[G, 10], u[G, n]; oversample) -> flux[P], T = float32 / float64. Point i belongs to
// light curve i / (P / G): its row of q (transit::Param) and of u.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitCpuF64);
// Same inputs -> (flux[P], dflux/dq[P, 10], dflux/du[P, n]).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitGradCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitGradCpuF64);
// Forward mode: (t, q, u, tt[P], tq[G, 10], tu[G, n]) -> the flux's tangent [P].
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitLinCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitLinCpuF64);
// Reverse mode: (t, q, u, ct[P]; oversample, block) -> (ct_t[P], ct_q[G, B, 10], ct_u[G, B, n]),
// B = ceil((P / G) / block) blocks of sums per light curve (the caller sums them).
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitVjpCpuF32);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextTransitVjpCpuF64);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_TRANSIT_CPU_H_
