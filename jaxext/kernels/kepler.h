// Kepler's equation, E - e sin E = M, solved for sin E and cos E.
//
// One header shared by the CPU handler (compiled by the host C++ compiler, where the element loop is
// auto-vectorised) and the CUDA kernel (compiled by nvcc). Every function is branch-free: lanes that
// are out of the domain are computed on safe stand-in values and replaced by NaN at the end, so a
// SIMD loop or a CUDA warp never diverges.
//
// Method
//   1. Reduce M to r in [-pi, pi] (three-part Cody-Waite: exact for |M| < 2^20 * 2pi in double;
//      beyond that the error is of the order of |M| times the machine epsilon, the rounding of M
//      itself). Solve for m = |r| in [0, pi] and restore the sign of sin E at the end.
//   2. Starting value from Mikkola (1987): the cubic approximation sin E ~ 3s - 4s^3 solved exactly,
//      plus his fifth-order correction. Accurate to ~1e-3 everywhere, including e -> 1, M -> 0.
//   3. One fourth-order (Householder-type) correction
//          d = -f / (f' + d f''/2 + d^2 f'''/6),   f = E - e sin E - m,
//      with the inner d taken from Halley's step; it takes the starter's ~1e-3 to ~1e-12. A last
//      Newton step removes the rest, and sin/cos of the result come from those of the last iterate
//      by the addition theorem: two evaluations of sin/cos in all. (Worst residual seen over 2e7
//      adversarial float64 inputs, e up to 1 - 1e-16 and M down to 1e-20: 5e-16.)
//
// Domain: 0 <= e < 1 and finite M. Anything else (e < 0, e >= 1, NaN or infinite inputs) yields NaN
// for both outputs. All arithmetic is IEEE (no -ffast-math): the NaN handling relies on it.
#ifndef JAXEXT_KERNELS_KEPLER_H_
#define JAXEXT_KERNELS_KEPLER_H_

#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "jaxext/kernels/platform.h"


