// Flux of a limb-darkened star occulted by an opaque disk, and its derivatives.
//
// One header shared by the CPU handler (host compiler) and the CUDA kernel (nvcc). All arithmetic is
// in double, whatever the storage type of the inputs.
//
// Geometry and law
//   The star is the unit disk, the occultor a disk of radius r whose centre is at distance b from
//   the star's centre. The specific intensity at mu = z = sqrt(1 - x^2 - y^2) is
//       I(mu) = 1 - sum_{j=1..n} u_j (1 - mu)^j            (quadratic: n = 2),
//   rewritten in powers of z as I = sum_m a_m z^m. The result is the visible flux divided by the
//   unocculted flux F0 = sum_m a_m 2 pi / (m + 2).
//
// Method (closed forms and recurrences; no numerical quadrature)
//   Let O_m be the flux of z^m over the occulted region (star disk intersected with occultor disk).
//   Its boundary is an arc of the occultor's circle and, when the occultor crosses the limb, an arc of
//   the limb. Parametrise the occultor's circle by (r cos phi, b + r sin phi); there
//       z^2 = a - c sin phi,   a = 1 - b^2 - r^2,   c = 2 b r,
//   and with phi = 2 psi - pi/2, z^2 = 4br (k^2 - sin^2 psi), k^2 = A / 4br, A = 1 - (b - r)^2,
//   B = 1 - (b + r)^2. The arc is |psi| <= kappa, kappa = pi/2 when the occultor lies inside the
//   disk (B >= 0) and sin kappa = k otherwise.
//   * Arc moments T_m = (4br)^{m/2} int (k^2 - sin^2 psi)^{m/2} dpsi obey (integrate the derivative
//     of sin psi cos psi (k^2 - sin^2 psi)^{m/2} over the arc)
//         (m + 2) T_{m+2} = 2 (m + 1) a T_m - m A B T_{m-2},   m >= 1 (and m = 0 inside the disk),
//     whose characteristic roots are A and B: upward recursion is stable unless a < 0 (then |B| >
//     A), where the sequence is computed downward (Miller's algorithm) and normalised by the exact
//     T_0 or T_1. T_0 and T_2 are elementary, T_{-1} and T_1 are complete elliptic integrals of the
//     first and second kind, computed with Bulirsch's cel.
//   * Green's theorem with G = z^m (-y, x), whose curl is (m + 2) z^m - m z^{m-2} and which vanishes
//     on the limb, gives O_m = [s_m + m O_{m-2}] / (m + 2) with s_m = [(a + 2r^2) J_m - J_{m+2}] / 2,
//     J_m = 2 T_m (m >= 2). O_0 is the lens area. For O_1, G = f(rho) (-y, x) with
//     f = (1 - z^3) / (3 rho^2); the part that is not an arc moment is an elementary arctangent plus
//     one complete elliptic integral of the third kind (cel again), written so that b = r is regular.
//   * Derivatives by the transport theorem: only the occultor's arc moves, so
//         dO/dr = r int_arc I dphi,   dO/db = r int_arc I sin phi dphi,
//     i.e. arc moments J_m and K_m = int z^m sin phi dphi, with K_{m+2} = (m + 2)(a K_m - c J_m) /
//     (m + 4) (or K_m = (a J_m - J_{m+2}) / c where the recurrences run downward). The derivative
//     with respect to u_j follows from O_m and F0 directly.
//   * Second derivatives (EvaluateHessian): differentiating the transport-theorem expressions once
//     more needs the derivatives of J_m and K_m in b and r, which come from the same integrals run
//     on dual numbers (dual.h): every branch (series, upward and Miller recurrences, Bulirsch's
//     cel) differentiated as computed. Everything else is closed-form: F is a ratio of two
//     expressions linear in u (dO_m/db = r K_m and dO_m/dr = r J_m give the mixed b/r-u terms).
//   Differences such as 1 - b - r and 1 - (b - r)^2 are formed from compensated sums, so contact
//   points, b = r, b -> 0, r -> 0 and r > 1 keep full absolute accuracy (tests/limbdark_test.py).
//
// Domain: b >= 0, r > 0 (either may be +inf, not both), n <= kMaxOrder. b < 0, r <= 0, NaN or
// b = r = inf give NaN for every output, as do partial overlaps (|b - r| < 1) by occultors larger
// than kHugeRadius = 1e8 stellar radii, whose lens area would carry errors ~1e-16 r. Accuracy
// elsewhere: ~1e-16 max(1, r) absolute.
// Non-physical laws (F0 <= 0) are not rejected: the result is whatever the formula gives.
#ifndef JAXEXT_KERNELS_LIMBDARK_H_
#define JAXEXT_KERNELS_LIMBDARK_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "jaxext/kernels/dual.h"
#include "jaxext/kernels/platform.h"

