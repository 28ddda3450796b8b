// Internals of jaxext.ode.dop853's CPU handler (ode_cpu.cc), shared with the translation units
// that compile the built-in models' SIMD lanes (ode_cpu_lanes_*.cc): each of those functions is
// flattened and cloned per CPU (clones.h), which makes them the slowest code in the library to
// compile (about 8 CPU-minutes together with GCC 16); apart, they compile in parallel.
#ifndef JAXEXT_CPU_ODE_CPU_INTERNAL_H_
#define JAXEXT_CPU_ODE_CPU_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "jaxext/cpu/clones.h"
#include "jaxext/kernels/dop853.h"
#include "jaxext/kernels/lanes.h"
#include "jaxext/kernels/orbit.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {
namespace ode_internal {

namespace ffi = xla::ffi;

template <typename T>
using NativeRhs = void (*)(T, const T*, const T*, T*, int32_t*);
template <typename T>
using NativeEvent = T (*)(T, const T*, const T*, int32_t*);
// A right-hand side's lanes form (jaxext/ode/_native.py): kLanes trajectories at once, each
// array lane-major (element i of lane l at [i * kLanes + l]): times t (kLanes), states y (n rows),
// parameters p (np rows) into dydt (n rows); status[l] set when lane l's call raised.
template <typename T>
using NativeRhsLanes = void (*)(const T*, const T*, const T*, T*, int32_t*);

// Trajectories integrated side by side per thread (RunLanes), and the SIMD width of the built-in
// models' evaluation across them.
constexpr int kLanes = 8;

extern std::atomic<int64_t> simd_lane_runs;  // OdeSimdLaneRuns

// The built-in model at kLanes stage points (one per trajectory, p: their parameters) as SIMD
// lanes (jaxext/kernels/lanes.h). Each lane rounds as the scalar model does (the library is built
// with -ffp-contract=off), so results do not depend on which lane a trajectory runs in, nor on
// which of the per-CPU clones runs (glibc's exp, which may differ between CPUs, is the same in
// both). The models do not depend on t. Per CPU, and a function of its own: inlined into the
// (also per-CPU) lanes loop, the vector model measured 30% slower (when the lanes still gathered
// their states for it: 82.7 against 64 us per trajectory, LEO, tol 1e-9, one core).
template <typename T>
using ModelLanes = Lanes<T, kLanes>;
#define JAXEXT_ODE_LANES_DECLARE(T, SUFFIX)                                                    \
  void ModelLanes##SUFFIX(const orbit::Model<T>& model, const ModelLanes<T>* y,               \
                          const ModelLanes<T>* p, ModelLanes<T>* f);                          \
  void VariationalLanes##SUFFIX##P0(const orbit::Model<T>& model, const ModelLanes<T>* y,     \
                                    const ModelLanes<T>* p, ModelLanes<T>* f);                \
  void VariationalLanes##SUFFIX##P1(const orbit::Model<T>& model, const ModelLanes<T>* y,     \
                                    const ModelLanes<T>* p, ModelLanes<T>* f);
JAXEXT_ODE_LANES_DECLARE(float, F32)
JAXEXT_ODE_LANES_DECLARE(double, F64)
#undef JAXEXT_ODE_LANES_DECLARE

// The variational equations' right-hand side at kLanes stage points: f with df/dy S + [0 | df/dp]
// (Variational's arithmetic, lane by lane), NP parameters per trajectory.
template <typename T, int NP>
inline __attribute__((always_inline)) void VariationalLanes(const orbit::Model<T>& model,
                                                            const ModelLanes<T>* y,
                                                            const ModelLanes<T>* p,
                                                            ModelLanes<T>* f) {
  constexpr int n = orbit::kStateSize;
  ModelLanes<T> dfdy[n * n], dfdp[n * (NP > 0 ? NP : 1)];
  model.Jacobian(T(0), y, p, NP, f, dfdy, dfdp);
  dop853::Sensitivities<ModelLanes<T>>(n, NP, dfdy, dfdp, y + n, f + n);
}

