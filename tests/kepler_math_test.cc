// Tests of jaxext/kernels/kepler.h alone (no XLA, no Python): the residual of Kepler's equation in
// x87 extended precision over adversarial inputs, the domain rules, and the header's own sin/cos,
// cube root and rounding helpers against the C library in extended precision.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "jaxext/kernels/kepler.h"

namespace {

int failures = 0;

#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      ++failures;                                           \
      std::printf("FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                             \
      std::printf("\n");                                    \
    }                                                       \
  } while (0)

using jaxext::kepler::solve;

const long double kTwoPiL = 6.283185307179586476925286766559005768L;

long double Residual(long double m, long double e, long double s, long double c) {
  const long double r = m - kTwoPiL * nearbyintl(m / kTwoPiL);
  const long double E = atan2l(s, c);
  long double res = E - e * sinl(E) - r;
  res -= kTwoPiL * nearbyintl(res / kTwoPiL);
  return fabsl(res);
}

template <typename T>
void ResidualBound(const char* name, double floor, double e_min_gap, int n) {
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double eps = std::numeric_limits<T>::epsilon();
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    double e = (i & 1) ? 1.0 - std::pow(10.0, std::log10(e_min_gap) * u(gen)) : u(gen);
    double m;
    switch (i % 4) {
      case 0: m = (2 * u(gen) - 1) * M_PI; break;
      case 1: m = std::pow(10.0, -20 + 20.5 * u(gen)); break;
      case 2: m = (2 * u(gen) - 1) * 1e6; break;
      default: m = M_PI - std::pow(10.0, -16 * u(gen)); break;
    }
    const T mt = static_cast<T>(m), et = static_cast<T>(e);
    if (!(et < T(1))) continue;
    T s, c;
    solve<T>(mt, et, &s, &c);
    const double tol = floor + std::fabs(static_cast<double>(mt)) * eps;
    const double res = static_cast<double>(Residual(mt, et, s, c));
    if (res / tol > worst) worst = res / tol;
    EXPECT(res <= tol, "%s M=%.17g e=%.17g residual=%.3g tol=%.3g", name, (double)mt, (double)et,
           res, tol);
    if (failures > 10) return;
  }
  std::printf("%s: worst residual / tolerance = %.3f over %d inputs\n", name, worst, n);
}

template <typename T>
void Domain() {
  const T nan = std::numeric_limits<T>::quiet_NaN(), inf = std::numeric_limits<T>::infinity();
  const T bad[][2] = {{1, -0.1}, {1, 1}, {1, 2}, {1, nan}, {1, inf}, {nan, 0.5}, {inf, 0.5},
                      {-inf, 0.5}, {1, -inf}};
  for (const auto& p : bad) {
    T s = 0, c = 0;
    solve<T>(p[0], p[1], &s, &c);
    EXPECT(std::isnan(s) && std::isnan(c), "M=%g e=%g gave %g %g", (double)p[0], (double)p[1],
           (double)s, (double)c);
  }
  T s, c;
  solve<T>(T(0), T(0.999), &s, &c);
  EXPECT(s == T(0) && c == T(1), "M=0 gave %g %g", (double)s, (double)c);
  solve<T>(std::numeric_limits<T>::max(), T(0.5), &s, &c);
  EXPECT(std::isfinite(s) && std::isfinite(c), "M=max gave %g %g", (double)s, (double)c);
}

void Helpers() {
  double worst = 0;
  for (double x = -0.5; x < 4.0; x += 1.1e-5) {
    double s, c;
    jaxext::kepler::sincos<double>(x, &s, &c);
    worst = std::fmax(worst, std::fabs((double)(s - sinl(x))));
    worst = std::fmax(worst, std::fabs((double)(c - cosl(x))));
  }
  EXPECT(worst < 4.5e-16, "double sincos max abs error %.3g", worst);
  float worstf = 0;
  for (float x = -0.5f; x < 4.0f; x += 1.3e-4f) {
    float s, c;
    jaxext::kepler::sincos<float>(x, &s, &c);
    worstf = std::fmax(worstf, std::fabs((float)(s - sinl(x))));
    worstf = std::fmax(worstf, std::fabs((float)(c - cosl(x))));
  }
  EXPECT(worstf < 4e-7f, "float sincos max abs error %.3g", worstf);
  double worst_cbrt = 0;
  for (double x = 1e-300; x < 1e300; x *= 1.0137) {
    worst_cbrt = std::fmax(worst_cbrt, std::fabs(jaxext::kepler::cbrt_positive(x) / std::cbrt(x) - 1));
  }
  EXPECT(worst_cbrt < 2e-6, "cbrt max relative error %.3g", worst_cbrt);
  const double cases[][2] = {{0.5, 0}, {1.5, 2}, {2.5, 2}, {-0.5, -0}, {-1.5, -2}, {1e300, 1e300},
                             {4503599627370497.0, 4503599627370497.0}, {2.7, 3}, {-2.2, -2}};
  for (const auto& p : cases) {
    EXPECT(jaxext::kepler::round_nearest(p[0]) == p[1], "round(%.17g) = %.17g", p[0],
           jaxext::kepler::round_nearest(p[0]));
  }
}

}  // namespace

int main() {
  ResidualBound<double>("float64", 2e-15, 1e-16, 4000000);
  ResidualBound<float>("float32", 1e-6, 1e-7, 2000000);
  Domain<double>();
  Domain<float>();
  Helpers();
  std::printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
