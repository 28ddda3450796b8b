#include "jaxext/cpu/tp_cpu.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "jaxext/cpu/parallel.h"
#include "jaxext/cpu/tp_common.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

constexpr char kOp[] = "jaxext tensor_product";

template <typename T>
ffi::Future TensorProductTyped(ffi::ThreadPool& pool, ffi::AnyBuffer a, ffi::AnyBuffer b,
                               ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> out,
                               const TpAttrs& attrs) {
  const int m = attrs.mode;
  const int64_t rows = out->dimensions().size() >= 1 ? out->dimensions()[0] : 0;
  const int64_t slot_rows[4] = {rows, rows, rows, rows};
  ffi::AnyBuffer* const operands[3] = {&a, &b, &c};
  const T* slot[4];
  if (ffi::Error err = SlotData<T>(attrs, operands, *out, slot_rows, slot, kOp, "the irreps");
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  // Everything the chunks use is copied or owned: they run after this function returned.
  auto owned = Own(attrs);
  auto table = MakeTable<T>(attrs);
  T* result = out->typed_data<T>();
  const std::array<int64_t, 4> d{attrs.dims[0], attrs.dims[1], attrs.dims[2], attrs.dims[3]};
  const int64_t work = std::max<int64_t>(1, attrs.n_entries * 8);
  return ParallelFor(pool, rows, std::max<int64_t>(1, 200000 / work),
                     [=](int64_t begin, int64_t end) {
                       TpRows<T> row(owned->attrs, table);
                       for (int64_t r = begin; r < end; ++r) {
                         const T* at[4];
                         for (int s = 0; s < 4; ++s) at[s] = slot[s] ? slot[s] + r * d[s] : nullptr;
                         row.Reset();
                         row.Add(at[tp::kX], at[tp::kY], at[tp::kW], at[tp::kOut]);
                         row.Store(result + r * d[m]);
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
  return WithTpAttrs(kOp, out->element_type(), mode, dims, paths, cg_i, cg_j,
                     cg_k, cg_v, n_paths, n_entries, x_terms, out_terms,
                     [&](auto zero, const TpAttrs& attrs) {
                       return TensorProductTyped<decltype(zero)>(pool, a, b, c, out, attrs);
                     });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTensorProductCpu, TensorProductImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>() JAXEXT_TP_ATTRS);

}  // namespace cpu
}  // namespace jaxext
