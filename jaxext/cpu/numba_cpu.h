// CPU FFI handler of jaxext.numba_kernel: calls a Numba-compiled C function, no Python involved.
//
// A kernel is known to the handler by its content id in the process's registry of native
// functions (jaxext/cpu/native_registry.h).
#ifndef JAXEXT_CPU_NUMBA_CPU_H_
#define JAXEXT_CPU_NUMBA_CPU_H_

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// The entry point Numba compiles (jaxext/numba_bridge/compile_cpu.py generates it):
//   data[i]    operand i's data (arguments first, then results)
//   shapes     every operand's dimensions, concatenated in operand order
//   fparams    float parameters; iparams: integer parameters
//   status     set to 0 on success, non-zero if the kernel raised
using NumbaEntry = void (*)(void* const* data, const int64_t* shapes, const double* fparams,
                            const int64_t* iparams, int32_t* status);

// Operands: any number of buffers (arguments), results likewise. Attributes:
//   kernel_id (i64), name (string, for errors), fparams (f64[]), iparams (i64[]),
//   nbatch (i64): leading batch axes looped over natively (vmap="sequential");
//   bmasks (i64[], one per argument then result): bit j set when the operand has batch axis j;
//   split (i64): non-zero when every index of the operands' shared first axis is independent
//   (vmap="elementwise"), so that axis may be split across XLA's thread pool.
// Batch slices, being independent, are spread over the pool too. Returns an ffi::Future.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextNumbaCallCpu);

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_NUMBA_CPU_H_
