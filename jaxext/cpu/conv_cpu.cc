#include "jaxext/cpu/conv_cpu.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jaxext/cpu/parallel.h"
#include "jaxext/cpu/tp_common.h"
#include "jaxext/kernels/conv_tasks.h"
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

// The factored forms' operands after the graph is checked: x (senders x dx), y (edges x dy),
// h (edges x k), kernel (k x dw), each of the results' dtype `type`; k into *k.
ffi::Error CheckFactored(const Graph& g, const TpAttrs& attrs, ffi::DataType type,
                         ffi::AnyBuffer& x, ffi::AnyBuffer& y, ffi::AnyBuffer& h,
                         ffi::AnyBuffer& kernel, int64_t* k) {
  for (ffi::AnyBuffer* buf : {&x, &y, &h, &kernel}) {
    if (buf->element_type() != type) {
      return Invalid("the operands' and the result's dtypes differ");
    }
  }
  const auto* d = attrs.dims;
  const auto hd = h.dimensions(), kd = kernel.dimensions();
  if (hd.size() != 2 || kd.size() != 2 || hd[0] != g.e || kd[0] != hd[1] || kd[1] != d[tp::kW] ||
      static_cast<int64_t>(x.element_count()) != g.s * d[tp::kX] ||
      static_cast<int64_t>(y.element_count()) != g.e * d[tp::kY]) {
    return Invalid("operand shapes disagree with the graph and irreps (factored weights: "
                   "(edges, k) and (k, weights))");
  }
  *k = hd[1];
  return ffi::Error::Success();
}

// ParallelFor's grain for rows sharing `edges` edges of `per_edge` work units each: ~200000
// units per chunk.
inline int64_t Grain(int64_t per_edge, int64_t edges, int64_t rows) {
  const int64_t per_row = std::max<int64_t>(1, per_edge * std::max<int64_t>(1, edges) /
                                                   std::max<int64_t>(1, rows));
  return std::max<int64_t>(1, 200000 / per_row);
}

// The node runs of `range` (rows of them) cut into tasks (jaxext/kernels/conv_tasks.h): the
// running task counts, rows + 1.
inline std::shared_ptr<const std::vector<int64_t>> NodeTasks(const int32_t* range, int64_t rows) {
  auto tasks = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(rows + 1));
  (*tasks)[0] = 0;
  for (int64_t i = 0; i < rows; ++i) {
    (*tasks)[i + 1] = (*tasks)[i] + conv::RunTasks(range[i + 1] - range[i], conv::kTaskEdges);
  }
  return tasks;
}

