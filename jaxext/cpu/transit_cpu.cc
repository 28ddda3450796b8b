#include "jaxext/cpu/transit_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "jaxext/common/transit_shapes.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/transit.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

// Tens of ns per point in transit, ~1 ns out of it: below this many points a thread hand-off
// costs more than it saves.
constexpr int64_t kGrain = 4096;
// Sub-exposures handled together: their geometry first, then the occultation in lane blocks.
constexpr int kPiece = 64;
constexpr int kQ = transit::kNumParams;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define JAXEXT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define JAXEXT_CPU_CLONES
#endif

// The lane loops of the orbit, as functions of their own (cloned per CPU like the whole loop):
// inside the large loop below GCC leaves them scalar; here each vectorises.
JAXEXT_CPU_CLONES void PhaseLanes(const transit::Orbit& orbit, const double* __restrict ts,
                                  double* __restrict dts, double* __restrict M,
                                  int64_t* __restrict in_window, int n) {
  for (int j = 0; j < n; ++j) transit::Phase(orbit, ts[j], &dts[j], &M[j], &in_window[j]);
}
JAXEXT_CPU_CLONES void KeplerLanes(const double* __restrict M, double e, double* __restrict s,
                                   double* __restrict c, int n) {
  for (int j = 0; j < n; ++j) kepler::solve(M[j], e, &s[j], &c[j]);
}
// sin E, cos E from the orbit's Chebyshev series (Clenshaw), x clamped to [-1, 1]: times out of
// the window get finite values, which are not used.
JAXEXT_CPU_CLONES void ChebyshevLanes(const transit::Orbit& o, const double* __restrict M,
                                      double* __restrict s, double* __restrict c, int n) {
  const double shift = o.q[transit::kMtr] + o.cheb_mid, scale = o.cheb_scale;
  double x2[kPiece], s1[kPiece], s2[kPiece], c1[kPiece], c2[kPiece];
  for (int j = 0; j < n; ++j) {
    double x = (M[j] - shift) * scale;
    x2[j] = 2.0 * (x > 1.0 ? 1.0 : (x < -1.0 ? -1.0 : x));
    s1[j] = s2[j] = c1[j] = c2[j] = 0.0;
  }
  for (int k = o.cheb_n - 1; k >= 1; --k) {  // Clenshaw, the lanes innermost
    const double ck_s = o.cheb_sin[k], ck_c = o.cheb_cos[k];
    for (int j = 0; j < n; ++j) {
      const double ns = x2[j] * s1[j] - s2[j] + ck_s;
      const double nc = x2[j] * c1[j] - c2[j] + ck_c;
      s2[j] = s1[j];
      s1[j] = ns;
      c2[j] = c1[j];
      c1[j] = nc;
    }
  }
  for (int j = 0; j < n; ++j) {
    s[j] = 0.5 * x2[j] * s1[j] - s2[j] + o.cheb_sin[0];
    c[j] = 0.5 * x2[j] * c1[j] - c2[j] + o.cheb_cos[0];
  }
}
JAXEXT_CPU_CLONES void SinCosLanes(const double* __restrict M, double* __restrict s,
                                   double* __restrict c, int n) {
  for (int j = 0; j < n; ++j) kepler::sincos(M[j], &s[j], &c[j]);
}

// What a pass does with each point's flux and derivatives (already averaged over its
// sub-exposures): the four kernel modes. `dq`, `du` are null for ValueSink (kGrad false).
template <typename T>
struct ValueSink {
  static constexpr bool kGrad = false;
  T* flux;
  void Point(int64_t p, int64_t, double f, const double*, const double*, int) {
    flux[p] = static_cast<T>(f);
  }
};

// Per-point derivatives dflux/dq[P, 10], dflux/du[P, n].
template <typename T>
struct GradSink {
  static constexpr bool kGrad = true;
  T *flux, *dq, *du;
  void Point(int64_t p, int64_t, double f, const double* fq, const double* fu, int order) {
    flux[p] = static_cast<T>(f);
    for (int m = 0; m < kQ; ++m) dq[p * kQ + m] = static_cast<T>(fq[m]);
    for (int m = 0; m < order; ++m) du[p * order + m] = static_cast<T>(fu[m]);
  }
};

// Forward mode: the flux's tangent for tangents tt[P] (times), tq[G, 10], tu[G, n].
template <typename T>
struct LinSink {
  static constexpr bool kGrad = true;
  const T *tt, *tq, *tu;
  T* out;
  void Point(int64_t p, int64_t g, double, const double* fq, const double* fu, int order) {
    double acc = -fq[transit::kT0] * static_cast<double>(tt[p]);  // the flux depends on t - t0
    for (int m = 0; m < kQ; ++m) acc += fq[m] * static_cast<double>(tq[g * kQ + m]);
    for (int m = 0; m < order; ++m) acc += fu[m] * static_cast<double>(tu[g * order + m]);
    out[p] = static_cast<T>(acc);
  }
};

