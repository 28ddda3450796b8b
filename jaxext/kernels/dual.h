// Forward-mode dual numbers with K derivative components: a function written for a generic scalar
// evaluated on Duals gives its value and its exact partial derivatives (used for the Jacobians of
// the built-in ODE models, jaxext/kernels/orbit.h, and for the derivatives of the arc moments of
// the limb-darkening integrals, jaxext/kernels/limbdark.h). Only what those use is defined. Values
// are computed with the same operations as in plain T, so they round identically (a model's
// derivative run takes the same steps as its plain run). Comparisons compare values only, so that
// branches go the way the plain run goes.
#ifndef JAXEXT_KERNELS_DUAL_H_
#define JAXEXT_KERNELS_DUAL_H_

#include <cmath>

#include "jaxext/kernels/platform.h"

namespace jaxext {

// The overloads below would hide the standard ones inside namespace jaxext: keep both visible.
using std::exp;
using std::sqrt;

template <typename T, int K>
struct Dual {
  using Scalar = T;
  T v;
  T d[K];

  JAXEXT_HD Dual() : v(0) {
    for (int k = 0; k < K; ++k) d[k] = 0;
  }
  JAXEXT_HD Dual(T value) : v(value) {  // NOLINT: constants promote implicitly
    for (int k = 0; k < K; ++k) d[k] = 0;
  }
  // The independent variable number `k` with value `value`.
  JAXEXT_HD static Dual Variable(T value, int k) {
    Dual x(value);
    if (k >= 0 && k < K) x.d[k] = 1;
    return x;
  }
  JAXEXT_HD Dual& operator+=(const Dual& b) {
    v += b.v;
    for (int k = 0; k < K; ++k) d[k] += b.d[k];
    return *this;
  }
  JAXEXT_HD Dual& operator*=(T s) {  // by a constant
    v *= s;
    for (int k = 0; k < K; ++k) d[k] *= s;
    return *this;
  }
};

// Constants mixed with Duals are taken as T (int, float or double alike: the scalar parameter is
// not deduced, so an int constant converts as it would in plain T arithmetic).
template <typename D>
using DualScalar = typename D::Scalar;

template <typename T, int K>
JAXEXT_HD Dual<T, K> operator-(const Dual<T, K>& a) {
  Dual<T, K> r;
  r.v = -a.v;
  for (int k = 0; k < K; ++k) r.d[k] = -a.d[k];
  return r;
}

template <typename T, int K>
JAXEXT_HD Dual<T, K> operator+(const Dual<T, K>& a, const Dual<T, K>& b) {
  Dual<T, K> r;
  r.v = a.v + b.v;
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] + b.d[k];
  return r;
}

template <typename T, int K>
JAXEXT_HD Dual<T, K> operator-(const Dual<T, K>& a, const Dual<T, K>& b) {
  Dual<T, K> r;
  r.v = a.v - b.v;
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] - b.d[k];
  return r;
}

template <typename T, int K>
JAXEXT_HD Dual<T, K> operator*(const Dual<T, K>& a, const Dual<T, K>& b) {
  Dual<T, K> r;
  r.v = a.v * b.v;
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] * b.v + a.v * b.d[k];
  return r;
}

template <typename T, int K>
JAXEXT_HD Dual<T, K> operator/(const Dual<T, K>& a, const Dual<T, K>& b) {
  Dual<T, K> r;
  r.v = a.v / b.v;  // the value exactly as in plain arithmetic (same rounding as the model in T)
  for (int k = 0; k < K; ++k) r.d[k] = (a.d[k] - r.v * b.d[k]) / b.v;
  return r;
}

// Mixed with constants of T.
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator+(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) {
  return a + Dual<T, K>(b);
}
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator+(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) {
  return Dual<T, K>(a) + b;
}
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator-(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) {
  return a - Dual<T, K>(b);
}
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator-(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) {
  return Dual<T, K>(a) - b;
}
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator*(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) {
  Dual<T, K> r;
  r.v = a.v * b;
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] * b;
  return r;
}
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator*(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return b * a; }
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator/(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) {
  Dual<T, K> r;
  r.v = a.v / b;
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] / b;
  return r;
}
template <typename T, int K>
JAXEXT_HD Dual<T, K> operator/(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) {
  return Dual<T, K>(a) / b;
}

