// What the CUDA handlers of jaxext.equivariant.tensor_product and .conv share (their kernels:
// tp_kernels.h): the product's tables in device memory, and the checks before a launch.
//
// Tables: the paths and Clebsch-Gordan entries arrive as FFI attributes (host memory). They are
// copied to the device once per (device, precision, contents), in the FFI initialize stage
// (before any CUDA graph capture), and kept for the life of the process.
#ifndef JAXEXT_CUDA_TP_CUDA_COMMON_H_
#define JAXEXT_CUDA_TP_CUDA_COMMON_H_

#include <string>

#include <cuda_runtime_api.h>

#include "jaxext/common/tp_binding.h"
#include "jaxext/cuda/launch.h"
#include "jaxext/cuda/tp_kernels.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

// The tables of `a` on the current device (copied there on first use; host-synchronous then).
// `stream`: the execute stage's; if it is being captured into a CUDA graph and the tables are
// not there yet (no initialize stage ran), an error instead of a copy that would break capture.
xla::ffi::ErrorOr<TpTables<float>> TablesF32(const TpAttrs& a, const char* op,
                                             cudaStream_t stream);
xla::ffi::ErrorOr<TpTables<double>> TablesF64(const TpAttrs& a, const char* op,
                                              cudaStream_t stream);

template <typename T>
xla::ffi::ErrorOr<TpTables<T>> Tables(const TpAttrs& a, const char* op,
                                      cudaStream_t stream = nullptr) {
  if constexpr (sizeof(T) == 4) {
    return TablesF32(a, op, stream);
  } else {
    return TablesF64(a, op, stream);
  }
}

// The initialize stage of both handlers: the tables of `a`, in `dtype`, on the device.
xla::ffi::Error PrepareTables(const TpAttrs& a, xla::ffi::DataType dtype, const char* op);

// The tables against the rows' widths `dims` (the four slots'): an error unless every entry and
// path lies inside them.
template <typename T>
xla::ffi::Error CheckTables(const TpTables<T>& t, const int64_t dims[4], const char* op) {
  if (!t.fast.valid) {
    return xla::ffi::Error::InvalidArgument(std::string(op) +
                                            ": a Clebsch-Gordan entry lies outside its path");
  }
  for (int s = 0; s < 4; ++s) {
    if (t.fast.need[s] > dims[s]) {
      return xla::ffi::Error::InvalidArgument(std::string(op) +
                                              ": a path lies outside the rows' widths");
    }
  }
  return xla::ffi::Error::Success();
}

// Checks the tables against the operands, then launches (tp_kernels.h's LaunchTp).
template <typename T>
xla::ffi::Error RunTp(cudaStream_t stream, int mode, const TpTables<T>& t,
                      const TpOperands<T>& ops, const TpGraph& g, const char* op) {
  if (xla::ffi::Error err = CheckTables(t, ops.dims, op); err.failure()) return err;
  return LaunchStatus(op, LaunchTp<T>(stream, mode, t, ops, g));
}

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_TP_CUDA_COMMON_H_
