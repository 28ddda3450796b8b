// Transit light curves in one pass: times -> mean anomaly -> Kepler -> sky position -> occultation,
// with exposure-time integration, and the exact derivatives of the flux with respect to every
// parameter.
//
// One header shared by the CPU handler and the CUDA kernel. All arithmetic is in double.
//
// Parameters (one row per light curve, the "kernel parameters" q; jaxext/transit.py maps the
// public ones -- period, t0, a, impact or inclination, ecc, omega, r, texp -- onto them):
//   q = (n, t0, m_tr, a, cos_i, ecc, sin_w, cos_w, r, texp)
//   n = 2 pi / period (mean motion), m_tr = mean anomaly at mid-transit t0 (true anomaly
//   pi/2 - omega), cos_i = cosine of the inclination, (sin_w, cos_w) = that of omega.
// For sub-exposure k of K (offset o_k = (k + 1/2) / K - 1/2) of the point at time t:
//   phi = n (t + texp o_k - t0),  M = m_tr + phi,  E - e sin E = M,
//   (X, Y) = (cos E - e, sqrt(1 - e^2) sin E)      (position in the orbital plane / a),
//   U = cos_w X - sin_w Y,  V = sin_w X + cos_w Y,
//   sky position (x, y) = -a (U, cos_i V), in front of the star when V sin_i > 0,
//   b = |(x, y)|, flux = limbdark(b, r, u) in front and 1 behind; the point's flux is the mean
//   over k. (The conventions of batman and jaxoplanet; see jaxext/transit.py.)
// Circular orbits (e = 0 exactly) take E = M without the Kepler solve. On the CPU, an eccentric
// orbit with a window takes sin E and cos E over it from Chebyshev series built once per light
// curve from Kepler solves at 32 nodes (ExpandOrbit), used only where they converge to double
// precision (else Kepler's equation is solved per time, as on CUDA). Likewise the CPU value pass of
// a long light curve takes the occultation from piecewise Chebyshev series in b built from the
// exact kernel (FluxSeries below; within ~1e-15 of it), the derivative passes and CUDA the exact
// occultation per point.
//
// Skipping: per light curve, the range of phi (reduced to (-pi, pi]) outside which the planet is
// farther than 1 + r from the star in the sky is computed once (a conservative window: it uses
// the smallest orbital distance a (1 - e)); points outside it are out of transit without an orbit
// computation. The flux there is exactly 1 either way.
//
// Derivatives: db/dq by the chain rule through the formulas above (dE/dM = 1/(1 - e cos E),
// dE/de = sin E/(1 - e cos E)), times the occultation's analytic db derivative; dr and du come from
// the occultation kernel directly. dflux/dt = -dflux/dt0.
//
// Domain: a light curve whose parameters are not all finite, or with e outside [0, 1), a <= 0,
// n <= 0, r <= 0, or non-finite limb-darkening coefficients, has NaN flux (and derivatives) at
// every time; a non-finite time gives NaN at that point. |cos_i| >= 1 (face-on) never transits.
#ifndef JAXEXT_KERNELS_TRANSIT_H_
#define JAXEXT_KERNELS_TRANSIT_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "jaxext/kernels/kepler.h"
#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/platform.h"

