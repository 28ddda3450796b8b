// What the CPU handlers of jaxext.equivariant.tensor_product and .conv share: their attributes
// (the product's paths, Clebsch-Gordan entries and irrep blocks, jaxext/cpu/tp_cpu.h), and the
// per-row work around the loops of jaxext/kernels/tp.h (channel-minor copies of the inputs, the
// accumulator, the result back in e3nn's layout).
#ifndef JAXEXT_CPU_TP_COMMON_H_
#define JAXEXT_CPU_TP_COMMON_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jaxext/kernels/tp.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// The attributes of both handlers, appended to their ffi::Ffi::Bind() chains.
#define JAXEXT_TP_ATTRS                                   \
  .Attr<int64_t>("mode")                                  \
      .Attr<xla::ffi::Span<const int64_t>>("dims")        \
      .Attr<xla::ffi::Span<const int64_t>>("paths")       \
      .Attr<xla::ffi::Span<const int64_t>>("cg_i")        \
      .Attr<xla::ffi::Span<const int64_t>>("cg_j")        \
      .Attr<xla::ffi::Span<const int64_t>>("cg_k")        \
      .Attr<xla::ffi::Span<const double>>("cg_v")         \
      .Attr<int64_t>("n_paths")                           \
      .Attr<int64_t>("n_entries")                         \
      .Attr<xla::ffi::Span<const int64_t>>("x_terms")     \
      .Attr<xla::ffi::Span<const int64_t>>("out_terms")

// The same attributes, checked and decoded.
struct TpAttrs {
  int mode;
  int64_t dims[4];
  const tp::Path* paths;
  int64_t n_paths;
  const int64_t *ci, *cj, *ck;
  const double* cv;
  int64_t n_entries;
  const tp::Term *x_terms, *out_terms;
  int64_t n_x_terms, n_out_terms;
};

inline xla::ffi::Error DecodeTpAttrs(int64_t mode, xla::ffi::Span<const int64_t> dims,
                                     xla::ffi::Span<const int64_t> paths,
                                     xla::ffi::Span<const int64_t> cg_i,
                                     xla::ffi::Span<const int64_t> cg_j,
                                     xla::ffi::Span<const int64_t> cg_k,
                                     xla::ffi::Span<const double> cg_v, int64_t n_paths,
                                     int64_t n_entries, xla::ffi::Span<const int64_t> x_terms,
                                     xla::ffi::Span<const int64_t> out_terms, const char* op,
                                     TpAttrs* a) {
  if (mode < 0 || mode > 3 || dims.size() != 4 || x_terms.size() % tp::kTermFields != 0 ||
      out_terms.size() % tp::kTermFields != 0 ||
      static_cast<int64_t>(paths.size()) < n_paths * tp::kPathFields ||
      static_cast<int64_t>(cg_v.size()) < n_entries) {
    return xla::ffi::Error::InvalidArgument(std::string(op) + ": bad attributes");
  }
  a->mode = static_cast<int>(mode);
  for (int s = 0; s < 4; ++s) a->dims[s] = dims[s];
  a->paths = reinterpret_cast<const tp::Path*>(paths.begin());
  a->n_paths = n_paths;
  a->ci = cg_i.begin();
  a->cj = cg_j.begin();
  a->ck = cg_k.begin();
  a->cv = cg_v.begin();
  a->n_entries = n_entries;
  a->x_terms = reinterpret_cast<const tp::Term*>(x_terms.begin());
  a->out_terms = reinterpret_cast<const tp::Term*>(out_terms.begin());
  a->n_x_terms = static_cast<int64_t>(x_terms.size()) / tp::kTermFields;
  a->n_out_terms = static_cast<int64_t>(out_terms.size()) / tp::kTermFields;
  return xla::ffi::Error::Success();
}

// The data of the three input slots (all but `mode`, given in slot order) after checking that slot
// s holds rows[s] rows of dims[s]; slot[mode] stays null. `op` and `what` name the error.
template <typename T>
xla::ffi::Error SlotData(const TpAttrs& a, xla::ffi::AnyBuffer* const operands[3],
                         const int64_t rows[4], const T* slot[4], const char* op,
                         const char* what) {
  for (int s = 0, k = 0; s < 4; ++s) {
    slot[s] = nullptr;
    if (s == a.mode) continue;
    if (static_cast<int64_t>(operands[k]->element_count()) != rows[s] * a.dims[s]) {
      return xla::ffi::Error::InvalidArgument(std::string(op) +
                                              ": operand shapes disagree with " + what);
    }
    slot[s] = operands[k]->template typed_data<T>();
    ++k;
  }
  return xla::ffi::Error::Success();
}

// tp::AccumulateMode, per CPU (tp_common.cc: AVX-512 / AVX2 / baseline clones).
void AccumulateRow(int mode, const tp::Path* paths, int64_t n_paths, const int64_t* ci,
                   const int64_t* cj, const int64_t* ck, const double* cv, const double* x,
                   const double* y, const double* w, const double* o, double* acc);
void AccumulateRow(int mode, const tp::Path* paths, int64_t n_paths, const int64_t* ci,
                   const int64_t* cj, const int64_t* ck, const float* cv, const float* x,
                   const float* y, const float* w, const float* o, float* acc);

// One result row at a time, for one thread: Reset, Add the contribution of one (x, y, w, out)
// set of rows (any number of times: a convolution's node adds its edges), Store into e3nn's
// layout. The Clebsch-Gordan values are shared (converted to T once per call).
template <typename T>
class TpRows {
 public:
  TpRows(const TpAttrs& a, std::shared_ptr<const std::vector<T>> values)
      : a_(a), values_(std::move(values)), x_minor_(a.dims[tp::kX]),
        o_minor_(a.dims[tp::kOut]), acc_(a.dims[a.mode]) {}

  // The coefficients in T, to share between the chunks of one call.
  static std::shared_ptr<const std::vector<T>> Values(const TpAttrs& a) {
    return std::make_shared<const std::vector<T>>(a.cv, a.cv + a.n_entries);
  }

  void Reset() { std::fill(acc_.begin(), acc_.end(), T(0)); }

  // Rows of the four slots (the result slot's is ignored).
  void Add(const T* x, const T* y, const T* w, const T* o) {
    const int m = a_.mode;
    if (m != tp::kX) tp::ToMinor(a_.x_terms, a_.n_x_terms, x, x_minor_.data());
    if (m != tp::kOut) tp::ToMinor(a_.out_terms, a_.n_out_terms, o, o_minor_.data());
    AccumulateRow(m, a_.paths, a_.n_paths, a_.ci, a_.cj, a_.ck, values_->data(),
                  m != tp::kX ? x_minor_.data() : nullptr, y, w,
                  m != tp::kOut ? o_minor_.data() : nullptr, acc_.data());
  }

  void Store(T* dst) const {
    if (a_.mode == tp::kX) {
      tp::ToMajor(a_.x_terms, a_.n_x_terms, acc_.data(), dst);
    } else if (a_.mode == tp::kOut) {
      tp::ToMajor(a_.out_terms, a_.n_out_terms, acc_.data(), dst);
    } else {
      std::copy(acc_.begin(), acc_.end(), dst);
    }
  }

 private:
  const TpAttrs& a_;
  std::shared_ptr<const std::vector<T>> values_;
  std::vector<T> x_minor_, o_minor_, acc_;
};

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_TP_COMMON_H_
