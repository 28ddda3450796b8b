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

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_TRANSIT_CPU_H_
