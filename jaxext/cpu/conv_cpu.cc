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
                      int64_t n_paths, int64_t n_entries, ffi::Span<const int64_t> x_terms,
                      ffi::Span<const int64_t> out_terms) {
  if (mode < 0 || mode > 3 || dims.size() != 4 || x_terms.size() % tp::kTermFields != 0 ||
      out_terms.size() % tp::kTermFields != 0 ||
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
  const tp::Term* xt = reinterpret_cast<const tp::Term*>(x_terms.begin());
  const tp::Term* ot = reinterpret_cast<const tp::Term*>(out_terms.begin());
  const int64_t nxt = static_cast<int64_t>(x_terms.size()) / tp::kTermFields;
  const int64_t not_ = static_cast<int64_t>(out_terms.size()) / tp::kTermFields;
  const int64_t per_row = std::max<int64_t>(1, n_entries * 8 * std::max<int64_t>(1, e) /
                                                   std::max<int64_t>(1, n_rows));
  return ParallelFor(pool, n_rows, std::max<int64_t>(1, 200000 / per_row),
                     [=](int64_t begin, int64_t end) {
                       const T* cv = values->data();
                       std::vector<T> x_minor(d[tp::kX]), o_minor(d[tp::kOut]), acc(d[m]);
                       // Adds edge k's contribution to acc (channel-minor for node results).
                       auto add_edge = [&](int64_t k) {
                         if (m != tp::kX) {
                           tp::ToMinor(xt, nxt, slot[tp::kX] + snd[k] * d[tp::kX], x_minor.data());
                         }
                         if (m != tp::kOut) {
                           tp::ToMinor(ot, not_, slot[tp::kOut] + rcv[k] * d[tp::kOut],
                                       o_minor.data());
                         }
                         tp::AccumulateMode<T>(
                             m, path, n_paths, ci, cj, ck, cv,
                             m != tp::kX ? x_minor.data() : nullptr,
                             slot[tp::kY] ? slot[tp::kY] + k * d[tp::kY] : nullptr,
                             slot[tp::kW] ? slot[tp::kW] + k * d[tp::kW] : nullptr,
                             m != tp::kOut ? o_minor.data() : nullptr, acc.data());
                       };
                       for (int64_t i = begin; i < end; ++i) {
                         std::fill(acc.begin(), acc.end(), T(0));
                         T* dst = result + i * d[m];
                         if (m == tp::kY || m == tp::kW) {  // one edge per result row
                           add_edge(i);
                           std::copy(acc.begin(), acc.end(), dst);
                           continue;
                         }
                         // a node: its edges in sorted order, then back to e3nn's layout
                         const int32_t* order = m == tp::kOut ? order_r : order_s;
                         const int32_t* range = m == tp::kOut ? range_r : range_s;
                         for (int32_t q = range[i]; q < range[i + 1]; ++q) add_edge(order[q]);
                         tp::ToMajor(m == tp::kOut ? ot : xt, m == tp::kOut ? not_ : nxt,
                                     acc.data(), dst);
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
  switch (out->element_type()) {
    case ffi::DataType::F32:
      return ConvTyped<float>(pool, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                              send_ranges, out, mode, dims, paths, cg_i, cg_j, cg_k, cg_v,
                              n_paths, n_entries, x_terms, out_terms);
    case ffi::DataType::F64:
      return ConvTyped<double>(pool, a, b, c, senders, receivers, by_recv, recv_ranges, by_send,
                               send_ranges, out, mode, dims, paths, cg_i, cg_j, cg_k, cg_v,
                               n_paths, n_entries, x_terms, out_terms);
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
                                  .Attr<int64_t>("n_entries")
                                  .Attr<ffi::Span<const int64_t>>("x_terms")
                                  .Attr<ffi::Span<const int64_t>>("out_terms"));

}  // namespace cpu
}  // namespace jaxext
