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

constexpr char kOp[] = "jaxext equivariant.conv";

ffi::Error Invalid(const std::string& what) {
  return ffi::Error::InvalidArgument(std::string(kOp) + ": " + what);
}

// The graph's operands, checked: int32, one sender and receiver per edge, every id in range, and
// each edge order listing every edge of node i (and only those) between range[i] and range[i + 1].
struct Graph {
  const int32_t *snd, *rcv, *order_r, *range_r, *order_s, *range_s;
  int64_t e, r, s;  // edges, receivers, senders
};

ffi::Error CheckGraph(ffi::AnyBuffer& senders, ffi::AnyBuffer& receivers, ffi::AnyBuffer& by_recv,
                      ffi::AnyBuffer& recv_ranges, ffi::AnyBuffer& by_send,
                      ffi::AnyBuffer& send_ranges, Graph* g_out) {
  for (ffi::AnyBuffer* ids :
       {&senders, &receivers, &by_recv, &recv_ranges, &by_send, &send_ranges}) {
    if (ids->element_type() != ffi::DataType::S32) return Invalid("int32 indices");
  }
  Graph g;
  g.e = static_cast<int64_t>(senders.element_count());
  g.r = static_cast<int64_t>(recv_ranges.element_count()) - 1;
  g.s = static_cast<int64_t>(send_ranges.element_count()) - 1;
  const int64_t e = g.e, r = g.r, s = g.s;
  if (receivers.element_count() != static_cast<size_t>(e)) {  // conv_p is public (see below)
    return Invalid("senders and receivers must have one entry per edge");
  }
  g.snd = senders.typed_data<int32_t>();
  g.rcv = receivers.typed_data<int32_t>();
  for (int64_t i = 0; i < e; ++i) {
    if (g.snd[i] < 0 || g.snd[i] >= s || g.rcv[i] < 0 || g.rcv[i] >= r) {
      return Invalid("edge " + std::to_string(i) + " has sender " + std::to_string(g.snd[i]) +
                     " / receiver " + std::to_string(g.rcv[i]) + " outside the nodes (" +
                     std::to_string(s) + " senders, " + std::to_string(r) + " receivers)");
    }
  }
  // conv_p is public: the edge orders and ranges (built by conv() from senders and receivers) are
  // operands a caller may bind inconsistently. Each order must list every edge of node i, and only
  // those, between range[i] and range[i + 1] (O(edges + nodes), next to the product's cost).
  if (by_recv.element_count() != static_cast<size_t>(e) ||
      by_send.element_count() != static_cast<size_t>(e) || r < 0 || s < 0) {
    return Invalid("the edge orders must have one entry per edge (" + std::to_string(e) +
                   ") and the ranges at least one");
  }
  g.order_r = by_recv.typed_data<int32_t>();
  g.range_r = recv_ranges.typed_data<int32_t>();
  g.order_s = by_send.typed_data<int32_t>();
  g.range_s = send_ranges.typed_data<int32_t>();
  std::vector<char> seen(static_cast<size_t>(e));
  const struct {
    const int32_t* order;
    const int32_t* range;
    const int32_t* node;
    int64_t nodes;
    const char* what;
  } groups[2] = {{g.order_r, g.range_r, g.rcv, r, "receiver"},
                 {g.order_s, g.range_s, g.snd, s, "sender"}};
  for (const auto& gr : groups) {
    if (gr.range[0] != 0 || gr.range[gr.nodes] != e) {
      return Invalid(std::string("the ") + gr.what + " ranges must run from 0 to the "
                     "number of edges");
    }
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t i = 0; i < gr.nodes; ++i) {
      if (gr.range[i + 1] < gr.range[i] || gr.range[i + 1] > e) {
        return Invalid(std::string("the ") + gr.what +
                       " ranges must not decrease nor pass the number of edges");
      }
      for (int32_t q = gr.range[i]; q < gr.range[i + 1]; ++q) {
        if (gr.order[q] < 0 || gr.order[q] >= e || seen[gr.order[q]] || gr.node[gr.order[q]] != i) {
          return Invalid(std::string("the edges by ") + gr.what + " must list node " +
                         std::to_string(i) + "'s edges (and only those) in its range");
        }
        seen[gr.order[q]] = 1;
      }
    }
  }
  *g_out = g;
  return ffi::Error::Success();
}

// The edge weights as a radial network's last layer, w = h @ kernel (h: E x k, kernel: k x the
// product's weights), made one receiver's edges at a time (EdgeWeights) instead of read.
template <typename T>
struct WeightFactors {
  bool factored = false;  // (h may be null: a zero-size buffer when k = 0)
  const T* h = nullptr;
  int64_t k = 0;
  const T* kernel = nullptr;
};

