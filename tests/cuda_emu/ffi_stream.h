// The emulated CUDA handlers' stream (tests/cuda_emu/README.md): force-included into their
// sources. They run as CPU handlers, whose context has no stream, so a CUDA handler's
// `Ctx<PlatformStream<cudaStream_t>>` decodes to a null stream here instead of failing.
#ifndef JAXEXT_TESTS_CUDA_EMU_FFI_STREAM_H_
#define JAXEXT_TESTS_CUDA_EMU_FFI_STREAM_H_

#include <optional>

#include <cuda_runtime_api.h>

#include "xla/ffi/api/ffi.h"

namespace xla::ffi {

template <>
struct CtxDecoding<PlatformStream<cudaStream_t>> {
  using Type = cudaStream_t;
  static std::optional<Type> Decode(const XLA_FFI_Api*, XLA_FFI_ExecutionContext*,
                                    DiagnosticEngine&) {
    return Type{nullptr};
  }
};

}  // namespace xla::ffi

#endif  // JAXEXT_TESTS_CUDA_EMU_FFI_STREAM_H_
