// Calls jaxext's limb-darkening math header from another repository's C++ code.
#include <cmath>
#include <cstdio>

#include "jaxext/kernels/limbdark.h"

int main() {
  namespace ld = jaxext::limbdark;
  int failures = 0;
  // Uniform disk: 1 - lens area / pi, the lens area from the textbook formula.
  ld::Law uniform;
  ld::MakeLaw<double>(nullptr, 0, &uniform);
  const double b = 0.95, r = 0.2;
  const double k0 = std::acos((r * r + b * b - 1) / (2 * b * r));
  const double k1 = std::acos((1 - r * r + b * b) / (2 * b));
  const double lens = r * r * k0 + k1 - 0.5 * std::sqrt(4 * b * b - std::pow(1 + b * b - r * r, 2));
  double f, fb, fr, fu[ld::kMaxOrder];
  ld::Evaluate<true>(b, r, uniform, &f, &fb, &fr, fu);
  std::printf("uniform b=%g r=%g: flux=%.17g expected=%.17g\n", b, r, f, 1 - lens / M_PI);
  if (!(std::fabs(f - (1 - lens / M_PI)) < 1e-14)) ++failures;
  // Quadratic law, small planet: deficit -> r^2 I(mu) / (pi <I>) / pi * pi.
  const double u[2] = {0.4, 0.26};
  ld::Law quad;
  ld::MakeLaw<double>(u, 2, &quad);
  const double rs = 1e-4, bs = 0.6, mu = std::sqrt(1 - bs * bs);
  const double intensity = 1 - u[0] * (1 - mu) - u[1] * (1 - mu) * (1 - mu);
  const double mean = 1 - u[0] / 3 - u[1] / 6;
  ld::Evaluate<false>(bs, rs, quad, &f, nullptr, nullptr, nullptr);
  const double want = rs * rs * intensity / mean;
  std::printf("quadratic small planet: deficit=%.17g expected=%.17g\n", 1 - f, want);
  if (!(std::fabs((1 - f) / want - 1) < 1e-6)) ++failures;
  ld::Evaluate<false>(0.5, -0.1, quad, &f, nullptr, nullptr, nullptr);
  if (!std::isnan(f)) ++failures;
  return failures ? 1 : 0;
}
