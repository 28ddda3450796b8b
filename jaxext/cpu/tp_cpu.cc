#include "jaxext/cpu/tp_cpu.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/tp.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

ffi::Error Invalid(const char* what) {
  return ffi::Error::InvalidArgument(std::string("jaxext tensor_product: ") + what);
}

template <typename T>
ffi::Future TensorProductTyped(ffi::ThreadPool& pool, ffi::AnyBuffer a, ffi::AnyBuffer b,
                               ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> out, int64_t mode,
                               ffi::Span<const int64_t> dims, ffi::Span<const int64_t> paths,
                               ffi::Span<const int64_t> cg_i, ffi::Span<const int64_t> cg_j,
                               ffi::Span<const int64_t> cg_k, ffi::Span<const double> cg_v,
                               int64_t n_paths, int64_t n_entries,
                               ffi::Span<const int64_t> x_terms,
                               ffi::Span<const int64_t> out_terms) {
  if (mode < 0 || mode > 3 || dims.size() != 4 || x_terms.size() % tp::kTermFields != 0 ||
      out_terms.size() % tp::kTermFields != 0 ||
      static_cast<int64_t>(paths.size()) < n_paths * tp::kPathFields ||
      static_cast<int64_t>(cg_v.size()) < n_entries) {
    return ErrorFuture(Invalid("bad attributes"));
  }
  const int64_t rows = out->dimensions().size() >= 1 ? out->dimensions()[0] : 0;
  ffi::AnyBuffer* operands[3] = {&a, &b, &c};
  const T* slot[4] = {nullptr, nullptr, nullptr, nullptr};
  for (int s = 0, k = 0; s < 4; ++s) {
    if (s == mode) continue;
    if (static_cast<int64_t>(operands[k]->element_count()) != rows * dims[s]) {
      return ErrorFuture(Invalid("operand shapes disagree with the irreps"));
    }
    slot[s] = operands[k]->typed_data<T>();
    ++k;
  }
  if (static_cast<int64_t>(out->element_count()) != rows * dims[mode]) {
    return ErrorFuture(Invalid("result shape disagrees with the irreps"));
  }
  // The coefficients in T once per call, shared (read-only) by every chunk.
  auto values = std::make_shared<std::vector<T>>(cg_v.begin(), cg_v.begin() + n_entries);
  const tp::Path* path = reinterpret_cast<const tp::Path*>(paths.begin());
  const int64_t* ci = cg_i.begin();
  const int64_t* cj = cg_j.begin();
  const int64_t* ck = cg_k.begin();
  T* result = out->typed_data<T>();
  const int64_t d[4] = {dims[0], dims[1], dims[2], dims[3]};
  const int m = static_cast<int>(mode);
  const tp::Term* xt = reinterpret_cast<const tp::Term*>(x_terms.begin());
  const tp::Term* ot = reinterpret_cast<const tp::Term*>(out_terms.begin());
  const int64_t nxt = static_cast<int64_t>(x_terms.size()) / tp::kTermFields;
  const int64_t not_ = static_cast<int64_t>(out_terms.size()) / tp::kTermFields;
  const int64_t work = std::max<int64_t>(1, n_entries * 8);
  return ParallelFor(pool, rows, std::max<int64_t>(1, 200000 / work),
                     [=](int64_t begin, int64_t end) {
                       const T* cv = values->data();
                       std::vector<T> x_minor(d[tp::kX]), o_minor(d[tp::kOut]), acc(d[m]);
                       for (int64_t r = begin; r < end; ++r) {
                         const T* row[4];
                         for (int s = 0; s < 4; ++s) row[s] = slot[s] ? slot[s] + r * d[s] : nullptr;
                         if (m != tp::kX) tp::ToMinor(xt, nxt, row[tp::kX], x_minor.data());
                         if (m != tp::kOut) tp::ToMinor(ot, not_, row[tp::kOut], o_minor.data());
                         std::fill(acc.begin(), acc.end(), T(0));
                         tp::AccumulateMode<T>(m, path, n_paths, ci, cj, ck, cv,
                                               m != tp::kX ? x_minor.data() : nullptr,
                                               row[tp::kY], row[tp::kW],
                                               m != tp::kOut ? o_minor.data() : nullptr,
                                               acc.data());
                         T* dst = result + r * d[m];
                         if (m == tp::kX) {
                           tp::ToMajor(xt, nxt, acc.data(), dst);
                         } else if (m == tp::kOut) {
                           tp::ToMajor(ot, not_, acc.data(), dst);
                         } else {
                           std::copy(acc.begin(), acc.end(), dst);
                         }
                       }
                     });
}

ffi::Future TensorProductImpl(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b,
                              ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> out, int64_t mode,
                              ffi::Span<const int64_t> dims, ffi::Span<const int64_t> paths,
                              ffi::Span<const int64_t> cg_i, ffi::Span<const int64_t> cg_j,
                              ffi::Span<const int64_t> cg_k, ffi::Span<const double> cg_v,
                              int64_t n_paths, int64_t n_entries, ffi::Span<const int64_t> x_terms,
                              ffi::Span<const int64_t> out_terms) {
  switch (out->element_type()) {
    case ffi::DataType::F32:
      return TensorProductTyped<float>(pool, a, b, c, out, mode, dims, paths, cg_i, cg_j, cg_k,
                                       cg_v, n_paths, n_entries, x_terms, out_terms);
    case ffi::DataType::F64:
      return TensorProductTyped<double>(pool, a, b, c, out, mode, dims, paths, cg_i, cg_j, cg_k,
                                        cg_v, n_paths, n_entries, x_terms, out_terms);
    default:
      return ErrorFuture(Invalid("float32 or float64 only"));
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTensorProductCpu, TensorProductImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
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
