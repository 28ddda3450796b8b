#include "jaxext/cpu/ode_cpu.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "jaxext/cpu/clones.h"
#include "jaxext/cpu/native_registry.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/common/dop853_binding.h"
#include "jaxext/kernels/dop853.h"
#include "jaxext/kernels/lanes.h"
#include "jaxext/kernels/orbit.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

template <typename T>
using NativeRhs = void (*)(T, const T*, const T*, T*, int32_t*);
template <typename T>
using NativeEvent = T (*)(T, const T*, const T*, int32_t*);

// Trajectories integrated side by side per thread (RunLanes), and the SIMD width of the built-in
// models' evaluation across them.
constexpr int kLanes = 8;

std::atomic<int64_t> simd_lane_runs{0};  // OdeSimdLaneRuns

// The built-in model at kLanes stage points (one per trajectory, p: their parameters) as SIMD
// lanes (jaxext/kernels/lanes.h). Each lane rounds as the scalar model does (the library is built
// with -ffp-contract=off), so results do not depend on which lane a trajectory runs in, nor on
// which of the per-CPU clones runs (glibc's exp, which may differ between CPUs, is the same in
// both). The models do not depend on t. Per CPU, and a function of its own: inlined into the
// (also per-CPU) lanes loop, the vector model measured 30% slower (when the lanes still gathered
// their states for it: 82.7 against 64 us per trajectory, LEO, tol 1e-9, one core).
template <typename T>
using ModelLanes = Lanes<T, kLanes>;
JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void ModelLanesF32(const orbit::Model<float>& model,
                                                        const ModelLanes<float>* y,
                                                        const ModelLanes<float>* p,
                                                        ModelLanes<float>* f) {
  model(0.0f, y, p, f);
}
JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void ModelLanesF64(const orbit::Model<double>& model,
                                                        const ModelLanes<double>* y,
                                                        const ModelLanes<double>* p,
                                                        ModelLanes<double>* f) {
  model(0.0, y, p, f);
}

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
#define JAXEXT_VARIATIONAL_LANES(T, NP, NAME)                                                 \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void NAME(const orbit::Model<T>& model,                \
                                                 const ModelLanes<T>* y,                      \
                                                 const ModelLanes<T>* p, ModelLanes<T>* f) { \
    VariationalLanes<T, NP>(model, y, p, f);                                                  \
  }
JAXEXT_VARIATIONAL_LANES(float, 0, VariationalLanesF32P0)
JAXEXT_VARIATIONAL_LANES(float, 1, VariationalLanesF32P1)
JAXEXT_VARIATIONAL_LANES(double, 0, VariationalLanesF64P0)
JAXEXT_VARIATIONAL_LANES(double, 1, VariationalLanesF64P1)
#undef JAXEXT_VARIATIONAL_LANES

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

// Right-hand sides that evaluate kLanes trajectories' stages at once (ModelRhs::EvalLanes), and
// the state size they integrate (0 for the others).
template <typename Rhs, typename = void>
struct EvaluatesLanes : std::false_type {};
template <typename Rhs>
struct EvaluatesLanes<Rhs, std::void_t<decltype(&Rhs::EvalLanes)>> : std::true_type {};
template <typename Rhs>
constexpr int LaneStateOf() {
  if constexpr (EvaluatesLanes<Rhs>::value) {
    return Rhs::kLaneState;
  } else {
    return 0;
  }
}

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

template <typename T>
using NativeJacobian = void (*)(T, const T*, const T*, T*, T*, int32_t*);

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