// Edges whose weights are made together (kChunk x the product's weights in each thread's buffer).
constexpr int64_t kChunk = 48;

template <typename T>
ffi::Future ConvRun(ffi::ThreadPool& pool, const Graph& g, const T* const slot_in[4],
                    WeightFactors<T> factors, T* result, const TpAttrs& attrs) {
  const int m = attrs.mode;
  const int64_t e = g.e, r = g.r, s = g.s;
  const int64_t rows[4] = {s, e, e, r};
  std::array<const T*, 4> slot{slot_in[0], slot_in[1], slot_in[2], slot_in[3]};
  const int32_t *snd = g.snd, *rcv = g.rcv, *order_r = g.order_r, *range_r = g.range_r,
                *order_s = g.order_s, *range_s = g.range_s;
  // Everything the chunks use is copied or owned: they run after this function returned.
  auto owned = Own(attrs);
  auto table = MakeTable<T>(attrs);
  const std::array<int64_t, 4> d{attrs.dims[0], attrs.dims[1], attrs.dims[2], attrs.dims[3]};
  // The node rows read by every one of their edges, channel-minor once (x by sender, out's
  // cotangent by receiver).
  std::shared_ptr<const std::vector<T>> x_minor, o_minor;
  if (m != tp::kX) x_minor = MinorRows(attrs.x_terms, attrs.n_x_terms, slot[tp::kX], s, d[tp::kX]);
  if (m != tp::kOut) {
    o_minor = MinorRows(attrs.out_terms, attrs.n_out_terms, slot[tp::kOut], r, d[tp::kOut]);
  }
  const int64_t n_rows = rows[m];
  // A row's cost: its share of the product's entries over the edges, and of the weights' matrix
  // product where the weights are made here.
  const int64_t per_edge = attrs.n_entries * 8 + factors.k * d[tp::kW];
  const int64_t per_row = std::max<int64_t>(1, per_edge * std::max<int64_t>(1, e) /
                                                   std::max<int64_t>(1, n_rows));
  return ParallelFor(pool, n_rows, std::max<int64_t>(1, 200000 / per_row),
                     [=](int64_t begin, int64_t end) {
                       TpRows<T> row(owned->attrs, table);
                       auto add_edge = [&](int64_t k, const T* w) {  // edge k's four rows
                         const T* no = nullptr;
                         row.AddMinor(x_minor ? x_minor->data() + snd[k] * d[tp::kX] : no,
                                      slot[tp::kY] ? slot[tp::kY] + k * d[tp::kY] : no, w,
                                      o_minor ? o_minor->data() + rcv[k] * d[tp::kOut] : no);
                       };
                       auto weights = [&](int64_t k) {
                         return slot[tp::kW] ? slot[tp::kW] + k * d[tp::kW] : nullptr;
                       };
                       std::vector<const T*> h_rows;
                       std::vector<T> made;
                       if (factors.factored) {
                         h_rows.resize(kChunk);
                         made.resize(static_cast<size_t>(kChunk * d[tp::kW]));
                       }
                       for (int64_t i = begin; i < end; ++i) {
                         row.Reset();
                         if (m == tp::kY || m == tp::kW) {  // one edge per result row
                           add_edge(i, weights(i));
                         } else {  // a node: its edges in sorted order
                           const int32_t* order = m == tp::kOut ? order_r : order_s;
                           const int32_t* range = m == tp::kOut ? range_r : range_s;
                           if (!factors.factored) {
                             for (int32_t q = range[i]; q < range[i + 1]; ++q) {
                               add_edge(order[q], weights(order[q]));
                             }
                           } else {
                             for (int64_t q0 = range[i]; q0 < range[i + 1]; q0 += kChunk) {
                               const int64_t n = std::min<int64_t>(kChunk, range[i + 1] - q0);
                               for (int64_t j = 0; j < n; ++j) {
                                 h_rows[j] = factors.h + order[q0 + j] * factors.k;
                               }
                               EdgeWeights(h_rows.data(), n, factors.k, factors.kernel,
                                           d[tp::kW], made.data());
                               for (int64_t j = 0; j < n; ++j) {
                                 add_edge(order[q0 + j], made.data() + j * d[tp::kW]);
                               }
                             }
                           }
                         }
                         row.Store(result + i * d[m]);
                       }
                     });
}

