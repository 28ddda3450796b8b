// Real spherical harmonics in e3nn's conventions, as polynomials of the (unnormalised) vector:
// Y^l_m(v) for l = 0..lmax, m = -l..l, stored at index l^2 + l + m.
//
// e3nn (and jaxext.equivariant) takes y as the polar axis: with (X, Y, Z) = (z, x, y), Y^l_m is
// the standard real harmonic (Wikipedia's table, no Condon-Shortley sign) of (X, Y, Z), times
// r^l, with "component" normalisation (sum_m Y^l_m(v)^2 = (2l + 1) |v|^(2l)). They come from the
// regular solid harmonics' recurrences (no division by r, no trigonometry):
//   C_l^l = (2l-1)(X C_{l-1}^{l-1} - Y S_{l-1}^{l-1}),  S_l^l = (2l-1)(Y C_{l-1}^{l-1} + X S_{l-1}^{l-1})
//   Q_l^{l-1} = (2l-1) Z Q_{l-1}^{l-1}
//   (l-m) Q_l^m = (2l-1) Z Q_{l-1}^m - (l+m-1) r^2 Q_{l-2}^m        (Q = C or S)
// and Y^l_m = norm_lm * (C_l^m for m >= 0, S_l^{|m|} for m < 0), with
// norm_lm = sqrt((2l+1) (l-|m|)! / (l+|m|)!) (times sqrt(2) for m != 0), passed in by the caller.
#ifndef JAXEXT_KERNELS_SPH_H_
#define JAXEXT_KERNELS_SPH_H_

#include "jaxext/kernels/platform.h"

namespace jaxext {
namespace sph {

constexpr int kMaxL = 12;

JAXEXT_HD constexpr int Size(int lmax) { return (lmax + 1) * (lmax + 1); }

// out[Size(lmax)]; norms[Size(lmax)] as described above. Inlined into the CPU's per-CPU clones
// of its row loop (jaxext/cpu/sph_cpu.cc), which pass lmax as a constant: the loops then unroll
// completely (their C and S values in registers, the divisions folded); with a runtime lmax
// (the CUDA kernel) they stay loops.
template <typename T>
JAXEXT_HD_CLONED void SolidHarmonics(int lmax, T x, T y, T z, const T* norms, T* out) {
  const T X = z, Y = x, Z = y;
  const T r2 = X * X + Y * Y + Z * Z;
  // C and S of the two previous degrees and the current one, indexed by m.
  T c[3][kMaxL + 1], s[3][kMaxL + 1];
  c[0][0] = T(1);
  s[0][0] = T(0);
  out[0] = norms[0];
  JAXEXT_UNROLL_ALL
  for (int l = 1; l <= lmax; ++l) {
    const int cur = l % 3, p1 = (l + 2) % 3, p2 = (l + 1) % 3;  // l, l-1, l-2
    const T f = T(2 * l - 1);
    c[cur][l] = f * (X * c[p1][l - 1] - Y * s[p1][l - 1]);
    s[cur][l] = f * (Y * c[p1][l - 1] + X * s[p1][l - 1]);
    c[cur][l - 1] = f * Z * c[p1][l - 1];
    s[cur][l - 1] = f * Z * s[p1][l - 1];
    JAXEXT_UNROLL_ALL
    for (int m = l - 2; m >= 0; --m) {
      const T inv = T(1) / T(l - m);
      c[cur][m] = (f * Z * c[p1][m] - T(l + m - 1) * r2 * c[p2][m]) * inv;
      s[cur][m] = (f * Z * s[p1][m] - T(l + m - 1) * r2 * s[p2][m]) * inv;
    }
    const int base = l * l + l;
    out[base] = norms[base] * c[cur][0];
    JAXEXT_UNROLL_ALL
    for (int m = 1; m <= l; ++m) {
      out[base + m] = norms[base + m] * c[cur][m];
      out[base - m] = norms[base - m] * s[cur][m];
    }
  }
}

}  // namespace sph
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_SPH_H_
