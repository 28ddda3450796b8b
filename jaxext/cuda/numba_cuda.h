// CUDA FFI handler of jaxext.numba_cuda_kernel: launches a kernel compiled by numba-cuda.
//
// The kernel's PTX travels in the custom call's attributes (compiled at trace time by
// jaxext/numba_bridge/compile_cuda.py), so an executable from jax's compilation cache or a
// jax.export'ed function carries everything it needs: no process addresses, no Python. The module
// is loaded with the CUDA driver API once per (CUDA context, kernel) and kept for the life of the
// process; launches go to XLA's stream, always the same ones for the same attributes, so the
// handler is declared command-buffer compatible (XLA may capture it into a CUDA graph). The
// module is loaded in the initialize stage, before any capture; execute loads it too if needed.
#ifndef JAXEXT_CUDA_NUMBA_CUDA_H_
#define JAXEXT_CUDA_NUMBA_CUDA_H_

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

// Operands: any number of buffers (arguments), results likewise. Attributes:
//   name (string, for errors); ptx, entry (strings: the module and its kernel's mangled name);
//   module_id (i64, content id of ptx+entry: the cache key); grid, block (i64[3]);
//   shared_mem (i64, dynamic shared memory bytes);
//   pkinds (i64[], per scalar parameter in order: 0 float64 from fparams, 1 int64 from iparams;
//   a lone -1 when there are none); fparams (f64[]), iparams (i64[]);
//   nbatch (i64): leading batch axes looped over natively (vmap="sequential": one launch per
//   batch slice); bmasks (i64[], one per argument then result): bit j set when the operand has
//   batch axis j.
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextNumbaCallCudaInitialize);
XLA_FFI_DECLARE_HANDLER_SYMBOL(JaxextNumbaCallCuda);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_NUMBA_CUDA_H_
