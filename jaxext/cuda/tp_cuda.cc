#include "jaxext/cuda/tp_cuda.h"

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "jaxext/common/tp_binding.h"
#include "jaxext/common/tp_path_tables.h"
#include "jaxext/cuda/tp_cuda_common.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

// The bytes that define a product's tables (paths, then i, j, k, then the values in T).
template <typename T>
std::string TableBytes(const TpAttrs& a) {
  std::string bytes;
  auto add = [&](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  add(a.paths, sizeof(tp::Path) * a.n_paths);
  for (const int64_t* v : {a.ci, a.cj, a.ck}) add(v, sizeof(int64_t) * a.n_entries);
  for (int64_t e = 0; e < a.n_entries; ++e) {
    const T value = static_cast<T>(a.cv[e]);
    add(&value, sizeof(T));
  }
  return bytes;
}

// Where the per-path tables lie in a product's device block (bytes from its start).
struct FastLayout {
  size_t paths = 0, m_begin = 0, m_j = 0, y_begin = 0, y_pos = 0, m_v = 0, y_v = 0;
  int32_t n_paths = 0, m_size = 0, ny = 0;
  bool ok = false, valid = true;
  int64_t need[4] = {0, 0, 0, 0};
};

// Appends the per-path tables (values in T) to `bytes`, 16-byte aligned, and says where.
template <typename T>
FastLayout AppendFast(const TpPathTables& h, std::string* bytes) {
  FastLayout l;
  l.ok = h.ok;
  l.valid = h.valid;
  for (int s = 0; s < 4; ++s) l.need[s] = h.need[s];
  if (!h.ok || !h.valid) return l;
  auto put = [&](const void* p, size_t n) {
    bytes->resize((bytes->size() + 15) / 16 * 16, '\0');
    const size_t at = bytes->size();
    bytes->append(static_cast<const char*>(p), n);
    return at;
  };
  std::vector<T> m_v(h.m_v.begin(), h.m_v.end()), y_v(h.y_v.begin(), h.y_v.end());
  l.paths = put(h.paths.data(), sizeof(TpFastPath) * h.paths.size());
  l.m_begin = put(h.m_begin.data(), sizeof(int32_t) * h.m_begin.size());
  l.m_j = put(h.m_j.data(), sizeof(int32_t) * h.m_j.size());
  l.y_begin = put(h.y_begin.data(), sizeof(int32_t) * h.y_begin.size());
  l.y_pos = put(h.y_pos.data(), sizeof(int32_t) * h.y_pos.size());
  l.m_v = put(m_v.data(), sizeof(T) * m_v.size());
  l.y_v = put(y_v.data(), sizeof(T) * y_v.size());
  l.n_paths = static_cast<int32_t>(h.paths.size());
  l.m_size = h.m_size;
  l.ny = h.ny;
  return l;
}

std::mutex& TablesMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

struct DeviceTables {
  void* base = nullptr;
  FastLayout fast;
};

// (device, bytes) -> device copy of the bytes and the per-path tables. Never freed: executables
// that use them may run at any time, and there is one per distinct product and precision.
std::map<std::pair<int, std::string>, DeviceTables>& TablesCache() {
  static auto* cache = new std::map<std::pair<int, std::string>, DeviceTables>;
  return *cache;
}

template <typename T>
ffi::ErrorOr<TpTables<T>> GetTables(const TpAttrs& a, const char* op, cudaStream_t stream) {
  int device = 0;
  auto fail = [&](const char* what, cudaError_t err) {
    return ffi::Unexpected(ffi::Error::Internal(std::string(op) + ": " + what + ": " +
                                                cudaGetErrorString(err)));
  };
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return fail("cudaGetDevice", err);
  }
  std::string bytes = TableBytes<T>(a);
  DeviceTables found;
  {
    std::lock_guard<std::mutex> lock(TablesMutex());
    auto key = std::make_pair(device, bytes);
    auto it = TablesCache().find(key);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (it != TablesCache().end()) {
      found = it->second;
    } else if (stream != nullptr && cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
               capturing != cudaStreamCaptureStatusNone) {
      return ffi::Unexpected(ffi::Error::Internal(
          std::string(op) + ": the product's tables are not on the device while a CUDA graph "
                            "is being captured (the FFI initialize stage did not run)"));
    } else {
      std::string blob = bytes;
      found.fast = AppendFast<T>(
          BuildTpPathTables(a.paths, a.n_paths, a.ci, a.cj, a.ck, a.cv, a.n_entries), &blob);
      if (cudaError_t err = cudaMalloc(&found.base, std::max<size_t>(blob.size(), 8));
          err != cudaSuccess) {
        return fail("cudaMalloc of the product's tables", err);
      }
      if (cudaError_t err =
              cudaMemcpy(found.base, blob.data(), blob.size(), cudaMemcpyHostToDevice);
          err != cudaSuccess) {
        cudaFree(found.base);
        return fail("copying the product's tables", err);
      }
      TablesCache().emplace(std::move(key), found);
    }
  }
  const char* p = static_cast<const char*>(found.base);
  TpTables<T> t;
  t.n_paths = a.n_paths;
  t.paths = reinterpret_cast<const tp::Path*>(p);
  t.ci = reinterpret_cast<const int64_t*>(p + sizeof(tp::Path) * a.n_paths);
  t.cj = t.ci + a.n_entries;
  t.ck = t.cj + a.n_entries;
  t.cv = reinterpret_cast<const T*>(t.ck + a.n_entries);
  const FastLayout& l = found.fast;
  TpFast<T>& f = t.fast;
  f.ok = l.ok;
  f.valid = l.valid;
  for (int s = 0; s < 4; ++s) f.need[s] = l.need[s];
  if (l.ok && l.valid) {
    f.paths = reinterpret_cast<const TpFastPath*>(p + l.paths);
    f.m_begin = reinterpret_cast<const int32_t*>(p + l.m_begin);
    f.m_j = reinterpret_cast<const int32_t*>(p + l.m_j);
    f.y_begin = reinterpret_cast<const int32_t*>(p + l.y_begin);
    f.y_pos = reinterpret_cast<const int32_t*>(p + l.y_pos);
    f.m_v = reinterpret_cast<const T*>(p + l.m_v);
    f.y_v = reinterpret_cast<const T*>(p + l.y_v);
    f.n_paths = l.n_paths;
    f.m_size = l.m_size;
    f.ny = l.ny;
  }
  return t;
}

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument("jaxext tensor_product: " + what);
}

