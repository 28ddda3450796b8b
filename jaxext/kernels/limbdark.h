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

JAXEXT_HD bool IsInf(double x) { return fabs(x) > 1.7976931348623157e308; }

// x + y + z with one compensated step: exact when the result is the difference of nearby values.
JAXEXT_HD double Sum3(double x, double y, double z) {
  const double s = x + y;
  const double bp = s - x;
  const double err = (x - (s - bp)) + (y - bp);
  return (s + z) + err;
}

// Bulirsch's complete elliptic integral
//   cel(kc, p, a, b) = int_0^{pi/2} (a cos^2 t + b sin^2 t) / ((cos^2 t + p sin^2 t)
//                      sqrt(cos^2 t + kc^2 sin^2 t)) dt,     kc != 0, p > 0,
// by his Gauss-transformation algorithm (Bulirsch 1969, Numer. Math. 13, 305), for three integrals
// with one modulus kc: cel(kc, p1, a1, b1), cel(kc, 1, a2, b2), cel(kc, 1, a3, b3).
// The Gauss transformation of the modulus (one square root per step) is shared by all three and
// that of the characteristic p = 1 by the last two; p1 > 0.
JAXEXT_HD void Cel3(double kc, double p1, double a1, double b1, double a2, double b2, double a3,
                    double b3, double* c1, double* c2, double* c3) {
  kc = fabs(kc);
  double e = kc, m = 1.0;
  p1 = sqrt(p1);
  b1 = b1 / p1;
  double p = 1.0;
  for (int it = 0; it < 64; ++it) {
    const double r1 = 1.0 / p1, r = 1.0 / p;
    const double g1 = e * r1, g = e * r;
    double f = a1;
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
    const double mold = m;
    m = kc + m;
    // Quadratic convergence: once the moduli agree to 1e-9, the step just taken left ~1e-18.
    if (fabs(mold - kc) <= mold * 1e-9) break;
    kc = 2.0 * sqrt(e);
    e = kc * m;
  }
  const double h = 0.5 * kPi / m;
  *c1 = h * (a1 * m + b1) / (m + p1);
  const double h2 = h / (m + p);
  *c2 = h2 * (a2 * m + b2);
  *c3 = h2 * (a3 * m + b3);
}