template <typename T>
struct ModelRhs {
  static constexpr int kLaneState = orbit::kStateSize;
  const orbit::Model<T>* model;
  const T* p;
  // Flattened: the model inlined here, once, rather than called (4-8% faster in the lanes).
  JAXEXT_CPU_FLATTEN bool operator()(T t, const T* y, T* dydt) const {
    (*model)(t, y, p, dydt);
    return true;
  }
  // kLanes trajectories' stages at once: states y, their parameters p (the drag's B), into f.
  void EvalLanes(const ModelLanes<T>* y, const ModelLanes<T>* p, ModelLanes<T>* f) const {
    if constexpr (std::is_same_v<T, float>) {
      ModelLanesF32(*model, y, p, f);
    } else {
      ModelLanesF64(*model, y, p, f);
    }
  }
};

// A user's right-hand side (compiled by Numba), one trajectory (parameters p) per call.
template <typename T>
struct UserRhs {
  NativeRhs<T> fn;
  const T* p;
  bool operator()(T t, const T* y, T* dydt) const {
    int32_t status = 0;
    fn(t, y, p, dydt, &status);
    return status == 0;
  }
};

// The same with its lanes form (NativeRhsLanes), which RunLanes calls once per stage for kLanes
// trajectories whose workspaces interleave (the state size known at run time, at most
// dop853::kMaxLaneRowsState): the stage sums and error norms as SIMD vectors, one call into the
// user's code for all lanes. The scalar form still serves the rest (the first step, the dense
// output's extra stages).
template <typename T>
struct UserLanesRhs : UserRhs<T> {
  NativeRhsLanes<T> lanes;
  // t: the lanes' times; y, p, dydt: lane-major rows; status: kLanes flags (zeroed by the caller).
  void EvalLaneRows(const T* t, const T* y, const T* p, T* dydt, int32_t* status) const {
    lanes(t, y, p, dydt, status);
  }
};

// Right-hand sides that evaluate kLanes trajectories' stages at once: as SIMD values of a static
// state size (ModelRhs::EvalLanes), or from lane-major rows of a size known at run time
// (UserLanesRhs::EvalLaneRows); and the state size they integrate (0 for the others).
template <typename Rhs, typename = void>
struct EvaluatesLanes : std::false_type {};
template <typename Rhs>
struct EvaluatesLanes<Rhs, std::void_t<decltype(&Rhs::EvalLanes)>> : std::true_type {};
template <typename Rhs, typename = void>
struct EvaluatesLaneRows : std::false_type {};
template <typename Rhs>
struct EvaluatesLaneRows<Rhs, std::void_t<decltype(&Rhs::EvalLaneRows)>> : std::true_type {};
template <typename Rhs>
constexpr int LaneStateOf() {
  if constexpr (EvaluatesLanes<Rhs>::value) {
    return Rhs::kLaneState;
  } else {
    return 0;
  }
}

// f and its Jacobians df/dy (n x n) and df/dp (n x np), row-major.
template <typename T>
struct ModelJacobian {
  const orbit::Model<T>* model;
  const T* p;
  int64_t np;
  bool operator()(T t, const T* y, T* f, T* dfdy, T* dfdp) const {
    model->Jacobian(t, y, p, np, f, dfdy, dfdp);
    return true;
  }
};

// The state augmented with its sensitivities S = d y / d (y0, p) (n x cols, cols = n + np, row-major
// after the n state components): dS/dt = df/dy S + [0 | df/dp], S(t0) = [I | 0].
template <typename T, typename Jacobian>
struct Variational {
  Jacobian jacobian;
  int64_t n, np;
  T* dfdy;  // scratch: n x n
  T* dfdp;  // scratch: n x np
  bool operator()(T t, const T* y, T* f) const {
    if (!jacobian(t, y, f, dfdy, dfdp)) return false;
    dop853::Sensitivities(n, np, dfdy, dfdp, y + n, f + n);
    return true;
  }
};

