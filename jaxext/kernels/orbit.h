// Built-in right-hand sides of jaxext.ode: Cowell's method for an Earth orbiter. The state is
// (x, y, z, vx, vy, vz) in an inertial frame whose z axis is the planet's rotation axis.
//
//   two-body        a = -mu r / |r|^3
//   zonal J2, J3, J4 (the gradient of  mu/r sum_n J_n (R/r)^n P_n(z/r), subtracted from the central
//                   term; the textbook component formulas)
//   drag            a = -1/2 B rho(h) |v_rel| v_rel,   v_rel = v - omega x r  (co-rotating air),
//                   h = |r| - R (spherical planet), B = C_d A / m per trajectory (its parameter 0),
//                   rho piecewise exponential: rho0_b exp(-(h - h0_b) / H_b) in the band with the
//                   largest base h0_b <= h (the first band below its base)
//
// Units: any consistent length and time units for positions, velocities, mu and R (jaxext.ode.models
// uses km and s); density in kg/m^3 and B in m^2/kg, with `meters_per_unit` converting rho B (1/m) to
// the length unit (1000 for km).
//
// The constants travel as one array of doubles (jaxext/ode/models.py writes it; Decode reads it):
//   [mu, R, J2, J3, J4, drag (0/1), meters_per_unit, omega, bands, h0[bands], rho0[bands], H[bands]]
#ifndef JAXEXT_KERNELS_ORBIT_H_
#define JAXEXT_KERNELS_ORBIT_H_

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "jaxext/kernels/dual.h"
#include "jaxext/kernels/platform.h"

namespace jaxext {
namespace orbit {

constexpr int kStateSize = 6;
constexpr int kMaxBands = 32;
constexpr int kHeader = 9;  // constants before the atmosphere's bands

template <typename T>
struct Model {
  T mu = 0, radius = 0, j2 = 0, j3 = 0, j4 = 0;
  bool drag = false;
  T drag_scale = 0;  // meters_per_unit / 2
  T omega = 0;
  int bands = 0;
  T h0[kMaxBands], rho0[kMaxBands], inv_scale_height[kMaxBands];

  // False when the array is malformed (wrong length or too many bands).
  JAXEXT_HD_FUNC bool Decode(const double* c, int64_t size) {
    if (size < kHeader) return false;
    mu = T(c[0]);
    radius = T(c[1]);
    j2 = T(c[2]);
    j3 = T(c[3]);
    j4 = T(c[4]);
    drag = c[5] != 0;
    drag_scale = T(c[6] / 2);
    omega = T(c[7]);
    bands = static_cast<int>(c[8]);
    if (bands < 0 || bands > kMaxBands || size != kHeader + 3 * bands) return false;
    if (drag && bands == 0) return false;
    for (int b = 0; b < bands; ++b) {
      if (b > 0 && !(c[kHeader + b] > c[kHeader + b - 1])) return false;  // bases ascend
      h0[b] = T(c[kHeader + b]);
      rho0[b] = T(c[kHeader + bands + b]);
      inv_scale_height[b] = T(1 / c[kHeader + 2 * bands + b]);
    }
    return true;
  }

  // Parameters each trajectory needs (B for drag).
  JAXEXT_HD int num_params() const { return drag ? 1 : 0; }

  // S: T, jaxext::Dual<T, K> for the Jacobian (jaxext/kernels/dual.h), SIMD lanes of T
  // (jaxext/kernels/lanes.h: each lane its own band and std::exp, so each rounds as in plain T),
  // or dual numbers of SIMD lanes.
  template <typename S>
  JAXEXT_HD S Density(const S& altitude) const {
    if constexpr (LaneCount<S>::value > 1) {
      // Each lane's band as the number of bases above the first at or below its altitude (the
      // bases ascend: Decode checks), counted branch-free over all lanes at once; then the
      // scalar formula with each lane's band constants: lane by lane for plain lanes (measured
      // 10% faster for the whole integration than vector arithmetic around a per-lane exp), as
      // vectors for dual numbers of lanes.
      constexpr int L = LaneCount<S>::value;
      using Vector = decltype(Value(altitude));  // the lanes of T (of S's values)
      const Vector value = Value(altitude);
      T h[L], above[L], base[L], rho_base[L], inv_height[L];
      for (int l = 0; l < L; ++l) {
        h[l] = value[l];
        above[l] = 0;
      }
      for (int b = 1; b < bands; ++b) {
        for (int l = 0; l < L; ++l) above[l] += h0[b] <= h[l] ? T(1) : T(0);
      }
      for (int l = 0; l < L; ++l) {
        const int b = static_cast<int>(above[l]);
        base[l] = h0[b];
        rho_base[l] = rho0[b];
        inv_height[l] = inv_scale_height[b];
      }
      if constexpr (std::is_same_v<S, Vector>) {
        T rho[L];
        for (int l = 0; l < L; ++l) {
          rho[l] = rho_base[l] * std::exp((base[l] - h[l]) * inv_height[l]);
        }
        return S::FromArray(rho);
      } else {
        return Vector::FromArray(rho_base) *
               exp((Vector::FromArray(base) - altitude) * Vector::FromArray(inv_height));
      }
    } else {
      using std::exp;
      int b = 0;
      while (b + 1 < bands && h0[b + 1] <= altitude) ++b;
      return rho0[b] * exp((h0[b] - altitude) * inv_scale_height[b]);
    }
  }

