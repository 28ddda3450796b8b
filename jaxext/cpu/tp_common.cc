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

// The layout changes around those loops, block by block, with each block's 2l+1 (l <= 7) a
// compile-time constant of tp::BlockToMinor / BlockToMajor: compiled once for baseline x86-64 with
// a runtime 2l+1 (as they were, called from tp_common.h), they cost as much as the product's own
// loops in float32 rows. Not in an anonymous namespace: see clones.h.
namespace tp_layout {

// D = 2l+1 for l <= 7 as a constant, any other block at run time (kD = 0).
template <typename T, bool kToMinor, int kD>
JAXEXT_HD void Block(const tp::Term& b, const T* src, T* dst) {
  if constexpr (kToMinor) {
    tp::BlockToMinor<T, kD>(b, src, dst);
  } else {
    tp::BlockToMajor<T, kD>(b, src, dst);
  }
}

template <typename T, bool kToMinor>
JAXEXT_HD void Blocks(const tp::Term* terms, int64_t n_terms, const T* src, T* dst) {
  for (int64_t t = 0; t < n_terms; ++t) {
    const tp::Term b = terms[t];
    switch (b.d) {
      case 1: Block<T, kToMinor, 1>(b, src, dst); break;
      case 3: Block<T, kToMinor, 3>(b, src, dst); break;
      case 5: Block<T, kToMinor, 5>(b, src, dst); break;
      case 7: Block<T, kToMinor, 7>(b, src, dst); break;
      case 9: Block<T, kToMinor, 9>(b, src, dst); break;
      case 11: Block<T, kToMinor, 11>(b, src, dst); break;
      case 13: Block<T, kToMinor, 13>(b, src, dst); break;
      case 15: Block<T, kToMinor, 15>(b, src, dst); break;
      default: Block<T, kToMinor, 0>(b, src, dst);
    }
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
