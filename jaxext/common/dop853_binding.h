// The FFI signature jaxext.ode.dop853's handlers share (jaxext/cpu/ode_cpu.h describes it): the
// CPU and CUDA bindings differ only in their context (thread pool or stream).
#ifndef JAXEXT_COMMON_DOP853_BINDING_H_
#define JAXEXT_COMMON_DOP853_BINDING_H_

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
      .Attr<std::string_view>("device_code")

#endif  // JAXEXT_COMMON_DOP853_BINDING_H_