namespace jaxext {
namespace transit {

// Columns of the parameter rows q.
enum Param : int {
  kN = 0,
  kT0 = 1,
  kMtr = 2,
  kA = 3,
  kCosI = 4,
  kEcc = 5,
  kSinW = 6,
  kCosW = 7,
  kRadius = 8,
  kTexp = 9,
  kNumParams = 10,
};

constexpr double kPi = 3.14159265358979323846;
// Chebyshev nodes of the per-light-curve orbit expansion. The series is used only if its last 8
// coefficients are at the level of the nodes' rounding (below kChebNoise: converged to double
// precision; the true ones are far smaller); terms below kChebTail are dropped.
constexpr int kChebMax = 32;
constexpr double kChebNoise = 1e-15;
constexpr double kChebTail = 1e-16;
constexpr double kTwoPi = 6.28318530717958647693;

// Per light curve: the parameters, and what the points share.
struct Orbit {
  double q[kNumParams];
  double s1;        // sqrt(1 - e^2)
  bool valid;       // parameters in the domain (else every flux is NaN)
  bool circular;    // e == 0
  bool can_transit; // |cos_i| < 1
  bool windowed;    // transits only for reduced phi in [psi_lo, psi_hi]
  double psi_lo, psi_hi;
  // Eccentric orbits with a window (CPU): sin E and cos E over the window as Chebyshev series in
  // x = (psi - cheb_mid) * cheb_scale, |x| <= 1, of cheb_n terms (0: none; solve Kepler's
  // equation instead).
  int cheb_n;
  double cheb_mid, cheb_scale;
  double cheb_sin[kChebMax], cheb_cos[kChebMax];
};

JAXEXT_HD bool Finite(double x) { return x - x == 0.0; }

// Mean anomaly at true anomaly f.
JAXEXT_HD double MeanAnomaly(double f, double e) {
  const double E = 2.0 * atan2(sqrt(1.0 - e) * sin(0.5 * f), sqrt(1.0 + e) * cos(0.5 * f));
  return E - e * sin(E);
}

// x reduced to (-pi, pi].
JAXEXT_HD double Reduce(double x) {
  double y = x - kTwoPi * rint(x * (1.0 / kTwoPi));
  return y <= -kPi ? y + kTwoPi : (y > kPi ? y - kTwoPi : y);
}

template <typename T>
JAXEXT_HD void MakeOrbit(const T* q_in, const limbdark::Law& law, Orbit* o) {
  o->cheb_n = 0;
  bool finite = true;
  for (int k = 0; k < kNumParams; ++k) {
    // (A float32 subnormal radius is widened from its bits: converting it reads 0 under DAZ.)
    o->q[k] = k == kRadius ? limbdark::detail::WidenRadius(q_in[k]) : static_cast<double>(q_in[k]);
    finite = finite && Finite(o->q[k]);
  }
  for (int m = 0; m <= law.order; ++m) finite = finite && Finite(law.a[m]);
  const double* q = o->q;
  const double e = q[kEcc];
  o->valid = finite && e >= 0.0 && e < 1.0 && q[kA] > 0.0 && q[kN] > 0.0 &&
             limbdark::detail::PositiveBits(q[kRadius]);  // a subnormal r too (DAZ)
  o->circular = e == 0.0;
  o->s1 = o->valid ? sqrt((1.0 - e) * (1.0 + e)) : 0.0;
  o->can_transit = fabs(q[kCosI]) < 1.0;
  o->windowed = false;
  o->psi_lo = -kPi;
  o->psi_hi = kPi;
  if (!o->valid) return;
  // In front and within 1 + r of the star in the sky needs |cos(omega + f)| <= (1 + r) / dist
  // <= c = (1 + r) / (a (1 - e)) (since |x| = dist |cos(omega + f)|): f within delta = asin(c)
  // of f_tr = pi/2 - omega. Its image in M is narrower than pi when the bound on dM/df below
  // says so; then the window is [M(f_tr - delta), M(f_tr + delta)] - m_tr, widened by a margin.
  const double c = (1.0 + q[kRadius]) / (q[kA] * (1.0 - e)) * (1.0 + 1e-6);
  if (!(c < 0.5)) return;
  const double delta = asin(c);
  const double max_dmdf = (1.0 + e) * sqrt((1.0 + e) / (1.0 - e));
  if (!(2.0 * delta * max_dmdf < 0.9 * kPi)) return;
  const double f_tr = 0.5 * kPi - atan2(q[kSinW], q[kCosW]);
  const double lo = Reduce(MeanAnomaly(f_tr - delta, e) - q[kMtr]);
  const double hi = Reduce(MeanAnomaly(f_tr + delta, e) - q[kMtr]);
  if (!(lo < 0.0 && hi > 0.0)) return;  // m_tr inconsistent with (e, omega): no skipping
  const double margin = 1e-6;
  o->windowed = true;
  o->psi_lo = lo - margin;
  o->psi_hi = hi + margin;
}

// Chebyshev coefficients of sin E and cos E over the window of an eccentric orbit (Kepler's
// equation solved at kChebMax nodes); keeps the shortest series whose dropped coefficients are all
// below kChebTail, or none (cheb_n = 0). Host code: the CPU handler calls it once per light curve
// and chunk, when a time first falls in the window; the CUDA kernel solves Kepler's equation.
inline void ExpandOrbit(Orbit* o) {
#if !defined(__CUDA_ARCH__)
  o->cheb_n = 0;
  if (!o->valid || o->circular || !o->windowed) return;
  // cos(pi m / (2 kChebMax)), m < 4 kChebMax: every cosine below.
  static const struct Table {
    double v[4 * kChebMax];
    Table() {
      for (int m = 0; m < 4 * kChebMax; ++m) v[m] = cos(kPi * m / (2 * kChebMax));
    }
  } table;
  const double e = o->q[kEcc];
  const double lo = o->psi_lo, hi = o->psi_hi;
  double fs[kChebMax], fc[kChebMax];
  for (int j = 0; j < kChebMax; ++j) {  // nodes x_j = cos(pi (j + 1/2) / N)
    const double x = table.v[2 * j + 1];
    kepler::solve(o->q[kMtr] + 0.5 * (lo + hi) + 0.5 * (hi - lo) * x, e, &fs[j], &fc[j]);
  }
  int last = 0;
  for (int k = 0; k < kChebMax; ++k) {
    double as = 0.0, ac = 0.0;
    for (int j = 0; j < kChebMax; ++j) {
      const double w = table.v[(k * (2 * j + 1)) % (4 * kChebMax)];
      as += fs[j] * w;
      ac += fc[j] * w;
    }
    const double norm = (k == 0 ? 1.0 : 2.0) / kChebMax;
    o->cheb_sin[k] = as * norm;
    o->cheb_cos[k] = ac * norm;
    const double m = fmax(fabs(o->cheb_sin[k]), fabs(o->cheb_cos[k]));
    if (k >= kChebMax - 8 && !(m < kChebNoise)) return;  // not converged: keep solving Kepler
    if (m >= kChebTail) last = k;  // (terms below kChebTail are dropped)
  }
  o->cheb_mid = 0.5 * (lo + hi);
  o->cheb_scale = 2.0 / (hi - lo);
  o->cheb_n = last + 1;
#endif
}

// ---------------------------------------------------------------------------------------------
// The occultation along one light curve (CPU value pass). With r and the law fixed, the flux is a
// function of b alone, analytic except at the contact points b = 1 - r and b = 1 + r (and, off
// the real range, b = r - 1 and b = -1 - r): there it behaves like d^2 log d or d^{3/2} in the
// distance d to the contact. For 0 < r < 1 the range [0, 1 + r) is cut into three sides, each
// graded geometrically towards its contact point:
//   side 0: b in [0, 1 - r),      d = (1 - r) - b,  length L0 = 1 - r;
//   side 1: b in [1 - r, 1),      d = b - (1 - r),  length r;
//   side 2: b in [1, 1 + r),      d = (1 + r) - b,  length r;
// piece k of a side holds d / L in [2^{-k-1}, 2^{-k}] (k < kFluxDepth), where the deficit 1 - flux
// is a Chebyshev series in x = 4 (d / L) 2^k - 3, in [-1, 1]: x is the mantissa of d / L, and
// every piece sees its nearest singularity at the same relative distance, so a series of ~16 terms
// reaches double precision on all of them. A piece's series is built from the exact kernel at
// kFluxNodes Chebyshev nodes when a point first falls in it (BuildFluxPiece: a function of r, the
// law and the piece only, so every point's flux is a function of its own b, r and law, whatever
// the order, chunking or thread count in which points are evaluated), and is used only if its
// last coefficients are at the nodes' rounding level (else that piece is evaluated exactly); terms
// below kFluxTail are dropped. Points nearer a contact than L 2^-kFluxDepth and non-finite b are
// evaluated exactly; b >= 1 + r has flux exactly 1. Light curves with r >= 1 are evaluated
// exactly, and so are short ones (the caller decides: jaxext/transit.py). Host code (the CUDA
// kernel runs the exact occultation per point); tests/transit_test.py checks it against the exact
// kernel dense in b.
// ---------------------------------------------------------------------------------------------
constexpr int kFluxDepth = 32;
constexpr int kFluxPieces = 3 * kFluxDepth;
constexpr int kFluxOne = kFluxPieces;        // b >= 1 + r: deficit 0
constexpr int kFluxExact = kFluxPieces + 1;  // evaluated by the exact kernel
constexpr int kFluxNodes = 24;
constexpr double kFluxNoise = 2e-16;
constexpr double kFluxTail = 1e-17;

struct FluxSeries {
  double r;
  double s0_hi, s0_lo, s2_hi, s2_lo;  // 1 - r and 1 + r as unevaluated sums (exact)
  double inv_l0, inv_r;               // 1 / (1 - r), 1 / r
  // Per piece (and kFluxOne): the series' terms and coefficients (zero beyond terms), once built.
  // (kFluxExact has no row: callers evaluate its points exactly without looking here.)
  int terms[kFluxPieces + 1];
  double c[kFluxPieces + 1][kFluxNodes];
};

JAXEXT_HD void TwoSum(double a, double b, double* hi, double* lo) {
  const double s = a + b, bb = s - a;
  *hi = s;
  *lo = (a - (s - bb)) + (b - bb);
}

// A table for radius r with no piece built (kFluxOne: the empty series).
inline void InitFluxSeries(double r, FluxSeries* s) {
  s->r = r;
  TwoSum(1.0, -r, &s->s0_hi, &s->s0_lo);
  TwoSum(1.0, r, &s->s2_hi, &s->s2_lo);
  s->inv_l0 = 1.0 / (1.0 - r);
  s->inv_r = 1.0 / r;
  s->terms[kFluxOne] = 0;
  for (int k = 0; k < kFluxNodes; ++k) s->c[kFluxOne][k] = 0.0;
}

// The piece of b (as a double: kFluxOne, kFluxExact or side * kFluxDepth + k) and x in it.
// Branch-free, for the CPU's lane loops.
inline void LocateFlux(const FluxSeries& s, double b, double* piece, double* x) {
  // (Every field read unconditionally, then selects: no branches, no conditional loads, so the
  // CPU's lane loops vectorise.)
  const double s0_hi = s.s0_hi, s0_lo = s.s0_lo, s2_hi = s.s2_hi, s2_lo = s.s2_lo;
  const double inv_l0 = s.inv_l0, inv_r = s.inv_r;
  const double d0 = (s0_hi - b) + s0_lo, d1 = (b - s0_hi) - s0_lo, d2 = (s2_hi - b) + s2_lo;
  const double side = (b >= s0_hi ? 1.0 : 0.0) + (b >= 1.0 ? 1.0 : 0.0);
  const double d = side == 2.0 ? d2 : (side == 1.0 ? d1 : d0);
  const double t = d * (side == 0.0 ? inv_l0 : inv_r);
  std::uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  // k = -1 - floor(log2 t) from the exponent field (the 2^52 trick: no integer conversion), and
  // the mantissa in [1/2, 1), t 2^k.
  const std::uint64_t ebits = ((bits >> 52) & 0x7ffull) | 0x4330000000000000ull;
  const std::uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3fe0000000000000ull;
  double ebiased, mant;
  std::memcpy(&ebiased, &ebits, sizeof ebiased);
  std::memcpy(&mant, &mbits, sizeof mant);
  const double k = 1022.0 - (ebiased - 0x1p52);
  // t = 1 (d = L, the far end of piece 0) has k = -1: it is x = 1 of piece 0.
  *x = t >= 1.0 ? 1.0 : 4.0 * mant - 3.0;
  const double in_piece = side * kFluxDepth + (t >= 1.0 ? 0.0 : k);
  const double other = b >= s2_hi ? 1.0 * kFluxOne : 1.0 * kFluxExact;
  *piece = ((t > 0.0) & (t <= 1.0) & (k < kFluxDepth)) ? in_piece : other;
}
// The exact occultation at n values of b for radius r (and, if kGrad, its derivatives in b, r
// and u, as limbdark::Evaluate gives them; null pointers otherwise): the lane path for laws of
// order <= 2, blocks of limbdark::kLanes. Always inlined: each of the CPU handler's per-CPU clones
// gets its own vector code.
template <bool kGrad>
inline __attribute__((always_inline)) void ExactFlux(double r, const limbdark::Law& law,
                                                     const double* b, int n, double* f,
                                                     double* fb, double* fr, double* fu) {
  const int order = law.order;
  if (order <= 2) {
    for (int j = 0; j < n; j += limbdark::kLanes) {
      const int c = n - j < limbdark::kLanes ? n - j : limbdark::kLanes;
      limbdark::EvaluateLanes<kGrad, double>(b + j, &r, 0, c, law, f + j, kGrad ? fb + j : nullptr,
                                             kGrad ? fr + j : nullptr,
                                             kGrad ? fu + j * order : nullptr);
    }
  } else {
    for (int j = 0; j < n; ++j) {
      limbdark::Evaluate<kGrad>(b[j], r, law, &f[j], kGrad ? fb + j : nullptr,
                                kGrad ? fr + j : nullptr, kGrad ? fu + j * order : nullptr);
    }
  }
}

// Builds the series of `piece` < kFluxPieces into s->c[piece], s->terms[piece]: whether it
// converged (else the piece is evaluated exactly). A function of r, the law and the piece only;
// never inlined, so that one compiled copy (the same instructions, the same rounding) builds every
// piece whichever call site gets there first.
#if defined(__GNUC__)
__attribute__((noinline))
#endif
inline bool BuildFluxPiece(FluxSeries* s, const limbdark::Law& law, int piece) {
  static const struct Table {  // cos(pi m / (2 kFluxNodes)), m < 4 kFluxNodes
    double v[4 * kFluxNodes];
    Table() {
      for (int m = 0; m < 4 * kFluxNodes; ++m) v[m] = cos(kPi * m / (2 * kFluxNodes));
    }
  } table;
  const int side = piece / kFluxDepth, k = piece % kFluxDepth;
  const double len = side == 0 ? 1.0 - s->r : s->r;
  const double scale = ldexp(len, -k) * 0.25;  // d = scale (x + 3)
  double b[kFluxNodes], f[kFluxNodes];
  for (int j = 0; j < kFluxNodes; ++j) {
    const double d = scale * (table.v[2 * j + 1] + 3.0);
    b[j] = side == 0 ? (s->s0_hi - d) + s->s0_lo
                     : (side == 1 ? (s->s0_hi + d) + s->s0_lo : (s->s2_hi - d) + s->s2_lo);
  }
  ExactFlux<false>(s->r, law, b, kFluxNodes, f, nullptr, nullptr, nullptr);
  bool finite = true;
  for (int j = 0; j < kFluxNodes; ++j) {
    f[j] = 1.0 - f[j];  // the deficit: coefficients free of the constant's rounding
    finite = finite && Finite(f[j]);
  }
  if (!finite) return false;
  double* c = s->c[piece];
  int last = 0;
  for (int m = 0; m < kFluxNodes; ++m) {
    double acc = 0.0;
    for (int j = 0; j < kFluxNodes; ++j) acc += f[j] * table.v[(m * (2 * j + 1)) % (4 * kFluxNodes)];
    c[m] = acc * ((m == 0 ? 1.0 : 2.0) / kFluxNodes);
    if (m >= kFluxNodes - 6 && !(fabs(c[m]) < kFluxNoise)) return false;  // not converged
    if (fabs(c[m]) >= kFluxTail) last = m;
  }
  for (int m = last + 1; m < kFluxNodes; ++m) c[m] = 0.0;
  s->terms[piece] = last + 1;
  return true;
}

// A point far outside the disks' reach: flux exactly 1 on every path of the occultation kernel.
JAXEXT_HD double FarAway(const Orbit& o) { return 2.0 * (1.0 + o.q[kRadius]) + 2.0; }

// The sub-exposure offset o_k (in units of texp).
JAXEXT_HD double Offset(int k, int oversample) {
  return (k + 0.5) / oversample - 0.5;
}

// The per-sub-exposure work in three branch-free steps, so that a loop over sub-exposures of one
// light curve vectorises each step (the CPU handler runs them as separate lane loops, skipping the
// last two when no sub-exposure of a block is in the window; the CUDA kernel calls Separation).
//
// 1. Phase: mean anomaly M and whether the sub-exposure at time t_sub can be in transit.
//    `dt` = t_sub - t0 (kept for the derivative in n). Non-finite phases count as in the window
//    (their NaN flows through to the flux). Flags are 0/1 integers of a double's width, so that
//    the CPU's lane loops vectorise.
JAXEXT_HD void Phase(const Orbit& o, double t_sub, double* dt, double* M, int64_t* in_window) {
  const double* q = o.q;
  *dt = t_sub - q[kT0];
  const double phi = q[kN] * *dt;
  const double psi = Reduce(phi);
  *M = q[kMtr] + psi;
  *in_window = static_cast<int64_t>(!Finite(phi)) |
               (static_cast<int64_t>(o.can_transit) & static_cast<int64_t>(psi >= o.psi_lo) &
                static_cast<int64_t>(psi <= o.psi_hi));
}

// 2. sin E and cos E (E = M on circular orbits).
JAXEXT_HD void Anomaly(const Orbit& o, double M, double* sE, double* cE) {
  if (o.circular) {
    kepler::sincos(M, sE, cE);
  } else {
    kepler::solve(M, o.q[kEcc], sE, cE);
  }
}

// 3. b, whether the occultation must be evaluated (`active`; otherwise the flux is 1: out of the
//    window or behind the star; b is then FarAway), and if kGrad db/dq at db_dq[m * stride]
//    (zeros where inactive). NaN b (active) for invalid light curves and non-finite times.
template <bool kGrad>
JAXEXT_HD double Geometry(const Orbit& o, double dt, double offset, double sE, double cE,
                          int64_t in_window, int64_t* active, double* db_dq, int64_t stride) {
  const double* q = o.q;
  const double e = q[kEcc];
  const double X = cE - e, Y = o.s1 * sE;
  const double sw = q[kSinW], cw = q[kCosW], ci = q[kCosI], a = q[kA];
  const double U = cw * X - sw * Y, V = sw * X + cw * Y;
  const double x = -a * U, y = -a * ci * V;
  const double b_orbit = sqrt(x * x + y * y);
  const int64_t finite = static_cast<int64_t>(o.valid) & static_cast<int64_t>(Finite(b_orbit));
  const int64_t on = in_window & static_cast<int64_t>(V > 0.0);
  *active = on | (1 - finite);
  const double b = finite == 0 ? NAN : (on != 0 ? b_orbit : FarAway(o));
  if (kGrad) {
    const double inv_b = (on != 0 && b_orbit > 0.0) ? 1.0 / b_orbit : 0.0;  // 0 where inactive
    const double D = 1.0 - e * cE;
    const double X_E = -sE, Y_E = o.s1 * cE;
    const double U_E = cw * X_E - sw * Y_E, V_E = sw * X_E + cw * Y_E;
    // db = (x dx + y dy) / b with dx = -a dU - U da, dy = -a ci dV - a V dci - ci V da.
    const double b_U = -a * x * inv_b, b_V = -a * ci * y * inv_b;
    const double b_M = (b_U * U_E + b_V * V_E) / D;
    db_dq[kN * stride] = b_M * dt;
    db_dq[kT0 * stride] = -b_M * q[kN];
    db_dq[kMtr * stride] = b_M;
    db_dq[kTexp * stride] = b_M * q[kN] * offset;
    db_dq[kA * stride] = inv_b > 0.0 ? b_orbit / a : 0.0;
    db_dq[kCosI * stride] = -a * V * y * inv_b;
    // e: through E (dE/de = sin E / D) and explicitly (dX/de = -1, dY/de = -e sin E / s1).
    const double X_e = -1.0, Y_e = o.s1 > 0.0 ? -e * sE / o.s1 : 0.0;
    db_dq[kEcc * stride] = b_M * sE + b_U * (cw * X_e - sw * Y_e) + b_V * (sw * X_e + cw * Y_e);
    db_dq[kSinW * stride] = b_U * (-Y) + b_V * X;
    db_dq[kCosW * stride] = b_U * X + b_V * Y;
    db_dq[kRadius * stride] = 0.0;
  }
  return b;
}

// The three steps for one sub-exposure (db_dq contiguous).
template <bool kGrad>
JAXEXT_HD double Separation(const Orbit& o, double t, double offset, bool* active,
                            double* db_dq) {
  double dt, M, sE = 0.0, cE = 1.0;
  int64_t in_window, on;
  Phase(o, t + o.q[kTexp] * offset, &dt, &M, &in_window);
  if (in_window) Anomaly(o, M, &sE, &cE);
  const double b = Geometry<kGrad>(o, dt, offset, sE, cE, in_window, &on, db_dq, 1);
  *active = on != 0;
  return b;
}

}  // namespace transit
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_TRANSIT_H_
