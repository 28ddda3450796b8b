// CUDA FFI handler of jaxext.ode.dop853: one thread per trajectory, each running the DOP853 of
// jaxext/kernels/dop853.h on its own steps, with the built-in models of jaxext/kernels/orbit.h
// (state and workspace in the thread's local memory) and built-in radius events. Same operands,
// results and attributes as the CPU handler (jaxext/cpu/ode_cpu.h); Python right-hand sides and
// event functions are refused (the lowering says so first).
#ifndef JAXEXT_CUDA_ODE_CUDA_H_
#define JAXEXT_CUDA_ODE_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextDop853Cuda);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_ODE_CUDA_H_
