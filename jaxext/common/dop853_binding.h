// The FFI signature jaxext.ode.dop853's handlers share (jaxext/cpu/ode_cpu.h describes it): the
// CPU and CUDA bindings differ only in their context (thread pool or stream). Also the check of a
// call's operand, result and attribute sizes that every handler (CPU, CUDA built-in, CUDA user
// functions) runs first.
#ifndef JAXEXT_COMMON_DOP853_BINDING_H_
#define JAXEXT_COMMON_DOP853_BINDING_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "jaxext/kernels/dop853.h"
#include "xla/ffi/api/ffi.h"

#define JAXEXT_DOP853_BINDING(Context) \
  JAXEXT_DOP853_STAGE_BINDING(xla::ffi::ExecutionStage::kExecute, Context)

// The same for one execution stage (the CUDA handler also links device code at initialization).
#define JAXEXT_DOP853_STAGE_BINDING(stage, Context)                 \
  xla::ffi::Ffi::Bind<stage>()                                      \
      .Ctx<Context>()                                               \
      .Arg<xla::ffi::AnyBuffer>()                                   \
      .Arg<xla::ffi::AnyBuffer>()                                   \
      .Arg<xla::ffi::AnyBuffer>()                                   \
      .Arg<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Ret<xla::ffi::AnyBuffer>()                                   \
      .Attr<int64_t>("rhs_id")                                      \
      .Attr<std::string_view>("name")                               \
      .Attr<xla::ffi::Span<const double>>("model")                  \
      .Attr<xla::ffi::Span<const double>>("rtol")                   \
      .Attr<xla::ffi::Span<const double>>("atol")                   \
      .Attr<double>("first_step")                                   \
      .Attr<double>("max_step")                                     \
      .Attr<int64_t>("max_steps")                                   \
      .Attr<int64_t>("n_events")                                    \
      .Attr<xla::ffi::Span<const int64_t>>("event_kinds")           \
      .Attr<xla::ffi::Span<const int64_t>>("event_ids")             \
      .Attr<xla::ffi::Span<const double>>("event_consts")           \
      .Attr<xla::ffi::Span<const int64_t>>("event_directions")      \
      .Attr<xla::ffi::Span<const int64_t>>("event_terminal")        \
      .Attr<int64_t>("jac_id")                                      \
      .Attr<int64_t>("sensitivities")                               \
      .Attr<int64_t>("dense_steps")                                 \
      .Attr<std::string_view>("device_code")

namespace jaxext {

// The sizes of one call, read off its operands and checked against its results and attributes.
struct Dop853Shape {
  int64_t count, n, np, n_aug, m, kslots;  // trajectories, state, params, state + sensitivities,
                                           // t_eval points, event slots
  int64_t dense_steps;                     // steps whose dense output is kept (0: none)
};

// Fills `s` and returns "" when the operands, results and attribute sizes agree; otherwise what
// is wrong. `event_attrs`: the sizes of the per-event attribute arrays (each >= n_events).
inline std::string GetDop853Shape(const xla::ffi::AnyBuffer& y0, const xla::ffi::AnyBuffer& params,
                                  const xla::ffi::AnyBuffer& t_span,
                                  const xla::ffi::AnyBuffer& t_eval, const xla::ffi::AnyBuffer& ys,
                                  const xla::ffi::AnyBuffer& t_final,
                                  const xla::ffi::AnyBuffer& y_final,
                                  const xla::ffi::AnyBuffer& stats,
                                  const xla::ffi::AnyBuffer& t_events,
                                  const xla::ffi::AnyBuffer& y_events,
                                  const xla::ffi::AnyBuffer& event_counts,
                                  const xla::ffi::AnyBuffer& dense_t,
                                  const xla::ffi::AnyBuffer& dense_f, size_t n_rtol,
                                  size_t n_atol, int64_t n_events,
                                  std::initializer_list<size_t> event_attrs, bool sensitivities,
                                  int64_t dense_steps, Dop853Shape* s) {
  const auto dims = y0.dimensions();
  if (dims.size() != 2) return "y0 must have rank 2";
  if (params.dimensions().size() != 2) return "params must have rank 2";
  if (n_events < 0 || n_events > dop853::kMaxEvents) {
    return "at most " + std::to_string(dop853::kMaxEvents) + " events";
  }
  for (const size_t size : event_attrs) {
    if (static_cast<int64_t>(size) < n_events) return "event attributes shorter than n_events";
  }
  const int64_t count = dims[0], n = dims[1], np = params.dimensions()[1];
  const int64_t n_aug = sensitivities ? n + n * (n + np) : n;
  const int64_t m = static_cast<int64_t>(t_eval.element_count());
  const int64_t kslots = n_events > 0 ? static_cast<int64_t>(t_events.element_count()) /
                                            std::max<int64_t>(1, count * n_events)
                                      : 0;
  if (params.dimensions()[0] != count ||
      static_cast<int64_t>(t_span.element_count()) != 2 * count ||
      static_cast<int64_t>(ys.element_count()) != count * m * n_aug ||
      static_cast<int64_t>(t_final.element_count()) != count ||
      static_cast<int64_t>(y_final.element_count()) != count * n_aug ||
      static_cast<int64_t>(stats.element_count()) != 4 * count ||
      static_cast<int64_t>(y_events.element_count()) != count * n_events * kslots * n_aug ||
      static_cast<int64_t>(event_counts.element_count()) != count * n_events) {
    return "operand and result shapes disagree";
  }
  // Without a dense output its results are empty. (Products checked for overflow: the sizes
  // come from the call, and a wrapped product would pass for a small buffer.)
  int64_t dense_t_size = 0, dense_f_size = 0;
  if (dense_steps < 0 ||
      (dense_steps > 0 && __builtin_mul_overflow(count, dense_steps + 1, &dense_t_size)) ||
      __builtin_mul_overflow(count, dense_steps, &dense_f_size) ||
      __builtin_mul_overflow(dense_f_size, (dop853::kDense + 1) * n_aug, &dense_f_size) ||
      static_cast<int64_t>(dense_t.element_count()) != dense_t_size ||
      static_cast<int64_t>(dense_f.element_count()) != dense_f_size) {
    return "dense output result shapes disagree with dense_steps";
  }
  if (static_cast<int64_t>(n_rtol) != n || static_cast<int64_t>(n_atol) != n) {
    return "rtol and atol must have one value per state component";
  }
  *s = Dop853Shape{count, n, np, n_aug, m, kslots, dense_steps};
  return "";
}

}  // namespace jaxext

#endif  // JAXEXT_COMMON_DOP853_BINDING_H_