// Each cut node's row: its partial rows, then its own row (its last piece), added in that order.
template <typename T>
void JoinPieces(const std::vector<int64_t>& tasks, int64_t rows, int64_t width, const T* partial,
                T* result) {
  if (tasks[rows] == rows) return;  // nothing cut
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t pieces = tasks[i + 1] - tasks[i];
    if (pieces <= 1) continue;
    const int64_t first = conv::FirstSlot(tasks.data(), i);
    T* own = result + i * width;
    for (int64_t c = 0; c < width; ++c) {
      own[c] = conv::JoinElement(partial, first, pieces, width, c, own[c]);
    }
  }
}

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
  // One edge per result row (y's and w's cotangents): rows of equal cost, split evenly.
  if (m == tp::kY || m == tp::kW) {
    return ParallelFor(pool, n_rows, Grain(per_edge, e, n_rows),
                       [=](int64_t begin, int64_t end) {
                         TpRows<T> row(owned->attrs, table);
                         for (int64_t i = begin; i < end; ++i) {
                           row.Reset();
                           row.AddMinor(x_minor ? x_minor->data() + snd[i] * d[tp::kX] : nullptr,
                                        slot[tp::kY] ? slot[tp::kY] + i * d[tp::kY] : nullptr,
                                        slot[tp::kW] ? slot[tp::kW] + i * d[tp::kW] : nullptr,
                                        o_minor ? o_minor->data() + rcv[i] * d[tp::kOut]
                                                : nullptr);
                           row.Store(result + i * d[m]);
                         }
                       });
  }
  // Node rows (the result by receiver, x's cotangent by sender): the runs cut into tasks of at
  // most conv::kTaskEdges edges (jaxext/kernels/conv_tasks.h), handed out on demand, then each cut
  // node's pieces added in order.
  const int32_t* order = m == tp::kOut ? order_r : order_s;
  const int32_t* range = m == tp::kOut ? range_r : range_s;
  const int64_t task_edges = conv::kTaskEdges;
  const auto tasks = NodeTasks(range, n_rows);
  const int64_t n_tasks = (*tasks)[n_rows];
  const int64_t width = d[m];
  auto partial = std::make_shared<std::vector<T>>(
      static_cast<size_t>((n_tasks - n_rows) * width));
  const int64_t block = Grain(per_edge, e, n_tasks);  // tasks per hand-out
  auto run = [=](int64_t begin, int64_t end) {
    TpRows<T> row(owned->attrs, table);
    auto add_edge = [&](int64_t k, const T* w) {  // edge k's four rows
      const T* no = nullptr;
      row.AddMinor(x_minor ? x_minor->data() + snd[k] * d[tp::kX] : no,
                   slot[tp::kY] ? slot[tp::kY] + k * d[tp::kY] : no, w,
                   o_minor ? o_minor->data() + rcv[k] * d[tp::kOut] : no);
    };
    std::vector<const T*> h_rows;
    std::vector<T> made;
    if (factors.factored) {
      h_rows.resize(kChunk);
      made.resize(static_cast<size_t>(kChunk * d[tp::kW]));
    }
    for (int64_t t = begin; t < end; ++t) {
      const conv::Task task =
          conv::FindTask(tasks->data(), range, n_rows, n_tasks - n_rows, t, task_edges);
      row.Reset();
      if (!factors.factored) {
        for (int64_t q = task.begin; q < task.end; ++q) {
          add_edge(order[q], slot[tp::kW] ? slot[tp::kW] + order[q] * d[tp::kW] : nullptr);
        }
      } else {
        for (int64_t q0 = task.begin; q0 < task.end; q0 += kChunk) {
          const int64_t n = std::min<int64_t>(kChunk, task.end - q0);
          for (int64_t j = 0; j < n; ++j) h_rows[j] = factors.h + order[q0 + j] * factors.k;
          EdgeWeights(h_rows.data(), n, factors.k, factors.kernel, d[tp::kW], made.data());
          for (int64_t j = 0; j < n; ++j) add_edge(order[q0 + j], made.data() + j * d[tp::kW]);
        }
      }
      row.Store(task.slot < 0 ? result + task.node * width : partial->data() + task.slot * width);
    }
  };
  auto join = [=]() { JoinPieces(*tasks, n_rows, width, partial->data(), result); };
  return ParallelForDynamic(pool, n_tasks, block, run, join);
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
  int64_t k;
  if (ffi::Error err = CheckFactored(g, attrs, out->element_type(), x, y, h, kernel, &k);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  if (static_cast<int64_t>(out->element_count()) != g.r * attrs.dims[tp::kOut]) {
    return ErrorFuture(Invalid("the result's shape disagrees with the graph and irreps"));
  }
  const T* slot[4] = {x.typed_data<T>(), y.typed_data<T>(), nullptr, nullptr};
  WeightFactors<T> factors{true, h.typed_data<T>(), k, kernel.typed_data<T>()};
  return ConvRun<T>(pool, g, slot, factors, out->typed_data<T>(), attrs);
}