// K_1 = int_0^{2pi} (a - c sin phi)^{1/2} sin phi dphi for the occultor inside the disk, as a
// series in x = c / a: -2 pi sqrt(a) sum_{j odd} C(1/2, j) j!!/(j+1)!! x^j, ten terms (used for
// x < 0.1, where the truncation is below 1e-21 relative).
JAXEXT_HD double InsideK1Series(double a, double c) {
  const double x = c / a, x2 = x * x;
  double sum = 0.0006123339034241893;
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
JAXEXT_HD void MillerChain(int parity, int top, double a, double AB, double ratio, double exact,
                           double* T) {
  if (top < parity) return;
  if ((top - parity) & 1) --top;
  int extra = static_cast<int>(ceil(39.0 / log(ratio))) + 2;
  if (extra > 200) extra = 200;
  const int start = top + 2 * extra;
  double above = 0.0, cur = 1.0;  // T_{m+2}, T_m
  for (int m = start; m >= parity + 2; m -= 2) {
    const double below = (2.0 * (m + 1) * a * cur - (m + 2) * above) / (m * AB);
    above = cur;
    cur = below;
    if (m - 2 <= top) T[m - 2] = below;
    if (fabs(cur) > 1e150) {
      cur *= 1e-150;
      above *= 1e-150;
      for (int j = m - 2; j <= top; j += 2) {
        if (j >= parity) T[j] *= 1e-150;
      }
    }
  }
  const double scale = exact / T[parity];
  for (int j = parity; j <= top; j += 2) T[j] *= scale;
}

// Occulted fluxes O[0..n] of z^m and, if kGrad, the arc moments J[0..n], K[0..n] (J and K are
// zero when the disks do not overlap or the occultor covers the whole star).
// Returns kHidden when the occultor covers the star, otherwise kVisible.
enum Regime { kVisible = 0, kHidden = 1 };

template <bool kGrad>
JAXEXT_HD Regime Integrals(double b, double r, int n, double* O, double* J, double* K) {
  const double p = Sum3(1.0, b, -r);  // 1 + b - r
  const double q = Sum3(1.0, -b, r);  // 1 - b + r
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
  const double A = p * q;
  const double D = Sum3(1.0, -b, -r);  // 1 - b - r
  const double B = D * (1.0 + b + r);
  const double a = 0.5 * (A + B);
  const double c = 2.0 * b * r;
  const double fbr = 2.0 * c;
  const bool inside = B >= 0.0;

  const int top = (n + 2 > 3) ? n + 2 : 3;  // highest moment needed
  double T[kMaxMoment + 1];
  double theta = kPi, lam = 0.0, four_delta = 0.0, k = 0.0, kc = 0.0, kcp = 0.0;
  double t_minus1;
  // The elliptic integrals (only needed from the linear term on): T_1, T_{-1} and the
  // third-kind integral of O_1, all with one modulus.
  // |b - r|, kept away from 0 (b = r is regular, but the split below into an arctangent and a
  // third-kind integral is not): the shift changes the result by ~1e-30 relative.
  double d = fabs(b - r);
  if (d < 1e-30 * (b + r)) d = 1e-30 * (b + r);
  double cel_pi = 0.0, cel_t1 = 0.0, cel_k = 0.0;
  if (inside) {
    T[0] = kPi;
    T[2] = a * kPi;
    const double sA = sqrt(A);
    kcp = sqrt(B / A);
    if (kcp < 1e-150) kcp = 1e-150;
    if (n >= 1) {
      const double kcp2 = kcp * kcp;
      Cel3(kcp, (b + r) * (b + r) / (d * d), 1.0, kcp2, 1.0, kcp2, 1.0, 1.0, &cel_pi, &cel_t1,
           &cel_k);
    }
    T[1] = 2.0 * sA * cel_t1;
    t_minus1 = 2.0 * cel_k / sA;
  } else {
    four_delta = sqrt(A) * sqrt(-B);  // 4 x area of the triangle (star centre, occultor centre,
                                      // contact point); two roots so that A B cannot underflow
    theta = atan2(four_delta, -a);  // angle subtended by the arc at the occultor's centre
    lam = atan2(four_delta, a + 2.0 * b * b);  // half the limb arc, seen from the star's centre
    const double k2 = A / fbr;
    k = sqrt(k2);
    kc = sqrt(-B / fbr);
    if (kc < 1e-150) kc = 1e-150;
    T[0] = theta;
    T[2] = a * theta + four_delta;
    const double sf = sqrt(fbr);
    if (n >= 1) Cel3(kc, 1.0 / (d * d), 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, &cel_pi, &cel_t1, &cel_k);
    T[1] = 2.0 * (A / sf) * cel_t1;
    t_minus1 = 2.0 * cel_k / sf;
  }
  const double AB = A * B;
  const bool downward = (a < 0.0) && (-B > 2.0 * A) && (-B > 0.5);
  if (downward) {
    const double ratio = -B / A;
    MillerChain(0, top, a, AB, ratio, T[0], T);
    MillerChain(1, top, a, AB, ratio, T[1], T);
  } else {
    for (int m = 2; m + 2 <= top; m += 2)
      T[m + 2] = (2.0 * (m + 1) * a * T[m] - m * AB * T[m - 2]) / (m + 2);
    T[3] = (4.0 * a * T[1] - (B == 0.0 ? 0.0 : AB * t_minus1)) / 3.0;
    for (int m = 3; m + 2 <= top; m += 2)
      T[m + 2] = (2.0 * (m + 1) * a * T[m] - m * AB * T[m - 2]) / (m + 2);
  }
  double Jm[kMaxMoment + 1];
  for (int m = 0; m <= top; ++m) Jm[m] = 2.0 * T[m];

  // O_0: lens area.
  O[0] = inside ? kPi * r * r : r * r * theta + lam - 0.5 * four_delta;
  // O_1.
  if (n >= 1) {
    const double sg = (r >= b) ? 1.0 : -1.0;
    double term0, v1;
    if (inside) {
      term0 = 2.0 * kPi * sg;
      v1 = -4.0 * sg * (r + b) * sqrt(A) / d * cel_pi;
    } else {
      term0 = 4.0 * sg * atan2((b + r) * sqrt(A), d * sqrt(-B));
      v1 = -4.0 * sg * (r + b) * sqrt(A) * k / d * cel_pi;
    }
    const double arc = 0.5 * ((a + 2.0 * r * r) * Jm[1] - Jm[3]) + 0.5 * (Jm[0] - Jm[1]) +
                       0.5 * (term0 + v1);
    O[1] = (2.0 * lam + arc) / 3.0;
  }
  for (int m = 2; m <= n; ++m) {
    const double s = 0.5 * ((a + 2.0 * r * r) * Jm[m] - Jm[m + 2]);
    O[m] = (s + m * O[m - 2]) / (m + 2);
  }
  if (!kGrad) return kVisible;

  for (int m = 0; m <= n; ++m) J[m] = Jm[m];
  K[0] = inside ? 0.0 : -four_delta / (b * r);
  if (n >= 1) {
    if (downward) {
      for (int m = 1; m <= n; ++m) K[m] = (a * Jm[m] - Jm[m + 2]) / c;
    } else {
      if (c == 0.0) {
        K[1] = 0.0;
      } else if (inside && c < 0.1 * a) {
        K[1] = InsideK1Series(a, c);
      } else {
        K[1] = (a * Jm[1] - Jm[3]) / c;
      }
      for (int m = 0; m + 2 <= n; ++m) K[m + 2] = (m + 2) * (a * K[m] - c * Jm[m]) / (m + 4);
    }
  }
  return kVisible;
}

}  // namespace detail

