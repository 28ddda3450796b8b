#include "jaxext/cpu/transit_cpu.h"

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>

#include "jaxext/common/transit_shapes.h"
#include "jaxext/cpu/clones.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/transit.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
// A named namespace, not an anonymous one: clang leaves calls from per-CPU clones to functions of
// internal linkage unresolved (clones.h).
namespace transit_internal {

// Tens of ns per point in transit, ~1 ns out of it: below this many points a thread hand-off
// costs more than it saves.
constexpr int64_t kGrain = 4096;
// Points handled together (one sub-exposure of each at a time): their orbit and geometry first,
// then the occultation in lane blocks.
constexpr int kPiece = 64;
constexpr int kQ = transit::kNumParams;

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
// out = sum_k c_k T_k(x), k < terms (Clenshaw), for blocks of 32 lanes (n rounded up; x and out
// hold kPiece values): four vectors of 8 per block, their recurrences in registers and
// independent, so that their latencies overlap (c_k - u2 is off the critical path: one FMA per
// term on it). The orbit's sin E / cos E series and the flux series.
typedef double Vec8 __attribute__((vector_size(64)));
constexpr int kVecs = 4, kBlock = 8 * kVecs;
static_assert(kPiece % kBlock == 0, "Clenshaw blocks tile a piece");
JAXEXT_CPU_CLONES void ChebyshevSumLanes(const double* __restrict c, int terms,
                                         const double* __restrict x, double* __restrict out,
                                         int n) {
  for (int j0 = 0; j0 < n; j0 += kBlock) {
    Vec8 x2[kVecs], u1[kVecs], u2[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      std::memcpy(&x2[v], x + j0 + 8 * v, sizeof(Vec8));
      x2[v] += x2[v];
      u1[v] = u2[v] = Vec8{};
    }
    for (int k = terms - 1; k >= 1; --k) {
      const double ck = c[k];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) {
        const Vec8 next = x2[v] * u1[v] + (ck - u2[v]);
        u2[v] = u1[v];
        u1[v] = next;
      }
    }
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) {
      const Vec8 sum = 0.5 * x2[v] * u1[v] - u2[v] + c[0];
      std::memcpy(out + j0 + 8 * v, &sum, sizeof(Vec8));
    }
  }
}

// sin E, cos E from the orbit's Chebyshev series, x clamped to [-1, 1]: times out of the window
// get finite values, which are not used. s and c hold kPiece values.
JAXEXT_CPU_CLONES void ChebyshevLanes(const transit::Orbit& o, const double* __restrict M,
                                      double* __restrict s, double* __restrict c, int n) {
  const double shift = o.q[transit::kMtr] + o.cheb_mid, scale = o.cheb_scale;
  double x[kPiece];
  for (int j = 0; j < n; ++j) {
    const double xj = (M[j] - shift) * scale;
    x[j] = xj > 1.0 ? 1.0 : (xj < -1.0 ? -1.0 : xj);
  }
  for (int j = n; j < kPiece; ++j) x[j] = 0.0;
  ChebyshevSumLanes(o.cheb_sin, o.cheb_n, x, s, n);
  ChebyshevSumLanes(o.cheb_cos, o.cheb_n, x, c, n);
}
JAXEXT_CPU_CLONES void SinCosLanes(const double* __restrict M, double* __restrict s,
                                   double* __restrict c, int n) {
  for (int j = 0; j < n; ++j) kepler::sincos(M[j], &s[j], &c[j]);
}

// Each sub-exposure's piece of the flux series and x in it (transit::LocateFlux); the lanes past
// n get piece kFluxOne and x = 0 (whole blocks of lanes can then be evaluated).
JAXEXT_CPU_CLONES void LocateLanes(const transit::FluxSeries& s, const double* __restrict b,
                                   double* __restrict piece, double* __restrict x, int n) {
  for (int j = 0; j < n; ++j) transit::LocateFlux(s, b[j], &piece[j], &x[j]);
  for (int j = n; j < kPiece; ++j) {
    piece[j] = transit::kFluxOne;
    x[j] = 0.0;
  }
}

