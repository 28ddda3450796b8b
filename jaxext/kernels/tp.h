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
// channels u of one Clebsch-Gordan entry: contiguous, vectorisable, in tiles of a fixed width
// whose sums stay in registers over all the entries that add to the same result block. Sequential
// within a row, in a fixed order: deterministic.
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

// Block b of `src`, channel-major (u, m), to channel-minor (m, u) in `dst` (both at b.offset).
// kD: the block's 2l+1 when the caller knows it at compile time (the loop over m then unrolls and
// the loop over u vectorises as one group of interleaved loads: jaxext/cpu/tp_common.cc), else 0
// (b.d at run time).
template <typename T, int kD = 0>
JAXEXT_HD_CLONED void BlockToMinor(const Term& b, const T* __restrict__ src, T* __restrict__ dst) {
  const int64_t d = kD > 0 ? kD : b.d;
  for (int64_t u = 0; u < b.mul; ++u) {
    for (int64_t m = 0; m < d; ++m) dst[b.offset + m * b.mul + u] = src[b.offset + u * d + m];
  }
}

// The inverse of BlockToMinor.
template <typename T, int kD = 0>
JAXEXT_HD_CLONED void BlockToMajor(const Term& b, const T* __restrict__ src, T* __restrict__ dst) {
  const int64_t d = kD > 0 ? kD : b.d;
  for (int64_t u = 0; u < b.mul; ++u) {
    for (int64_t m = 0; m < d; ++m) dst[b.offset + u * d + m] = src[b.offset + m * b.mul + u];
  }
}

// The entries' grouping key for mode kMode: the index of the result's own Clebsch-Gordan axis
// (k for out, i for x, j for y; none for w, whose block is the path's). Entries of one path with
// the same key, consecutive in the table, are summed in registers before touching the result
// (the CPU handlers sort each path's entries by it: jaxext/cpu/tp_common.h).
template <int kMode>
JAXEXT_HD int64_t GroupKey(int64_t i, int64_t j, int64_t k) {
  if constexpr (kMode == kOut) {
    return k;
  } else if constexpr (kMode == kX) {
    return i;
  } else if constexpr (kMode == kY) {
    return j;
  } else {
    return 0;
  }
}

// Lanes of the y cotangent's partial sums: one 64-byte vector of T per y component.
template <typename T>
constexpr int kYLanes = 64 / static_cast<int>(sizeof(T));

// Scratch values Accumulate needs for a row of mode `mode` (the y cotangent's partial sums).
template <typename T>
JAXEXT_HD_FUNC int64_t ScratchSize(int mode, const int64_t dims[4]) {
  return mode == kY ? dims[kY] * kYLanes<T> : 0;
}

// The entries [e0, e1) of path q (one group: the same key), channels [u0, u0 + B) with B a
// compile-time width: the sum over the group is kept in B registers, then added to the result.
// The path's weights multiply the group's sum, not each entry. For kY, `acc` is the scratch of
// kYLanes partial sums per y component.
template <typename T, int kMode, int B>
JAXEXT_HD void Tile(const Path& q, int64_t e0, int64_t e1, int64_t key, int64_t u0,
                    const int64_t* ci, const int64_t* cj, const int64_t* ck, const T* cv,
                    const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ w,
                    const T* __restrict__ o, T* __restrict__ acc) {
  const int64_t mul = q.mul;
  T sum[B];
  for (int u = 0; u < B; ++u) sum[u] = T(0);
  for (int64_t e = e0; e < e1; ++e) {
    if constexpr (kMode == kOut) {  // out[k, u] += w[u] sum c y[j] x[i, u]
      const T s = cv[e] * y[q.y + cj[e]];
      const T* xr = x + q.x + ci[e] * mul + u0;
      for (int u = 0; u < B; ++u) sum[u] += s * xr[u];
    } else if constexpr (kMode == kX) {  // x[i, u] += w[u] sum c y[j] o[k, u]
      const T s = cv[e] * y[q.y + cj[e]];
      const T* orow = o + q.out + ck[e] * mul + u0;
      for (int u = 0; u < B; ++u) sum[u] += s * orow[u];
    } else if constexpr (kMode == kY) {  // y[j] += sum_u w[u] sum c x[i, u] o[k, u]
      const T s = cv[e];
      const T* xr = x + q.x + ci[e] * mul + u0;
      const T* orow = o + q.out + ck[e] * mul + u0;
      for (int u = 0; u < B; ++u) sum[u] += s * (xr[u] * orow[u]);
    } else {  // w[u] += sum c y[j] x[i, u] o[k, u]
      const T s = cv[e] * y[q.y + cj[e]];
      const T* xr = x + q.x + ci[e] * mul + u0;
      const T* orow = o + q.out + ck[e] * mul + u0;
      for (int u = 0; u < B; ++u) sum[u] += s * (xr[u] * orow[u]);
    }
  }
  if constexpr (kMode == kOut || kMode == kX) {
    const T* wp = w + q.w + u0;
    T* a = acc + (kMode == kOut ? q.out : q.x) + key * mul + u0;
    for (int u = 0; u < B; ++u) a[u] += wp[u] * sum[u];
  } else if constexpr (kMode == kW) {  // w is the result here (no input)
    T* a = acc + q.w + u0;
    for (int u = 0; u < B; ++u) a[u] += sum[u];
  } else {  // fold the B channels into the lanes of y[j]'s partial sums
    const T* wp = w + q.w + u0;
    constexpr int kL = kYLanes<T>;
    T* part = acc + (q.y + key) * kL;
    if constexpr (B >= kL) {
      T f[kL];
      for (int l = 0; l < kL; ++l) f[l] = wp[l] * sum[l];
      for (int c = kL; c < B; c += kL) {
        for (int l = 0; l < kL; ++l) f[l] += wp[c + l] * sum[c + l];
      }
      for (int l = 0; l < kL; ++l) part[l] += f[l];
    } else {
      for (int u = 0; u < B; ++u) part[u] += wp[u] * sum[u];
    }
  }
}