namespace jaxext {
namespace limbdark {

// Highest supported degree of the limb-darkening polynomial.
constexpr int kMaxOrder = 16;

// Below this radius the occultation is below double precision and is evaluated in the limit.
constexpr double kTinyRadius = 1e-100;
// Above this radius a partial overlap (|b - r| < 1) would lose ~log10(r) digits (the lens area is a
// difference of terms of size r): such results are NaN rather than inaccurate.
constexpr double kHugeRadius = 1e8;

constexpr double kPi = 3.14159265358979323846;

// The intensity in powers of z, and the unocculted flux.
struct Law {
  int order;
  double a[kMaxOrder + 1];
  double total;
};

template <typename T>
JAXEXT_HD void MakeLaw(const T* u, int n, Law* law) {
  law->order = n;
  for (int m = 0; m <= n; ++m) law->a[m] = (m == 0) ? 1.0 : 0.0;
  for (int j = 1; j <= n; ++j) {
    // (1 - z)^j = sum_m C(j, m) (-z)^m
    double binom = 1.0;
    const double uj = static_cast<double>(u[j - 1]);
    for (int m = 0; m <= j; ++m) {
      law->a[m] -= uj * ((m & 1) ? -binom : binom);
      binom = binom * (j - m) / (m + 1);
    }
  }
  double total = 0.0;
  for (int m = 0; m <= n; ++m) total += law->a[m] * (2.0 * kPi / (m + 2));
  law->total = total;
}

namespace detail {

// The integrals below are written for a scalar type S: double, or Dual<double, 2> (dual.h) for
// their derivatives with respect to b and r (EvaluateHessian). The helpers of this block give both.
using Dual2 = Dual<double, 2>;

template <typename S>
struct IsDual {
  static constexpr bool value = false;
};
template <typename T, int K>
struct IsDual<Dual<T, K>> {
  static constexpr bool value = true;
};

JAXEXT_HD bool IsInf(double x) { return fabs(x) > 1.7976931348623157e308; }
JAXEXT_HD bool IsInf(const Dual2& x) { return IsInf(x.v); }

// x > 0 read off its bits: where the FPU treats denormals as zero (XLA's CPU threads run with
// DAZ/FTZ), a positive subnormal radius compares as 0 and would be taken for r <= 0 (NaN). As
// bits it is positive, and the tiny-occultor path (r < kTinyRadius) gives its flux, 1.
JAXEXT_HD bool PositiveBits(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits != 0 && bits <= 0x7ff0000000000000ull;  // sign clear, not +0 or NaN; +inf counts
}

// A radius as double, a float32 subnormal included: converting one reads it as 0 under DAZ, but
// its value (mantissa * 2^-149) is a normal double, computed here from normal operands.
JAXEXT_HD double WidenRadius(double x) { return x; }
JAXEXT_HD double WidenRadius(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits != 0 && bits < 0x00800000u ? static_cast<double>(bits) * 0x1p-149
                                         : static_cast<double>(x);
}

JAXEXT_HD double Abs(double x) { return fabs(x); }
JAXEXT_HD Dual2 Abs(const Dual2& x) { return x.v < 0.0 ? -x : x; }

JAXEXT_HD double Atan2(double y, double x) { return atan2(y, x); }
JAXEXT_HD Dual2 Atan2(const Dual2& y, const Dual2& x) {
  Dual2 t;
  t.v = atan2(y.v, x.v);
  // d atan2 = (x dy - y dx) / (x^2 + y^2), scaled by max(|x|, |y|) so that no square underflows.
  const double scale = fabs(x.v) > fabs(y.v) ? fabs(x.v) : fabs(y.v);
  const double xs = scale > 0.0 ? x.v / scale : 0.0, ys = scale > 0.0 ? y.v / scale : 0.0;
  const double inv = scale > 0.0 ? 1.0 / ((xs * xs + ys * ys) * scale) : 0.0;
  for (int k = 0; k < 2; ++k) t.d[k] = (xs * y.d[k] - ys * x.d[k]) * inv;
  return t;
}

// x + y + z with one compensated step: exact when the result is the difference of nearby values.
JAXEXT_HD double Sum3(double x, double y, double z) {
  const double s = x + y;
  const double bp = s - x;
  const double err = (x - (s - bp)) + (y - bp);
  return (s + z) + err;
}
// (The derivative of a sum needs no compensation.)
JAXEXT_HD Dual2 Sum3(const Dual2& x, const Dual2& y, const Dual2& z) {
  Dual2 t;
  t.v = Sum3(x.v, y.v, z.v);
  for (int k = 0; k < 2; ++k) t.d[k] = x.d[k] + y.d[k] + z.d[k];
  return t;
}

// Bulirsch's complete elliptic integral
//   cel(kc, p, a, b) = int_0^{pi/2} (a cos^2 t + b sin^2 t) / ((cos^2 t + p sin^2 t)
//                      sqrt(cos^2 t + kc^2 sin^2 t)) dt,     kc != 0, p > 0,
// by his Gauss-transformation algorithm (Bulirsch 1969, Numer. Math. 13, 305), for three integrals
// with one modulus kc: cel(kc, p1, a1, b1), cel(kc, 1, a2, b2), cel(kc, 1, a3, b3).
// The Gauss transformation of the modulus (one square root per step) is shared by all three and
// that of the characteristic p = 1 by the last two; p1 > 0.
// On Duals: the c2 and c3 chains do not involve p1, so their derivatives are those of
// cel(kc, 1, ., .) whatever p1's derivative is; and one more step is taken after the values
// converge. The error left in a value is ~(m - kc)^2, in a derivative ~(m - kc) d(m - kc), and
// d(m - kc) need not be small when m - kc is (kc = 1 - O(b r) near b = 0 inside): the extra step
// squares m - kc again.
template <typename S>
JAXEXT_HD void Cel3(S kc, S p1, S a1, S b1, S a2, S b2, S a3, S b3, S* c1, S* c2, S* c3) {
  kc = Abs(kc);
  S e = kc, m = 1.0;
  p1 = sqrt(p1);
  b1 = b1 / p1;
  S p = 1.0;
  int extra = IsDual<S>::value ? 1 : 0;
  for (int it = 0; it < 64; ++it) {
    const S r1 = 1.0 / p1, r = 1.0 / p;
    const S g1 = e * r1, g = e * r;
    S f = a1;
    a1 = a1 + b1 * r1;
    b1 = 2.0 * (b1 + f * g1);
    p1 = g1 + p1;
    f = a2;
    a2 = a2 + b2 * r;
    b2 = 2.0 * (b2 + f * g);
    f = a3;
    a3 = a3 + b3 * r;
    b3 = 2.0 * (b3 + f * g);
    p = g + p;
    const S mold = m;
    m = kc + m;
    // Quadratic convergence: once the moduli agree to 1e-9, the step just taken left ~1e-18.
    if (Abs(mold - kc) <= mold * 1e-9 && extra-- == 0) break;
    kc = 2.0 * sqrt(e);
    e = kc * m;
  }
  const S h = 0.5 * kPi / m;
  *c1 = h * (a1 * m + b1) / (m + p1);
  const S h2 = h / (m + p);
  *c2 = h2 * (a2 * m + b2);
  *c3 = h2 * (a3 * m + b3);
}

// K_1 = int_0^{2pi} (a - c sin phi)^{1/2} sin phi dphi for the occultor inside the disk, as a
// series in x = c / a: -2 pi sqrt(a) sum_{j odd} C(1/2, j) j!!/(j+1)!! x^j, ten terms (used for
// x < 0.1, where the truncation is below 1e-21 relative).
template <typename S>
JAXEXT_HD S InsideK1Series(S a, S c) {
  const S x = c / a, x2 = x * x;
  S sum = 0.0006123339034241893;
  sum = sum * x2 + 0.000763429282191197;
  sum = sum * x2 + 0.0009782764550436696;
  sum = sum * x2 + 0.0012985714129172266;
  sum = sum * x2 + 0.0018067080527544022;
  sum = sum * x2 + 0.0026848912239074707;
  sum = sum * x2 + 0.004405975341796875;
  sum = sum * x2 + 0.008544921875;
  sum = sum * x2 + 0.0234375;
  sum = sum * x2 + 0.25;
  return -2.0 * kPi * sqrt(a) * x * sum;
}

constexpr int kMaxMoment = kMaxOrder + 3;

// Arc moments T_m, m = 0..top, of one parity, by Miller's downward recurrence, normalised so that
// T_parity equals `exact`.
// (On Duals the chain is the derivative of the normalised solution: the recurrence is linear in T
// with coefficients smooth in a and AB, and so is the normalisation.)
template <typename S>
JAXEXT_HD void MillerChain(int parity, int top, S a, S AB, S ratio, S exact, S* T) {
  if (top < parity) return;
  if ((top - parity) & 1) --top;
  int extra = static_cast<int>(ceil(39.0 / log(Value(ratio)))) + 2;
  if (extra > 200) extra = 200;
  const int start = top + 2 * extra;
  S above = 0.0, cur = 1.0;  // T_{m+2}, T_m
  for (int m = start; m >= parity + 2; m -= 2) {
    const S below = (2.0 * (m + 1) * a * cur - (m + 2) * above) / (m * AB);
    above = cur;
    cur = below;
    if (m - 2 <= top) T[m - 2] = below;
    if (Abs(cur) > 1e150) {
      cur *= 1e-150;
      above *= 1e-150;
      for (int j = m - 2; j <= top; j += 2) {
        if (j >= parity) T[j] *= 1e-150;
      }
    }
  }
  const S scale = exact / T[parity];
  for (int j = parity; j <= top; j += 2) T[j] = T[j] * scale;
}

// Occulted fluxes O[0..n] of z^m and, if kGrad, the arc moments J[0..n], K[0..n] (J and K are
// zero when the disks do not overlap or the occultor covers the whole star).
// Returns kHidden when the occultor covers the star, otherwise kVisible.
// S = Dual2 (b and r as the two variables) also gives the derivatives of J and K in b and r, to be
// used as such; not those of O, which are wrong near b = r (O_1's split into an arctangent and a
// third-kind integral is singular there, and |b - r| is clamped below: see d), and which the
// transport theorem gives from J and K anyway.
enum Regime { kVisible = 0, kHidden = 1 };

template <bool kGrad, typename S = double>
JAXEXT_HD Regime Integrals(S b, S r, int n, S* O, S* J, S* K) {
  const S p = Sum3(S(1.0), b, -r);  // 1 + b - r
  const S q = Sum3(S(1.0), -b, r);  // 1 - b + r
  for (int m = 0; m <= n; ++m) {
    O[m] = 0.0;
    if (kGrad) {
      J[m] = 0.0;
      K[m] = 0.0;
    }
  }
  if (q <= 0.0 || IsInf(b)) return kVisible;  // b >= 1 + r: no overlap
  if (p <= 0.0 || IsInf(r)) {                 // r >= 1 + b: the star is hidden
    for (int m = 0; m <= n; ++m) O[m] = 2.0 * kPi / (m + 2);
    return kHidden;
  }
  const S A = p * q;
  const S D = Sum3(S(1.0), -b, -r);  // 1 - b - r
  const S B = D * (1.0 + b + r);
  const S a = 0.5 * (A + B);
  const S c = 2.0 * b * r;
  const S fbr = 2.0 * c;
  const bool inside = B >= 0.0;

  const int top = (n + 2 > 3) ? n + 2 : 3;  // highest moment needed
  S T[kMaxMoment + 1];
  S theta = kPi, lam = 0.0, four_delta = 0.0, k = 0.0, kc = 0.0, kcp = 0.0;
  S t_minus1;
  // The elliptic integrals (only needed from the linear term on): T_1, T_{-1} and the
  // third-kind integral of O_1, all with one modulus.
  // |b - r|, kept away from 0 (b = r is regular, but the split below into an arctangent and a
  // third-kind integral is not): the shift changes the result by ~1e-30 relative.
  S d = Abs(b - r);
  if (d < 1e-30 * (b + r)) d = 1e-30 * (b + r);
  S cel_pi = 0.0, cel_t1 = 0.0, cel_k = 0.0;
  if (inside) {
    T[0] = kPi;
    T[2] = a * kPi;
    const S sA = sqrt(A);
    kcp = sqrt(B / A);
    if (kcp < 1e-150) kcp = 1e-150;
    if (n >= 1) {
      const S kcp2 = kcp * kcp;
      Cel3<S>(kcp, (b + r) * (b + r) / (d * d), 1.0, kcp2, 1.0, kcp2, 1.0, 1.0, &cel_pi,
              &cel_t1, &cel_k);
    }
    T[1] = 2.0 * sA * cel_t1;
    t_minus1 = 2.0 * cel_k / sA;
  } else {
    four_delta = sqrt(A) * sqrt(-B);  // 4 x area of the triangle (star centre, occultor centre,
                                      // contact point); two roots so that A B cannot underflow
    theta = Atan2(four_delta, -a);  // angle subtended by the arc at the occultor's centre
    lam = Atan2(four_delta, a + 2.0 * b * b);  // half the limb arc, seen from the star's centre
    const S k2 = A / fbr;
    k = sqrt(k2);
    kc = sqrt(-B / fbr);
    if (kc < 1e-150) kc = 1e-150;
    T[0] = theta;
    T[2] = a * theta + four_delta;
    const S sf = sqrt(fbr);
    if (n >= 1) Cel3<S>(kc, 1.0 / (d * d), 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, &cel_pi, &cel_t1, &cel_k);
    T[1] = 2.0 * (A / sf) * cel_t1;
    t_minus1 = 2.0 * cel_k / sf;
  }
  const S AB = A * B;
  const bool downward = (a < 0.0) && (-B > 2.0 * A) && (-B > 0.5);
  if (downward) {
    const S ratio = -B / A;
    MillerChain(0, top, a, AB, ratio, T[0], T);
    MillerChain(1, top, a, AB, ratio, T[1], T);
  } else {
    for (int m = 2; m + 2 <= top; m += 2)
      T[m + 2] = (2.0 * (m + 1) * a * T[m] - m * AB * T[m - 2]) / (m + 2);
    T[3] = (4.0 * a * T[1] - (B == 0.0 ? S(0.0) : AB * t_minus1)) / 3.0;
    for (int m = 3; m + 2 <= top; m += 2)
      T[m + 2] = (2.0 * (m + 1) * a * T[m] - m * AB * T[m - 2]) / (m + 2);
  }
  S Jm[kMaxMoment + 1];
  for (int m = 0; m <= top; ++m) Jm[m] = 2.0 * T[m];

  // O_0: lens area.
  O[0] = inside ? kPi * r * r : r * r * theta + lam - 0.5 * four_delta;
  // O_1.
  if (n >= 1) {
    const double sg = (r >= b) ? 1.0 : -1.0;
    S term0, v1;
    if (inside) {
      term0 = 2.0 * kPi * sg;
      v1 = -4.0 * sg * (r + b) * sqrt(A) / d * cel_pi;
    } else {
      term0 = 4.0 * sg * Atan2((b + r) * sqrt(A), d * sqrt(-B));
      v1 = -4.0 * sg * (r + b) * sqrt(A) * k / d * cel_pi;
    }
    const S arc = 0.5 * ((a + 2.0 * r * r) * Jm[1] - Jm[3]) + 0.5 * (Jm[0] - Jm[1]) +
                  0.5 * (term0 + v1);
    O[1] = (2.0 * lam + arc) / 3.0;
  }
  for (int m = 2; m <= n; ++m) {
    const S s = 0.5 * ((a + 2.0 * r * r) * Jm[m] - Jm[m + 2]);
    O[m] = (s + m * O[m - 2]) / (m + 2);
  }
  if (!kGrad) return kVisible;

  for (int m = 0; m <= n; ++m) J[m] = Jm[m];
  K[0] = inside ? S(0.0) : -four_delta / (b * r);
  if (n >= 1) {
    if (downward) {
      for (int m = 1; m <= n; ++m) K[m] = (a * Jm[m] - Jm[m + 2]) / c;
    } else {
      // (The series also covers c = 0, b = 0, inside: there K_1 = 0 but, on Duals, not its
      // derivative in b.)
      if (inside && c < 0.1 * a) {
        K[1] = InsideK1Series(a, c);
      } else if (c == 0.0) {
        K[1] = 0.0;
      } else {
        K[1] = (a * Jm[1] - Jm[3]) / c;
      }
      for (int m = 0; m + 2 <= n; ++m) K[m + 2] = (m + 2) * (a * K[m] - c * Jm[m]) / (m + 4);
    }
  }
  return kVisible;
}

// Out of the domain (see the header comment): every output is NaN.
JAXEXT_HD bool OutOfDomain(double b, double r) {
  return !(b >= 0.0) || !PositiveBits(r) || (IsInf(b) && IsInf(r)) ||
         (r > kHugeRadius && fabs(b - r) < 1.0);
}

// The occultor below kTinyRadius: z and the intensity I (and dI/dz) at its centre.
JAXEXT_HD void CentreIntensity(double b, const Law& law, double* z, double* intensity,
                               double* slope) {
  const int n = law.order;
  *z = b < 1.0 ? sqrt((1.0 - b) * (1.0 + b)) : 0.0;
  double i = 0.0, di = 0.0;
  for (int m = n; m >= 0; --m) {
    di = di * *z + i;
    i = i * *z + law.a[m];
  }
  *intensity = i;
  *slope = di;
}

// 1 - flux from the occulted fluxes.
JAXEXT_HD double Deficit(const Law& law, Regime regime, const double* O) {
  double occ = 0.0;
  for (int m = 0; m <= law.order; ++m) occ += law.a[m] * O[m];
  return (regime == kHidden) ? 1.0 : occ * (1.0 / law.total);
}

// The gradient from the integrals.
JAXEXT_HD void Gradient(const Law& law, double r, double deficit, const double* O,
                        const double* J, const double* K, double* dfdb, double* dfdr,
                        double* dfdu) {
  const int n = law.order;
  const double inv_total = 1.0 / law.total;
  double ij = 0.0, ik = 0.0;
  for (int m = 0; m <= n; ++m) {
    ij += law.a[m] * J[m];
    ik += law.a[m] * K[m];
  }
  // (J = K = 0 when the disks do not overlap or the star is hidden, where r may be infinite.)
  *dfdr = (ij == 0.0) ? 0.0 : -r * ij * inv_total;
  *dfdb = (ik == 0.0) ? 0.0 : -r * ik * inv_total;
  for (int j = 1; j <= n; ++j) {
    double binom = 1.0, sum = 0.0;
    for (int m = 0; m <= j; ++m) {
      const double term = binom * (O[m] - deficit * (2.0 * kPi / (m + 2)));
      sum += (m & 1) ? -term : term;
      binom = binom * (j - m) / (m + 1);
    }
    dfdu[j - 1] = sum * inv_total;
  }
}

}  // namespace detail

// Relative flux and, if kGrad, its derivatives with respect to b, r and u_1..u_n (dfdu[j - 1]).
template <bool kGrad>
JAXEXT_HD void Evaluate(double b, double r, const Law& law, double* flux, double* dfdb,
                        double* dfdr, double* dfdu) {
  const int n = law.order;
  if (detail::OutOfDomain(b, r)) {
    const double nan = NAN;
    *flux = nan;
    if (kGrad) {
      *dfdb = nan;
      *dfdr = nan;
      for (int j = 0; j < n; ++j) dfdu[j] = nan;
    }
    return;
  }
  if (r < kTinyRadius && !(b >= 1.0 + r)) {
    // A vanishing occultor: the deficit (~r^2) is below double precision; the derivative in r is
    // its leading term -2 pi r I(mu) / F0 (mu at the occultor's centre), the others underflow.
    *flux = 1.0;
    if (kGrad) {
      double z, intensity, slope;
      detail::CentreIntensity(b, law, &z, &intensity, &slope);
      *dfdr = -2.0 * kPi * r * intensity / law.total;
      *dfdb = 0.0;
      for (int j = 0; j < n; ++j) dfdu[j] = 0.0;
    }
    return;
  }
  double O[kMaxOrder + 1], J[kMaxOrder + 1], K[kMaxOrder + 1];
  const detail::Regime regime = detail::Integrals<kGrad>(b, r, n, O, J, K);
  const double deficit = detail::Deficit(law, regime, O);
  *flux = 1.0 - deficit;
  if (!kGrad) return;
  detail::Gradient(law, r, deficit, O, J, K, dfdb, dfdr, dfdu);
}

// Q_j = -dF0/du_j = 2 pi / ((j + 1)(j + 2)), the unocculted flux of (1 - mu)^j.
JAXEXT_HD double UnoccultedMoment(int j) { return 2.0 * kPi / ((j + 1.0) * (j + 2.0)); }

// Relative flux, its gradient (as Evaluate<true>) and its second derivatives: d2F/db2 (hbb),
// d2F/db dr (hbr), d2F/dr2 (hrr), d2F/db du_j (hbu[j - 1]) and d2F/dr du_j (hru[j - 1]).
// The block in u needs no integral and is left to the caller: F is a ratio of two expressions
// linear in u, whence d2F/du_j du_k = (Q_j dF/du_k + Q_k dF/du_j) / F0 (Q_j = UnoccultedMoment(j)).
//
// With I = sum_m a_m z^m, F0 the unocculted flux and the transport theorem (dF/db = -r sum a_m K_m
// / F0, dF/dr = -r sum a_m J_m / F0):
//   d2F/db2 = -r sum a_m dK_m/db / F0,        d2F/dr2 = -(sum a_m J_m + r sum a_m dJ_m/dr) / F0,
//   d2F/db dr = -r sum a_m dJ_m/db / F0,
//   d2F/db du_j = (r sum_m c_jm K_m + Q_j dF/db) / F0,  c_jm = (-1)^m C(j, m) = -da_m/du_j,
//   d2F/dr du_j = (r sum_m c_jm J_m + Q_j dF/dr) / F0.
// The derivatives of the arc moments J_m, K_m in b and r come from Integrals run on dual numbers
// (every regime and branch of theirs: series, upward and Miller recurrences, elliptic integrals).
// Accuracy (tests/limbdark_test.py, against 50-digit quadratures): ~1e-15 of the largest entry for
// n <= 4, growing with the order like the gradient's (~1e-12 at n = 16: alternating binomial sums).
// The contact points b = 1 + r, b = |1 - r| are where F is not twice differentiable: the second
// derivatives in b and r diverge there (like distance^-1/2 on the side of the partial overlap,
// logarithmically inside for a darkened limb), and lose relative accuracy approaching them (~1e-14
// at 1e-4). Exactly at one, the values are finite but meaningless: those of the side the branch
// tests pick (zero at b = 1 + r and at r = 1 + b; at b = 1 - r, those of the occultor inside the
// disk with the elliptic modulus clamped at 1e-150).
JAXEXT_HD_FUNC void EvaluateHessian(double b, double r, const Law& law, double* flux,
                                    double* dfdb, double* dfdr, double* dfdu, double* hbb,
                                    double* hbr, double* hrr, double* hbu, double* hru) {
  const int n = law.order;
  if (detail::OutOfDomain(b, r)) {
    const double nan = NAN;
    *flux = *dfdb = *dfdr = *hbb = *hbr = *hrr = nan;
    for (int j = 0; j < n; ++j) dfdu[j] = hbu[j] = hru[j] = nan;
    return;
  }
  const double inv_total = 1.0 / law.total;
  if (r < kTinyRadius && !(b >= 1.0 + r)) {
    // Evaluate's limit, F = 1 - pi r^2 I / F0, differentiated once more in r (the rest is of order
    // r^2 or r and underflows or is kept as such).
    double z, intensity, slope;
    detail::CentreIntensity(b, law, &z, &intensity, &slope);
    *flux = 1.0;
    *dfdb = 0.0;
    *dfdr = -2.0 * kPi * r * intensity * inv_total;
    *hbb = 0.0;
    *hrr = -2.0 * kPi * intensity * inv_total;
    *hbr = z > 0.0 ? 2.0 * kPi * r * slope * (b / z) * inv_total : 0.0;  // dz/db = -b / z
    double w = 1.0;  // (1 - z)^j
    for (int j = 1; j <= n; ++j) {
      w *= 1.0 - z;
      dfdu[j - 1] = 0.0;
      hbu[j - 1] = 0.0;
      hru[j - 1] = 2.0 * kPi * r * (w - intensity * UnoccultedMoment(j) * inv_total) * inv_total;
    }
    return;
  }
  using detail::Dual2;
  Dual2 o2[kMaxOrder + 1], j2[kMaxOrder + 1], k2[kMaxOrder + 1];
  const detail::Regime regime =
      detail::Integrals<true, Dual2>(Dual2::Variable(b, 0), Dual2::Variable(r, 1), n, o2, j2, k2);
  double O[kMaxOrder + 1], J[kMaxOrder + 1], K[kMaxOrder + 1];
  double ij = 0.0, jb = 0.0, jr = 0.0, kb = 0.0;
  for (int m = 0; m <= n; ++m) {
    O[m] = o2[m].v;
    J[m] = j2[m].v;
    K[m] = k2[m].v;
    ij += law.a[m] * J[m];
    jb += law.a[m] * j2[m].d[0];
    jr += law.a[m] * j2[m].d[1];
    kb += law.a[m] * k2[m].d[0];
  }
  const double deficit = detail::Deficit(law, regime, O);
  *flux = 1.0 - deficit;
  detail::Gradient(law, r, deficit, O, J, K, dfdb, dfdr, dfdu);
  // J_0 is twice the angle of the occultor's arc inside the disk: zero without a partial overlap
  // (then every second derivative is zero; r may be infinite).
  if (regime == detail::kHidden || J[0] == 0.0) {
    *hbb = *hbr = *hrr = 0.0;
    for (int j = 0; j < n; ++j) hbu[j] = hru[j] = 0.0;
    return;
  }
  if (b * r < 1e-140 && detail::Sum3(1.0, -b, -r) < 0.0) {
    // A partial overlap with b r this small lies within ~1e-140 of the limb, where the dual
    // numbers' squares underflow: either r < 1e-140 with b = 1 (to double precision), or b <
    // 1e-140 with r = 1, within b of the contact points r = 1 +- b. There, the limit of a tiny
    // occultor centred on a straight limb: F = 1 - a_0 r^2 h(s) / F0, s = (b - 1) / r = 0, h the
    // area of the unit disk beyond a line at distance s (h(0) = pi / 2, h'(0) = -2, h''(0) = 0),
    // a_0 = I(0); here: contact points, whose values are zero.
    const bool limb = r < b;
    const double a0 = law.a[0];
    *hbb = 0.0;
    *hbr = limb ? 2.0 * a0 * inv_total : 0.0;
    *hrr = limb ? -kPi * a0 * inv_total : 0.0;
    for (int j = 1; j <= n; ++j) {  // da_0/du_j = -1
      const double w = limb ? (1.0 - a0 * UnoccultedMoment(j) * inv_total) * r * inv_total : 0.0;
      hbu[j - 1] = -2.0 * w;
      hru[j - 1] = kPi * w;
    }
    return;
  }
  *hbb = -r * kb * inv_total;
  *hbr = -r * jb * inv_total;
  *hrr = -(ij + r * jr) * inv_total;
  for (int j = 1; j <= n; ++j) {
    double binom = 1.0, sj = 0.0, sk = 0.0;
    for (int m = 0; m <= j; ++m) {
      sj += (m & 1) ? -binom * J[m] : binom * J[m];
      sk += (m & 1) ? -binom * K[m] : binom * K[m];
      binom = binom * (j - m) / (m + 1);
    }
    const double q = UnoccultedMoment(j);
    hbu[j - 1] = (r * sk + q * *dfdb) * inv_total;
    hru[j - 1] = (r * sj + q * *dfdr) * inv_total;
  }
}

// Evaluate for point i of typed buffers (r[i * r_stride]), storing flux[i], and if kGrad dfdb[i],
// dfdr[i] and dfdu[i * n .. i * n + n - 1]: the per-point body of every handler loop.
template <bool kGrad, typename T>
JAXEXT_HD void EvaluateAt(const T* b, const T* r, int64_t r_stride, const Law& law, int64_t i,
                          T* flux, T* dfdb, T* dfdr, T* dfdu) {
  double f, fb = 0.0, fr = 0.0, fu[kMaxOrder];
  Evaluate<kGrad>(static_cast<double>(b[i]), detail::WidenRadius(r[i * r_stride]), law, &f, &fb,
                  &fr, fu);
  flux[i] = static_cast<T>(f);
  if (kGrad) {
    dfdb[i] = static_cast<T>(fb);
    dfdr[i] = static_cast<T>(fr);
    for (int j = 0; j < law.order; ++j) dfdu[i * law.order + j] = static_cast<T>(fu[j]);
  }
}

// EvaluateHessian for point i of typed buffers: the outputs of EvaluateAt<true> and hbb[i],
// hbr[i], hrr[i], hbu[i * n + j], hru[i * n + j].
template <typename T>
JAXEXT_HD_FUNC void EvaluateHessianAt(const T* b, const T* r, int64_t r_stride, const Law& law,
                                      int64_t i, T* flux, T* dfdb, T* dfdr, T* dfdu, T* hbb,
                                      T* hbr, T* hrr, T* hbu, T* hru) {
  double f, fb, fr, fu[kMaxOrder], bb, br, rr, bu[kMaxOrder], ru[kMaxOrder];
  EvaluateHessian(static_cast<double>(b[i]), detail::WidenRadius(r[i * r_stride]), law, &f, &fb,
                  &fr, fu, &bb, &br, &rr, bu, ru);
  flux[i] = static_cast<T>(f);
  dfdb[i] = static_cast<T>(fb);
  dfdr[i] = static_cast<T>(fr);
  hbb[i] = static_cast<T>(bb);
  hbr[i] = static_cast<T>(br);
  hrr[i] = static_cast<T>(rr);
  for (int j = 0; j < law.order; ++j) {
    dfdu[i * law.order + j] = static_cast<T>(fu[j]);
    hbu[i * law.order + j] = static_cast<T>(bu[j]);
    hru[i * law.order + j] = static_cast<T>(ru[j]);
  }
}

// ---------------------------------------------------------------------------------------------
// CPU fast path: laws of order <= 2 (uniform, linear, quadratic) for kLanes points at once, in
// structure-of-arrays form so that the compiler vectorises every lane loop. The same formulas as
// Integrals, written branch-free: each lane computes the inside and partial-overlap inputs of one
// shared Cel3 and selects; arctangents come from Atan2NonNeg (below) instead of the C library.
// Converged lanes are frozen, so a lane's result never depends on its neighbours. Lanes outside
// this path's scope (out of domain, infinite, or r large enough for the downward recurrence) are
// recomputed with Evaluate.
// ---------------------------------------------------------------------------------------------
constexpr int kLanes = 8;

// clang host code (not nvcc's, whatever its host compiler) runs the Cel3 iteration below on whole
// vectors (see there).
#if defined(__clang__) && !defined(__CUDACC__) && defined(__has_builtin)
#if __has_builtin(__builtin_reduce_and)
#define JAXEXT_LIMBDARK_CEL3_VECTORS 1
#endif
#endif
#ifndef JAXEXT_LIMBDARK_CEL3_VECTORS
#define JAXEXT_LIMBDARK_CEL3_VECTORS 0
#endif

#if defined(_OPENMP) || defined(__clang__)
#define JAXEXT_LANES _Pragma("omp simd") for (int l = 0; l < kLanes; ++l)
#elif defined(__GNUC__) && !defined(__CUDACC__)
#define JAXEXT_LANES _Pragma("GCC ivdep") for (int l = 0; l < kLanes; ++l)
#else
#define JAXEXT_LANES for (int l = 0; l < kLanes; ++l)
#endif

// atan2(y, x) for y >= 0 (result in [0, pi]), to ~1 ulp: octant reduction to t in [0, 1], then
// atan t = pi/6 + atan((sqrt3 t - 1) / (sqrt3 + t)) for t > tan(pi/12), and the Taylor series
// on |t| <= tan(pi/12) (15 terms: truncation below 1e-19).
JAXEXT_HD double Atan2NonNeg(double y, double x) {
  const double ax = fabs(x);
  const double num = y < ax ? y : ax;
  const double den = y < ax ? ax : y;
  const double kSqrt3 = 1.7320508075688772935;
  // One division: t = num / den, or (sqrt3 t - 1) / (sqrt3 + t) when t > tan(pi/12).
  const bool big = num > 0.26794919243112270 * den;
  const double off = big ? kPi / 6.0 : 0.0;
  const double tn = big ? kSqrt3 * num - den : num;
  const double td = big ? kSqrt3 * den + num : den;
  const double t = td > 0.0 ? tn / td : 0.0;
  const double t2 = t * t;
  double p = 1.0 / 29.0;
  p = p * t2 - 1.0 / 27.0;
  p = p * t2 + 1.0 / 25.0;
  p = p * t2 - 1.0 / 23.0;
  p = p * t2 + 1.0 / 21.0;
  p = p * t2 - 1.0 / 19.0;
  p = p * t2 + 1.0 / 17.0;
  p = p * t2 - 1.0 / 15.0;
  p = p * t2 + 1.0 / 13.0;
  p = p * t2 - 1.0 / 11.0;
  p = p * t2 + 1.0 / 9.0;
  p = p * t2 - 1.0 / 7.0;
  p = p * t2 + 1.0 / 5.0;
  p = p * t2 - 1.0 / 3.0;
  double at = off + (t + t * t2 * p);
  at = y > ax ? 0.5 * kPi - at : at;
  return x < 0.0 ? kPi - at : at;
}

// Always inlined, so that each target_clones variant of the caller gets its own vector code.
// rin holds one radius per point (r_stride 1) or one for all (r_stride 0).
template <bool kGrad, typename T>
inline __attribute__((always_inline)) void EvaluateLanes(const T* bin, const T* rin,
                                                         int64_t r_stride, int count,
                                                         const Law& law, T* flux, T* dfdb,
                                                         T* dfdr, T* dfdu) {
  const int n = law.order;  // <= 2
  double b[kLanes], r[kLanes], A[kLanes], B[kLanes], a[kLanes], d[kLanes], fd[kLanes];
  double theta[kLanes], lam[kLanes], term0[kLanes], k[kLanes], sA[kLanes], sf[kLanes], sB[kLanes];
  // Lane flags as 64-bit integers (0 / 1), the width of a double: keeps the loops vectorisable.
  int64_t inside[kLanes], none[kLanes], total[kLanes], slow[kLanes];
  // Cel3 state.
  double ckc[kLanes], ce[kLanes], cm[kLanes], cp1[kLanes], ca1[kLanes], cb1[kLanes], cp[kLanes];
  double ca2[kLanes], cb2[kLanes], ca3[kLanes], cb3[kLanes];
  int64_t done[kLanes];
  double bin_d[kLanes], rin_d[kLanes];
  int64_t clearly_apart = 0;  // b > 1 + r beyond rounding: flux 1, whatever the path
  for (int l = 0; l < kLanes; ++l) {
    bin_d[l] = l < count ? static_cast<double>(bin[l]) : 2.0;
    rin_d[l] = l < count ? detail::WidenRadius(rin[l * r_stride]) : 0.5;
    clearly_apart += (bin_d[l] > rin_d[l] + 1.0 + 4e-16 * (bin_d[l] + rin_d[l] + 1.0)) ? 1 : 0;
  }
  if (clearly_apart == kLanes) {  // a whole block out of transit (most of a light curve)
    for (int l = 0; l < count; ++l) {
      flux[l] = static_cast<T>(1.0);
      if (kGrad) {
        dfdb[l] = static_cast<T>(0.0);
        dfdr[l] = static_cast<T>(0.0);
        for (int j = 0; j < n; ++j) dfdu[l * n + j] = static_cast<T>(0.0);
      }
    }
    return;
  }

  JAXEXT_LANES {
    double bb = bin_d[l];
    double rr = rin_d[l];
    const double p = detail::Sum3(1.0, bb, -rr);
    const double q = detail::Sum3(1.0, -bb, rr);
    const double AA = p * q;
    const double BB = detail::Sum3(1.0, -bb, -rr) * (1.0 + bb + rr);
    const double aa = 0.5 * (AA + BB);
    none[l] = q <= 0.0;
    total[l] = p <= 0.0;
    // Evaluate's downward-recurrence regime (see Integrals) only matters where the disks overlap.
    // (Bitwise, not short-circuit, operators: no control flow, so the loop vectorises.)
    const int64_t bad = static_cast<int64_t>(!(bb >= 0.0)) | static_cast<int64_t>(!(rr > 0.0)) |
                        static_cast<int64_t>(rr < kTinyRadius) |
                        static_cast<int64_t>(rr > kHugeRadius) |
                        static_cast<int64_t>(fabs(bb) > 1.7976931348623157e308) |
                        static_cast<int64_t>(fabs(rr) > 1.7976931348623157e308);
    const int64_t downward = (1 - none[l]) & (1 - total[l]) & static_cast<int64_t>(aa < 0.0) &
                             static_cast<int64_t>(-BB > 2.0 * AA) & static_cast<int64_t>(-BB > 0.5);
    slow[l] = bad | downward;
    // Stand-in geometry (b, r) = (0.9, 0.2), a partial overlap, for lanes whose result is set
    // otherwise: A = 1.7 * 0.3, B = -0.1 * 2.1.
    const bool stand_in = (none[l] | total[l] | slow[l]) != 0;
    bb = stand_in ? 0.9 : bb;
    rr = stand_in ? 0.2 : rr;
    b[l] = bb;
    r[l] = rr;
    A[l] = stand_in ? 0.51 : AA;
    B[l] = stand_in ? -0.21 : BB;
    a[l] = 0.5 * (A[l] + B[l]);
    const double dd = fabs(bb - rr), dmin = 1e-30 * (bb + rr);  // as in Integrals
    d[l] = dd < dmin ? dmin : dd;
  }
  JAXEXT_LANES {
    const bool in = B[l] >= 0.0;
    inside[l] = in;
    const double fbr = 4.0 * b[l] * r[l];
    const double sa = sqrt(A[l]), sb = sqrt(fabs(B[l])), sfb = sqrt(fbr);
    sA[l] = sa;
    sf[l] = sfb;
    sB[l] = sb;
    fd[l] = in ? 0.0 : sa * sb;  // sqrt(-A B)
    k[l] = sa / sfb;
    double kc = sb / (in ? sa : sfb);  // sqrt(B / A) inside, sqrt(-B / 4br) otherwise
    kc = kc < 1e-150 ? 1e-150 : kc;
    const double kc2 = kc * kc;
    const double bpr = b[l] + r[l];
    ckc[l] = kc;
    ce[l] = kc;
    cm[l] = 1.0;
    const double p1 = (in ? bpr : 1.0) / d[l];  // sqrt of the characteristic
    cp1[l] = p1;
    ca1[l] = 1.0;
    cb1[l] = in ? kc2 / p1 : 0.0;
    cp[l] = 1.0;
    ca2[l] = 1.0;
    cb2[l] = in ? kc2 : 0.0;
    ca3[l] = 1.0;
    cb3[l] = 1.0;
    done[l] = 0;
  }
  // The arctangents are only needed where the occultor crosses the limb.
  int64_t crossing = 0;
  for (int l = 0; l < kLanes; ++l) crossing += inside[l] ? 0 : 1;
  if (crossing == 0) {
    JAXEXT_LANES {
      theta[l] = kPi;
      lam[l] = 0.0;
      term0[l] = 0.5 * kPi;
    }
  } else {
    JAXEXT_LANES {
      theta[l] = Atan2NonNeg(fd[l], -a[l]);
      lam[l] = inside[l] ? 0.0 : Atan2NonNeg(fd[l], a[l] + 2.0 * b[l] * b[l]);
      const double t0 = Atan2NonNeg((b[l] + r[l]) * sA[l], d[l] * sB[l]);
      term0[l] = inside[l] ? 0.5 * kPi : t0;
    }
  }
  if (n >= 1) {
#if JAXEXT_LIMBDARK_CEL3_VECTORS
    // clang: the iteration on whole vectors of kLanes (GCC vector extensions, which clang has
    // too). Its vectoriser turns the lane loop's `x[l] = frozen ? x[l] : y` into stores masked by
    // lane (vmaskmovpd), very slow on AMD processors (measured: the quadratic law 1.67x slower
    // than GCC's build on an AVX2 EPYC); here a frozen lane keeps its values through a blend.
    // GCC keeps the lane loop below: its code for 64-byte vectors on AVX2 is ~4x slower.
    typedef double VD __attribute__((vector_size(8 * kLanes)));
    typedef int64_t VI __attribute__((vector_size(8 * kLanes)));
    VD a1, b1, p1, a2, b2, a3, b3, p, m, kc, e;
    VI frozen;
    std::memcpy(&a1, ca1, sizeof a1);
    std::memcpy(&b1, cb1, sizeof b1);
    std::memcpy(&p1, cp1, sizeof p1);
    std::memcpy(&a2, ca2, sizeof a2);
    std::memcpy(&b2, cb2, sizeof b2);
    std::memcpy(&a3, ca3, sizeof a3);
    std::memcpy(&b3, cb3, sizeof b3);
    std::memcpy(&p, cp, sizeof p);
    std::memcpy(&m, cm, sizeof m);
    std::memcpy(&kc, ckc, sizeof kc);
    std::memcpy(&e, ce, sizeof e);
    for (int l = 0; l < kLanes; ++l) frozen[l] = done[l] ? -1 : 0;
    for (int it = 0; it < 64; ++it) {  // the lane loop's arithmetic, operation for operation
      const VD r1 = 1.0 / p1, rp = 1.0 / p;
      const VD g1 = e * r1, g = e * rp;
      const VD na1 = a1 + b1 * r1;
      const VD nb1 = 2.0 * (b1 + a1 * g1);
      const VD np1 = g1 + p1;
      const VD na2 = a2 + b2 * rp;
      const VD nb2 = 2.0 * (b2 + a2 * g);
      const VD na3 = a3 + b3 * rp;
      const VD nb3 = 2.0 * (b3 + a3 * g);
      const VD np = g + p;
      const VD nm = kc + m;
      const VD dm = m - kc;
      const VI conv = (dm < 0.0 ? -dm : dm) <= m * 1e-9;  // lanes of -1 (true) or 0
      VD nkc;
      for (int l = 0; l < kLanes; ++l) nkc[l] = 2.0 * sqrt(e[l]);
      a1 = frozen ? a1 : na1;
      b1 = frozen ? b1 : nb1;
      p1 = frozen ? p1 : np1;
      a2 = frozen ? a2 : na2;
      b2 = frozen ? b2 : nb2;
      a3 = frozen ? a3 : na3;
      b3 = frozen ? b3 : nb3;
      p = frozen ? p : np;
      m = frozen ? m : nm;
      const VI keep = frozen | conv;
      const VD ne = nkc * nm;
      kc = keep ? kc : nkc;
      e = keep ? e : ne;
      frozen = keep;
      if (__builtin_reduce_and(frozen) != 0) break;  // every lane frozen
    }
    std::memcpy(ca1, &a1, sizeof a1);
    std::memcpy(cb1, &b1, sizeof b1);
    std::memcpy(cp1, &p1, sizeof p1);
    std::memcpy(ca2, &a2, sizeof a2);
    std::memcpy(cb2, &b2, sizeof b2);
    std::memcpy(ca3, &a3, sizeof a3);
    std::memcpy(cb3, &b3, sizeof b3);
    std::memcpy(cp, &p, sizeof p);
    std::memcpy(cm, &m, sizeof m);
#else
    for (int it = 0; it < 64; ++it) {
      int64_t pending = 0;
#if defined(_OPENMP)
#pragma omp simd reduction(+ : pending)
#endif
      for (int l = 0; l < kLanes; ++l) {
        const double r1 = 1.0 / cp1[l], rp = 1.0 / cp[l];
        const double e = ce[l], kc = ckc[l], m = cm[l];
        const double g1 = e * r1, g = e * rp;
        const double na1 = ca1[l] + cb1[l] * r1;
        const double nb1 = 2.0 * (cb1[l] + ca1[l] * g1);
        const double np1 = g1 + cp1[l];
        const double na2 = ca2[l] + cb2[l] * rp;
        const double nb2 = 2.0 * (cb2[l] + ca2[l] * g);
        const double na3 = ca3[l] + cb3[l] * rp;
        const double nb3 = 2.0 * (cb3[l] + ca3[l] * g);
        const double np = g + cp[l];
        const double nm = kc + m;
        const bool conv = fabs(m - kc) <= m * 1e-9;
        const double nkc = 2.0 * sqrt(e);
        const bool frozen = done[l];
        ca1[l] = frozen ? ca1[l] : na1;
        cb1[l] = frozen ? cb1[l] : nb1;
        cp1[l] = frozen ? cp1[l] : np1;
        ca2[l] = frozen ? ca2[l] : na2;
        cb2[l] = frozen ? cb2[l] : nb2;
        ca3[l] = frozen ? ca3[l] : na3;
        cb3[l] = frozen ? cb3[l] : nb3;
        cp[l] = frozen ? cp[l] : np;
        cm[l] = frozen ? m : nm;
        ckc[l] = (frozen || conv) ? kc : nkc;
        ce[l] = (frozen || conv) ? e : nkc * nm;
        done[l] = (frozen || conv) ? 1 : 0;
        pending += 1 - done[l];
      }
      if (pending == 0) break;
    }
#endif
  }
  double O0[kLanes], O1[kLanes], O2[kLanes], J0[kLanes], J1[kLanes], J2[kLanes], J3[kLanes];
  JAXEXT_LANES {
    const bool in = inside[l];
    const double bb = b[l], rr = r[l], aa = a[l], AB = A[l] * B[l];
    const double m = cm[l];
    const double h = 0.5 * kPi / m;
    const double cel_pi = h * (ca1[l] * m + cb1[l]) / (m + cp1[l]);
    const double h2 = h / (m + cp[l]);
    const double cel_t1 = h2 * (ca2[l] * m + cb2[l]);
    const double cel_k = h2 * (ca3[l] * m + cb3[l]);
    const double T0 = in ? kPi : theta[l];
    const double T2 = in ? aa * kPi : aa * theta[l] + fd[l];
    const double rs = 1.0 / (in ? sA[l] : sf[l]);
    const double T1 = 2.0 * A[l] * rs * cel_t1;  // inside: 2 sqrt(A) cel_t1
    const double tm1 = 2.0 * cel_k * rs;
    const double T3 = (4.0 * aa * T1 - (B[l] == 0.0 ? 0.0 : AB * tm1)) * (1.0 / 3.0);
    const double T4 = (6.0 * aa * T2 - 2.0 * AB * T0) * 0.25;
    J0[l] = 2.0 * T0;
    J1[l] = 2.0 * T1;
    J2[l] = 2.0 * T2;
    J3[l] = 2.0 * T3;
    const double J4 = 2.0 * T4;
    O0[l] = in ? kPi * rr * rr : rr * rr * theta[l] + lam[l] - 0.5 * fd[l];
    const double sg = (rr >= bb) ? 1.0 : -1.0;
    const double v1 = -4.0 * sg * (rr + bb) * sA[l] * (in ? 1.0 : k[l]) / d[l] * cel_pi;
    const double arc = 0.5 * ((aa + 2.0 * rr * rr) * J1[l] - J3[l]) + 0.5 * (J0[l] - J1[l]) +
                       0.5 * (4.0 * sg * term0[l] + v1);
    O1[l] = (2.0 * lam[l] + arc) * (1.0 / 3.0);
    const double s2 = 0.5 * ((aa + 2.0 * rr * rr) * J2[l] - J4);
    O2[l] = (s2 + 2.0 * O0[l]) * 0.25;
  }
  const double a0 = law.a[0], a1 = n >= 1 ? law.a[1] : 0.0, a2 = n >= 2 ? law.a[2] : 0.0;
  const double inv_total = 1.0 / law.total;
  // With derivatives, every lane's results go into lane arrays (no branch, no store conditional on
  // the lane: clang then keeps the loop one vector loop, as GCC does either way), and the first
  // `count` are copied out; the value alone is stored directly (measured faster so under clang).
  double f_out[kLanes], dr_out[kLanes], db_out[kLanes], du0_out[kLanes], du1_out[kLanes];
  JAXEXT_LANES {
    const bool no = none[l], tot = total[l];
    const double o0 = no ? 0.0 : (tot ? kPi : O0[l]);
    const double o1 = no ? 0.0 : (tot ? 2.0 * kPi / 3.0 : O1[l]);
    const double o2 = no ? 0.0 : (tot ? 0.5 * kPi : O2[l]);
    const double deficit = tot ? 1.0 : (a0 * o0 + a1 * o1 + a2 * o2) * inv_total;
    if (!kGrad && l < count) flux[l] = static_cast<T>(1.0 - deficit);
    if (kGrad) {
      f_out[l] = 1.0 - deficit;
      const bool zero = no || tot;
      const double bb = b[l], rr = r[l], aa = a[l], c = 2.0 * bb * rr;
      const double K0 = inside[l] ? 0.0 : -fd[l] / (bb * rr);
      // Both sides computed, one selected (the series' value is discarded where it does not
      // apply; a zero c only selects the 0).
      const double k1_series = detail::InsideK1Series(aa, c);
      const double k1_direct = (aa * J1[l] - J3[l]) / (c == 0.0 ? 1.0 : c);
      const double K1 = (inside[l] && c < 0.1 * aa) ? k1_series : (c == 0.0 ? 0.0 : k1_direct);
      const double K2 = 2.0 * (aa * K0 - c * J0[l]) / 4.0;
      const double ij = a0 * J0[l] + a1 * J1[l] + a2 * J2[l];
      const double ik = a0 * K0 + a1 * K1 + a2 * K2;
      dr_out[l] = zero ? 0.0 : -rr * ij * inv_total;
      db_out[l] = zero ? 0.0 : -rr * ik * inv_total;
      // dF/du_j = sum_m (-1)^m C(j, m) (O_m - deficit P_m) / F0, P_m = 2 pi / (m + 2).
      const double e0 = o0 - deficit * kPi, e1 = o1 - deficit * (2.0 * kPi / 3.0);
      const double e2 = o2 - deficit * (0.5 * kPi);
      du0_out[l] = (e0 - e1) * inv_total;
      du1_out[l] = (e0 - 2.0 * e1 + e2) * inv_total;
    }
  }
  for (int l = 0; kGrad && l < count; ++l) {
    flux[l] = static_cast<T>(f_out[l]);
    dfdr[l] = static_cast<T>(dr_out[l]);
    dfdb[l] = static_cast<T>(db_out[l]);
    if (n >= 1) dfdu[l * n] = static_cast<T>(du0_out[l]);
    if (n >= 2) dfdu[l * n + 1] = static_cast<T>(du1_out[l]);
  }
  for (int l = 0; l < count; ++l) {
    if (slow[l]) EvaluateAt<kGrad, T>(bin, rin, r_stride, law, l, flux, dfdb, dfdr, dfdu);
  }
}

}  // namespace limbdark
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_LIMBDARK_H_