namespace jaxext {
namespace kepler {

template <typename T>
struct Constants;

// Multi-part splits of 2 pi and pi/2: the leading parts have enough trailing zero bits that their
// products with small integers are exact.
template <>
struct Constants<double> {
  static constexpr double kTwoPi1 = 0x1.921fb54400000p+2;
  static constexpr double kTwoPi2 = 0x1.0b4611a600000p-32;
  static constexpr double kTwoPi3 = 0x1.3198a2e037073p-67;
  static constexpr double kHalfPi1 = 0x1.921fb54400000p+0;
  static constexpr double kHalfPi2 = 0x1.0b4611a600000p-34;
  static constexpr double kHalfPi3 = 0x1.3198a2e037073p-69;
  static constexpr double kInvTwoPi = 0x1.45f306dc9c883p-3;
  static constexpr double kTwoOverPi = 0x1.45f306dc9c883p-1;
  static constexpr double kPi = 0x1.921fb54442d18p+1;
  // Adding and subtracting 2^52 rounds a double in [0, 2^52) to the nearest integer (ties to even);
  // from 2^52 on every double is an integer.
  static constexpr double kRoundMagic = 0x1p52;
};

template <>
struct Constants<float> {
  static constexpr float kTwoPi1 = 0x1.922p+2f;
  static constexpr float kTwoPi2 = -0x1.2aep-16f;
  static constexpr float kTwoPi3 = -0x1.de973ep-29f;
  static constexpr float kHalfPi1 = 0x1.922p+0f;
  static constexpr float kHalfPi2 = -0x1.2aep-18f;
  static constexpr float kHalfPi3 = -0x1.de973ep-31f;
  static constexpr float kInvTwoPi = 0x1.45f306p-3f;
  static constexpr float kTwoOverPi = 0x1.45f306p-1f;
  static constexpr float kPi = 0x1.921fb6p+1f;
  static constexpr float kRoundMagic = 0x1p23f;
};

// Round to nearest integer (ties to even) for any x; values from 2^52 (double) / 2^23 (float) on are
// integers already and pass through. Branch-free and vectorisable on any x86 (no SSE4.1 needed).
template <typename T>
JAXEXT_HD T round_nearest(T x) {
  const T magic = Constants<T>::kRoundMagic;
  const T ax = x < T(0) ? -x : x;
  T r = (ax + magic) - magic;
  r = x < T(0) ? -r : r;
  return ax < magic ? r : x;
}

// sin and cos of x for |x| <= ~4 pi (the solver only asks for x in about [-0.1, pi + 0.1]).
// Quadrant reduction with a three-part pi/2, then Taylor polynomials on [-pi/4, pi/4] carried far
// enough that truncation is below half an ulp.
template <typename T>
struct SinCosPoly;

template <>
struct SinCosPoly<double> {
  JAXEXT_HD static void eval(double r, double* s, double* c) {
    const double z = r * r;
    // sin r = r + r z (-1/3! + z (1/5! - ...)), through r^17; cos through r^18. On |r| <= pi/4
    // the first omitted terms are below 1e-19 relative.
    const double S3 = -1.0 / 6.0, S5 = 1.0 / 120.0, S7 = -1.0 / 5040.0, S9 = 1.0 / 362880.0,
                 S11 = -1.0 / 39916800.0, S13 = 1.0 / 6227020800.0,
                 S15 = -1.0 / 1307674368000.0, S17 = 1.0 / 355687428096000.0;
    double p = S17;
    p = p * z + S15;
    p = p * z + S13;
    p = p * z + S11;
    p = p * z + S9;
    p = p * z + S7;
    p = p * z + S5;
    p = p * z + S3;
    *s = r + r * z * p;
    const double C2 = -0.5, C4 = 1.0 / 24.0, C6 = -1.0 / 720.0, C8 = 1.0 / 40320.0,
                 C10 = -1.0 / 3628800.0, C12 = 1.0 / 479001600.0,
                 C14 = -1.0 / 87178291200.0, C16 = 1.0 / 20922789888000.0,
                 C18 = -1.0 / 6402373705728000.0;
    double q = C18;
    q = q * z + C16;
    q = q * z + C14;
    q = q * z + C12;
    q = q * z + C10;
    q = q * z + C8;
    q = q * z + C6;
    q = q * z + C4;
    q = q * z + C2;
    *c = 1.0 + z * q;
  }
};

template <>
struct SinCosPoly<float> {
  JAXEXT_HD static void eval(float r, float* s, float* c) {
    const float z = r * r;
    float p = 1.0f / 362880.0f;
    p = p * z - 1.0f / 5040.0f;
    p = p * z + 1.0f / 120.0f;
    p = p * z - 1.0f / 6.0f;
    *s = r + r * z * p;
    float q = -1.0f / 3628800.0f;
    q = q * z + 1.0f / 40320.0f;
    q = q * z - 1.0f / 720.0f;
    q = q * z + 1.0f / 24.0f;
    q = q * z - 0.5f;
    *c = 1.0f + z * q;
  }
};

#if defined(__CUDA_ARCH__) || defined(JAXEXT_KEPLER_LIBM)
// CUDA's math library on the device (or, to test the device path on a host, the C library's).
JAXEXT_HD void library_sincos(double x, double* s, double* c) { ::sincos(x, s, c); }
JAXEXT_HD void library_sincos(float x, float* s, float* c) { ::sincosf(x, s, c); }
#endif

template <typename T>
JAXEXT_HD void sincos(T x, T* s, T* c) {
#if defined(__CUDA_ARCH__) || defined(JAXEXT_KEPLER_LIBM)
  library_sincos(x, s, c);
#else
  using K = Constants<T>;
  const T q = round_nearest(x * K::kTwoOverPi);
  T r = x - q * K::kHalfPi1;
  r = r - q * K::kHalfPi2;
  r = r - q * K::kHalfPi3;
  T sr, cr;
  SinCosPoly<T>::eval(r, &sr, &cr);
  // Quadrant q mod 4 selects (sin, cos) among (sr, cr), (cr, -sr), (-sr, -cr), (-cr, sr). Kept in
  // floating point (no integer lanes of another width) so that the caller's loop vectorises.
  const T q4 = q - T(4) * round_nearest((q - T(1.5)) * T(0.25));  // q mod 4, in {0, 1, 2, 3}
  const bool odd = (q4 == T(1)) | (q4 == T(3));
  const T so = odd ? cr : sr;
  const T co = odd ? sr : cr;
  *s = q4 >= T(2) ? -so : so;
  *c = ((q4 == T(1)) | (q4 == T(2))) ? -co : co;
#endif
}

// Cube root of x > 0 (normal numbers), branch-free: exponent split with integer bit operations,
// a quadratic first guess on [1, 8), then two Newton steps: relative error < 2e-6, all the starter
// needs (it is itself good to ~1e-3).
JAXEXT_HD double cbrt_positive(double x) {
#if defined(__CUDA_ARCH__) || defined(JAXEXT_KEPLER_LIBM)
  return ::cbrt(x);
#else
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  // Biased exponent as a double, through the 2^52 trick (no int64 -> double conversion needed).
  std::uint64_t ebits = (bits >> 52) | 0x4330000000000000ull;
  double ebiased;
  std::memcpy(&ebiased, &ebits, sizeof ebiased);
  const double ex = (ebiased - 0x1p52) - 1023.0;  // unbiased exponent
  // q = floor(ex / 3), rem = ex - 3 q in {0, 1, 2}.
  double qf = round_nearest((ex - 1.0) / 3.0);
  double rem = ex - 3.0 * qf;
  // mantissa in [1, 2) times 2^rem in [1, 8).
  std::uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double mant;
  std::memcpy(&mant, &mbits, sizeof mant);
  const double y = mant * (rem == 0.0 ? 1.0 : (rem == 1.0 ? 2.0 : 4.0));
  // First guess for cbrt(y), y in [1, 8): a quadratic through y = 1, 27/8, 8 (error < 3%), then
  // two Newton steps (quadratic convergence: 3e-2 -> 1e-3 -> 2e-6).
  double g = 0.7401 + y * (0.2745 - 0.01463 * y);
  JAXEXT_UNROLL
  for (int i = 0; i < 2; ++i) g = (2.0 * g + y / (g * g)) * (1.0 / 3.0);
  // 2^q through the same trick in reverse.
  double t = (qf + 1023.0) + 0x1p52;
  std::uint64_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  std::uint64_t pbits = (tb & 0x000fffffffffffffull) << 52;
  double p2;
  std::memcpy(&p2, &pbits, sizeof p2);
  return g * p2;
#endif
}

JAXEXT_HD float cbrt_positive(float x) {
#if defined(__CUDA_ARCH__)
  return ::cbrtf(x);  // the starter needs ~1e-3; a double cbrt costs the GPU's FP64 pipe
#else
  return static_cast<float>(cbrt_positive(static_cast<double>(x)));
#endif
}

// a / b where a few ulps are harmless (the starter, and corrections far smaller than the result).
// On the GPU in float: a reciprocal and a product instead of IEEE division's refinement sequence
// (ncu on an H100: the float kernel is instruction-bound). |b| stays in [2^-126, 2^126] here.
template <typename T>
JAXEXT_HD T loose_div(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return __fdividef(a, b);
#endif
  return a / b;
}

template <typename T>
JAXEXT_HD bool is_finite(T x) {
  return x - x == T(0);  // false for NaN and +-inf
}

// Solves E - e sin E = M; writes sin E and cos E. NaN outside 0 <= e < 1 or for non-finite M.
template <typename T>
JAXEXT_HD void solve(T mean_anomaly, T ecc, T* sin_e, T* cos_e) {
  using K = Constants<T>;
  const bool valid = (ecc >= T(0)) & (ecc < T(1)) & is_finite(mean_anomaly);
  const T M = valid ? mean_anomaly : T(0);
  const T e = valid ? ecc : T(0);

  // 1. Range reduction to [-pi, pi].
  const T k = round_nearest(M * K::kInvTwoPi);
  T r = M - k * K::kTwoPi1;
  r = r - k * K::kTwoPi2;
  r = r - k * K::kTwoPi3;
  // For huge |M| (k inexact) r can land outside [-pi, pi]: fold once, then clamp. Either only
  // moves r by about the rounding of the reduction, which is already of the order of |M| eps.
  r = r > K::kPi ? r - T(2) * K::kPi : r;
  r = r < -K::kPi ? r + T(2) * K::kPi : r;
  r = r > K::kPi ? K::kPi : (r < -K::kPi ? -K::kPi : r);
  const bool negative = r < T(0);
  const T m = negative ? -r : r;

  // 2. Mikkola's starter.
  const T denom = T(4) * e + T(0.5);
  const T alpha = loose_div(T(1) - e, denom);
  const T beta = loose_div(T(0.5) * m, denom);
  using std::sqrt;
  const T z3 = beta + sqrt(beta * beta + alpha * alpha * alpha);
  const T z = cbrt_positive(z3);
  const T z2 = z * z;
  // s = z - alpha / z, written without cancellation.
  T s = loose_div(T(2) * beta, z2 + alpha + loose_div(alpha * alpha, z2));
  const T s2 = s * s;
  s = s - loose_div(T(0.078) * s2 * s2 * s, T(1) + e);
  T E = m + e * (T(3) * s - T(4) * s * s * s);

  // 3. One fourth-order correction.
  T sn, cs;
  {
    sincos(E, &sn, &cs);
    const T esn = e * sn, ecs = e * cs;
    const T f0 = E - esn - m;
    const T f1 = T(1) - ecs;
    // Halley's step, in one division, then the fourth-order step built on it.
    const T d2 = loose_div(-T(2) * f0 * f1, T(2) * f1 * f1 - f0 * esn);
    const T d3 = loose_div(-f0, f1 + T(0.5) * d2 * esn + d2 * d2 * ecs * T(1.0 / 6.0));
    E = E + d3;
  }
  // Final Newton step, with sin/cos of the update by the addition theorem (d is ~ulp-sized).
  sincos(E, &sn, &cs);
  const T f0 = E - e * sn - m;
  const T d = loose_div(-f0, T(1) - e * cs);
  const T dd = T(0.5) * d * d;
  T sin_out = sn + cs * d - sn * dd;
  T cos_out = cs - sn * d - cs * dd;
  sin_out = negative ? -sin_out : sin_out;

  const T nan = std::numeric_limits<T>::quiet_NaN();
  *sin_e = valid ? sin_out : nan;
  *cos_e = valid ? cos_out : nan;
}

}  // namespace kepler
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_KEPLER_H_