// Adds one row's contribution to `acc` for mode kMode (specialised at compile time). x and o are
// channel-minor rows (o: out's cotangent); y and w as given. acc: channel-minor for kX and kOut,
// plain for kY and kW. Inputs of the result's own slot are not read. `scratch`: ScratchSize
// values. Every sum runs in a fixed order: deterministic. Channels go in tiles of 256 bytes (then
// 64, 16 bytes, then one by one), each tile's sums in registers.
template <typename T, int kMode>
JAXEXT_HD_CLONED void Accumulate(const Path* paths, int64_t n_paths, const int64_t* ci,
                               const int64_t* cj, const int64_t* ck, const T* cv,
                               const T* __restrict__ x, const T* __restrict__ y,
                               const T* __restrict__ w, const T* __restrict__ o,
                               T* __restrict__ acc, T* __restrict__ scratch) {
  constexpr int kWide = 256 / static_cast<int>(sizeof(T));
  T* target = acc;
  int64_t ny = 0;  // the y components the paths read
  if constexpr (kMode == kY) {
    for (int64_t p = 0; p < n_paths; ++p) {
      if (paths[p].y + paths[p].dy > ny) ny = paths[p].y + paths[p].dy;
    }
    for (int64_t t = 0; t < ny * kYLanes<T>; ++t) scratch[t] = T(0);
    target = scratch;
  }
  for (int64_t p = 0; p < n_paths; ++p) {
    const Path q = paths[p];
    for (int64_t e0 = q.begin; e0 < q.end;) {
      const int64_t key = GroupKey<kMode>(ci[e0], cj[e0], ck[e0]);
      int64_t e1 = e0 + 1;
      while (e1 < q.end && GroupKey<kMode>(ci[e1], cj[e1], ck[e1]) == key) ++e1;
      int64_t u0 = 0;
      for (; u0 + kWide <= q.mul; u0 += kWide) {
        Tile<T, kMode, kWide>(q, e0, e1, key, u0, ci, cj, ck, cv, x, y, w, o, target);
      }
      for (; u0 + kWide / 4 <= q.mul; u0 += kWide / 4) {
        Tile<T, kMode, kWide / 4>(q, e0, e1, key, u0, ci, cj, ck, cv, x, y, w, o, target);
      }
      for (; u0 + kWide / 16 <= q.mul; u0 += kWide / 16) {
        Tile<T, kMode, kWide / 16>(q, e0, e1, key, u0, ci, cj, ck, cv, x, y, w, o, target);
      }
      for (; u0 < q.mul; ++u0) {
        Tile<T, kMode, 1>(q, e0, e1, key, u0, ci, cj, ck, cv, x, y, w, o, target);
      }
      e0 = e1;
    }
  }
  if constexpr (kMode == kY) {  // each component's lanes, pairwise
    for (int64_t j = 0; j < ny; ++j) {
      T* part = scratch + j * kYLanes<T>;
      for (int h = kYLanes<T> / 2; h > 0; h /= 2) {
        for (int l = 0; l < h; ++l) part[l] += part[l + h];
      }
      acc[j] += part[0];
    }
  }
}

template <typename T>
JAXEXT_HD_CLONED void AccumulateMode(int mode, const Path* paths, int64_t n_paths,
                                   const int64_t* ci, const int64_t* cj, const int64_t* ck,
                                   const T* cv, const T* x, const T* y, const T* w, const T* o,
                                   T* acc, T* scratch) {
  switch (mode) {
    case kOut:
      Accumulate<T, kOut>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc, scratch);
      break;
    case kX:
      Accumulate<T, kX>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc, scratch);
      break;
    case kY:
      Accumulate<T, kY>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc, scratch);
      break;
    default:
      Accumulate<T, kW>(paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc, scratch);
      break;
  }
}

}  // namespace tp
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_TP_H_