// A light curve's flux series shared by the chunks of one call (built pieces are published to
// all of them; a piece is built once). Piece states: 0 not built, 1 being built, 2 series,
// 3 exact. Whichever chunk builds a piece, its coefficients are the same (BuildFluxPiece depends
// on r, the law and the piece only), so results never depend on the chunking.
struct SharedFluxSeries {
  transit::FluxSeries s;
  std::atomic<int> state[transit::kFluxPieces + 2];
  explicit SharedFluxSeries(double r) { Reset(r); }
  // Empty again, for radius r (only while no other thread uses the table).
  void Reset(double r) {
    transit::InitFluxSeries(r, &s);
    for (int i = 0; i < transit::kFluxPieces; ++i) state[i].store(0, std::memory_order_relaxed);
    state[transit::kFluxOne].store(2, std::memory_order_relaxed);
    state[transit::kFluxExact].store(3, std::memory_order_relaxed);
  }
  // The piece's state once settled (2 or 3), building it if no chunk has.
  int Settle(const limbdark::Law& law, int piece) {
    int st = state[piece].load(std::memory_order_acquire);
    if (st >= 2) return st;
    int expected = 0;
    if (st == 0 && state[piece].compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      st = transit::BuildFluxPiece(&s, law, piece) ? 2 : 3;
      state[piece].store(st, std::memory_order_release);
      return st;
    }
    while ((st = state[piece].load(std::memory_order_acquire)) == 1) std::this_thread::yield();
    return st;
  }
};

// Per call: a lazily allocated SharedFluxSeries for each light curve that straddles chunks (at
// most two per chunk; light curves inside one chunk use that chunk's own table, so memory stays
// bounded however many light curves a call has).
class FluxTables {
 public:
  explicit FluxTables(int64_t curves)
      : n_(curves), tables_(new std::atomic<SharedFluxSeries*>[static_cast<size_t>(curves)]) {
    for (int64_t g = 0; g < n_; ++g) tables_[g].store(nullptr, std::memory_order_relaxed);
  }
  ~FluxTables() {
    for (int64_t g = 0; g < n_; ++g) delete tables_[g].load(std::memory_order_relaxed);
  }
  SharedFluxSeries* Get(int64_t g, double r) {
    SharedFluxSeries* t = tables_[g].load(std::memory_order_acquire);
    if (t != nullptr) return t;
    auto* fresh = new SharedFluxSeries(r);
    if (tables_[g].compare_exchange_strong(t, fresh, std::memory_order_acq_rel)) return fresh;
    delete fresh;  // another chunk published first
    return t;
  }

 private:
  int64_t n_;
  std::unique_ptr<std::atomic<SharedFluxSeries*>[]> tables_;
};

