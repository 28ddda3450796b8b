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

// Points [begin, end) of light curves sharing per_group points each. Inlined into the
// target_clones wrappers below, so each gets its own vector code.
template <bool kGrad, typename T>
inline __attribute__((always_inline)) void TransitLoop(const T* t, const T* q, const T* u,
                                                       const TransitShape& shape, int64_t begin,
                                                       int64_t end, T* flux, T* dq, T* du) {
  const int order = shape.order;
  const int K = shape.oversample;
  const double inv_k = 1.0 / K;
  limbdark::Law law;
  transit::Orbit orbit;
  // Per sub-exposure of a piece (structure of arrays: each step below is a vectorisable loop).
  double ts[kPiece], off[kPiece], dts[kPiece], M[kPiece], sE[kPiece], cE[kPiece], b[kPiece];
  bool in_window[kPiece], active[kPiece];
  double f[kPiece], fb[kPiece], fr[kPiece], fu[kPiece * limbdark::kMaxOrder];
  double db[kGrad ? kQ * kPiece : 1];  // db/dq_m of sub-exposure j at db[m * kPiece + j]
  // Running sums for the point whose sub-exposures are being reduced.
  double acc_f = 0.0, acc_q[kQ], acc_u[limbdark::kMaxOrder];
  for (int64_t i = begin; i < end;) {
    const int64_t g = i / shape.per_group;
    const int64_t stop = std::min(end, (g + 1) * shape.per_group);
    limbdark::MakeLaw(u + g * order, order, &law);
    transit::MakeOrbit(q + g * kQ, law, &orbit);
    const double r = orbit.q[transit::kRadius];
    const double texp = orbit.q[transit::kTexp];
    for (int64_t s = i * K; s < stop * K; s += kPiece) {
      const int cnt = static_cast<int>(std::min<int64_t>(kPiece, stop * K - s));
      if (K == 1) {
        for (int j = 0; j < cnt; ++j) {
          ts[j] = static_cast<double>(t[s + j]);
          off[j] = 0.0;
        }
      } else {
        for (int j = 0; j < cnt; ++j) {
          const int64_t p = (s + j) / K;
          off[j] = transit::Offset(static_cast<int>(s + j - p * K), K);
          ts[j] = static_cast<double>(t[p]) + texp * off[j];
        }
      }
      int any = 0;
      for (int j = 0; j < cnt; ++j) {
        transit::Phase(orbit, ts[j], &dts[j], &M[j], &in_window[j]);
        any += in_window[j];
      }
      if (any == 0 && orbit.valid) {  // the whole piece out of transit: flux 1
        for (int j = 0; j < cnt; ++j) {
          f[j] = 1.0;
          active[j] = false;
        }
      } else {
        if (orbit.circular) {
          for (int j = 0; j < cnt; ++j) kepler::sincos(M[j], &sE[j], &cE[j]);
        } else {
          const double e = orbit.q[transit::kEcc];
          for (int j = 0; j < cnt; ++j) kepler::solve(M[j], e, &sE[j], &cE[j]);
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
      // Reduce the sub-exposures onto their points.
      for (int j = 0; j < cnt; ++j) {
        const int64_t sub = s + j;
        const int64_t p = K == 1 ? sub : sub / K;
        const int64_t k = sub - p * K;
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
          flux[p] = static_cast<T>(acc_f * inv_k);
          if (kGrad) {
            for (int m = 0; m < kQ; ++m) dq[p * kQ + m] = static_cast<T>(acc_q[m] * inv_k);
            for (int m = 0; m < order; ++m) du[p * order + m] = static_cast<T>(acc_u[m] * inv_k);
          }
        }
      }
    }
    i = stop;
  }
}

JAXEXT_CPU_CLONES void LoopF64(const double* t, const double* q, const double* u,
                               const TransitShape& shape, int64_t begin, int64_t end,
                               double* flux) {
  TransitLoop<false, double>(t, q, u, shape, begin, end, flux, nullptr, nullptr);
}
JAXEXT_CPU_CLONES void LoopF32(const float* t, const float* q, const float* u,
                               const TransitShape& shape, int64_t begin, int64_t end,
                               float* flux) {
  TransitLoop<false, float>(t, q, u, shape, begin, end, flux, nullptr, nullptr);
}
JAXEXT_CPU_CLONES void LoopGradF64(const double* t, const double* q, const double* u,
                                   const TransitShape& shape, int64_t begin, int64_t end,
                                   double* flux, double* dq, double* du) {
  TransitLoop<true, double>(t, q, u, shape, begin, end, flux, dq, du);
}
JAXEXT_CPU_CLONES void LoopGradF32(const float* t, const float* q, const float* u,
                                   const TransitShape& shape, int64_t begin, int64_t end,
                                   float* flux, float* dq, float* du) {
  TransitLoop<true, float>(t, q, u, shape, begin, end, flux, dq, du);
}

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
  const T* pt = t.typed_data();
  const T* pq = q.typed_data();
  const T* pu = u.typed_data();
  T* pf = flux->typed_data();
  const int64_t grain = std::max<int64_t>(1, kGrain / shape.oversample);
  return ParallelFor(pool, shape.points, grain, [=](int64_t begin, int64_t end) {
    if constexpr (std::is_same<T, double>::value) {
      LoopF64(pt, pq, pu, shape, begin, end, pf);
    } else {
      LoopF32(pt, pq, pu, shape, begin, end, pf);
    }
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
  const T* pt = t.typed_data();
  const T* pq = q.typed_data();
  const T* pu = u.typed_data();
  T* pf = flux->typed_data();
  T* pdq = dq->typed_data();
  T* pdu = du->typed_data();
  const int64_t grain = std::max<int64_t>(1, kGrain / (4 * shape.oversample));
  return ParallelFor(pool, shape.points, grain, [=](int64_t begin, int64_t end) {
    if constexpr (std::is_same<T, double>::value) {
      LoopGradF64(pt, pq, pu, shape, begin, end, pf, pdq, pdu);
    } else {
      LoopGradF32(pt, pq, pu, shape, begin, end, pf, pdq, pdu);
    }
  });
}

}  // namespace

#define JAXEXT_TRANSIT_CPU_BINDING(T)       \
  ffi::Ffi::Bind()                          \
      .Ctx<ffi::ThreadPool>()               \
      .Arg<ffi::Buffer<ffi::DataType::T>>() \
      .Arg<ffi::Buffer<ffi::DataType::T>>() \
      .Arg<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCpuF32, TransitImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_CPU_BINDING(F32).Attr<int64_t>("oversample"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitCpuF64, TransitImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_CPU_BINDING(F64).Attr<int64_t>("oversample"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCpuF32, TransitGradImpl<ffi::DataType::F32>,
                              JAXEXT_TRANSIT_CPU_BINDING(F32)
                                  .Ret<ffi::Buffer<ffi::DataType::F32>>()
                                  .Ret<ffi::Buffer<ffi::DataType::F32>>()
                                  .Attr<int64_t>("oversample"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextTransitGradCpuF64, TransitGradImpl<ffi::DataType::F64>,
                              JAXEXT_TRANSIT_CPU_BINDING(F64)
                                  .Ret<ffi::Buffer<ffi::DataType::F64>>()
                                  .Ret<ffi::Buffer<ffi::DataType::F64>>()
                                  .Attr<int64_t>("oversample"));

}  // namespace cpu
}  // namespace jaxext