template <typename T>
struct UserJacobian {
  NativeRhs<T> fn;
  NativeJacobian<T> jac;
  const T* p;
  int64_t n, np;
  bool operator()(T t, const T* y, T* f, T* dfdy, T* dfdp) const {
    int32_t status = 0;
    fn(t, y, p, f, &status);
    if (status != 0) return false;
    // Entries the user's function leaves unwritten are zero (not left over from another call).
    for (int64_t i = 0; i < n * n; ++i) dfdy[i] = T(0);
    for (int64_t i = 0; i < n * np; ++i) dfdp[i] = T(0);
    jac(t, y, p, dfdy, dfdp, &status);
    return status == 0;
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

ffi::Error Invalid(std::string message) {
  return ffi::Error::InvalidArgument("jaxext.ode.dop853: " + message);
}

struct Attrs {
  int64_t rhs_id;
  std::string_view name;
  ffi::Span<const double> model, rtol, atol;
  double first_step, max_step;
  int64_t max_steps, n_events;
  ffi::Span<const int64_t> event_kinds, event_ids;
  ffi::Span<const double> event_consts;
  ffi::Span<const int64_t> event_directions, event_terminal;
  int64_t jac_id, sensitivities;
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
  // (6, or 6 with its sensitivities), the error controlled on its first 6 components.
  constexpr bool kVector = EvaluatesLanes<Rhs>::value;
  constexpr int kStaticN = LaneStateOf<Rhs>();
  using Integrator = dop853::Integrator<T, Rhs, EventSet<T>, kStaticN, kVector ? kLanes : 1,
                                        kVector ? orbit::kStateSize : 0>;
  constexpr int32_t kRunning = Integrator::kRunning;
  if (kVector && (n != orbit::kStateSize || n_aug != kStaticN)) {
    return ffi::Error(ffi::ErrorCode::kInternal,
                      "jaxext.ode.dop853: the built-in models' lanes got a state of the "
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
    }
  }
  // Stages S..kStages of every busy lane, lane after lane within each stage, or as vectors of
  // all lanes (step sizes h, parameters p; idle lanes compute with h = 0, and nothing reads
  // what they compute).
  using V = ModelLanes<T>;
  auto stages = [&](auto self, auto stage, const V& h, const V& p) -> int64_t {
    constexpr int S = decltype(stage)::value;
    if constexpr (kVector) {
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
      stages(stages, std::integral_constant<int, 1>(), hv, pv);  // (the models cannot fail)
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
#define JAXEXT_MODEL_LANES(T, MAKER, NAME)                                                 \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN ffi::Error NAME(const Job<T>& job, MAKER make_rhs) { \
    return RunLanes<T>(job, make_rhs);                                                     \
  }
JAXEXT_MODEL_LANES(float, MakeModelRhs<float>, RunModelLanesF32)
JAXEXT_MODEL_LANES(double, MakeModelRhs<double>, RunModelLanesF64)
using MakeVariationalF32P0 = MakeModelVariational<float, 0>;
using MakeVariationalF32P1 = MakeModelVariational<float, 1>;
using MakeVariationalF64P0 = MakeModelVariational<double, 0>;
using MakeVariationalF64P1 = MakeModelVariational<double, 1>;
JAXEXT_MODEL_LANES(float, MakeVariationalF32P0, RunVariationalLanesF32P0)
JAXEXT_MODEL_LANES(float, MakeVariationalF32P1, RunVariationalLanesF32P1)
JAXEXT_MODEL_LANES(double, MakeVariationalF64P0, RunVariationalLanesF64P0)
JAXEXT_MODEL_LANES(double, MakeVariationalF64P1, RunVariationalLanesF64P1)
#undef JAXEXT_MODEL_LANES

// The built-in models one trajectory per lane, in scalar code (JAXEXT_ODE_SIMD=0: same results;
// for comparisons and debugging).
template <typename T, typename Rhs>
struct ScalarRhs {
  Rhs rhs;
  bool operator()(T t, const T* y, T* f) const { return rhs(t, y, f); }
};

bool SimdLanesEnabled() {
  const char* flag = std::getenv("JAXEXT_ODE_SIMD");
  return flag == nullptr || std::string_view(flag) != "0";
}

template <typename T>
ffi::Future Dop853Typed(ffi::ThreadPool pool, ffi::AnyBuffer y0, ffi::AnyBuffer params,
                        ffi::AnyBuffer t_span, ffi::AnyBuffer t_eval, ffi::Result<ffi::AnyBuffer> ys,
                        ffi::Result<ffi::AnyBuffer> t_final, ffi::Result<ffi::AnyBuffer> y_final,
                        ffi::Result<ffi::AnyBuffer> stats, ffi::Result<ffi::AnyBuffer> t_events,
                        ffi::Result<ffi::AnyBuffer> y_events,
                        ffi::Result<ffi::AnyBuffer> event_counts, const Attrs& a) {
  const int64_t n_events = a.n_events;
  const bool sensitivities = a.sensitivities != 0;
  Dop853Shape shape;
  if (const std::string bad = GetDop853Shape(
          y0, params, t_span, t_eval, *ys, *t_final, *y_final, *stats, *t_events, *y_events,
          *event_counts, a.rtol.size(), a.atol.size(), n_events,
          {a.event_kinds.size(), a.event_ids.size(), a.event_consts.size(),
           a.event_directions.size(), a.event_terminal.size()},
          sensitivities, &shape);
      !bad.empty()) {
    return ErrorFuture(Invalid(bad));
  }
  const int64_t count = shape.count, n = shape.n, np = shape.np, n_aug = shape.n_aug;
  const int64_t m = shape.m, kslots = shape.kslots;
  if (count == 0) return ReadyFuture();

  orbit::Model<T> model;
  NativeRhs<T> user = nullptr;
  NativeJacobian<T> user_jacobian = nullptr;
  if (a.rhs_id == 0) {
    if (!model.Decode(a.model.begin(), static_cast<int64_t>(a.model.size()))) {
      return ErrorFuture(Invalid("malformed built-in model constants"));
    }
    if (n != orbit::kStateSize) return ErrorFuture(Invalid("the built-in models need n = 6"));
    if (np < model.num_params()) {
      return ErrorFuture(Invalid("the model needs " + std::to_string(model.num_params()) +
                                 " parameter(s) per trajectory"));
    }
  } else {
    user = LookupNativeFunctionAs<NativeRhs<T>>(a.rhs_id);
    if (user == nullptr) {
      return ErrorFuture(ffi::Error(
          ffi::ErrorCode::kNotFound,
          "jaxext.ode.dop853: right-hand side '" + std::string(a.name) +
              "' is not compiled in this process (an exported or cached executable "
              "needs jaxext.ode.dop853 called once with the same function first)"));
    }
    if (sensitivities) {
      user_jacobian = LookupNativeFunctionAs<NativeJacobian<T>>(a.jac_id);
      if (user_jacobian == nullptr) {
        return ErrorFuture(Invalid("the Jacobian of '" + std::string(a.name) +
                                   "' is not compiled in this process"));
      }
    }
  }
  EventSet<T> events;
  events.count = static_cast<int>(n_events);
  events.kinds = a.event_kinds.begin();
  events.consts = a.event_consts.begin();
  events.directions = a.event_directions.begin();
  events.terminal = a.event_terminal.begin();
  for (int64_t e = 0; e < n_events; ++e) {
    events.fns[e] = nullptr;
    if (a.event_kinds[e] == 0) {
      if (n < 3) return ErrorFuture(Invalid("a radius event needs n >= 3"));
    } else {
      events.fns[e] = LookupNativeFunctionAs<NativeEvent<T>>(a.event_ids[e]);
      if (events.fns[e] == nullptr) {
        return ErrorFuture(ffi::Error(ffi::ErrorCode::kNotFound,
                                      "jaxext.ode.dop853: an event function of '" +
                                          std::string(a.name) + "' is not compiled in this process"));
      }
    }
  }

  const T* y0p = y0.typed_data<T>();
  const T* pp = params.typed_data<T>();
  const T* sp = t_span.typed_data<T>();
  const T* tp = t_eval.typed_data<T>();
  T* ysp = ys->typed_data<T>();
  T* tfp = t_final->typed_data<T>();
  T* yfp = y_final->typed_data<T>();
  int32_t* stp = stats->typed_data<int32_t>();
  T* tep = t_events->typed_data<T>();
  T* yep = y_events->typed_data<T>();
  int32_t* cp = event_counts->typed_data<int32_t>();
  // Trajectories cost from microseconds to seconds each: every worker (the pool's threads and
  // the caller) takes them one at a time from a shared counter into its lanes.
  // Few trajectories for many threads: fewer lanes each, so that no thread takes kLanes while
  // others get none (a lane claims a trajectory when it starts and when it frees up).
  auto next = std::make_shared<std::atomic<int64_t>>(0);
  const int64_t workers = std::min<int64_t>(pool.num_threads() + 1, count);
  const int64_t max_lanes = std::min<int64_t>(kLanes, (count + workers - 1) / workers);
  const bool simd = SimdLanesEnabled();
  // The workers may run after this function returns: Job points to the lambda's own copies (of
  // the attributes' views and the events' pointers into XLA's attribute storage, as before).
  return ParallelForDynamic(pool, workers, 1, [=](int64_t, int64_t) {
    const Job<T> job{next.get(), count, max_lanes, &a,  &events, n,   np,  n_aug, m,  kslots,
                     y0p,        pp,    sp,        tp,  ysp,     tfp, yfp, stp,   tep, yep, cp};
    const orbit::Model<T>* mp = &model;
    constexpr bool f32 = std::is_same_v<T, float>;
    if (!sensitivities) {
      if (user != nullptr) {
        return RunLanes(job, [user](const T* p, T*) { return UserRhs<T>{user, p}; });
      }
      if (!simd) {
        return RunLanes(job, [mp](const T* p, T*) {
          return ScalarRhs<T, ModelRhs<T>>{ModelRhs<T>{mp, p}};
        });
      }
      if constexpr (f32) {
        return RunModelLanesF32(job, MakeModelRhs<T>{mp});
      } else {
        return RunModelLanesF64(job, MakeModelRhs<T>{mp});
      }
    }
    if (user != nullptr) {
      return RunLanes(job, [user, user_jacobian, n, np](const T* p, T* scratch) {
        return Variational<T, UserJacobian<T>>{UserJacobian<T>{user, user_jacobian, p, n, np}, n,
                                               np, scratch, scratch + n * n};
      });
    }
    if (simd && np <= 1) {
      if constexpr (f32) {
        return np == 0 ? RunVariationalLanesF32P0(job, {mp, n, np})
                       : RunVariationalLanesF32P1(job, {mp, n, np});
      } else {
        return np == 0 ? RunVariationalLanesF64P0(job, {mp, n, np})
                       : RunVariationalLanesF64P1(job, {mp, n, np});
      }
    }
    return RunLanes(job, [mp, n, np](const T* p, T* scratch) {
      return Variational<T, ModelJacobian<T>>{ModelJacobian<T>{mp, p, np}, n, np, scratch,
                                              scratch + n * n};
    });
  });
}

ffi::Future Dop853Impl(ffi::ThreadPool pool, ffi::AnyBuffer y0, ffi::AnyBuffer params,
                       ffi::AnyBuffer t_span, ffi::AnyBuffer t_eval, ffi::Result<ffi::AnyBuffer> ys,
                       ffi::Result<ffi::AnyBuffer> t_final, ffi::Result<ffi::AnyBuffer> y_final,
                       ffi::Result<ffi::AnyBuffer> stats, ffi::Result<ffi::AnyBuffer> t_events,
                       ffi::Result<ffi::AnyBuffer> y_events,
                       ffi::Result<ffi::AnyBuffer> event_counts, int64_t rhs_id,
                       std::string_view name, ffi::Span<const double> model,
                       ffi::Span<const double> rtol, ffi::Span<const double> atol,
                       double first_step, double max_step, int64_t max_steps, int64_t n_events,
                       ffi::Span<const int64_t> event_kinds, ffi::Span<const int64_t> event_ids,
                       ffi::Span<const double> event_consts,
                       ffi::Span<const int64_t> event_directions,
                       ffi::Span<const int64_t> event_terminal, int64_t jac_id,
                       int64_t sensitivities, std::string_view /*device_code: CUDA's*/) {
  const Attrs a{rhs_id,    name,         model,           rtol,           atol,
                first_step, max_step,    max_steps,       n_events,       event_kinds,
                event_ids, event_consts, event_directions, event_terminal, jac_id,
                sensitivities};
  if (stats->element_type() != ffi::DataType::S32 ||
      event_counts->element_type() != ffi::DataType::S32) {
    return ErrorFuture(Invalid("stats and event counts must be int32"));
  }
  switch (y0.element_type()) {
    case ffi::DataType::F32:
      return Dop853Typed<float>(pool, y0, params, t_span, t_eval, ys, t_final, y_final, stats,
                                t_events, y_events, event_counts, a);
    case ffi::DataType::F64:
      return Dop853Typed<double>(pool, y0, params, t_span, t_eval, ys, t_final, y_final, stats,
                                 t_events, y_events, event_counts, a);
    default:
      return ErrorFuture(Invalid("float32 or float64 states only"));
  }
}

}  // namespace

int64_t OdeSimdLaneRuns() { return simd_lane_runs.load(); }

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextDop853Cpu, Dop853Impl,
                              JAXEXT_DOP853_BINDING(ffi::ThreadPool));

}  // namespace cpu
}  // namespace jaxext