// The built-in model's variational equations (Variational with ModelJacobian) for kLanes
// trajectories at once (EvalLanes), NP (0 or 1) parameters per trajectory.
template <typename T, int NP>
struct ModelVariational : Variational<T, ModelJacobian<T>> {
  static constexpr int kLaneState = orbit::kStateSize * (1 + orbit::kStateSize + NP);
  void EvalLanes(const ModelLanes<T>* y, const ModelLanes<T>* p, ModelLanes<T>* f) const {
    const orbit::Model<T>& model = *this->jacobian.model;
    if constexpr (std::is_same_v<T, float> && NP == 0) {
      VariationalLanesF32P0(model, y, p, f);
    } else if constexpr (std::is_same_v<T, float>) {
      VariationalLanesF32P1(model, y, p, f);
    } else if constexpr (NP == 0) {
      VariationalLanesF64P0(model, y, p, f);
    } else {
      VariationalLanesF64P1(model, y, p, f);
    }
  }
};

template <typename T>
struct EventSet {
  int count = 0;
  const int64_t* kinds;
  const double* consts;
  const int64_t* directions;
  const int64_t* terminal;
  NativeEvent<T> fns[dop853::kMaxEvents];
  const T* p = nullptr;

  int size() const { return count; }
  int direction(int e) const { return static_cast<int>(directions[e]); }
  int64_t max_count(int e) const { return terminal[e]; }
  bool value(int e, T t, const T* y, T* g) const {
    if (kinds[e] == 0) {
      *g = std::sqrt(y[0] * y[0] + y[1] * y[1] + y[2] * y[2]) - T(consts[e]);
      return true;
    }
    int32_t status = 0;
    *g = fns[e](t, y, p, &status);
    return status == 0;
  }
};

struct Attrs {
  int64_t rhs_id;
  std::string_view name;
  ffi::Span<const double> model, rtol, atol;
  double first_step, max_step;
  int64_t max_steps, n_events;
  ffi::Span<const int64_t> event_kinds, event_ids;
  ffi::Span<const double> event_consts;
  ffi::Span<const int64_t> event_directions, event_terminal;
  int64_t jac_id, sensitivities, dense_steps;
};

// Trajectories integrated side by side per thread (kLanes): their stages alternate, so that the
// out-of-order core overlaps one trajectory's dependency chain (each stage needs the previous
// one's right-hand side: square roots, divisions, exp) with the others'. With the built-in models
// (EvalLanes) the lanes' workspaces interleave and each stage of all lanes is one SIMD
// computation: stage sums, right-hand sides, error norms (dop853.h's StageLanes). Each trajectory
// still takes its own steps, with the same arithmetic as alone: results do not depend on the
// lanes.

// One call's trajectories and where their results go, for the workers (RunLanes). With
// sensitivities the state has n_aug = n + n (n + np) components, else n_aug = n.
template <typename T>
struct Job {
  std::atomic<int64_t>* next;  // the next trajectory to take
  int64_t count, max_lanes;
  const Attrs* attrs;
  const EventSet<T>* events;
  int64_t n, np, n_aug, m, kslots;
  const T *y0, *params, *span, *t_eval;
  T *ys, *t_final, *y_final;
  int32_t* stats;
  T *t_events, *y_events;
  int32_t* counts;
  int64_t dense_steps;  // each trajectory's dense output: (dense_steps + 1) times and
  T *dense_t, *dense_f;  // dense_steps x (kDense + 1) x n_aug values (when dense_steps > 0)
};

