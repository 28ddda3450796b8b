// The channelwise ("uvu") tensor product of jaxext.equivariant, one row at a time:
//
//   out[o + u*do + k] += c * w[wo + u] * x[xo + u*dx + i] * y[yo + j]
//
// over the paths (one per coupled triple of irreps) and their sparse Clebsch-Gordan entries
// (i, j, k, c), c including the path's normalisation. The product is linear in each of x, y, w
// and out's cotangent, so one loop serves all four "modes": the slot in `mode` is the result and
// the other three are inputs (mode kOut is the product itself; kX, kY, kW are its derivatives
// with respect to x, y, w given a cotangent of out).
//
// Layout: the arrays are e3nn's, channel-major within each irrep block (u, m). The loops work on
// channel-minor copies (m, u) of the x and out rows, so that the innermost loop runs over the
// channels u of one Clebsch-Gordan entry: contiguous, vectorisable. Sequential within a row, in a
// fixed order: deterministic.
#ifndef JAXEXT_KERNELS_TP_H_
#define JAXEXT_KERNELS_TP_H_

#include <cstdint>

#include "jaxext/kernels/platform.h"

namespace jaxext {
namespace tp {

enum Slot : int { kX = 0, kY = 1, kW = 2, kOut = 3 };

// One path, as 10 int64s: offsets of its blocks in x, y, w, out; multiplicity; block sizes of
// x, y, out (2l+1); its range of Clebsch-Gordan entries.
struct Path {
  int64_t x, y, w, out, mul, dx, dy, dout, begin, end;
};
constexpr int kPathFields = 10;

// One irrep block of a row, as 3 int64s: offset, multiplicity, 2l+1.
struct Term {
  int64_t offset, mul, d;
};
constexpr int kTermFields = 3;

// Channel-major (u, m) blocks of `src` to channel-minor (m, u) in `dst`, block by block.
template <typename T>
JAXEXT_HD_FUNC void ToMinor(const Term* terms, int64_t n_terms, const T* src, T* dst) {
  for (int64_t t = 0; t < n_terms; ++t) {
    const Term b = terms[t];
    for (int64_t u = 0; u < b.mul; ++u) {
      for (int64_t m = 0; m < b.d; ++m) dst[b.offset + m * b.mul + u] = src[b.offset + u * b.d + m];
    }
  }
}

// The inverse of ToMinor.
template <typename T>
JAXEXT_HD_FUNC void ToMajor(const Term* terms, int64_t n_terms, const T* src, T* dst) {
  for (int64_t t = 0; t < n_terms; ++t) {
    const Term b = terms[t];
    for (int64_t u = 0; u < b.mul; ++u) {
      for (int64_t m = 0; m < b.d; ++m) dst[b.offset + u * b.d + m] = src[b.offset + m * b.mul + u];
    }
  }
}

// Adds one row's contribution to `acc` for mode kMode (specialised at compile time). x and o are
// channel-minor rows (o: out's cotangent); y and w as given. acc: channel-minor for kX and kOut,
// plain for kY and kW. Inputs of the result's own slot are not read.
template <typename T, int kMode>
JAXEXT_HD_FUNC void Accumulate(const Path* paths, int64_t n_paths, const int64_t* ci,
                               const int64_t* cj, const int64_t* ck, const T* cv,
                               const T* __restrict__ x, const T* __restrict__ y,
                               const T* __restrict__ w, const T* __restrict__ o,
                               T* __restrict__ acc) {
  for (int64_t p = 0; p < n_paths; ++p) {
    const Path q = paths[p];
    const int64_t mul = q.mul;
    const T* wp = w ? w + q.w : nullptr;
    for (int64_t e = q.begin; e < q.end; ++e) {
      const int64_t xi = q.x + ci[e] * mul, ok = q.out + ck[e] * mul, yj = q.y + cj[e];
      if constexpr (kMode == kOut) {
        const T s = cv[e] * y[yj];
        T* a = acc + ok;
        const T* xr = x + xi;
        for (int64_t u = 0; u < mul; ++u) a[u] += s * wp[u] * xr[u];
      } else if constexpr (kMode == kX) {
        const T s = cv[e] * y[yj];
        T* a = acc + xi;
        const T* orow = o + ok;
        for (int64_t u = 0; u < mul; ++u) a[u] += s * wp[u] * orow[u];
      } else if constexpr (kMode == kY) {
        const T* xr = x + xi;
        const T* orow = o + ok;
        T dot = T(0);
        for (int64_t u = 0; u < mul; ++u) dot += wp[u] * xr[u] * orow[u];
        acc[yj] += cv[e] * dot;
      } else {  // kW
        const T s = cv[e] * y[yj];
        T* a = acc + q.w;
        const T* xr = x + xi;
        const T* orow = o + ok;
        for (int64_t u = 0; u < mul; ++u) a[u] += s * xr[u] * orow[u];
      }
    }
  }
}

template <typename T>
JAXEXT_HD_FUNC void AccumulateMode(int mode, const Path* paths, int64_t n_paths,
                                   const int64_t* ci, const int64_t* cj, const int64_t* ck,
                                   const T* cv, const T* x, const T* y, const T* w, const T* o,
                                   T* acc) {
  switch (mode) {
    case kOut:
      Accumulate<T, kOut>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc);
      break;
    case kX:
      Accumulate<T, kX>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc);
      break;
    case kY:
      Accumulate<T, kY>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc);
      break;
    default:
      Accumulate<T, kW>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc);
      break;
  }
}

}  // namespace tp
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_TP_H_
