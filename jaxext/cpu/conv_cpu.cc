#include "jaxext/cpu/conv_cpu.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/tp.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument("jaxext equivariant.conv: " + what);
}

template <typename T>
ffi::Future ConvTyped(ffi::ThreadPool& pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                      ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                      ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send,
                      ffi::AnyBuffer send_ranges, ffi::Result<ffi::AnyBuffer> out, int64_t mode,
                      ffi::Span<const int64_t> dims, ffi::Span<const int64_t> paths,
                      ffi::Span<const int64_t> cg_i, ffi::Span<const int64_t> cg_j,
                      ffi::Span<const int64_t> cg_k, ffi::Span<const double> cg_v,
                      int64_t n_paths, int64_t n_entries) {
  if (mode < 0 || mode > 3 || dims.size() != 4 ||
      static_cast<int64_t>(paths.size()) < n_paths * tp::kPathFields ||
      static_cast<int64_t>(cg_v.size()) < n_entries) {
    return ErrorFuture(Invalid("bad attributes"));
  }
  for (ffi::AnyBuffer* ids : {&senders, &receivers, &by_recv, &recv_ranges, &by_send, &send_ranges}) {
    if (ids->element_type() != ffi::DataType::S32) return ErrorFuture(Invalid("int32 indices"));
  }
  const int64_t e = static_cast<int64_t>(senders.element_count());
  const int64_t r = static_cast<int64_t>(recv_ranges.element_count()) - 1;
  const int64_t s = static_cast<int64_t>(send_ranges.element_count()) - 1;
  const int64_t rows[4] = {s, e, e, r};
  ffi::AnyBuffer* operands[3] = {&a, &b, &c};
  const T* slot[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int q = 0, k = 0; q < 4; ++q) {
    if (q == mode) continue;
    if (static_cast<int64_t>(operands[k]->element_count()) != rows[q] * dims[q]) {
      return ErrorFuture(Invalid("operand shapes disagree with the graph and irreps"));
    }
    slot[q] = operands[k]->typed_data<T>();
    ++k;
  }
  if (static_cast<int64_t>(out->element_count()) != rows[mode] * dims[mode]) {
    return ErrorFuture(Invalid("result shape disagrees with the graph and irreps"));
  }
  const int32_t* snd = senders.typed_data<int32_t>();
  const int32_t* rcv = receivers.typed_data<int32_t>();
  for (int64_t i = 0; i < e; ++i) {
    if (snd[i] < 0 || snd[i] >= s || rcv[i] < 0 || rcv[i] >= r) {
      return ErrorFuture(Invalid("edge " + std::to_string(i) + " has sender " +
                                 std::to_string(snd[i]) + " / receiver " + std::to_string(rcv[i]) +
                                 " outside the nodes (" + std::to_string(s) + " senders, " +
                                 std::to_string(r) + " receivers)"));
    }
  }
  auto values = std::make_shared<std::vector<T>>(cg_v.begin(), cg_v.begin() + n_entries);
  const tp::Path* path = reinterpret_cast<const tp::Path*>(paths.begin());
  const int64_t *ci = cg_i.begin(), *cj = cg_j.begin(), *ck = cg_k.begin();
  const int32_t* order_r = by_recv.typed_data<int32_t>();
  const int32_t* range_r = recv_ranges.typed_data<int32_t>();
  const int32_t* order_s = by_send.typed_data<int32_t>();
  const int32_t* range_s = send_ranges.typed_data<int32_t>();
  T* result = out->typed_data<T>();
  const int64_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
  const int m = static_cast<int>(mode);
  const int64_t n_rows = rows[m];
  // The row pointers of the four slots for edge k (the result slot's is unused).
  auto edge_rows = [=](int64_t k, const T** row) {
    row[tp::kX] = slot[tp::kX] ? slot[tp::kX] + snd[k] * d[tp::kX] : nullptr;
    row[tp::kY] = slot[tp::kY] ? slot[tp::kY] + k * d[tp::kY] : nullptr;
    row[tp::kW] = slot[tp::kW] ? slot[tp::kW] + k * d[tp::kW] : nullptr;
    row[tp::kOut] = slot[tp::kOut] ? slot[tp::kOut] + rcv[k] * d[tp::kOut] : nullptr;
  };
  const int64_t per_row = std::max<int64_t>(1, n_entries * 8 * std::max<int64_t>(1, e) /
                                                   std::max<int64_t>(1, n_rows));
  return ParallelFor(pool, n_rows, std::max<int64_t>(1, 200000 / per_row),
                     [=](int64_t begin, int64_t end) {
                       const T* cv = values->data();
                       const T* row[4];
                       for (int64_t i = begin; i < end; ++i) {
                         T* dst = result + i * d[m];
                         if (m == tp::kY || m == tp::kW) {  // one edge per result row
                           edge_rows(i, row);
                           tp::Row<T>(m, path, n_paths, ci, cj, ck, cv, row, dst, d[m]);
                           continue;
                         }
                         // a node: its edges, in sorted order
                         const int32_t* order = m == tp::kOut ? order_r : order_s;
                         const int32_t* range = m == tp::kOut ? range_r : range_s;
                         for (int64_t k = 0; k < d[m]; ++k) dst[k] = T(0);
                         for (int32_t q = range[i]; q < range[i + 1]; ++q) {
                           edge_rows(order[q], row);
                           tp::Row<T>(m, path, n_paths, ci, cj, ck, cv, row, dst, d[m],
                                      /*accumulate=*/true);
                         }
                       }
                     });
}

ffi::Future ConvImpl(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                     ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                     ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,
                     ffi::Result<ffi::AnyBuffer> out, int64_t mode, ffi::Span<const int64_t> dims,
                     ffi::Span<const int64_t> paths, ffi::Span<const int64_t> cg_i,
                     ffi::Span<const int64_t> cg_j, ffi::Span<const int64_t> cg_k,
                     ffi::Span<const double> cg_v, int64_t n_paths, int64_t n_entries) {
  switch (out->element_type()) {
    case ffi::DataType::F32:
      return ConvTyped<float>(pool, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                              send_ranges, out, mode, dims, paths, cg_i, cg_j, cg_k, cg_v,
                              n_paths, n_entries);
    case ffi::DataType::F64:
      return ConvTyped<double>(pool, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                               send_ranges, out, mode, dims, paths, cg_i, cg_j, cg_k, cg_v,
                               n_paths, n_entries);
    default:
      return ErrorFuture(Invalid("float32 or float64 only"));
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvCpu, ConvImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("mode")
                                  .Attr<ffi::Span<const int64_t>>("dims")
                                  .Attr<ffi::Span<const int64_t>>("paths")
                                  .Attr<ffi::Span<const int64_t>>("cg_i")
                                  .Attr<ffi::Span<const int64_t>>("cg_j")
                                  .Attr<ffi::Span<const int64_t>>("cg_k")
                                  .Attr<ffi::Span<const double>>("cg_v")
                                  .Attr<int64_t>("n_paths")
                                  .Attr<int64_t>("n_entries"));

}  // namespace cpu
}  // namespace jaxext