// The factored convolution's cotangents from one walk over the edges by sender: the result's
// cotangent ct (receivers x out) gives dx (senders x x), dy (edges x y), dh (edges x k) and dk
// (k x weights), each skipped where its result is empty. Each sender's edges are taken kChunk at
// a time: their weights w = h @ kernel made once (EdgeWeights) serve dx and dy, and their weights'
// cotangents dw (the product's mode W) go straight into dh = dw @ kernel^T and into the block's
// partial dk += h^T dw (the blocks' partials summed in block order at the end). No edges x
// weights array is made.
template <typename T>
ffi::Future ConvFactoredBwdRun(ffi::ThreadPool& pool, const Graph& g, const T* x, const T* y,
                               const T* h, int64_t k, const T* kernel, const T* ct, T* dx, T* dy,
                               T* dh, T* dk, const TpAttrs& attrs) {
  const std::array<int64_t, 4> d{attrs.dims[0], attrs.dims[1], attrs.dims[2], attrs.dims[3]};
  const int64_t r = g.r, s = g.s;
  const int32_t *rcv = g.rcv, *order_s = g.order_s, *range_s = g.range_s;
  // The attributes (owned: the chunks run after this function returned) in the three modes that
  // make the cotangents, and each mode's table.
  struct Modes {
    std::shared_ptr<const OwnedTpAttrs> owned;
    TpAttrs x, y, w;
  };
  auto modes_owned = std::make_shared<Modes>();
  modes_owned->owned = Own(attrs);
  modes_owned->x = modes_owned->y = modes_owned->w = modes_owned->owned->attrs;
  modes_owned->x.mode = tp::kX;
  modes_owned->y.mode = tp::kY;
  modes_owned->w.mode = tp::kW;
  const std::shared_ptr<const Modes> m = modes_owned;
  const auto tx = MakeTable<T>(m->x), ty = MakeTable<T>(m->y), tw = MakeTable<T>(m->w);
  const bool want_w = dx != nullptr || dy != nullptr;  // the weights themselves
  const bool want_dw = dh != nullptr || dk != nullptr;  // the weights' cotangents
  std::shared_ptr<const std::vector<T>> x_minor, o_minor;
  if (dy != nullptr || want_dw) {
    x_minor = MinorRows(attrs.x_terms, attrs.n_x_terms, x, s, d[tp::kX]);
  }
  o_minor = MinorRows(attrs.out_terms, attrs.n_out_terms, ct, r, d[tp::kOut]);
  std::shared_ptr<const std::vector<T>> kernel_t;  // kernel^T (weights x k), for dh
  if (dh != nullptr) {
    auto t = std::make_shared<std::vector<T>>(static_cast<size_t>(d[tp::kW] * k));
    for (int64_t q = 0; q < k; ++q) {
      for (int64_t c = 0; c < d[tp::kW]; ++c) (*t)[c * k + q] = kernel[q * d[tp::kW] + c];
    }
    kernel_t = t;
  }
  const int64_t modes = (dx != nullptr) + (dy != nullptr) + want_dw;
  const int64_t per_edge = attrs.n_entries * 8 * modes +
                           k * d[tp::kW] * (want_w + (dh != nullptr) + (dk != nullptr));
  const int64_t kw = k * d[tp::kW];
  // Each sender's run cut into tasks (conv_tasks.h); x's cotangent joined from the pieces as the
  // forward's rows are. The tasks come in groups of ~10 grains of work (32 to 4096 edges), fixed
  // by the graph, the irreps and the cotangents asked for, each group with its own partial dk
  // (k x weights), added in group order at the end: dk's rounding does not depend on the
  // threads. Groups are handed out on demand.
  const auto tasks = NodeTasks(range_s, s);
  const int64_t n_tasks = (*tasks)[s];
  const int64_t group_edges =
      std::clamp<int64_t>(2000000 / std::max<int64_t>(1, per_edge), 32, 4096);
  auto groups = std::make_shared<std::vector<int64_t>>(1, 0);  // each group's first task
  for (int64_t t = 0, acc = 0; t < n_tasks; ++t) {
    const conv::Task task =
        conv::FindTask(tasks->data(), range_s, s, n_tasks - s, t, conv::kTaskEdges);
    acc += 1 + (task.end - task.begin);  // a row's own cost, about an edge's
    if (acc >= group_edges) {
      groups->push_back(t + 1);
      acc = 0;
    }
  }
  if (groups->back() != n_tasks) groups->push_back(n_tasks);
  const int64_t n_groups = static_cast<int64_t>(groups->size()) - 1;
  auto dx_partial = std::make_shared<std::vector<T>>(
      dx != nullptr ? static_cast<size_t>((n_tasks - s) * d[tp::kX]) : 0);
  auto dk_partial = std::make_shared<std::vector<T>>(
      dk != nullptr ? static_cast<size_t>(n_groups * kw) : 0);
  auto run = [=](int64_t group_begin, int64_t group_end) {
    TpRows<T> row_x(m->x, tx), row_y(m->y, ty), row_w(m->w, tw);
    std::vector<const T*> rows(std::max<int64_t>(kChunk, k));
    std::vector<T> made, dw, dh_chunk, h_t, dk_chunk;
    if (want_w) made.resize(static_cast<size_t>(kChunk * d[tp::kW]));
    if (want_dw) dw.resize(static_cast<size_t>(kChunk * d[tp::kW]));
    if (dh != nullptr) dh_chunk.resize(static_cast<size_t>(kChunk * k));
    if (dk != nullptr) {
      h_t.resize(static_cast<size_t>(k * kChunk));
      dk_chunk.resize(static_cast<size_t>(kw));
    }
    for (int64_t b = group_begin; b < group_end; ++b) {
      T* dk_group = dk != nullptr ? dk_partial->data() + b * kw : nullptr;
      if (dk_group != nullptr) std::fill(dk_group, dk_group + kw, T(0));
      for (int64_t t = (*groups)[b]; t < (*groups)[b + 1]; ++t) {
        const conv::Task task =
            conv::FindTask(tasks->data(), range_s, s, n_tasks - s, t, conv::kTaskEdges);
        const int64_t i = task.node;
        const T* xm = x_minor ? x_minor->data() + i * d[tp::kX] : nullptr;
        if (dx != nullptr) row_x.Reset();
        for (int64_t q0 = task.begin; q0 < task.end; q0 += kChunk) {
          const int64_t n = std::min<int64_t>(kChunk, task.end - q0);
          const int32_t* edges = order_s + q0;
          if (want_w) {
            for (int64_t j = 0; j < n; ++j) rows[j] = h + edges[j] * k;
            EdgeWeights(rows.data(), n, k, kernel, d[tp::kW], made.data());
          }
          for (int64_t j = 0; j < n; ++j) {
            const int64_t q = edges[j];
            const T* om = o_minor->data() + rcv[q] * d[tp::kOut];
            const T* yq = y + q * d[tp::kY];
            const T* wq = want_w ? made.data() + j * d[tp::kW] : nullptr;
            if (dx != nullptr) row_x.AddMinor(nullptr, yq, wq, om);
            if (dy != nullptr) {
              row_y.Reset();
              row_y.AddMinor(xm, nullptr, wq, om);
              row_y.Store(dy + q * d[tp::kY]);
            }
            if (want_dw) {
              row_w.Reset();
              row_w.AddMinor(xm, yq, nullptr, om);
              row_w.Store(dw.data() + j * d[tp::kW]);
            }
          }
          if (dh != nullptr) {
            for (int64_t j = 0; j < n; ++j) rows[j] = dw.data() + j * d[tp::kW];
            EdgeWeights(rows.data(), n, d[tp::kW], kernel_t->data(), k, dh_chunk.data());
            for (int64_t j = 0; j < n; ++j) {
              std::copy(dh_chunk.begin() + j * k, dh_chunk.begin() + (j + 1) * k,
                        dh + static_cast<int64_t>(edges[j]) * k);
            }
          }
          if (dk_group != nullptr && kw > 0) {  // dk += h^T dw: (k x n) times (n x weights)
            for (int64_t j = 0; j < n; ++j) {
              for (int64_t q = 0; q < k; ++q) h_t[q * n + j] = h[edges[j] * k + q];
            }
            for (int64_t q = 0; q < k; ++q) rows[q] = h_t.data() + q * n;
            EdgeWeights(rows.data(), k, n, dw.data(), d[tp::kW], dk_chunk.data());
            for (int64_t c = 0; c < kw; ++c) dk_group[c] += dk_chunk[c];
          }
        }
        if (dx != nullptr) {
          row_x.Store(task.slot < 0 ? dx + i * d[tp::kX]
                                    : dx_partial->data() + task.slot * d[tp::kX]);
        }
      }
    }
  };
  auto finish = [=]() {
    if (dx != nullptr) JoinPieces(*tasks, s, d[tp::kX], dx_partial->data(), dx);
    if (dk != nullptr) {
      std::fill(dk, dk + kw, T(0));
      for (int64_t b = 0; b < n_groups; ++b) {
        const T* p = dk_partial->data() + b * kw;
        for (int64_t c = 0; c < kw; ++c) dk[c] += p[c];
      }
    }
  };
  return ParallelForDynamic(pool, n_groups, 1, run, finish);
}

