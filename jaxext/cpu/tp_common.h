// What the CPU handlers of jaxext.equivariant.tensor_product and .conv share beside their
// attributes (jaxext/common/tp_binding.h): the per-row work around the loops of
// jaxext/kernels/tp.h (channel-minor copies of the inputs, the accumulator, the result back in
// e3nn's layout).
#ifndef JAXEXT_CPU_TP_COMMON_H_
#define JAXEXT_CPU_TP_COMMON_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "jaxext/common/tp_binding.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/tp.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

// The part every CPU product handler shares after its operands (tensor_product, conv and conv's
// factored form): the attributes decoded, then run(T(), attrs) for the result's dtype T (float or
// double); otherwise an error future starting with `op`.
template <typename Run>
xla::ffi::Future WithTpAttrs(const char* op, xla::ffi::DataType type, int64_t mode,
                             xla::ffi::Span<const int64_t> dims,
                             xla::ffi::Span<const int64_t> paths,
                             xla::ffi::Span<const int64_t> cg_i,
                             xla::ffi::Span<const int64_t> cg_j,
                             xla::ffi::Span<const int64_t> cg_k,
                             xla::ffi::Span<const double> cg_v, int64_t n_paths,
                             int64_t n_entries, xla::ffi::Span<const int64_t> x_terms,
                             xla::ffi::Span<const int64_t> out_terms, Run run) {
  TpAttrs attrs;
  if (xla::ffi::Error err = DecodeTpAttrs(mode, dims, paths, cg_i, cg_j, cg_k, cg_v, n_paths,
                                          n_entries, x_terms, out_terms, op, &attrs);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  switch (type) {
    case xla::ffi::DataType::F32:
      return run(float(), attrs);
    case xla::ffi::DataType::F64:
      return run(double(), attrs);
    default:
      return ErrorFuture(xla::ffi::Error::InvalidArgument(std::string(op) +
                                                          ": float32 or float64 only"));
  }
}

// The attributes copied out of the call frame, for work that runs after the handler returned
// (its future completes later): the decoded TpAttrs point into the copies.
struct OwnedTpAttrs {
  std::vector<int64_t> paths, ci, cj, ck, x_terms, out_terms;
  std::vector<double> cv;
  TpAttrs attrs;
};

inline std::shared_ptr<const OwnedTpAttrs> Own(const TpAttrs& a) {
  auto o = std::make_shared<OwnedTpAttrs>();
  const int64_t* paths = reinterpret_cast<const int64_t*>(a.paths);
  o->paths.assign(paths, paths + a.n_paths * tp::kPathFields);
  o->ci.assign(a.ci, a.ci + a.n_entries);
  o->cj.assign(a.cj, a.cj + a.n_entries);
  o->ck.assign(a.ck, a.ck + a.n_entries);
  o->cv.assign(a.cv, a.cv + a.n_entries);
  const int64_t* xt = reinterpret_cast<const int64_t*>(a.x_terms);
  const int64_t* ot = reinterpret_cast<const int64_t*>(a.out_terms);
  o->x_terms.assign(xt, xt + a.n_x_terms * tp::kTermFields);
  o->out_terms.assign(ot, ot + a.n_out_terms * tp::kTermFields);
  o->attrs = a;
  o->attrs.paths = reinterpret_cast<const tp::Path*>(o->paths.data());
  o->attrs.ci = o->ci.data();
  o->attrs.cj = o->cj.data();
  o->attrs.ck = o->ck.data();
  o->attrs.cv = o->cv.data();
  o->attrs.x_terms = reinterpret_cast<const tp::Term*>(o->x_terms.data());
  o->attrs.out_terms = reinterpret_cast<const tp::Term*>(o->out_terms.data());
  return o;
}

// tp::AccumulateMode, per CPU (tp_common.cc: AVX-512 / AVX2 / baseline clones).
void AccumulateRow(int mode, const tp::Path* paths, int64_t n_paths, const int64_t* ci,
                   const int64_t* cj, const int64_t* ck, const double* cv, const double* x,
                   const double* y, const double* w, const double* o, double* acc,
                   double* scratch);
void AccumulateRow(int mode, const tp::Path* paths, int64_t n_paths, const int64_t* ci,
                   const int64_t* cj, const int64_t* ck, const float* cv, const float* x,
                   const float* y, const float* w, const float* o, float* acc, float* scratch);

// w = h @ kernel for n edges, edge j's row of h at h_rows[j] (k values): n x k times k x c into
// w (n x c, row-major), per CPU (tp_common.cc: register tiles of 6 edges by two vectors). A
// convolution's per-edge weights from a radial network's last hidden layer, made for one
// receiver's edges at a time, so that no E x c array of weights exists (conv's factored weights).
void EdgeWeights(const double* const* h_rows, int64_t n, int64_t k, const double* kernel,
                 int64_t c, double* w);
void EdgeWeights(const float* const* h_rows, int64_t n, int64_t k, const float* kernel, int64_t c,
                 float* w);

// One row's blocks through tp::BlockToMinor / BlockToMajor, per CPU (tp_common.cc: each block's
// transpose specialised for its 2l+1, vectorised across the channels).
void MinorRow(const tp::Term* terms, int64_t n_terms, const double* src, double* dst);
void MinorRow(const tp::Term* terms, int64_t n_terms, const float* src, float* dst);
void MajorRow(const tp::Term* terms, int64_t n_terms, const double* src, double* dst);
void MajorRow(const tp::Term* terms, int64_t n_terms, const float* src, float* dst);

// The Clebsch-Gordan entries for one mode, values in T, each path's entries stably sorted by the
// mode's group key (tp::GroupKey: entries adding to the same result block are consecutive).
template <typename T>
struct TpTable {
  std::vector<int64_t> ci, cj, ck;
  std::vector<T> cv;
};

template <typename T>
std::shared_ptr<const TpTable<T>> MakeTable(const TpAttrs& a) {
  auto t = std::make_shared<TpTable<T>>();
  std::vector<int64_t> order(static_cast<size_t>(a.n_entries));
  for (int64_t e = 0; e < a.n_entries; ++e) order[e] = e;
  const int64_t* key = nullptr;  // kW: one group per path, the table's order
  if (a.mode == tp::kOut) key = a.ck;
  if (a.mode == tp::kX) key = a.ci;
  if (a.mode == tp::kY) key = a.cj;
  if (key != nullptr) {
    for (int64_t p = 0; p < a.n_paths; ++p) {
      std::stable_sort(order.begin() + a.paths[p].begin, order.begin() + a.paths[p].end,
                       [key](int64_t l, int64_t r) { return key[l] < key[r]; });
    }
  }
  for (int64_t e : order) {
    t->ci.push_back(a.ci[e]);
    t->cj.push_back(a.cj[e]);
    t->ck.push_back(a.ck[e]);
    t->cv.push_back(static_cast<T>(a.cv[e]));
  }
  return t;
}

// One result row at a time, for one thread: Reset, Add the contribution of one (x, y, w, out)
// set of rows (any number of times: a convolution's node adds its edges), Store into e3nn's
// layout. The table is shared by the chunks of one call.
template <typename T>
class TpRows {
 public:
  TpRows(const TpAttrs& a, std::shared_ptr<const TpTable<T>> table)
      : a_(a), table_(std::move(table)), x_minor_(a.dims[tp::kX]), o_minor_(a.dims[tp::kOut]),
        acc_(a.dims[a.mode]), scratch_(tp::ScratchSize<T>(a.mode, a.dims)) {}

  void Reset() { std::fill(acc_.begin(), acc_.end(), T(0)); }

  // Rows of the four slots (the result slot's is ignored).
  void Add(const T* x, const T* y, const T* w, const T* o) {
    const int m = a_.mode;
    if (m != tp::kX) MinorRow(a_.x_terms, a_.n_x_terms, x, x_minor_.data());
    if (m != tp::kOut) MinorRow(a_.out_terms, a_.n_out_terms, o, o_minor_.data());
    AddMinor(m != tp::kX ? x_minor_.data() : nullptr, y, w,
             m != tp::kOut ? o_minor_.data() : nullptr);
  }

  // The same with the x and out rows already channel-minor (MinorRows: a convolution transposes
  // each node's row once, not once per edge).
  void AddMinor(const T* x_minor, const T* y, const T* w, const T* o_minor) {
    const TpTable<T>& t = *table_;
    AccumulateRow(a_.mode, a_.paths, a_.n_paths, t.ci.data(), t.cj.data(), t.ck.data(),
                  t.cv.data(), x_minor, y, w, o_minor, acc_.data(), scratch_.data());
  }

  void Store(T* dst) const {
    if (a_.mode == tp::kX) {
      MajorRow(a_.x_terms, a_.n_x_terms, acc_.data(), dst);
    } else if (a_.mode == tp::kOut) {
      MajorRow(a_.out_terms, a_.n_out_terms, acc_.data(), dst);
    } else {
      std::copy(acc_.begin(), acc_.end(), dst);
    }
  }

 private:
  const TpAttrs& a_;
  std::shared_ptr<const TpTable<T>> table_;
  std::vector<T> x_minor_, o_minor_, acc_, scratch_;
};

// Channel-minor copies of `rows` rows of `dim` values laid out in `terms` (MinorRow), over
// the calling thread (a convolution's node rows: little beside the work of their edges).
template <typename T>
std::shared_ptr<std::vector<T>> MinorRows(const tp::Term* terms, int64_t n_terms, const T* src,
                                          int64_t rows, int64_t dim) {
  auto out = std::make_shared<std::vector<T>>(static_cast<size_t>(rows * dim));
  for (int64_t r = 0; r < rows; ++r) {
    MinorRow(terms, n_terms, src + r * dim, out->data() + r * dim);
  }
  return out;
}

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_TP_COMMON_H_
