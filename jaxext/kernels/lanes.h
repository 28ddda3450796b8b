// SIMD lanes: L values of T side by side as one GCC vector, with the arithmetic the math headers'
// generic code uses (+ - * /, sqrt, fabs, a max, exp lane by lane), so that a function written
// for a scalar type evaluates L independent problems at once: the built-in orbit models and their
// dual-number Jacobians for L trajectories (jaxext/cpu/ode_cpu.cc), and dop853.h's stage sums and
// error norms of L interleaved integrators (StageLanes, ErrorNormLanes; Load and Store move L
// consecutive values). Each lane rounds exactly as plain T: these are IEEE operations lane by
// lane. What is not one vector operation (orbit.h's table lookup, and its exp for plain lanes) is
// written per lane by the math header, through LaneCount (platform.h). Compile users with
// -ffp-contract=off so that no multiply-add is fused in the vector code where the scalar code has
// none. Host compilers only.
#ifndef JAXEXT_KERNELS_LANES_H_
#define JAXEXT_KERNELS_LANES_H_

#include <cmath>
#include <cstring>
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
    return Build([x](int l) { return x[l]; }, std::make_integer_sequence<int, L>());
  }
  JAXEXT_HD T operator[](int l) const { return v[l]; }
  // L consecutive values in memory (any alignment), and back.
  JAXEXT_HD static Lanes Load(const T* x) {
    Lanes r;
    std::memcpy(&r.v, x, sizeof(V));
    return r;
  }
  JAXEXT_HD void Store(T* x) const { std::memcpy(x, &v, sizeof(V)); }

  JAXEXT_HD friend Lanes operator+(Lanes a, Lanes b) { return Of(a.v + b.v); }
  JAXEXT_HD friend Lanes operator-(Lanes a, Lanes b) { return Of(a.v - b.v); }
  JAXEXT_HD friend Lanes operator*(Lanes a, Lanes b) { return Of(a.v * b.v); }
  JAXEXT_HD friend Lanes operator/(Lanes a, Lanes b) { return Of(a.v / b.v); }
  JAXEXT_HD friend Lanes operator-(Lanes a) { return Of(-a.v); }
  JAXEXT_HD Lanes& operator+=(Lanes b) {
    v += b.v;
    return *this;
  }
  // a > b ? a : b lane by lane, as the scalar code spells max.
  JAXEXT_HD static Lanes Max(Lanes a, Lanes b) { return Of(a.v > b.v ? a.v : b.v); }
  JAXEXT_HD friend Lanes fabs(Lanes a) {  // the sign bits cleared
    Lanes r;
    for (int l = 0; l < L; ++l) r.v[l] = std::fabs(a.v[l]);
    return r;
  }
  JAXEXT_HD friend Lanes exp(Lanes a) {  // glibc's exp lane by lane (no vector exp)
    T e[L];
    for (int l = 0; l < L; ++l) e[l] = std::exp(a.v[l]);
    return FromArray(e);
  }
  // dual.h's derivative of sqrt: 0.5 / x where x > 0, else 0.
  JAXEXT_HD friend Lanes HalfInverseOfPositive(Lanes x) {
    return Of(x.v > T(0) ? T(0.5) / x.v : V{});
  }
  JAXEXT_HD friend Lanes sqrt(Lanes a) {  // one vector square root (-fno-math-errno)
    Lanes r;
    for (int l = 0; l < L; ++l) r.v[l] = std::sqrt(a.v[l]);
    return r;
  }

 private:
  template <typename Lane, int... l>
  JAXEXT_HD static Lanes Build(Lane lane, std::integer_sequence<int, l...>) {
    return Of(V{lane(l)...});
  }
};

template <typename T, int L>
struct LaneCount<Lanes<T, L>> {
  static constexpr int value = L;
};

}  // namespace jaxext

#endif  // JAXEXT_KERNELS_LANES_H_
