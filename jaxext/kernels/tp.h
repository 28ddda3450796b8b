// The channelwise ("uvu") tensor product of jaxext.equivariant, one row at a time:
//
//   out[o + u*do + k] += c * w[wo + u] * x[xo + u*dx + i] * y[yo + j]
//
// over the paths (one per coupled triple of irreps) and their sparse Clebsch-Gordan entries
// (i, j, k, c), c including the path's normalisation. The product is linear in each of x, y, w
// and out's cotangent, so one loop serves all four "modes": the slot in `mode` is the result and
// the other three are inputs (mode kOut is the product itself; kX, kY, kW are its derivatives
// with respect to x, y, w given a cotangent of out). Sequential within a row: deterministic.
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

// One mode, specialised at compile time (no branch in the innermost loop).
template <typename T, int kMode>
JAXEXT_HD_FUNC void RowMode(const Path* paths, int64_t n_paths, const int64_t* ci,
                            const int64_t* cj, const int64_t* ck, const T* cv,
                            const T* const* rows, T* result) {
  const T* x = rows[kX];
  const T* y = rows[kY];
  const T* w = rows[kW];
  const T* o = rows[kOut];
  for (int64_t p = 0; p < n_paths; ++p) {
    const Path& q = paths[p];
    for (int64_t u = 0; u < q.mul; ++u) {
      const int64_t xb = q.x + u * q.dx, ob = q.out + u * q.dout, wi = q.w + u;
      for (int64_t e = q.begin; e < q.end; ++e) {
        const int64_t xi = xb + ci[e], yj = q.y + cj[e], ok = ob + ck[e];
        if constexpr (kMode == kOut) {
          result[ok] += cv[e] * w[wi] * x[xi] * y[yj];
        } else if constexpr (kMode == kX) {
          result[xi] += cv[e] * w[wi] * y[yj] * o[ok];
        } else if constexpr (kMode == kY) {
          result[yj] += cv[e] * w[wi] * x[xi] * o[ok];
        } else {
          result[wi] += cv[e] * x[xi] * y[yj] * o[ok];
        }
      }
    }
  }
}

// rows[s]: the row of slot s (the result slot is written, the others read). The result row is
// zeroed first unless `accumulate` (the fused convolution adds several edges into one row).
template <typename T>
JAXEXT_HD_FUNC void Row(int mode, const Path* paths, int64_t n_paths, const int64_t* ci,
                        const int64_t* cj, const int64_t* ck, const T* cv, const T* const* rows,
                        T* result, int64_t result_size, bool accumulate = false) {
  if (!accumulate) {
    for (int64_t r = 0; r < result_size; ++r) result[r] = T(0);
  }
  switch (mode) {
    case kOut:
      RowMode<T, kOut>(paths, n_paths, ci, cj, ck, cv, rows, result);
      break;
    case kX:
      RowMode<T, kX>(paths, n_paths, ci, cj, ck, cv, rows, result);
      break;
    case kY:
      RowMode<T, kY>(paths, n_paths, ci, cj, ck, cv, rows, result);
      break;
    default:
      RowMode<T, kW>(paths, n_paths, ci, cj, ck, cv, rows, result);
      break;
  }
}

}  // namespace tp
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_TP_H_
