#include "jaxext/cpu/conv_cpu.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jaxext/cpu/parallel.h"
#include "jaxext/cpu/tp_common.h"
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
                      ffi::AnyBuffer send_ranges, ffi::Result<ffi::AnyBuffer> out,
                      const TpAttrs& attrs) {
  for (ffi::AnyBuffer* ids : {&senders, &receivers, &by_recv, &recv_ranges, &by_send, &send_ranges}) {
    if (ids->element_type() != ffi::DataType::S32) return ErrorFuture(Invalid("int32 indices"));
  }
  const int m = attrs.mode;
  const int64_t e = static_cast<int64_t>(senders.element_count());
  const int64_t r = static_cast<int64_t>(recv_ranges.element_count()) - 1;
  const int64_t s = static_cast<int64_t>(send_ranges.element_count()) - 1;
  const int64_t rows[4] = {s, e, e, r};
  ffi::AnyBuffer* const operands[3] = {&a, &b, &c};
  const T* slot[4];
  if (ffi::Error err = SlotData<T>(attrs, operands, *out, rows, slot,
                                    "jaxext equivariant.conv", "the graph and irreps");
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  if (receivers.element_count() != static_cast<size_t>(e)) {  // conv_p is public (see below)
    return ErrorFuture(Invalid("senders and receivers must have one entry per edge"));
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
  // conv_p is public: the edge orders and ranges (built by conv() from senders and receivers) are
  // operands a caller may bind inconsistently. Each order must list every edge of node i, and only
  // those, between range[i] and range[i + 1] (O(edges + nodes), next to the product's cost).
  if (by_recv.element_count() != static_cast<size_t>(e) ||
      by_send.element_count() != static_cast<size_t>(e) || r < 0 || s < 0) {
    return ErrorFuture(Invalid("the edge orders must have one entry per edge (" +
                               std::to_string(e) + ") and the ranges at least one"));
  }
  std::vector<char> seen(static_cast<size_t>(e));
  const struct {
    const int32_t* order;
    const int32_t* range;
    const int32_t* node;
    int64_t nodes;
    const char* what;
  } groups[2] = {
      {by_recv.typed_data<int32_t>(), recv_ranges.typed_data<int32_t>(), rcv, r, "receiver"},
      {by_send.typed_data<int32_t>(), send_ranges.typed_data<int32_t>(), snd, s, "sender"}};
  for (const auto& g : groups) {
    if (g.range[0] != 0 || g.range[g.nodes] != e) {
      return ErrorFuture(Invalid(std::string("the ") + g.what + " ranges must run from 0 to the "
                                 "number of edges"));
    }
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t i = 0; i < g.nodes; ++i) {
      if (g.range[i + 1] < g.range[i] || g.range[i + 1] > e) {
        return ErrorFuture(Invalid(std::string("the ") + g.what +
                                   " ranges must not decrease nor pass the number of edges"));
      }
      for (int32_t q = g.range[i]; q < g.range[i + 1]; ++q) {
        if (g.order[q] < 0 || g.order[q] >= e || seen[g.order[q]] || g.node[g.order[q]] != i) {
          return ErrorFuture(Invalid(std::string("the edges by ") + g.what + " must list node " +
                                     std::to_string(i) + "'s edges (and only those) in its range"));
        }
        seen[g.order[q]] = 1;
      }
    }
  }
  // Everything the chunks use is copied or owned: they run after this function returned.
  auto owned = Own(attrs);
  auto table = MakeTable<T>(attrs);
  const int32_t* order_r = by_recv.typed_data<int32_t>();
  const int32_t* range_r = recv_ranges.typed_data<int32_t>();
  const int32_t* order_s = by_send.typed_data<int32_t>();
  const int32_t* range_s = send_ranges.typed_data<int32_t>();
  T* result = out->typed_data<T>();
  const std::array<int64_t, 4> d{attrs.dims[0], attrs.dims[1], attrs.dims[2], attrs.dims[3]};
  // The node rows read by every one of their edges, channel-minor once (x by sender, out's
  // cotangent by receiver).
  std::shared_ptr<const std::vector<T>> x_minor, o_minor;
  if (m != tp::kX) x_minor = MinorRows(attrs.x_terms, attrs.n_x_terms, slot[tp::kX], s, d[tp::kX]);
  if (m != tp::kOut) {
    o_minor = MinorRows(attrs.out_terms, attrs.n_out_terms, slot[tp::kOut], r, d[tp::kOut]);
  }
  const int64_t n_rows = rows[m];
  const int64_t per_row = std::max<int64_t>(1, attrs.n_entries * 8 * std::max<int64_t>(1, e) /
                                                   std::max<int64_t>(1, n_rows));
  return ParallelFor(pool, n_rows, std::max<int64_t>(1, 200000 / per_row),
                     [=](int64_t begin, int64_t end) {
                       TpRows<T> row(owned->attrs, table);
                       auto add_edge = [&](int64_t k) {  // edge k's four rows
                         const T* no = nullptr;
                         row.AddMinor(x_minor ? x_minor->data() + snd[k] * d[tp::kX] : no,
                                      slot[tp::kY] ? slot[tp::kY] + k * d[tp::kY] : no,
                                      slot[tp::kW] ? slot[tp::kW] + k * d[tp::kW] : no,
                                      o_minor ? o_minor->data() + rcv[k] * d[tp::kOut] : no);
                       };
                       for (int64_t i = begin; i < end; ++i) {
                         row.Reset();
                         if (m == tp::kY || m == tp::kW) {  // one edge per result row
                           add_edge(i);
                         } else {  // a node: its edges in sorted order
                           const int32_t* order = m == tp::kOut ? order_r : order_s;
                           const int32_t* range = m == tp::kOut ? range_r : range_s;
                           for (int32_t q = range[i]; q < range[i + 1]; ++q) add_edge(order[q]);
                         }
                         row.Store(result + i * d[m]);
                       }
                     });
}

ffi::Future ConvImpl(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                     ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                     ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,
                     ffi::Result<ffi::AnyBuffer> out, int64_t mode, ffi::Span<const int64_t> dims,
                     ffi::Span<const int64_t> paths, ffi::Span<const int64_t> cg_i,
                     ffi::Span<const int64_t> cg_j, ffi::Span<const int64_t> cg_k,
                     ffi::Span<const double> cg_v, int64_t n_paths, int64_t n_entries,
                     ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms) {
  TpAttrs attrs;
  if (ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                     n_entries, x_terms, out_terms, "jaxext equivariant.conv",
                                     &attrs);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  switch (out->element_type()) {
    case ffi::DataType::F32:
      return ConvTyped<float>(pool, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                              send_ranges, out, attrs);
    case ffi::DataType::F64:
      return ConvTyped<double>(pool, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                               send_ranges, out, attrs);
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
                                  .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS);

}  // namespace cpu
}  // namespace jaxext
