// The FFI attributes of jaxext.equivariant.tensor_product's and .conv's handlers, CPU and CUDA:
// the product's paths, Clebsch-Gordan entries and irrep blocks (jaxext/cpu/tp_cpu.h describes
// them), decoded and checked once; and the operands of the three input slots.
#ifndef JAXEXT_COMMON_TP_BINDING_H_
#define JAXEXT_COMMON_TP_BINDING_H_

#include <cstdint>
#include <string>

#include "jaxext/kernels/tp.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {

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
// s holds rows[s] rows of dims[s] and the result rows[mode] rows of dims[mode]; slot[mode] stays
// null. `op` and `what` name the error.
template <typename T>
xla::ffi::Error SlotData(const TpAttrs& a, xla::ffi::AnyBuffer* const operands[3],
                         const xla::ffi::AnyBuffer& result, const int64_t rows[4],
                         const T* slot[4], const char* op, const char* what) {
  if (static_cast<int64_t>(result.element_count()) != rows[a.mode] * a.dims[a.mode]) {
    return xla::ffi::Error::InvalidArgument(std::string(op) + ": result shape disagrees with " +
                                            what);
  }
  for (int s = 0, k = 0; s < 4; ++s) {
    slot[s] = nullptr;
    if (s == a.mode) continue;
    if (operands[k]->element_type() != result.element_type()) {
      return xla::ffi::Error::InvalidArgument(std::string(op) +
                                              ": the operands' and the result's dtypes differ");
    }
    if (static_cast<int64_t>(operands[k]->element_count()) != rows[s] * a.dims[s]) {
      return xla::ffi::Error::InvalidArgument(std::string(op) +
                                              ": operand shapes disagree with " + what);
    }
    slot[s] = operands[k]->template typed_data<T>();
    ++k;
  }
  return xla::ffi::Error::Success();
}

}  // namespace jaxext

#endif  // JAXEXT_COMMON_TP_BINDING_H_
