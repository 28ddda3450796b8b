// Calls jaxext's Kepler math header from another repository's C++ code.
#include <cmath>
#include <cstdio>

#include "jaxext/kernels/kepler.h"

int main() {
  int failures = 0;
  const double cases[][2] = {{0.5, 0.1}, {2.0, 0.6}, {-3.0, 0.9}, {1e-9, 0.999999}};
  for (const auto& c : cases) {
    double s, co;
    jaxext::kepler::solve<double>(c[0], c[1], &s, &co);
    const double E = std::atan2(s, co);
    const double residual = std::fabs(E - c[1] * std::sin(E) - c[0]);
    std::printf("M=%g e=%g -> sin E=%.17g cos E=%.17g residual=%.3g\n", c[0], c[1], s, co, residual);
    if (!(residual < 1e-14)) ++failures;
  }
  double s, co;
  jaxext::kepler::solve<double>(1.0, 1.5, &s, &co);
  if (!std::isnan(s) || !std::isnan(co)) ++failures;
  return failures ? 1 : 0;
}