// Reverse mode: for a cotangent ct[P], ct_t[P] and, per block of points, the sums of
// ct * dflux/dq and ct * dflux/du (summed over the blocks in order by the caller).
template <typename T>
struct VjpSink {
  static constexpr bool kGrad = true;
  const T* ct;
  T* ct_t;
  double sq[kQ], su[limbdark::kMaxOrder];
  void Point(int64_t p, int64_t, double, const double* fq, const double* fu, int order) {
    const double c = static_cast<double>(ct[p]);
    ct_t[p] = static_cast<T>(-c * fq[transit::kT0]);
    for (int m = 0; m < kQ; ++m) sq[m] += c * fq[m];
    for (int m = 0; m < order; ++m) su[m] += c * fu[m];
  }
};

// Points [begin, end) of light curves sharing per_group points each. Inlined into the
// target_clones wrappers below, so each gets its own vector code.
template <typename Sink, typename T>
inline __attribute__((always_inline)) void TransitLoop(const T* t, const T* q, const T* u,
                                                       const TransitShape& shape, int64_t begin,
                                                       int64_t end, Sink& sink) {
  constexpr bool kGrad = Sink::kGrad;
  const int order = shape.order;
  const int K = shape.oversample;
  const double inv_k = 1.0 / K;
  limbdark::Law law;
  transit::Orbit orbit;
  // Per sub-exposure of a piece (structure of arrays: each step below is a vectorisable loop).
  double ts[kPiece], off[kPiece], dts[kPiece], M[kPiece], sE[kPiece], cE[kPiece], b[kPiece];
  int64_t in_window[kPiece], active[kPiece];  // 0/1, a double's width: the loops vectorise
  double f[kPiece], fb[kPiece], fr[kPiece], fu[kPiece * limbdark::kMaxOrder];
  double db[kGrad ? kQ * kPiece : 1];  // db/dq_m of sub-exposure j at db[m * kPiece + j]
  // Running sums for the point whose sub-exposures are being reduced.
  double acc_f = 0.0, acc_q[kQ], acc_u[limbdark::kMaxOrder];
  for (int64_t i = begin; i < end;) {
    const int64_t g = i / shape.per_group;
    const int64_t stop = std::min(end, (g + 1) * shape.per_group);
    limbdark::MakeLaw(u + g * order, order, &law);
    transit::MakeOrbit(q + g * kQ, law, &orbit);
    bool expanded = false;  // the orbit's Chebyshev series: built when first needed
    const double r = orbit.q[transit::kRadius];
    const double texp = orbit.q[transit::kTexp];
    for (int64_t s = i * K; s < stop * K; s += kPiece) {
      const int cnt = static_cast<int>(std::min<int64_t>(kPiece, stop * K - s));
      if (K == 1) {
        for (int j = 0; j < cnt; ++j) {
          ts[j] = static_cast<double>(t[s + j]);
          off[j] = 0.0;
        }
      } else {  // (point, sub-exposure) counters: no integer division per sub-exposure
        int64_t p = s / K;
        int k = static_cast<int>(s - p * K);
        for (int j = 0; j < cnt; ++j) {
          off[j] = transit::Offset(k, K);
          ts[j] = static_cast<double>(t[p]) + texp * off[j];
          if (++k == K) {
            k = 0;
            ++p;
          }
        }
      }
      PhaseLanes(orbit, ts, dts, M, in_window, cnt);
      int64_t any = 0;
      for (int j = 0; j < cnt; ++j) any |= in_window[j];
      if (any == 0 && orbit.valid) {  // the whole piece out of transit: flux 1
        for (int j = 0; j < cnt; ++j) {
          f[j] = 1.0;
          active[j] = 0;
        }
      } else {
        if (!expanded) {
          transit::ExpandOrbit(&orbit);
          expanded = true;
        }
        if (orbit.circular) {
          SinCosLanes(M, sE, cE, cnt);
        } else if (orbit.cheb_n > 0) {
          ChebyshevLanes(orbit, M, sE, cE, cnt);
        } else {
          KeplerLanes(M, orbit.q[transit::kEcc], sE, cE, cnt);
        }
        for (int j = 0; j < cnt; ++j) {
          b[j] = transit::Geometry<kGrad>(orbit, dts[j], off[j], sE[j], cE[j], in_window[j],
                                          &active[j], kGrad ? db + j : nullptr, kPiece);
        }
        if (order <= 2) {
          for (int j = 0; j < cnt; j += limbdark::kLanes) {
            const int c = std::min(limbdark::kLanes, cnt - j);
            limbdark::EvaluateLanes<kGrad, double>(b + j, &r, 0, c, law, f + j,
                                                   kGrad ? fb + j : nullptr,
                                                   kGrad ? fr + j : nullptr,
                                                   kGrad ? fu + j * order : nullptr);
          }
        } else {
          for (int j = 0; j < cnt; ++j) {
            limbdark::Evaluate<kGrad>(b[j], r, law, &f[j], &fb[j], &fr[j], fu + j * order);
          }
        }
      }
      if constexpr (!kGrad) {
        if (K == 1) {  // one sub-exposure per point: the fluxes are the points'
          for (int j = 0; j < cnt; ++j) sink.Point(s + j, g, f[j], nullptr, nullptr, order);
          continue;
        }
      }
      // Reduce the sub-exposures onto their points.
      int64_t p = s / K;
      int k = static_cast<int>(s - p * K);
      for (int j = 0; j < cnt; ++j, ++k) {
        if (k == K) {
          k = 0;
          ++p;
        }
        if (k == 0) {
          acc_f = 0.0;
          if (kGrad) {
            for (int m = 0; m < kQ; ++m) acc_q[m] = 0.0;
            for (int m = 0; m < order; ++m) acc_u[m] = 0.0;
          }
        }
        acc_f += f[j];
        if (kGrad && active[j]) {  // (inactive: flux 1 whatever the parameters)
          for (int m = 0; m < kQ; ++m) acc_q[m] += fb[j] * db[m * kPiece + j];
          acc_q[transit::kRadius] += fr[j];
          for (int m = 0; m < order; ++m) acc_u[m] += fu[j * order + m];
        }
        if (k == K - 1) {
          if (kGrad && K > 1) {
            for (int m = 0; m < kQ; ++m) acc_q[m] *= inv_k;
            for (int m = 0; m < order; ++m) acc_u[m] *= inv_k;
          }
          sink.Point(p, g, acc_f * inv_k, acc_q, acc_u, order);
        }
      }
    }
    i = stop;
  }
}

