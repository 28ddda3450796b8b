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

// EdgeWeights: each tile of kE edges by kV columns keeps its sums in registers over the k loop
// (kV = two vectors of the widest clone: 16 doubles, 32 floats), the kernel's rows streamed from
// the cache. Each sum runs over k in order. Not in an anonymous namespace: see clones.h.
namespace edge_weights {

template <typename T, int kE, int kV>
__attribute__((always_inline)) inline void Tile(const T* const* h, int64_t k, const T* kernel,
                                                int64_t c, int64_t c0, T* w) {
  T acc[kE][kV];
  for (int e = 0; e < kE; ++e) {
    for (int j = 0; j < kV; ++j) acc[e][j] = T(0);
  }
  for (int64_t q = 0; q < k; ++q) {
    const T* row = kernel + q * c + c0;
#pragma GCC unroll 8
    for (int e = 0; e < kE; ++e) {
      const T he = h[e][q];
#pragma GCC unroll 32
      for (int j = 0; j < kV; ++j) acc[e][j] += he * row[j];
    }
  }
  for (int e = 0; e < kE; ++e) {
    for (int j = 0; j < kV; ++j) w[e * c + c0 + j] = acc[e][j];
  }
}

// The columns of kE edges: full tiles, then eighth-vectors, then one at a time.
template <typename T, int kE>
__attribute__((always_inline)) inline void Rows(const T* const* h, int64_t k, const T* kernel,
                                                int64_t c, T* w) {
  constexpr int kV = 128 / sizeof(T);
  int64_t c0 = 0;
  for (; c0 + kV <= c; c0 += kV) Tile<T, kE, kV>(h, k, kernel, c, c0, w);
  for (; c0 + 8 <= c; c0 += 8) Tile<T, kE, 8>(h, k, kernel, c, c0, w);
  for (; c0 < c; ++c0) Tile<T, kE, 1>(h, k, kernel, c, c0, w);
}

template <typename T>
__attribute__((always_inline)) inline void All(const T* const* h, int64_t n, int64_t k,
                                               const T* kernel, int64_t c, T* w) {
  constexpr int kE = 6;
  int64_t e = 0;
  for (; e + kE <= n; e += kE) Rows<T, kE>(h + e, k, kernel, c, w + e * c);
  for (; e < n; ++e) Rows<T, 1>(h + e, k, kernel, c, w + e * c);
}

}  // namespace edge_weights

#define JAXEXT_EDGE_WEIGHTS(T)                                                                   \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void EdgeWeights(const T* const* h_rows, int64_t n,      \
                                                        int64_t k, const T* kernel, int64_t c,  \
                                                        T* w) {                                 \
    edge_weights::All<T>(h_rows, n, k, kernel, c, w);                                           \
  }
JAXEXT_EDGE_WEIGHTS(double)
JAXEXT_EDGE_WEIGHTS(float)
#undef JAXEXT_EDGE_WEIGHTS

}  // namespace cpu
}  // namespace jaxext