  // dydt = f(t, y; p), in T, in dual numbers, or in SIMD lanes (several trajectories at once).
  template <typename S>
  JAXEXT_HD_CLONED void operator()(T /*t*/, const S* y, const S* p, S* dydt) const {
    using std::exp;
    using std::sqrt;
    const S x = y[0], yy = y[1], z = y[2];
    const S r2 = x * x + yy * yy + z * z;
    const S r = sqrt(r2);
    const S inv_r2 = T(1) / r2;
    const S mu_r3 = mu / (r2 * r);
    S ax = -mu_r3 * x, ay = -mu_r3 * yy, az = -mu_r3 * z;
    if (j2 != 0 || j3 != 0 || j4 != 0) {
      const S zr2 = z * z * inv_r2;  // (z/r)^2
      const S rr = radius / r;
      const S mu_r3_rr2 = mu_r3 * rr * rr;  // mu R^2 / r^5
      if (j2 != 0) {
        const S f = T(-1.5) * j2 * mu_r3_rr2;
        const S q = T(1) - T(5) * zr2;
        ax += f * x * q;
        ay += f * yy * q;
        az += f * z * (q + T(2));
      }
      if (j3 != 0) {
        const S f = T(-2.5) * j3 * mu_r3_rr2 * rr / r;  // -5/2 J3 mu R^3 / r^7
        const S q = z * (T(3) - T(7) * zr2);
        ax += f * x * q;
        ay += f * yy * q;
        az += f * r2 * (T(6) * zr2 - T(7) * zr2 * zr2 - T(0.6));
      }
      if (j4 != 0) {
        const S f = j4 * mu_r3_rr2 * rr * rr * T(0.125);  // J4 mu R^4 / r^7 / 8
        ax += T(15) * f * x * (T(1) - T(14) * zr2 + T(21) * zr2 * zr2);
        ay += T(15) * f * yy * (T(1) - T(14) * zr2 + T(21) * zr2 * zr2);
        az += T(5) * f * z * (T(15) - T(70) * zr2 + T(63) * zr2 * zr2);
      }
    }
    if (drag) {
      const S vx = y[3] + omega * yy, vy = y[4] - omega * x, vz = y[5];
      const S v = sqrt(vx * vx + vy * vy + vz * vz);
      const S k = -drag_scale * p[0] * Density(r - radius) * v;
      ax += k * vx;
      ay += k * vy;
      az += k * vz;
    }
    dydt[0] = y[3];
    dydt[1] = y[4];
    dydt[2] = y[5];
    dydt[3] = ax;
    dydt[4] = ay;
    dydt[5] = az;
  }

  // f, df/dy (6 x 6) and df/dp (6 x np) at (t, y; p), row-major, exact: the model evaluated on
  // dual numbers (its values round as in plain T). Only parameter 0 (B) enters the models.
  // S: T, or SIMD lanes of T (several trajectories' Jacobians at once, each as in plain T).
  template <typename S>
  JAXEXT_HD_CLONED void Jacobian(T t, const S* y, const S* p, int64_t np, S* f, S* dfdy,
                                 S* dfdp) const {
    using D = Dual<S, kStateSize + 1>;
    D yd[kStateSize], pd[1], fd[kStateSize];
    for (int i = 0; i < kStateSize; ++i) yd[i] = D::Variable(y[i], i);
    pd[0] = np > 0 ? D::Variable(p[0], kStateSize) : D(S(T(0)));
    (*this)(t, yd, pd, fd);
    for (int i = 0; i < kStateSize; ++i) {
      f[i] = fd[i].v;
      for (int k = 0; k < kStateSize; ++k) dfdy[i * kStateSize + k] = fd[i].d[k];
      for (int64_t c = 0; c < np; ++c) {
        dfdp[i * np + c] = c == 0 ? fd[i].d[kStateSize] : S(T(0));
      }
    }
  }
};

}  // namespace orbit
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_ORBIT_H_