// Integrates trajectories j = (*next)++ while j < count, up to max_lanes (<= kLanes) at a time.
// `make_rhs(p, scratch)` gives trajectory j's right-hand side (p: its parameters; scratch:
// 2 n^2 + 2 n np elements it may use). With sensitivities, they start from [I | 0], and the error
// is controlled on the first n components only (the steps are those of the state alone).
template <typename T, typename MakeRhs>
ffi::Error RunLanes(const Job<T>& job, MakeRhs make_rhs) {
  std::atomic<int64_t>* const next = job.next;
  const int64_t count = job.count, max_lanes = job.max_lanes;
  const Attrs& a = *job.attrs;
  const EventSet<T>& events_proto = *job.events;
  const int64_t n = job.n, np = job.np, n_aug = job.n_aug, m = job.m, kslots = job.kslots;
  const T *y0 = job.y0, *params = job.params, *span = job.span, *t_eval = job.t_eval;
  T *ys = job.ys, *t_final = job.t_final, *y_final = job.y_final;
  T *t_events = job.t_events, *y_events = job.y_events;
  int32_t *stats = job.stats, *counts = job.counts;
  using Rhs = decltype(make_rhs(params, static_cast<T*>(nullptr)));
  // The built-in models (lanes evaluated at once) integrate a state size known at compile time
  // (6, or 6 with its sensitivities), the error controlled on its first 6 components. A user's
  // lanes (kRows) integrate the state alone, of a size known at run time.
  constexpr bool kRows = EvaluatesLaneRows<Rhs>::value;
  constexpr bool kVector = EvaluatesLanes<Rhs>::value || kRows;
  constexpr int kStaticN = LaneStateOf<Rhs>();
  using Integrator = dop853::Integrator<T, Rhs, EventSet<T>, kStaticN, kVector ? kLanes : 1,
                                        kVector && !kRows ? orbit::kStateSize : 0>;
  constexpr int32_t kRunning = Integrator::kRunning;
  if (kVector && !kRows && (n != orbit::kStateSize || n_aug != kStaticN)) {
    return ffi::Error(ffi::ErrorCode::kInternal,
                      "jaxext.ode.dop853: the built-in models' lanes got a state of the "
                      "wrong size");
  }
  if (kRows && (n_aug != n || n > dop853::kMaxLaneRowsState)) {
    return ffi::Error(ffi::ErrorCode::kInternal,
                      "jaxext.ode.dop853: a right-hand side's lanes got a state of the "
                      "wrong size");
  }
  if constexpr (kVector) simd_lane_runs.fetch_add(1, std::memory_order_relaxed);
  const int64_t n_events = events_proto.count;
  std::vector<T> tol(2 * n);
  for (int64_t i = 0; i < n; ++i) {
    tol[i] = T(a.rtol[i]);
    tol[n + i] = T(a.atol[i]);
  }
  const dop853::Settings<T> settings{tol.data(), tol.data() + n, T(a.first_step), T(a.max_step),
                                     a.max_steps};
  const int64_t cols = n + np;
  const int64_t scratch_size = 2 * n * n + 2 * n * std::max<int64_t>(np, 1);
  // One lane: the integrator of its current trajectory j, with what it refers to (its workspace
  // in `work`, or with vectors its share of `interleaved`).
  struct Lane {
    std::vector<T> work, scratch, start;
    Rhs rhs;
    EventSet<T> events;
    dop853::Outputs<T> out;
    int64_t j = -1;
  };
  // Lanes that take trajectories; with vectors, all kLanes are computed (the others idle).
  const int lanes = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_lanes, count)));
  const int slots = kVector ? kLanes : lanes;
  const int64_t work_size = dop853::WorkspaceSize(n_aug);
  std::vector<T> interleaved(kVector ? kLanes * work_size : 0);
  std::vector<T> prototype_scratch(scratch_size);  // (each lane's rhs is remade in fill)
  std::vector<Lane> lane(slots, Lane{std::vector<T>(kVector ? 0 : work_size),
                                     std::vector<T>(scratch_size), std::vector<T>(n_aug),
                                     make_rhs(params, prototype_scratch.data()), events_proto,
                                     {}, -1});
  std::vector<Integrator> integrators;
  integrators.reserve(slots);
  for (int k = 0; k < slots; ++k) {
    integrators.emplace_back(lane[k].rhs, lane[k].events, static_cast<int>(n_aug),
                             static_cast<int>(n), settings,
                             kVector ? interleaved.data() + k : lane[k].work.data());
  }
  T lane_p[kLanes] = {};  // each lane's first parameter (the built-in models' drag B)
  // A user's lanes: every lane's parameters as lane-major rows (np x kLanes).
  std::vector<T> lane_params(kRows ? np * kLanes : 0);
  auto failed = [&](int64_t j) {
    return ffi::Error(ffi::ErrorCode::kInternal,
                      "jaxext.ode.dop853: the user function of '" + std::string(a.name) +
                          "' raised an exception (trajectory " + std::to_string(j) +
                          "; Numba's nopython mode does not say which: call the Python "
                          "function on NumPy arrays to see it)");
  };
  // Starts the next trajectories on lane k until one needs steps (false: an error in `err`).
  auto fill = [&](int k, ffi::Error* err) -> bool {
    Lane& l = lane[k];
    Integrator& integrator = integrators[k];
    l.j = -1;
    for (;;) {
      const int64_t j = next->fetch_add(1);
      if (j >= count) break;
      const T* p = params + j * np;
      l.rhs = make_rhs(p, l.scratch.data());
      if (np > 0) lane_p[k] = p[0];
      if constexpr (kRows) {
        for (int64_t i = 0; i < np; ++i) lane_params[i * kLanes + k] = p[i];
      }
      l.events.p = p;
      l.out = dop853::Outputs<T>{t_eval,
                                 m,
                                 ys + j * m * n_aug,
                                 kslots,
                                 t_events + j * n_events * kslots,
                                 y_events + j * n_events * kslots * n_aug,
                                 counts + j * n_events,
                                 t_final + j,
                                 y_final + j * n_aug,
                                 stats + j * 4};
      if (job.dense_steps > 0) {
        l.out.dense_steps = job.dense_steps;
        l.out.dense_t = job.dense_t + j * (job.dense_steps + 1);
        l.out.dense_f = job.dense_f + j * job.dense_steps * (dop853::kDense + 1) * n_aug;
      }
      bool params_finite = true;
      for (int64_t k2 = 0; k2 < np; ++k2) params_finite = params_finite && dop853::Finite(p[k2]);
      for (int64_t i = 0; i < n; ++i) l.start[i] = y0[j * n + i];
      for (int64_t i = 0; i < n_aug - n; ++i) l.start[n + i] = (i % cols == i / cols) ? T(1) : T(0);
      int32_t status =
          integrator.Begin(span[2 * j], span[2 * j + 1], l.start.data(), params_finite, l.out);
      if (status == kRunning) status = integrator.Attempt(l.out);
      if (status == kRunning) {
        l.j = j;
        return true;
      }
      if (status == dop853::kCallbackFailed) {
        *err = failed(j);
        return false;
      }
    }
    return true;
  };
  ffi::Error err = ffi::Error::Success();
  for (int k = 0; k < lanes; ++k) {
    if (!fill(k, &err)) return err;
  }
  if constexpr (kVector) {
    // Lanes without a trajectory compute a busy lane's first stages (with h = 0) rather than
    // zeros, whose divisions by r = 0 would raise floating-point exceptions for nothing.
    int from = 0;
    while (from < lanes && lane[from].j < 0) ++from;
    for (int k = 0; k < kLanes && from < lanes; ++k) {
      if (k < lanes && lane[k].j >= 0) continue;
      for (int64_t e = 0; e < work_size; ++e) {
        interleaved[e * kLanes + k] = interleaved[e * kLanes + from];
      }
      for (int64_t i = 0; i < static_cast<int64_t>(lane_params.size()) / kLanes; ++i) {
        lane_params[i * kLanes + k] = lane_params[i * kLanes + from];
      }
    }
  }
  // Stages S..kStages of every busy lane, lane after lane within each stage, or as vectors of
  // all lanes (step sizes h, parameters p; idle lanes compute with h = 0, and nothing reads
  // what they compute).
  using V = ModelLanes<T>;
  auto stages = [&](auto self, auto stage, const V& h, const V& p) -> int64_t {
    constexpr int S = decltype(stage)::value;
    if constexpr (kRows) {
      // One call for every lane (idle ones included: what they compute, and whether their
      // call raised, is never read).
      int32_t status[kLanes] = {};
      Integrator::template StageLaneRows<S>(
          integrators.data(), h, [&](const T* t, const T* y, T* f) {
            lane[0].rhs.EvalLaneRows(t, y, lane_params.data(), f, status);
            return true;
          });
      for (int k = 0; k < lanes; ++k) {
        if (lane[k].j >= 0 && status[k] != 0) {
          integrators[k].Fail(lane[k].out);
          return lane[k].j;
        }
      }
    } else if constexpr (kVector) {
      // Every lane's right-hand side is the same model (lane 0's), with each lane's p.
      Integrator::template StageLanes<S>(integrators.data(), h, [&](const V* y, V* f) {
        lane[0].rhs.EvalLanes(y, &p, f);
      });
    } else {
      for (int k = 0; k < lanes; ++k) {
        if (lane[k].j >= 0 && !integrators[k].template Stage<S>()) {
          integrators[k].Fail(lane[k].out);
          return lane[k].j;
        }
      }
    }
    if constexpr (S < dop853::kStages) {
      return self(self, std::integral_constant<int, S + 1>(), h, p);
    } else {
      return -1;
    }
  };
  for (;;) {
    bool busy = false;
    for (int k = 0; k < lanes; ++k) busy = busy || lane[k].j >= 0;
    if (!busy) break;
    T norms[kVector ? kLanes : 1];
    if constexpr (kVector) {
      T h[kLanes] = {};
      for (int k = 0; k < lanes; ++k) h[k] = lane[k].j >= 0 ? integrators[k].StepSize() : T(0);
      const V hv = V::FromArray(h), pv = V::FromArray(lane_p);
      // (the built-in models cannot fail; a user's lanes can)
      if (const int64_t j = stages(stages, std::integral_constant<int, 1>(), hv, pv); j >= 0) {
        return failed(j);
      }
      Integrator::ErrorNormLanes(integrators.data(), hv, norms);
    } else if (const int64_t j = stages(stages, std::integral_constant<int, 1>(), V(), V());
               j >= 0) {
      return failed(j);
    }
    for (int k = 0; k < lanes; ++k) {
      if (lane[k].j < 0) continue;
      int32_t status;
      if constexpr (kVector) {
        status = integrators[k].Conclude(lane[k].out, norms[k]);
      } else {
        status = integrators[k].Conclude(lane[k].out);
      }
      if (status == kRunning) status = integrators[k].Attempt(lane[k].out);
      if (status == kRunning) continue;
      if (status == dop853::kCallbackFailed) return failed(lane[k].j);
      if (!fill(k, &err)) return err;
    }
  }
  return ffi::Error::Success();
}