// The value pass's occultation for n <= kPiece sub-exposures of one light curve from its flux
// series. The common case -- every sub-exposure in one piece with a series -- is one Clenshaw
// pass. Otherwise the pass runs once per piece present (each lane keeps its own piece's result)
// and the exact kernel takes the blocks of kLanes holding lanes without a series: a lane's flux is
// computed the same way wherever it falls among the lanes. f must hold kPiece values.
JAXEXT_CPU_CLONES void SeriesFluxLanes(SharedFluxSeries& shared, const limbdark::Law& law,
                                       const double* __restrict b, double* __restrict f, int n) {
  const transit::FluxSeries& s = shared.s;
  double piece[kPiece], x[kPiece];
  LocateLanes(s, b, piece, x, n);
  const double p0 = piece[0];
  int64_t others = 0;
  for (int j = 1; j < n; ++j) others += piece[j] != p0 ? 1 : 0;
  const int first = static_cast<int>(p0);
  if (others == 0 && shared.Settle(law, first) == 2) {
    ChebyshevSumLanes(s.c[first], s.terms[first], x, f, n);  // the deficit
    for (int j = 0; j < n; ++j) f[j] = 1.0 - f[j];
    return;
  }
  // Lanes without a series, per block of kLanes: the exact kernel.
  for (int j0 = 0; j0 < n; j0 += limbdark::kLanes) {
    const int cnt = std::min(limbdark::kLanes, n - j0);
    bool exact = false;
    for (int l = 0; l < cnt; ++l) {
      exact = exact || shared.Settle(law, static_cast<int>(piece[j0 + l])) == 3;
    }
    if (exact) {
      transit::ExactFlux<false>(s.r, law, b + j0, cnt, f + j0, nullptr, nullptr, nullptr);
    }
  }
  // The pieces with a series, one pass each.
  double done[kPiece], g[kPiece];
  for (int j = 0; j < kPiece; ++j) done[j] = 0.0;
  for (int j = 0; j < n; ++j) {
    if (done[j] != 0.0) continue;
    const int id = static_cast<int>(piece[j]);
    if (shared.Settle(law, id) != 2) {
      done[j] = 1.0;
      continue;
    }
    ChebyshevSumLanes(s.c[id], s.terms[id], x, g, n);  // the deficit
    for (int m = j; m < n; ++m) {
      const bool mine = piece[m] == piece[j];
      f[m] = mine ? 1.0 - g[m] : f[m];
      done[m] = mine ? 1.0 : done[m];
    }
  }
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

// Points [begin, end) of light curves sharing per_group points each, in blocks of up to kPiece
// points: for each sub-exposure k in turn, the k-th sub-exposures of the block's points go through
// the steps together (neighbouring times: one piece of the flux series, mostly), and each point's
// sums over its sub-exposures run in k order. Inlined into the target_clones wrappers below, so
// each gets its own vector code.
template <typename Sink, typename T>
inline __attribute__((always_inline)) void TransitLoop(const T* t, const T* q, const T* u,
                                                       const TransitShape& shape, int64_t begin,
                                                       int64_t end, Sink& sink,
                                                       FluxTables* tables) {
  constexpr bool kGrad = Sink::kGrad;
  const int order = shape.order;
  const int K = shape.oversample;
  const double inv_k = 1.0 / K;
  limbdark::Law law;
  transit::Orbit orbit;
  // Per lane (one sub-exposure of each point of the block; structure of arrays: each step below
  // is a vectorisable loop).
  double tp[kPiece], ts[kPiece], dts[kPiece], M[kPiece], sE[kPiece], cE[kPiece], b[kPiece];
  int64_t in_window[kPiece], active[kPiece];  // 0/1, a double's width: the loops vectorise
  double f[kPiece], fb[kPiece], fr[kPiece], fu[kPiece * limbdark::kMaxOrder];
  double db[kGrad ? kQ * kPiece : 1];  // db/dq_m of lane j at db[m * kPiece + j]
  // Per point of the block: the sums over its sub-exposures (derivatives at [m * kPiece + j]).
  double acc_f[kPiece];
  double acc_q[kGrad ? kQ * kPiece : 1], acc_u[kGrad ? limbdark::kMaxOrder * kPiece : 1];
  double point_q[kQ], point_u[limbdark::kMaxOrder];
  std::unique_ptr<SharedFluxSeries> local;  // the flux series of light curves inside the chunk
  for (int64_t i = begin; i < end;) {
    const int64_t g = i / shape.per_group;
    const int64_t stop = std::min(end, (g + 1) * shape.per_group);
    limbdark::MakeLaw(u + g * order, order, &law);
    transit::MakeOrbit(q + g * kQ, law, &orbit);
    bool expanded = false;      // the orbit's Chebyshev series: built when first needed
    SharedFluxSeries* series = nullptr;  // the value pass's flux series, if used
    const double r = orbit.q[transit::kRadius];
    const double texp = orbit.q[transit::kTexp];
    for (int64_t p0 = i; p0 < stop; p0 += kPiece) {
      const int cnt = static_cast<int>(std::min<int64_t>(kPiece, stop - p0));
      // The lane steps run on whole blocks of kLanes (the last lanes repeat the last time): every
      // lane takes a loop's vector body, never its scalar remainder, whose rounding may differ
      // (FMA contraction): a point's flux does not depend on where the chunks start.
      const int lanes = (cnt + limbdark::kLanes - 1) / limbdark::kLanes * limbdark::kLanes;
      for (int j = 0; j < cnt; ++j) tp[j] = static_cast<double>(t[p0 + j]);
      for (int j = cnt; j < lanes; ++j) tp[j] = tp[cnt - 1];
      for (int k = 0; k < K; ++k) {
        const double off = K == 1 ? 0.0 : transit::Offset(k, K);
        if (K > 1) {
          for (int j = 0; j < lanes; ++j) ts[j] = tp[j] + texp * off;
        }
        PhaseLanes(orbit, K == 1 ? tp : ts, dts, M, in_window, lanes);
        int64_t any = 0;
        for (int j = 0; j < lanes; ++j) any |= in_window[j];
        if (any == 0 && orbit.valid) {  // every lane out of transit: flux 1
          for (int j = 0; j < lanes; ++j) {
            f[j] = 1.0;
            active[j] = 0;
          }
        } else {
          if (!expanded) {
            transit::ExpandOrbit(&orbit);
            expanded = true;
          }
          if (orbit.circular) {
            SinCosLanes(M, sE, cE, lanes);
          } else if (orbit.cheb_n > 0) {
            ChebyshevLanes(orbit, M, sE, cE, lanes);
          } else {
            KeplerLanes(M, orbit.q[transit::kEcc], sE, cE, lanes);
          }
          for (int j = 0; j < lanes; ++j) {
            b[j] = transit::Geometry<kGrad>(orbit, dts[j], off, sE[j], cE[j], in_window[j],
                                            &active[j], kGrad ? db + j : nullptr, kPiece);
          }
          // (valid: r and the law finite, r > 0.)
          if (tables != nullptr && series == nullptr && orbit.valid && r < 1.0) {
            if (g * shape.per_group >= begin && (g + 1) * shape.per_group <= end) {
              if (local == nullptr) {
                local = std::make_unique<SharedFluxSeries>(r);
              } else {
                local->Reset(r);
              }
              series = local.get();  // the light curve lies inside this chunk
            } else {
              series = tables->Get(g, r);
            }
          }
          if (series != nullptr) {
            SeriesFluxLanes(*series, law, b, f, lanes);
          } else {
            transit::ExactFlux<kGrad>(r, law, b, lanes, f, fb, fr, fu);
          }
        }
        if (K == 1) break;  // f (and the lane derivatives) are the points'
        // Sums over the sub-exposures, in k order (inactive lanes: flux 1 whatever the
        // parameters, no derivatives).
        for (int j = 0; j < lanes; ++j) acc_f[j] = (k == 0 ? 0.0 : acc_f[j]) + f[j];
        if constexpr (kGrad) {
          for (int m = 0; m < kQ; ++m) {
            double* aq = acc_q + m * kPiece;
            const double* dbm = db + m * kPiece;
            for (int j = 0; j < lanes; ++j) {
              double add = active[j] ? fb[j] * dbm[j] : 0.0;
              if (m == transit::kRadius) add += active[j] ? fr[j] : 0.0;
              aq[j] = (k == 0 ? 0.0 : aq[j]) + add;
            }
          }
          for (int m = 0; m < order; ++m) {
            double* au = acc_u + m * kPiece;
            for (int j = 0; j < lanes; ++j) {
              au[j] = (k == 0 ? 0.0 : au[j]) + (active[j] ? fu[j * order + m] : 0.0);
            }
          }
        }
      }
      if constexpr (!kGrad) {
        if (K == 1) {
          for (int j = 0; j < cnt; ++j) sink.Point(p0 + j, g, f[j], nullptr, nullptr, order);
        } else {
          for (int j = 0; j < cnt; ++j) {
            sink.Point(p0 + j, g, acc_f[j] * inv_k, nullptr, nullptr, order);
          }
        }
      } else if (K == 1) {
        for (int j = 0; j < cnt; ++j) {
          for (int m = 0; m < kQ; ++m) point_q[m] = active[j] ? fb[j] * db[m * kPiece + j] : 0.0;
          point_q[transit::kRadius] += active[j] ? fr[j] : 0.0;
          for (int m = 0; m < order; ++m) point_u[m] = active[j] ? fu[j * order + m] : 0.0;
          sink.Point(p0 + j, g, f[j], point_q, point_u, order);
        }
      } else {
        for (int j = 0; j < cnt; ++j) {
          for (int m = 0; m < kQ; ++m) point_q[m] = acc_q[m * kPiece + j] * inv_k;
          for (int m = 0; m < order; ++m) point_u[m] = acc_u[m * kPiece + j] * inv_k;
          sink.Point(p0 + j, g, acc_f[j] * inv_k, point_q, point_u, order);
        }
      }
    }
    i = stop;
  }
}

// One clone set per (mode, dtype).
#define JAXEXT_TRANSIT_LOOP(NAME, SINK, T)                                                   \
  JAXEXT_CPU_CLONES void NAME(const T* t, const T* q, const T* u, const TransitShape& shape,  \
                              int64_t begin, int64_t end, SINK<T>& sink,                     \
                              FluxTables* tables = nullptr) {                                \
    TransitLoop<SINK<T>, T>(t, q, u, shape, begin, end, sink, tables);                       \
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
                        ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux, int64_t oversample,
                        int64_t flux_series) {
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
  // The light curves' flux series, shared by the chunks (alive until the last one finishes).
  auto tables = flux_series != 0 ? std::make_shared<FluxTables>(shape.groups) : nullptr;
  return ParallelFor(pool, shape.points, grain, [=](int64_t begin, int64_t end) mutable {
    Loop(pt, pq, pu, shape, begin, end, sink, tables.get());
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

}  // namespace transit_internal

using namespace transit_internal;  // NOLINT(build/namespaces)

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
