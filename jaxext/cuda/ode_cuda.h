// CUDA FFI handler of jaxext.ode.dop853: one thread per trajectory, each running the DOP853 of
// jaxext/kernels/dop853.h on its own steps, with the built-in models of jaxext/kernels/orbit.h
// (state and workspace in the thread's local memory) and built-in radius events, or with the
// user's Python right-hand side and events compiled by numba-cuda and linked into the integrator
// at run time (ode_user_kernels.h). Same operands, results and attributes as the CPU handler
// (jaxext/cpu/ode_cpu.h); for user functions rhs_id is non-zero and device_code holds their PTX.
// The initialize stage links that PTX before any CUDA graph capture.
#ifndef JAXEXT_CUDA_ODE_CUDA_H_
#define JAXEXT_CUDA_ODE_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextDop853CudaInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextDop853Cuda);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_ODE_CUDA_H_