// The built-in models' lanes (ModelRhs, ModelVariational), compiled per CPU (clones.h) so that
// the lanes' vectors are the widest the CPU has (AVX-512: 8 doubles, one register); the same
// arithmetic in every clone (-ffp-contract=off: no fused multiply-adds).
template <typename T>
struct MakeModelRhs {
  const orbit::Model<T>* model;
  ModelRhs<T> operator()(const T* p, T*) const { return ModelRhs<T>{model, p}; }
};
template <typename T, int NP>
struct MakeModelVariational {
  const orbit::Model<T>* model;
  int64_t n, np;
  ModelVariational<T, NP> operator()(const T* p, T* scratch) const {
    return ModelVariational<T, NP>{
        {ModelJacobian<T>{model, p, np}, n, np, scratch, scratch + n * n}};
  }
};
// A user's right-hand side with its lanes form (UserLanesRhs).
template <typename T>
struct MakeUserLanesRhs {
  NativeRhs<T> fn;
  NativeRhsLanes<T> lanes;
  UserLanesRhs<T> operator()(const T* p, T*) const { return UserLanesRhs<T>{{fn, p}, lanes}; }
};
#define JAXEXT_ODE_RUN_LANES_DECLARE(T, SUFFIX)                                      \
  ffi::Error RunModelLanes##SUFFIX(const Job<T>& job, MakeModelRhs<T> make_rhs);    \
  ffi::Error RunUserLanes##SUFFIX(const Job<T>& job, MakeUserLanesRhs<T> make_rhs); \
  ffi::Error RunVariationalLanes##SUFFIX##P0(const Job<T>& job,                      \
                                             MakeModelVariational<T, 0> make_rhs);   \
  ffi::Error RunVariationalLanes##SUFFIX##P1(const Job<T>& job,                      \
                                             MakeModelVariational<T, 1> make_rhs);