// One clone set per (mode, dtype).
#define JAXEXT_TRANSIT_LOOP(NAME, SINK, T)                                                   \
  JAXEXT_CPU_CLONES void NAME(const T* t, const T* q, const T* u, const TransitShape& shape,  \
                              int64_t begin, int64_t end, SINK<T>& sink) {                   \
    TransitLoop<SINK<T>, T>(t, q, u, shape, begin, end, sink);                               \
  }
JAXEXT_TRANSIT_LOOP(Loop, ValueSink, double)
JAXEXT_TRANSIT_LOOP(Loop, ValueSink, float)
JAXEXT_TRANSIT_LOOP(Loop, GradSink, double)
JAXEXT_TRANSIT_LOOP(Loop, GradSink, float)
JAXEXT_TRANSIT_LOOP(Loop, LinSink, double)
JAXEXT_TRANSIT_LOOP(Loop, LinSink, float)
JAXEXT_TRANSIT_LOOP(Loop, VjpSink, double)
JAXEXT_TRANSIT_LOOP(Loop, VjpSink, float)
#undef JAXEXT_TRANSIT_LOOP

template <ffi::DataType dtype>
ffi::Future TransitImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                        ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux, int64_t oversample) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, flux->element_count(), nullptr, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  using T = ffi::NativeType<dtype>;
  const T *pt = t.typed_data(), *pq = q.typed_data(), *pu = u.typed_data();
  ValueSink<T> sink{flux->typed_data()};
  const int64_t grain = std::max<int64_t>(1, kGrain / shape.oversample);
  return ParallelFor(pool, shape.points, grain, [=](int64_t begin, int64_t end) mutable {
    Loop(pt, pq, pu, shape, begin, end, sink);
  });
}

template <ffi::DataType dtype>
ffi::Future TransitGradImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                            ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux,
                            ffi::ResultBuffer<dtype> dq, ffi::ResultBuffer<dtype> du,
                            int64_t oversample) {
  TransitShape shape;
  const size_t grad_counts[] = {dq->element_count(), du->element_count()};
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, flux->element_count(), grad_counts, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  using T = ffi::NativeType<dtype>;
  const T *pt = t.typed_data(), *pq = q.typed_data(), *pu = u.typed_data();
  GradSink<T> sink{flux->typed_data(), dq->typed_data(), du->typed_data()};
  const int64_t grain = std::max<int64_t>(1, kGrain / (4 * shape.oversample));
  return ParallelFor(pool, shape.points, grain, [=](int64_t begin, int64_t end) mutable {
    Loop(pt, pq, pu, shape, begin, end, sink);
  });
}