#define JAXEXT_TP_CUDA_PARAMS                                                                  \
  cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,                 \
      ffi::Result<ffi::AnyBuffer> out, int64_t mode, ffi::Span<const int64_t> dims,          \
      ffi::Span<const int64_t> paths, ffi::Span<const int64_t> cg_i,                         \
      ffi::Span<const int64_t> cg_j, ffi::Span<const int64_t> cg_k,                          \
      ffi::Span<const double> cg_v, int64_t n_paths, int64_t n_entries,                      \
      ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms

template <typename T>
ffi::Error TensorProductTyped(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                              ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> out,
                              const TpAttrs& attrs) {
  const int m = attrs.mode;
  const int64_t rows = out->dimensions().size() >= 1 ? out->dimensions()[0] : 0;
  const int64_t slot_rows[4] = {rows, rows, rows, rows};
  ffi::AnyBuffer* const operands[3] = {&a, &b, &c};
  TpOperands<T> ops{};
  if (ffi::Error err = SlotData<T>(attrs, operands, *out, slot_rows, ops.slot,
                                    "jaxext tensor_product", "the irreps");
      err.failure()) {
    return err;
  }
  auto tables = Tables<T>(attrs, "jaxext tensor_product", stream);
  if (!tables.has_value()) return tables.error();
  for (int s = 0; s < 4; ++s) ops.dims[s] = attrs.dims[s];
  ops.result = out->typed_data<T>();
  ops.rows = rows;
  return RunTp<T>(stream, m, *tables, ops, TpGraph{}, "jaxext tensor_product");
}

ffi::Error TensorProductImpl(JAXEXT_TP_CUDA_PARAMS) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                     n_entries, x_terms, out_terms, "jaxext tensor_product",
                                     &attrs);
      err.failure()) {
    return err;
  }
  switch (out->element_type()) {
    case ffi::DataType::F32:
      return TensorProductTyped<float>(stream, a, b, c, out, attrs);
    case ffi::DataType::F64:
      return TensorProductTyped<double>(stream, a, b, c, out, attrs);
    default:
      return Invalid("float32 or float64 only");
  }
}

// Copies the tables to the device before any graph capture.
ffi::Error TensorProductInitializeImpl(JAXEXT_TP_CUDA_PARAMS) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                     n_entries, x_terms, out_terms, "jaxext tensor_product",
                                     &attrs);
      err.failure()) {
    return err;
  }
  return PrepareTables(attrs, out->element_type(), "jaxext tensor_product");
}