JAXEXT_ODE_RUN_LANES_DECLARE(float, F32)
JAXEXT_ODE_RUN_LANES_DECLARE(double, F64)
#undef JAXEXT_ODE_RUN_LANES_DECLARE

// The definitions of one dtype's lanes functions (declared above), per CPU: in one translation
// unit per dtype (ode_cpu_lanes_f32.cc, ode_cpu_lanes_f64.cc).
#define JAXEXT_ODE_LANES_DEFINE(T, SUFFIX)                                                      \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void ModelLanes##SUFFIX(                                 \
      const orbit::Model<T>& model, const ModelLanes<T>* y, const ModelLanes<T>* p,             \
      ModelLanes<T>* f) {                                                                       \
    model(T(0), y, p, f);                                                                       \
  }                                                                                             \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void VariationalLanes##SUFFIX##P0(                       \
      const orbit::Model<T>& model, const ModelLanes<T>* y, const ModelLanes<T>* p,             \
      ModelLanes<T>* f) {                                                                       \
    VariationalLanes<T, 0>(model, y, p, f);                                                     \
  }                                                                                             \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void VariationalLanes##SUFFIX##P1(                       \
      const orbit::Model<T>& model, const ModelLanes<T>* y, const ModelLanes<T>* p,             \
      ModelLanes<T>* f) {                                                                       \
    VariationalLanes<T, 1>(model, y, p, f);                                                     \
  }                                                                                             \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN ffi::Error RunModelLanes##SUFFIX(                        \
      const Job<T>& job, MakeModelRhs<T> make_rhs) {                                            \
    return RunLanes<T>(job, make_rhs);                                                          \
  }                                                                                             \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN ffi::Error RunUserLanes##SUFFIX(                         \
      const Job<T>& job, MakeUserLanesRhs<T> make_rhs) {                                        \
    return RunLanes<T>(job, make_rhs);                                                          \
  }                                                                                             \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN ffi::Error RunVariationalLanes##SUFFIX##P0(              \
      const Job<T>& job, MakeModelVariational<T, 0> make_rhs) {                                 \
    return RunLanes<T>(job, make_rhs);                                                          \
  }                                                                                             \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN ffi::Error RunVariationalLanes##SUFFIX##P1(              \
      const Job<T>& job, MakeModelVariational<T, 1> make_rhs) {                                 \
    return RunLanes<T>(job, make_rhs);                                                          \
  }

}  // namespace ode_internal
}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_ODE_CPU_INTERNAL_H_
