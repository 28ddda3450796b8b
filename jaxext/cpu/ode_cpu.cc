#include "jaxext/cpu/ode_cpu.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "jaxext/cpu/native_registry.h"
#include "jaxext/cpu/ode_cpu_internal.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/common/dop853_binding.h"
#include "jaxext/kernels/dop853.h"
#include "jaxext/kernels/orbit.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace ode_internal {
std::atomic<int64_t> simd_lane_runs{0};
}  // namespace ode_internal
namespace {

using namespace ode_internal;  // NOLINT: this handler's own internals (ode_cpu_internal.h)

template <typename T>
using NativeJacobian = void (*)(T, const T*, const T*, T*, T*, int32_t*);

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

ffi::Error Invalid(std::string message) {
  return ffi::Error::InvalidArgument("jaxext.ode.dop853: " + message);
}

// The built-in models one trajectory per lane, in scalar code (JAXEXT_ODE_SIMD=0, which also
// keeps a user's right-hand side out of the SIMD lanes: same results; for comparisons and
// debugging).
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
                        ffi::Result<ffi::AnyBuffer> event_counts,
                        ffi::Result<ffi::AnyBuffer> dense_t, ffi::Result<ffi::AnyBuffer> dense_f,
                        const Attrs& a) {
  const int64_t n_events = a.n_events;
  const bool sensitivities = a.sensitivities != 0;
  Dop853Shape shape;
  if (const std::string bad = GetDop853Shape(
          y0, params, t_span, t_eval, *ys, *t_final, *y_final, *stats, *t_events, *y_events,
          *event_counts, *dense_t, *dense_f, a.rtol.size(), a.atol.size(), n_events,
          {a.event_kinds.size(), a.event_ids.size(), a.event_consts.size(),
           a.event_directions.size(), a.event_terminal.size()},
          sensitivities, a.dense_steps, &shape);
      !bad.empty()) {
    return ErrorFuture(Invalid(bad));
  }
  const int64_t count = shape.count, n = shape.n, np = shape.np, n_aug = shape.n_aug;
  const int64_t m = shape.m, kslots = shape.kslots;
  if (count == 0) return ReadyFuture();

  orbit::Model<T> model;
  NativeRhs<T> user = nullptr;
  NativeRhsLanes<T> user_lanes = nullptr;
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
    user_lanes = LookupNativeLanesAs<NativeRhsLanes<T>>(a.rhs_id);  // (optional)
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
  T* dtp = shape.dense_steps > 0 ? dense_t->typed_data<T>() : nullptr;
  T* dfp = shape.dense_steps > 0 ? dense_f->typed_data<T>() : nullptr;
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
                     y0p,        pp,    sp,        tp,  ysp,     tfp, yfp, stp,   tep, yep, cp,
                     shape.dense_steps, dtp, dfp};
    const orbit::Model<T>* mp = &model;
    constexpr bool f32 = std::is_same_v<T, float>;
    if (!sensitivities) {
      if (user != nullptr) {
        if (simd && user_lanes != nullptr && n <= dop853::kMaxLaneRowsState) {
          if constexpr (f32) {
            return RunUserLanesF32(job, MakeUserLanesRhs<T>{user, user_lanes});
          } else {
            return RunUserLanesF64(job, MakeUserLanesRhs<T>{user, user_lanes});
          }
        }
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
                       ffi::Result<ffi::AnyBuffer> event_counts,
                       ffi::Result<ffi::AnyBuffer> dense_t, ffi::Result<ffi::AnyBuffer> dense_f,
                       int64_t rhs_id,
                       std::string_view name, ffi::Span<const double> model,
                       ffi::Span<const double> rtol, ffi::Span<const double> atol,
                       double first_step, double max_step, int64_t max_steps, int64_t n_events,
                       ffi::Span<const int64_t> event_kinds, ffi::Span<const int64_t> event_ids,
                       ffi::Span<const double> event_consts,
                       ffi::Span<const int64_t> event_directions,
                       ffi::Span<const int64_t> event_terminal, int64_t jac_id,
                       int64_t sensitivities, int64_t dense_steps,
                       std::string_view /*device_code: CUDA's*/) {
  const Attrs a{rhs_id,    name,         model,           rtol,           atol,
                first_step, max_step,    max_steps,       n_events,       event_kinds,
                event_ids, event_consts, event_directions, event_terminal, jac_id,
                sensitivities, dense_steps};
  if (stats->element_type() != ffi::DataType::S32 ||
      event_counts->element_type() != ffi::DataType::S32) {
    return ErrorFuture(Invalid("stats and event counts must be int32"));
  }
  switch (y0.element_type()) {
    case ffi::DataType::F32:
      return Dop853Typed<float>(pool, y0, params, t_span, t_eval, ys, t_final, y_final, stats,
                                t_events, y_events, event_counts, dense_t, dense_f, a);
    case ffi::DataType::F64:
      return Dop853Typed<double>(pool, y0, params, t_span, t_eval, ys, t_final, y_final, stats,
                                 t_events, y_events, event_counts, dense_t, dense_f, a);
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