// Comparisons of values (the derivatives play no part).
template <typename T, int K>
JAXEXT_HD bool operator<(const Dual<T, K>& a, const Dual<T, K>& b) { return a.v < b.v; }
template <typename T, int K>
JAXEXT_HD bool operator<(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) { return a.v < b; }
template <typename T, int K>
JAXEXT_HD bool operator<(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return a < b.v; }
template <typename T, int K>
JAXEXT_HD bool operator<=(const Dual<T, K>& a, const Dual<T, K>& b) { return a.v <= b.v; }
template <typename T, int K>
JAXEXT_HD bool operator<=(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) { return a.v <= b; }
template <typename T, int K>
JAXEXT_HD bool operator<=(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return a <= b.v; }
template <typename T, int K>
JAXEXT_HD bool operator>(const Dual<T, K>& a, const Dual<T, K>& b) { return a.v > b.v; }
template <typename T, int K>
JAXEXT_HD bool operator>(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) { return a.v > b; }
template <typename T, int K>
JAXEXT_HD bool operator>(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return a > b.v; }
template <typename T, int K>
JAXEXT_HD bool operator>=(const Dual<T, K>& a, const Dual<T, K>& b) { return a.v >= b.v; }
template <typename T, int K>
JAXEXT_HD bool operator>=(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) { return a.v >= b; }
template <typename T, int K>
JAXEXT_HD bool operator>=(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return a >= b.v; }
template <typename T, int K>
JAXEXT_HD bool operator==(const Dual<T, K>& a, const Dual<T, K>& b) { return a.v == b.v; }
template <typename T, int K>
JAXEXT_HD bool operator==(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) { return a.v == b; }
template <typename T, int K>
JAXEXT_HD bool operator==(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return a == b.v; }
template <typename T, int K>
JAXEXT_HD bool operator!=(const Dual<T, K>& a, const Dual<T, K>& b) { return a.v != b.v; }
template <typename T, int K>
JAXEXT_HD bool operator!=(const Dual<T, K>& a, DualScalar<Dual<T, K>> b) { return a.v != b; }
template <typename T, int K>
JAXEXT_HD bool operator!=(DualScalar<Dual<T, K>> a, const Dual<T, K>& b) { return a != b.v; }

// 0.5 / x where x > 0, else 0 (lane by lane for jaxext/kernels/lanes.h's Lanes, which defines
// its own).
template <typename T>
JAXEXT_HD T HalfInverseOfPositive(T x) {
  return x > T(0) ? T(0.5) / x : T(0);
}

// T: float, double, or SIMD lanes of them (jaxext/kernels/lanes.h; their sqrt and exp are found
// by argument-dependent lookup).
template <typename T, int K>
JAXEXT_HD Dual<T, K> sqrt(const Dual<T, K>& a) {
  Dual<T, K> r;
  r.v = sqrt(a.v);
  // At 0 the derivative is taken as 0: the models use sqrt for norms |v| that only enter as
  // |v| v, smooth with zero derivative there (air at rest relative to the object).
  const T half_inv = HalfInverseOfPositive(r.v);
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] * half_inv;
  return r;
}

template <typename T, int K>
JAXEXT_HD Dual<T, K> exp(const Dual<T, K>& a) {
  Dual<T, K> r;
  r.v = exp(a.v);
  for (int k = 0; k < K; ++k) r.d[k] = a.d[k] * r.v;
  return r;
}

template <typename T>
JAXEXT_HD T Value(T x) { return x; }
template <typename T, int K>
JAXEXT_HD T Value(const Dual<T, K>& x) { return x.v; }

// Dual numbers of SIMD lanes carry as many independent values as their lanes.
template <typename T, int K>
struct LaneCount<Dual<T, K>> {
  static constexpr int value = LaneCount<T>::value;
};

}  // namespace jaxext

#endif  // JAXEXT_KERNELS_DUAL_H_
