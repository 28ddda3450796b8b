#include "jaxext/cpu/tp_common.h"

#include "jaxext/cpu/clones.h"

namespace jaxext {
namespace cpu {

// jaxext/kernels/tp.h's loops flattened into per-CPU clones (the channel loops vectorise 8 or 16
// wide where the CPU has AVX-512).
#define JAXEXT_TP_ACCUMULATE(T)                                                                 \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void AccumulateRow(                                      \
      int mode, const tp::Path* paths, int64_t n_paths, const int64_t* ci, const int64_t* cj,   \
      const int64_t* ck, const T* cv, const T* x, const T* y, const T* w, const T* o, T* acc,   \
      T* scratch) {                                                                             \
    tp::AccumulateMode<T>(mode, paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc, scratch);     \
  }
JAXEXT_TP_ACCUMULATE(double)
JAXEXT_TP_ACCUMULATE(float)
#undef JAXEXT_TP_ACCUMULATE

// The layout changes around those loops, per block: (u, m) <-> (m, u) for mul channels u and
// D = 2l+1 components m. With D a compile-time constant the channel loop is one group of D
// interleaved loads (or stores) the vectoriser turns into shuffles; tp::ToMinor / ToMajor (a
// runtime D, compiled once for baseline x86-64 where they are called) cost as much as the
// product's own loops in float32 rows. Forced inline into the clones, not in an anonymous
// namespace: see clones.h.
namespace tp_layout {

template <typename T, int D>
JAXEXT_HD void BlockToMinor(int64_t mul, const T* __restrict__ src, T* __restrict__ dst) {
  for (int64_t u = 0; u < mul; ++u) {
    for (int m = 0; m < D; ++m) dst[m * mul + u] = src[u * D + m];
  }
}

template <typename T, int D>
JAXEXT_HD void BlockToMajor(int64_t mul, const T* __restrict__ src, T* __restrict__ dst) {
  for (int64_t u = 0; u < mul; ++u) {
    for (int m = 0; m < D; ++m) dst[u * D + m] = src[m * mul + u];
  }
}

// D = 1, 3, ..., 15 (l <= 7) specialised; any other block as tp.h's loops.
template <typename T, bool kToMinor>
JAXEXT_HD void Blocks(const tp::Term* terms, int64_t n_terms, const T* src, T* dst) {
  for (int64_t t = 0; t < n_terms; ++t) {
    const tp::Term b = terms[t];
    const T* s = src + b.offset;
    T* d = dst + b.offset;
#define JAXEXT_TP_BLOCK(D)                                                 \
  case D:                                                                  \
    if constexpr (kToMinor) {                                              \
      BlockToMinor<T, D>(b.mul, s, d);                                     \
    } else {                                                               \
      BlockToMajor<T, D>(b.mul, s, d);                                     \
    }                                                                      \
    break;
    switch (b.d) {
      JAXEXT_TP_BLOCK(1)
      JAXEXT_TP_BLOCK(3)
      JAXEXT_TP_BLOCK(5)
      JAXEXT_TP_BLOCK(7)
      JAXEXT_TP_BLOCK(9)
      JAXEXT_TP_BLOCK(11)
      JAXEXT_TP_BLOCK(13)
      JAXEXT_TP_BLOCK(15)
      default:
        if constexpr (kToMinor) {
          tp::ToMinor(&b, 1, src, dst);
        } else {
          tp::ToMajor(&b, 1, src, dst);
        }
    }
#undef JAXEXT_TP_BLOCK
  }
}

}  // namespace tp_layout

#define JAXEXT_TP_LAYOUT(T)                                                                      \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void MinorRow(const tp::Term* terms, int64_t n_terms,     \
                                                     const T* src, T* dst) {                     \
    tp_layout::Blocks<T, true>(terms, n_terms, src, dst);                                        \
  }                                                                                              \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void MajorRow(const tp::Term* terms, int64_t n_terms,     \
                                                     const T* src, T* dst) {                     \
    tp_layout::Blocks<T, false>(terms, n_terms, src, dst);                                       \
  }
JAXEXT_TP_LAYOUT(double)
JAXEXT_TP_LAYOUT(float)
#undef JAXEXT_TP_LAYOUT

}  // namespace cpu
}  // namespace jaxext
