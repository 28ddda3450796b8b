// SIMD lanes: L values of T side by side as one GCC vector, with the arithmetic the math headers'
// generic code uses (+ - * /, sqrt, exp), so that a function written for a scalar type evaluates L
// independent problems at once (jaxext/cpu/ode_cpu.cc: the built-in orbit models for L
// trajectories). Each lane rounds exactly as plain T: + - * / and sqrt are IEEE operations lane by
// lane, and exp is std::exp per lane. Compile users with -ffp-contract=off so that no multiply-add
// is fused in the vector code where the scalar code has none. Host compilers only (GCC, Clang).
#ifndef JAXEXT_KERNELS_LANES_H_
#define JAXEXT_KERNELS_LANES_H_

#include <cmath>
#include <utility>

#include "jaxext/kernels/platform.h"

namespace jaxext {

// The GCC vector type of L values of T (a vector_size attribute on a dependent type is ignored
// inside a template: spelled out per type).
template <typename T, int L>
struct VectorOf;
template <int L>
struct VectorOf<float, L> {
  typedef float type __attribute__((vector_size(4 * L)));
};
template <int L>
struct VectorOf<double, L> {
  typedef double type __attribute__((vector_size(8 * L)));
};

template <typename T, int L>
struct Lanes {
  using V = typename VectorOf<T, L>::type;
  V v;

  Lanes() = default;
  // Constants broadcast implicitly (s - 0 keeps the sign of a zero, as s + 0 would not).
  JAXEXT_HD Lanes(T s) : v(s - V{}) {}  // NOLINT
  JAXEXT_HD static Lanes Of(V x) {
    Lanes r;
    r.v = x;
    return r;
  }
  // The lanes x[0], ..., x[L - 1], built in registers (writing lanes one by one into a vector in
  // memory and then loading it whole stalls on store-to-load forwarding).
  JAXEXT_HD static Lanes FromArray(const T* x) {
    return FromArray(x, std::make_integer_sequence<int, L>());
  }
  template <int... l>
  JAXEXT_HD static Lanes FromArray(const T* x, std::integer_sequence<int, l...>) {
    return Of(V{x[l]...});
  }
  JAXEXT_HD T operator[](int l) const { return v[l]; }

  JAXEXT_HD friend Lanes operator+(Lanes a, Lanes b) { return Of(a.v + b.v); }
  JAXEXT_HD friend Lanes operator-(Lanes a, Lanes b) { return Of(a.v - b.v); }
  JAXEXT_HD friend Lanes operator*(Lanes a, Lanes b) { return Of(a.v * b.v); }
  JAXEXT_HD friend Lanes operator/(Lanes a, Lanes b) { return Of(a.v / b.v); }
  JAXEXT_HD friend Lanes operator-(Lanes a) { return Of(-a.v); }
  JAXEXT_HD Lanes& operator+=(Lanes b) {
    v += b.v;
    return *this;
  }
  JAXEXT_HD friend Lanes sqrt(Lanes a) {  // one vector square root (-fno-math-errno)
    Lanes r;
    for (int l = 0; l < L; ++l) r.v[l] = std::sqrt(a.v[l]);
    return r;
  }
  JAXEXT_HD friend Lanes exp(Lanes a) {
    T r[L];
    for (int l = 0; l < L; ++l) r[l] = std::exp(a.v[l]);
    return FromArray(r);
  }
};

template <typename T, int L>
struct LaneCount<Lanes<T, L>> {
  static constexpr int value = L;
};

}  // namespace jaxext

#endif  // JAXEXT_KERNELS_LANES_H_
