#include "jaxext/cuda/conv_cuda.h"

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "jaxext/common/tp_binding.h"
#include "jaxext/cuda/tp_cuda_common.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

constexpr const char* kOp = "jaxext equivariant.conv";

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kOp) + ": " + what);
}

// The six graph operands (int32; lengths consistent) as a TpGraph (its node order, ranges and
// tasks left for the caller), and the rows of the four slots {senders, edges, edges, receivers};
// an error naming `op` otherwise.
ffi::Error DecodeGraph(ffi::AnyBuffer& senders, ffi::AnyBuffer& receivers, ffi::AnyBuffer& by_recv,
                       ffi::AnyBuffer& recv_ranges, ffi::AnyBuffer& by_send,
                       ffi::AnyBuffer& send_ranges, const char* op, TpGraph* g, int64_t rows[4]) {
  for (ffi::AnyBuffer* ids : {&senders, &receivers, &by_recv, &recv_ranges, &by_send,
                              &send_ranges}) {
    if (ids->element_type() != ffi::DataType::S32) {
      return ffi::Error::InvalidArgument(std::string(op) + ": int32 indices");
    }
  }
  const int64_t e = static_cast<int64_t>(senders.element_count());
  const int64_t r = static_cast<int64_t>(recv_ranges.element_count()) - 1;
  const int64_t s = static_cast<int64_t>(send_ranges.element_count()) - 1;
  if (static_cast<int64_t>(receivers.element_count()) != e ||
      static_cast<int64_t>(by_recv.element_count()) != e ||
      static_cast<int64_t>(by_send.element_count()) != e || r < 0 || s < 0) {
    return ffi::Error::InvalidArgument(std::string(op) + ": graph operands disagree");
  }
  rows[tp::kX] = s;
  rows[tp::kY] = rows[tp::kW] = e;
  rows[tp::kOut] = r;
  g->senders = senders.typed_data<int32_t>();
  g->receivers = receivers.typed_data<int32_t>();
  g->recv_ranges = recv_ranges.typed_data<int32_t>();
  g->send_ranges = send_ranges.typed_data<int32_t>();
  g->n_senders = s;
  g->n_receivers = r;
  g->n_edges = e;
  return ffi::Error::Success();
}

#define JAXEXT_CONV_CUDA_PARAMS                                                                \
  cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,                 \
      ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,              \
      ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,        \
      ffi::AnyBuffer tasks, ffi::Result<ffi::AnyBuffer> out,                                 \
      ffi::Result<ffi::AnyBuffer> partial, int64_t mode, ffi::Span<const int64_t> dims,      \
      ffi::Span<const int64_t> paths, ffi::Span<const int64_t> cg_i,                         \
      ffi::Span<const int64_t> cg_j, ffi::Span<const int64_t> cg_k,                          \
      ffi::Span<const double> cg_v, int64_t n_paths, int64_t n_entries,                      \
      ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms, int64_t task_edges

// tasks, partial, task_edges: the node rows cut into tasks (jaxext/kernels/conv_tasks.h), made
// by the lowering from the result's node ranges (by receiver for the result, by sender for x's
// cotangent); partial: the cut pieces' rows, (rows, width) in the result's dtype.
template <typename T>
ffi::Error ConvTyped(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                     ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                     ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send,
                     ffi::AnyBuffer send_ranges, ffi::AnyBuffer tasks,
                     ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> partial,
                     int64_t task_edges, const TpAttrs& attrs) {
  if (tasks.element_type() != ffi::DataType::S32) return Invalid("int32 indices");
  const int m = attrs.mode;
  TpGraph g;
  int64_t rows[4];
  if (ffi::Error err = DecodeGraph(senders, receivers, by_recv, recv_ranges, by_send, send_ranges,
                                   kOp, &g, rows);
      err.failure()) {
    return err;
  }
  ffi::AnyBuffer* const operands[3] = {&a, &b, &c};
  TpOperands<T> ops{};
  if (ffi::Error err =
          SlotData<T>(attrs, operands, *out, rows, ops.slot, kOp, "the graph and irreps");
      err.failure()) {
    return err;
  }
  auto tables = Tables<T>(attrs, kOp, stream);
  if (!tables.has_value()) return tables.error();
  for (int k = 0; k < 4; ++k) ops.dims[k] = attrs.dims[k];
  ops.result = out->typed_data<T>();
  ops.rows = rows[m];
  const bool by_sender = m == tp::kX;  // x's cotangent: sender nodes; out: receiver nodes
  g.order = (by_sender ? by_send : by_recv).typed_data<int32_t>();
  g.ranges = (by_sender ? send_ranges : recv_ranges).typed_data<int32_t>();
  if (m == tp::kOut || m == tp::kX) {  // node rows: cut into tasks
    const int64_t width = attrs.dims[m];
    if (task_edges < 1 || static_cast<int64_t>(tasks.element_count()) != ops.rows + 1 ||
        partial->element_type() != out->element_type() ||
        (width > 0 && static_cast<int64_t>(partial->element_count()) % width != 0)) {
      return Invalid("the tasks disagree with the graph");
    }
    g.tasks = tasks.typed_data<int32_t>();
    g.partial = partial->untyped_data();
    g.partial_rows = width > 0 ? static_cast<int64_t>(partial->element_count()) / width : 0;
    g.task_edges = task_edges;
  }
  return RunTp<T>(stream, m, *tables, ops, g, kOp);
}