#undef JAXEXT_TP_CUDA_PARAMS

// --- jaxext_tensor_product_edge_cts: the y and w cotangents together ----------------------------

constexpr const char* kEdgeCtsOp = "jaxext tensor_product (edge cotangents)";

#define JAXEXT_TP_EDGE_CTS_PARAMS                                                              \
  cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer y, ffi::AnyBuffer w, ffi::AnyBuffer ct, \
      ffi::Result<ffi::AnyBuffer> dy, ffi::Result<ffi::AnyBuffer> dw, int64_t mode,          \
      ffi::Span<const int64_t> dims, ffi::Span<const int64_t> paths,                         \
      ffi::Span<const int64_t> cg_i, ffi::Span<const int64_t> cg_j,                          \
      ffi::Span<const int64_t> cg_k, ffi::Span<const double> cg_v, int64_t n_paths,          \
      int64_t n_entries, ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms

ffi::Error EdgeCtsImpl(JAXEXT_TP_EDGE_CTS_PARAMS) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeEdgeCtsAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                          n_entries, x_terms, out_terms, kEdgeCtsOp, &attrs);
      err.failure()) {
    return err;
  }
  const int64_t n = dy->dimensions().size() >= 1 ? dy->dimensions()[0] : 0;
  const int64_t rows[4] = {n, n, n, n};
  return RunTpEdgeCts(stream, attrs, x, y, w, ct, *dy, *dw, rows, TpGraph{}, kEdgeCtsOp,
                      "the irreps");
}

// Copies the tables to the device before any graph capture.
ffi::Error EdgeCtsInitializeImpl(JAXEXT_TP_EDGE_CTS_PARAMS) {
  return PrepareEdgeCtsTables(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths, n_entries,
                              x_terms, out_terms, dy->element_type(), kEdgeCtsOp);
}

#undef JAXEXT_TP_EDGE_CTS_PARAMS

}  // namespace

ffi::ErrorOr<TpTables<float>> TablesF32(const TpAttrs& a, const char* op, cudaStream_t stream) {
  return GetTables<float>(a, op, stream);
}
ffi::ErrorOr<TpTables<double>> TablesF64(const TpAttrs& a, const char* op,
                                          cudaStream_t stream) {
  return GetTables<double>(a, op, stream);
}

ffi::Error PrepareTables(const TpAttrs& a, ffi::DataType dtype, const char* op) {
  if (dtype == ffi::DataType::F32) {
    auto t = GetTables<float>(a, op, nullptr);
    return t.has_value() ? ffi::Error::Success() : t.error();
  }
  auto t = GetTables<double>(a, op, nullptr);
  return t.has_value() ? ffi::Error::Success() : t.error();
}

#define JAXEXT_TP_CUDA_BINDING(stage)                   \
  ffi::Ffi::Bind<stage>()                               \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()         \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTensorProductCudaInitialize, TensorProductInitializeImpl,
                              JAXEXT_TP_CUDA_BINDING(ffi::ExecutionStage::kInitialize));
// Command-buffer compatible: the tables were copied in the initialize stage; launches only.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTensorProductCuda, TensorProductImpl,
                              JAXEXT_TP_CUDA_BINDING(ffi::ExecutionStage::kExecute),
                              {ffi::Traits::kCmdBufferCompatible});

// The edge cotangents: x, y, w and the result's cotangent in; y's and w's cotangents out.
#define JAXEXT_TP_EDGE_CTS_BINDING(stage)               \
  ffi::Ffi::Bind<stage>()                               \
      .Ctx<ffi::PlatformStream<cudaStream_t>>()         \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Arg<ffi::AnyBuffer>()                            \
      .Ret<ffi::AnyBuffer>()                            \
      .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTensorProductEdgeCtsCudaInitialize, EdgeCtsInitializeImpl,
                              JAXEXT_TP_EDGE_CTS_BINDING(ffi::ExecutionStage::kInitialize));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTensorProductEdgeCtsCuda, EdgeCtsImpl,
                              JAXEXT_TP_EDGE_CTS_BINDING(ffi::ExecutionStage::kExecute),
                              {ffi::Traits::kCmdBufferCompatible});

#undef JAXEXT_TP_EDGE_CTS_BINDING
#undef JAXEXT_TP_CUDA_BINDING

}  // namespace cuda
}  // namespace jaxext