template <typename T>
ffi::Future ConvTyped(ffi::ThreadPool& pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                      ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                      ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send,
                      ffi::AnyBuffer send_ranges, ffi::Result<ffi::AnyBuffer> out,
                      const TpAttrs& attrs) {
  Graph g;
  if (ffi::Error err = CheckGraph(senders, receivers, by_recv, recv_ranges, by_send, send_ranges,
                                  &g);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const int64_t rows[4] = {g.s, g.e, g.e, g.r};
  ffi::AnyBuffer* const operands[3] = {&a, &b, &c};
  const T* slot[4];
  if (ffi::Error err = SlotData<T>(attrs, operands, *out, rows, slot, kOp,
                                    "the graph and irreps");
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  return ConvRun<T>(pool, g, slot, WeightFactors<T>{}, out->typed_data<T>(), attrs);
}

// The convolution's result (mode out) with the weights as w = h @ kernel.
template <typename T>
ffi::Future ConvFactoredTyped(ffi::ThreadPool& pool, ffi::AnyBuffer x, ffi::AnyBuffer y,
                              ffi::AnyBuffer h, ffi::AnyBuffer kernel, ffi::AnyBuffer senders,
                              ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                              ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send,
                              ffi::AnyBuffer send_ranges, ffi::Result<ffi::AnyBuffer> out,
                              const TpAttrs& attrs) {
  if (attrs.mode != tp::kOut) return ErrorFuture(Invalid("factored weights give the result only"));
  Graph g;
  if (ffi::Error err = CheckGraph(senders, receivers, by_recv, recv_ranges, by_send, send_ranges,
                                  &g);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const auto* d = attrs.dims;
  for (ffi::AnyBuffer* buf : {&x, &y, &h, &kernel}) {
    if (buf->element_type() != out->element_type()) {
      return ErrorFuture(Invalid("the operands' and the result's dtypes differ"));
    }
  }
  const auto hd = h.dimensions(), kd = kernel.dimensions();
  if (hd.size() != 2 || kd.size() != 2 || hd[0] != g.e || kd[0] != hd[1] || kd[1] != d[tp::kW] ||
      static_cast<int64_t>(x.element_count()) != g.s * d[tp::kX] ||
      static_cast<int64_t>(y.element_count()) != g.e * d[tp::kY] ||
      static_cast<int64_t>(out->element_count()) != g.r * d[tp::kOut]) {
    return ErrorFuture(Invalid("operand shapes disagree with the graph and irreps (factored "
                               "weights: (edges, k) and (k, weights))"));
  }
  const T* slot[4] = {x.typed_data<T>(), y.typed_data<T>(), nullptr, nullptr};
  WeightFactors<T> factors{true, h.typed_data<T>(), hd[1], kernel.typed_data<T>()};
  return ConvRun<T>(pool, g, slot, factors, out->typed_data<T>(), attrs);
}

ffi::Future ConvImpl(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                     ffi::AnyBuffer senders, ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                     ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,
                     ffi::Result<ffi::AnyBuffer> out, int64_t mode, ffi::Span<const int64_t> dims,
                     ffi::Span<const int64_t> paths, ffi::Span<const int64_t> cg_i,
                     ffi::Span<const int64_t> cg_j, ffi::Span<const int64_t> cg_k,
                     ffi::Span<const double> cg_v, int64_t n_paths, int64_t n_entries,
                     ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms) {
  return WithTpAttrs(kOp, out->element_type(), mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                     n_entries, x_terms, out_terms, [&](auto zero, const TpAttrs& attrs) {
                       return ConvTyped<decltype(zero)>(pool, a, b, c, senders, receivers,
                                                        by_recv, recv_ranges, by_send,
                                                        send_ranges, out, attrs);
                     });
}

ffi::Future ConvFactoredImpl(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer y,
                             ffi::AnyBuffer h, ffi::AnyBuffer kernel, ffi::AnyBuffer senders,
                             ffi::AnyBuffer receivers, ffi::AnyBuffer by_recv,
                             ffi::AnyBuffer recv_ranges, ffi::AnyBuffer by_send,
                             ffi::AnyBuffer send_ranges, ffi::Result<ffi::AnyBuffer> out,
                             int64_t mode, ffi::Span<const int64_t> dims,
                             ffi::Span<const int64_t> paths, ffi::Span<const int64_t> cg_i,
                             ffi::Span<const int64_t> cg_j, ffi::Span<const int64_t> cg_k,
                             ffi::Span<const double> cg_v, int64_t n_paths, int64_t n_entries,
                             ffi::Span<const int64_t> x_terms, ffi::Span<const int64_t> out_terms) {
  return WithTpAttrs(kOp, out->element_type(), mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                     n_entries, x_terms, out_terms, [&](auto zero, const TpAttrs& attrs) {
                       return ConvFactoredTyped<decltype(zero)>(pool, x, y, h, kernel, senders,
                                                                receivers, by_recv, recv_ranges,
                                                                by_send, send_ranges, out, attrs);
                     });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvFactoredCpu, ConvFactoredImpl,
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
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS);

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