ffi::Error ConvImpl(JAXEXT_CONV_CUDA_PARAMS) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                     n_entries, x_terms, out_terms, kOp, &attrs);
      err.failure()) {
    return err;
  }
  switch (out->element_type()) {
    case ffi::DataType::F32:
      return ConvTyped<float>(stream, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                              send_ranges, tasks, out, partial, task_edges, attrs);
    case ffi::DataType::F64:
      return ConvTyped<double>(stream, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                               send_ranges, tasks, out, partial, task_edges, attrs);
    default:
      return Invalid("float32 or float64 only");
  }
}

// Copies the tables to the device before any graph capture.
ffi::Error ConvInitializeImpl(JAXEXT_CONV_CUDA_PARAMS) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                     n_entries, x_terms, out_terms, kOp, &attrs);
      err.failure()) {
    return err;
  }
  return PrepareTables(attrs, out->element_type(), kOp);
}

#undef JAXEXT_CONV_CUDA_PARAMS

// --- jaxext_conv_edge_cts: the y and w cotangents together --------------------------------------

constexpr const char* kEdgeCtsOp = "jaxext equivariant.conv (edge cotangents)";

#define JAXEXT_CONV_EDGE_CTS_PARAMS                                                            \
  cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer w, ffi::AnyBuffer ct, \
      ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,              \
      ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,        \
      ffi::Result<ffi::AnyBuffer> dy, ffi::Result<ffi::AnyBuffer> dw, int64_t mode,          \
      ffi::Span<const int64_t> dims, ffi::Span<const int64_t> paths,                         \
      ffi::Span<const int64_t> cg_i, ffi::Span<const int64_t> cg_j,                          \
      ffi::Span<const int64_t> cg_k, ffi::Span<const double> cg_v, int64_t n_paths,          \
      int64_t n_entries, ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms

ffi::Error EdgeCtsImpl(JAXEXT_CONV_EDGE_CTS_PARAMS) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeEdgeCtsAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                          n_entries, x_terms, out_terms, kEdgeCtsOp, &attrs);
      err.failure()) {
    return err;
  }
  TpGraph g;
  int64_t rows[4];
  if (ffi::Error err = DecodeGraph(senders, receivers, by_recv, recv_ranges, by_send, send_ranges,
                                   kEdgeCtsOp, &g, rows);
      err.failure()) {
    return err;
  }
  return RunTpEdgeCts(stream, attrs, x, y, w, ct, *dy, *dw, rows, g, kEdgeCtsOp,
                      "the graph and irreps");
}

// Copies the tables to the device before any graph capture.
ffi::Error EdgeCtsInitializeImpl(JAXEXT_CONV_EDGE_CTS_PARAMS) {
  return PrepareEdgeCtsTables(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths, n_entries,
                              x_terms, out_terms, dy->element_type(), kEdgeCtsOp);
}

#undef JAXEXT_CONV_EDGE_CTS_PARAMS

}  // namespace

// Both handlers: ten buffers in (conv's: three slots, the graph's six, the tasks; the edge
// cotangents': x, y, w, the result's cotangent, the graph's six), two out, the product's
// attributes.
#define JAXEXT_CONV_CUDA_BUFFERS(stage)                 \
  ffi::Ffi::Bind<stage>()                               \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()         \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Ret<ffi::AnyBuffer>()                            \
      .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS
#define JAXEXT_CONV_CUDA_BINDING(stage) \
  JAXEXT_CONV_CUDA_BUFFERS(stage).Attr<int64_t>("task_edges")

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvCudaInitialize, ConvInitializeImpl,
                              JAXEXT_CONV_CUDA_BINDING(ffi::ExecutionStage::kInitialize));
// Command-buffer compatible: the tables were copied in the initialize stage; launches only.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvCuda, ConvImpl,
                              JAXEXT_CONV_CUDA_BINDING(ffi::ExecutionStage::kExecute),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvEdgeCtsCudaInitialize, EdgeCtsInitializeImpl,
                              JAXEXT_CONV_CUDA_BUFFERS(ffi::ExecutionStage::kInitialize));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvEdgeCtsCuda, EdgeCtsImpl,
                              JAXEXT_CONV_CUDA_BUFFERS(ffi::ExecutionStage::kExecute),
                              {ffi::Traits::kCmdBufferCompatible});

#undef JAXEXT_CONV_CUDA_BINDING
#undef JAXEXT_CONV_CUDA_BUFFERS

}  // namespace cuda
}  // namespace jaxext