// Relative flux and, if kGrad, its derivatives with respect to b, r and u_1..u_n (dfdu[j - 1]).
template <bool kGrad>
JAXEXT_HD void Evaluate(double b, double r, const Law& law, double* flux, double* dfdb,
                        double* dfdr, double* dfdu) {
  const int n = law.order;
  if (!(b >= 0.0) || !(r > 0.0) || (detail::IsInf(b) && detail::IsInf(r)) ||
      (r > kHugeRadius && fabs(b - r) < 1.0)) {
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
      const double z = b < 1.0 ? sqrt((1.0 - b) * (1.0 + b)) : 0.0;
      double intensity = 0.0;
      for (int m = n; m >= 0; --m) intensity = intensity * z + law.a[m];
      *dfdr = -2.0 * kPi * r * intensity / law.total;
      *dfdb = 0.0;
      for (int j = 0; j < n; ++j) dfdu[j] = 0.0;
    }
    return;
  }
  double O[kMaxOrder + 1], J[kMaxOrder + 1], K[kMaxOrder + 1];
  const detail::Regime regime = detail::Integrals<kGrad>(b, r, n, O, J, K);
  double occ = 0.0;
  for (int m = 0; m <= n; ++m) occ += law.a[m] * O[m];
  const double inv_total = 1.0 / law.total;
  const double deficit = (regime == detail::kHidden) ? 1.0 : occ * inv_total;
  *flux = 1.0 - deficit;
  if (!kGrad) return;
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

// Evaluate for point i of typed buffers (r[i * r_stride]), storing flux[i], and if kGrad dfdb[i],
// dfdr[i] and dfdu[i * n .. i * n + n - 1]: the per-point body of every handler loop.
template <bool kGrad, typename T>
JAXEXT_HD void EvaluateAt(const T* b, const T* r, int64_t r_stride, const Law& law, int64_t i,
                          T* flux, T* dfdb, T* dfdr, T* dfdu) {
  double f, fb = 0.0, fr = 0.0, fu[kMaxOrder];
  Evaluate<kGrad>(static_cast<double>(b[i]), static_cast<double>(r[i * r_stride]), law, &f, &fb,
                  &fr, fu);
  flux[i] = static_cast<T>(f);
  if (kGrad) {
    dfdb[i] = static_cast<T>(fb);
    dfdr[i] = static_cast<T>(fr);
    for (int j = 0; j < law.order; ++j) dfdu[i * law.order + j] = static_cast<T>(fu[j]);
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
    rin_d[l] = l < count ? static_cast<double>(rin[l * r_stride]) : 0.5;
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
    for (int it = 0; it < 64; ++it) {
      int64_t pending = 0;
#if defined(_OPENMP) || defined(__clang__)
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
  JAXEXT_LANES {
    const bool no = none[l], tot = total[l];
    const double o0 = no ? 0.0 : (tot ? kPi : O0[l]);
    const double o1 = no ? 0.0 : (tot ? 2.0 * kPi / 3.0 : O1[l]);
    const double o2 = no ? 0.0 : (tot ? 0.5 * kPi : O2[l]);
    const double deficit = tot ? 1.0 : (a0 * o0 + a1 * o1 + a2 * o2) * inv_total;
    if (l < count) flux[l] = static_cast<T>(1.0 - deficit);
    if (kGrad) {
      const bool zero = no || tot;
      const double bb = b[l], rr = r[l], aa = a[l], c = 2.0 * bb * rr;
      const double K0 = inside[l] ? 0.0 : -fd[l] / (bb * rr);
      double K1;
      if (inside[l] && c < 0.1 * aa) {  // (if-converted: both sides are cheap)
        K1 = detail::InsideK1Series(aa, c);
      } else {
        K1 = c == 0.0 ? 0.0 : (aa * J1[l] - J3[l]) / c;
      }
      const double K2 = 2.0 * (aa * K0 - c * J0[l]) / 4.0;
      const double ij = a0 * J0[l] + a1 * J1[l] + a2 * J2[l];
      const double ik = a0 * K0 + a1 * K1 + a2 * K2;
      if (l < count) {
        dfdr[l] = static_cast<T>(zero ? 0.0 : -rr * ij * inv_total);
        dfdb[l] = static_cast<T>(zero ? 0.0 : -rr * ik * inv_total);
        // dF/du_j = sum_m (-1)^m C(j, m) (O_m - deficit P_m) / F0, P_m = 2 pi / (m + 2).
        const double e0 = o0 - deficit * kPi, e1 = o1 - deficit * (2.0 * kPi / 3.0);
        const double e2 = o2 - deficit * (0.5 * kPi);
        if (n >= 1) dfdu[l * n] = static_cast<T>((e0 - e1) * inv_total);
        if (n >= 2) dfdu[l * n + 1] = static_cast<T>((e0 - 2.0 * e1 + e2) * inv_total);
      }
    }
  }
  for (int l = 0; l < count; ++l) {
    if (slow[l]) EvaluateAt<kGrad, T>(bin, rin, r_stride, law, l, flux, dfdb, dfdr, dfdu);
  }
}

}  // namespace limbdark
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_LIMBDARK_H_
