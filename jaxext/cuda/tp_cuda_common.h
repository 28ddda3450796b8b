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

// The edge cotangents' handlers (jaxext_tensor_product_edge_cts, jaxext_conv_edge_cts): their
// attributes are those of mode kY (the product's tables, the widths of all four slots).
inline xla::ffi::Error DecodeEdgeCtsAttrs(
    int64_t mode, xla::ffi::Span<const int64_t> dims, xla::ffi::Span<const int64_t> paths,
    xla::ffi::Span<const int64_t> cg_i, xla::ffi::Span<const int64_t> cg_j,
    xla::ffi::Span<const int64_t> cg_k, xla::ffi::Span<const double> cg_v, int64_t n_paths,
    int64_t n_entries, xla::ffi::Span<const int64_t> x_terms,
    xla::ffi::Span<const int64_t> out_terms, const char* op, TpAttrs* attrs) {
  if (xla::ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                          n_entries, x_terms, out_terms, op, attrs);
      err.failure()) {
    return err;
  }
  if (attrs->mode != tp::kY) {
    return xla::ffi::Error::InvalidArgument(std::string(op) + ": mode must be 1 (y)");
  }
  return xla::ffi::Error::Success();
}

// The y and w cotangents together (tp_kernels.h's LaunchTpEdgeCts), from x, y, w and the
// result's cotangent ct, each operand checked as its mode's own call would check it. rows: the
// four slots' rows (a product's: all the same; a convolution's: senders, edges, edges,
// receivers); g: the convolution's graph, or none.
template <typename T>
xla::ffi::Error RunTpEdgeCtsTyped(cudaStream_t stream, const TpAttrs& attrs,
                                  xla::ffi::AnyBuffer& x, xla::ffi::AnyBuffer& y,
                                  xla::ffi::AnyBuffer& w, xla::ffi::AnyBuffer& ct,
                                  xla::ffi::AnyBuffer& dy, xla::ffi::AnyBuffer& dw,
                                  const int64_t rows[4], const TpGraph& g, const char* op,
                                  const char* what) {
  // y's cotangent from (x, w, ct); w's from (x, y, ct).
  TpOperands<T> ops{};
  xla::ffi::AnyBuffer* const y_operands[3] = {&x, &w, &ct};
  if (xla::ffi::Error err = SlotData<T>(attrs, y_operands, dy, rows, ops.slot, op, what);
      err.failure()) {
    return err;
  }
  TpAttrs w_attrs = attrs;
  w_attrs.mode = tp::kW;
  const T* w_slots[4];
  xla::ffi::AnyBuffer* const w_operands[3] = {&x, &y, &ct};
  if (xla::ffi::Error err = SlotData<T>(w_attrs, w_operands, dw, rows, w_slots, op, what);
      err.failure()) {
    return err;
  }
  auto tables = Tables<T>(attrs, op, stream);
  if (!tables.has_value()) return tables.error();
  for (int k = 0; k < 4; ++k) ops.dims[k] = attrs.dims[k];
  ops.result = dy.typed_data<T>();
  ops.rows = rows[tp::kY];
  if (xla::ffi::Error err = CheckTables(*tables, ops.dims, op); err.failure()) return err;
  return LaunchStatus(op, LaunchTpEdgeCts<T>(stream, *tables, w_slots[tp::kY], ops,
                                             dw.typed_data<T>(), g));
}

// RunTpEdgeCtsTyped in the results' dtype (both float32 or both float64).
inline xla::ffi::Error RunTpEdgeCts(cudaStream_t stream, const TpAttrs& attrs,
                                    xla::ffi::AnyBuffer& x, xla::ffi::AnyBuffer& y,
                                    xla::ffi::AnyBuffer& w, xla::ffi::AnyBuffer& ct,
                                    xla::ffi::AnyBuffer& dy, xla::ffi::AnyBuffer& dw,
                                    const int64_t rows[4], const TpGraph& g, const char* op,
                                    const char* what) {
  if (dy.element_type() != dw.element_type()) {
    return xla::ffi::Error::InvalidArgument(std::string(op) + ": the results' dtypes differ");
  }
  switch (dy.element_type()) {
    case xla::ffi::DataType::F32:
      return RunTpEdgeCtsTyped<float>(stream, attrs, x, y, w, ct, dy, dw, rows, g, op, what);
    case xla::ffi::DataType::F64:
      return RunTpEdgeCtsTyped<double>(stream, attrs, x, y, w, ct, dy, dw, rows, g, op, what);
    default:
      return xla::ffi::Error::InvalidArgument(std::string(op) + ": float32 or float64 only");
  }
}

// The initialize stage of both edge cotangents' handlers: their tables on the device.
inline xla::ffi::Error PrepareEdgeCtsTables(
    int64_t mode, xla::ffi::Span<const int64_t> dims, xla::ffi::Span<const int64_t> paths,
    xla::ffi::Span<const int64_t> cg_i, xla::ffi::Span<const int64_t> cg_j,
    xla::ffi::Span<const int64_t> cg_k, xla::ffi::Span<const double> cg_v, int64_t n_paths,
    int64_t n_entries, xla::ffi::Span<const int64_t> x_terms,
    xla::ffi::Span<const int64_t> out_terms, xla::ffi::DataType dtype, const char* op) {
  TpAttrs attrs;
  if (xla::ffi::Error err = DecodeEdgeCtsAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                               n_entries, x_terms, out_terms, op, &attrs);
      err.failure()) {
    return err;
  }
  return PrepareTables(attrs, dtype, op);
}

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_TP_CUDA_COMMON_H_