template <ffi::DataType dtype>
ffi::Future TransitLinImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                           ffi::Buffer<dtype> u, ffi::Buffer<dtype> tt, ffi::Buffer<dtype> tq,
                           ffi::Buffer<dtype> tu, ffi::ResultBuffer<dtype> out,
                           int64_t oversample) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, out->element_count(), nullptr, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  if (ffi::Error err = CheckTransitTangents(t.element_count(), q.element_count(),
                                            u.element_count(), tt.element_count(),
                                            tq.element_count(), tu.element_count());
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  using T = ffi::NativeType<dtype>;
  const T *pt = t.typed_data(), *pq = q.typed_data(), *pu = u.typed_data();
  LinSink<T> sink{tt.typed_data(), tq.typed_data(), tu.typed_data(), out->typed_data()};
  const int64_t grain = std::max<int64_t>(1, kGrain / (4 * shape.oversample));
  return ParallelFor(pool, shape.points, grain, [=](int64_t begin, int64_t end) mutable {
    Loop(pt, pq, pu, shape, begin, end, sink);
  });
}

// ct_q[G, B, 10] and ct_u[G, B, n] hold per-block sums, block b of light curve g covering its
// points [b * block, (b + 1) * block): the same blocks whatever the thread count, so the caller's
// sum over them is deterministic.
template <ffi::DataType dtype>
ffi::Future TransitVjpImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> t, ffi::Buffer<dtype> q,
                           ffi::Buffer<dtype> u, ffi::Buffer<dtype> ct,
                           ffi::ResultBuffer<dtype> ct_t, ffi::ResultBuffer<dtype> ct_q,
                           ffi::ResultBuffer<dtype> ct_u, int64_t oversample, int64_t block) {
  TransitShape shape;
  if (ffi::Error err = GetTransitShape(t.element_count(), q.dimensions(), u.dimensions(),
                                       oversample, ct_t->element_count(), nullptr, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  int64_t blocks;
  if (ffi::Error err = GetTransitVjpBlocks(shape, block, t.element_count(), ct.element_count(),
                                           ct_q->element_count(), ct_u->element_count(), &blocks);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const int64_t units = shape.groups * blocks;
  using T = ffi::NativeType<dtype>;
  const T *pt = t.typed_data(), *pq = q.typed_data(), *pu = u.typed_data();
  const T* pct = ct.typed_data();
  T *pct_t = ct_t->typed_data(), *psq = ct_q->typed_data(), *psu = ct_u->typed_data();
  const int64_t grain = std::max<int64_t>(1, kGrain / (4 * shape.oversample * block));
  return ParallelFor(pool, units, grain, [=](int64_t first, int64_t last) {
    for (int64_t unit = first; unit < last; ++unit) {
      const int64_t g = unit / blocks, b = unit - g * blocks;
      const int64_t begin = g * shape.per_group + b * block;
      const int64_t end = std::min((g + 1) * shape.per_group, begin + block);
      VjpSink<T> sink{pct, pct_t, {}, {}};
      for (int m = 0; m < kQ; ++m) sink.sq[m] = 0.0;
      for (int m = 0; m < shape.order; ++m) sink.su[m] = 0.0;
      Loop(pt, pq, pu, shape, begin, end, sink);
      for (int m = 0; m < kQ; ++m) psq[unit * kQ + m] = static_cast<T>(sink.sq[m]);
      for (int m = 0; m < shape.order; ++m) {
        psu[unit * shape.order + m] = static_cast<T>(sink.su[m]);
      }
    }
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCpuF32, TransitImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_BINDING(ffi::ThreadPool, F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCpuF64, TransitImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_BINDING(ffi::ThreadPool, F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCpuF32, TransitGradImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_GRAD_BINDING(ffi::ThreadPool, F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCpuF64, TransitGradImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_GRAD_BINDING(ffi::ThreadPool, F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitLinCpuF32, TransitLinImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_LIN_BINDING(ffi::ThreadPool, F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitLinCpuF64, TransitLinImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_LIN_BINDING(ffi::ThreadPool, F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitVjpCpuF32, TransitVjpImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_VJP_BINDING(ffi::ThreadPool, F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitVjpCpuF64, TransitVjpImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_VJP_BINDING(ffi::ThreadPool, F64));

}  // namespace cpu
}  // namespace jaxext