template <typename T>
ffi::Future ConvFactoredBwdTyped(ffi::ThreadPool& pool, ffi::AnyBuffer x, ffi::AnyBuffer y,
                                 ffi::AnyBuffer h, ffi::AnyBuffer kernel, ffi::AnyBuffer ct,
                                 ffi::AnyBuffer senders, ffi::AnyBuffer receivers,
                                 ffi::AnyBuffer by_recv, ffi::AnyBuffer recv_ranges,
                                 ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,
                                 ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dy,
                                 ffi::Result<ffi::AnyBuffer> dh, ffi::Result<ffi::AnyBuffer> dk,
                                 const TpAttrs& attrs) {
  Graph g;
  if (ffi::Error err = CheckGraph(senders, receivers, by_recv, recv_ranges, by_send, send_ranges,
                                  &g);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const ffi::DataType type = dx->element_type();
  int64_t k;
  if (ffi::Error err = CheckFactored(g, attrs, type, x, y, h, kernel, &k); err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const auto* d = attrs.dims;
  // A result is made where it has elements (the caller asks for the cotangents it needs).
  auto sized = [type](ffi::Result<ffi::AnyBuffer>& res, int64_t n) {
    const int64_t have = static_cast<int64_t>(res->element_count());
    return res->element_type() == type && (have == 0 || have == n);
  };
  if (ct.element_type() != type ||
      static_cast<int64_t>(ct.element_count()) != g.r * d[tp::kOut] ||
      !sized(dx, g.s * d[tp::kX]) || !sized(dy, g.e * d[tp::kY]) || !sized(dh, g.e * k) ||
      !sized(dk, k * d[tp::kW])) {
    return ErrorFuture(Invalid("the result's cotangent (receivers, out) or the cotangents' "
                               "shapes (as x, y, h, kernel, or empty) disagree with the graph "
                               "and irreps"));
  }
  auto data = [](ffi::Result<ffi::AnyBuffer>& res) {
    return res->element_count() ? res->typed_data<T>() : nullptr;
  };
  return ConvFactoredBwdRun<T>(pool, g, x.typed_data<T>(), y.typed_data<T>(), h.typed_data<T>(),
                               k, kernel.typed_data<T>(), ct.typed_data<T>(), data(dx),
                               data(dy), data(dh), data(dk), attrs);
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

ffi::Future ConvFactoredBwdImpl(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer y,
                                ffi::AnyBuffer h, ffi::AnyBuffer kernel, ffi::AnyBuffer ct,
                                ffi::AnyBuffer senders, ffi::AnyBuffer receivers,
                                ffi::AnyBuffer by_recv, ffi::AnyBuffer recv_ranges,
                                ffi::AnyBuffer by_send, ffi::AnyBuffer send_ranges,
                                ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dy,
                                ffi::Result<ffi::AnyBuffer> dh, ffi::Result<ffi::AnyBuffer> dk,
                                int64_t mode,
                                ffi::Span<const int64_t> dims, ffi::Span<const int64_t> paths,
                                ffi::Span<const int64_t> cg_i, ffi::Span<const int64_t> cg_j,
                                ffi::Span<const int64_t> cg_k, ffi::Span<const double> cg_v,
                                int64_t n_paths, int64_t n_entries,
                                ffi::Span<const int64_t> x_terms,
                                ffi::Span<const int64_t> out_terms) {
  return WithTpAttrs(kOp, dx->element_type(), mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                     n_entries, x_terms, out_terms, [&](auto zero, const TpAttrs& attrs) {
                       return ConvFactoredBwdTyped<decltype(zero)>(
                           pool, x, y, h, kernel, ct, senders, receivers, by_recv, recv_ranges,
                           by_send, send_ranges, dx, dy, dh, dk, attrs);
                     });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextConvFactoredBwdCpu, ConvFactoredBwdImpl,
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
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS);

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
