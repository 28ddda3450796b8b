#include "jaxext/cuda/ode_cuda.h"

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda.h"
#include "jaxext/common/dop853_binding.h"
#include "jaxext/cuda/driver.h"
#include "jaxext/cuda/launch.h"
#include "jaxext/cuda/ode_kernels.h"
#include "jaxext/cuda/ode_user_kernels.h"
#include "jaxext/kernels/dop853.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {

// The device code of ode_user_kernels.cu, per precision (embedded by cuda_device_code).
extern const unsigned char kOdeUserFloat[];
extern const size_t kOdeUserFloatSize;
extern const unsigned char kOdeUserDouble[];
extern const size_t kOdeUserDoubleSize;

namespace {

ffi::Error Invalid(std::string message) {
  return ffi::Error::InvalidArgument("jaxext.ode.dop853 (CUDA): " + message);
}

// ---- User right-hand sides: ode_user_kernels.cu linked with the user's PTX ------------------------

std::string UserPrefix(std::string_view name) {
  return "jaxext.ode.dop853 '" + std::string(name) + "' (CUDA): ";
}

// Linked modules, per (context, precision, user PTX), with their kernels as looked up. Never
// unloaded: executables that may launch them outlive any call, and there is one per distinct set
// of user functions. Keyed by a hash of the PTX; the PTX itself is compared on a hit.
struct UserModule {
  std::string ptx;
  CUmodule module = nullptr;
  std::map<std::string, CUfunction> kernels;
};

std::mutex& UserModulesMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
using UserModuleKey = std::tuple<CUcontext, int, size_t>;
std::map<UserModuleKey, std::vector<UserModule>>& UserModules() {
  static auto* modules = new std::map<UserModuleKey, std::vector<UserModule>>;
  return *modules;
}

// Kernel `kernel` (empty: only link) of `device_code` (the user's PTX) linked with our kernels
// for T, in ctx; links on first use.
template <typename T>
ffi::ErrorOr<CUfunction> UserKernel(const StreamContext& ctx, std::string_view name,
                                    std::string_view device_code, const std::string& kernel,
                                    cudaStream_t stream = nullptr) {
  std::lock_guard<std::mutex> lock(UserModulesMutex());
  auto& bucket = UserModules()[UserModuleKey(ctx.get(), static_cast<int>(sizeof(T)),
                                             std::hash<std::string_view>()(device_code))];
  UserModule* entry = nullptr;
  for (UserModule& m : bucket) {
    if (m.ptx == device_code) entry = &m;
  }
  const Driver& drv = ctx.driver();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (entry == nullptr && stream != nullptr &&
      cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
      capturing != cudaStreamCaptureStatusNone) {
    return ffi::Unexpected(ffi::Error::Internal(
        UserPrefix(name) + "the user's functions are not linked while a CUDA graph is being "
                           "captured (the FFI initialize stage did not run)"));
  }
  if (entry == nullptr) {
    const bool f32 = sizeof(T) == 4;
    const std::string_view ours(
        reinterpret_cast<const char*>(f32 ? kOdeUserFloat : kOdeUserDouble),
        f32 ? kOdeUserFloatSize : kOdeUserDoubleSize);
    auto module = LinkModule(drv, {{CU_JIT_INPUT_FATBINARY, ours, "jaxext_dop853_user"},
                                   {CU_JIT_INPUT_PTX, device_code, std::string(name)}});
    if (!module.has_value()) {
      return ffi::Unexpected(ffi::Error(
          ffi::ErrorCode::kInternal,
          UserPrefix(name) + "linking the user's functions (the driver must be at least as new "
                             "as the CUDA 13.0 toolkit and numba-cuda's NVVM): " +
              std::string(module.error().message())));
    }
    bucket.push_back(UserModule{std::string(device_code), *module, {}});
    entry = &bucket.back();
  }
  if (kernel.empty()) return CUfunction{nullptr};
  auto it = entry->kernels.find(kernel);
  if (it != entry->kernels.end()) return it->second;
  CUfunction fn = nullptr;
  if (CUresult r = drv.module_get_function(&fn, entry->module, kernel.c_str()); r != CUDA_SUCCESS) {
    return ffi::Unexpected(ffi::Error::Internal(UserPrefix(name) + "no kernel " + kernel + ": " +
                                                drv.Describe(r)));
  }
  entry->kernels.emplace(kernel, fn);
  return fn;
}

// The smallest kernel bound that holds n_aug components (0: none does).
int UserBound(int64_t n_aug, bool sensitivities) {
  if (sensitivities) {
    for (int b : ode_user::kSensitivityBounds) if (n_aug <= b) return b;
  } else {
    for (int b : ode_user::kStateBounds) if (n_aug <= b) return b;
  }
  return 0;
}

template <typename T>
ffi::Error UserDop853(cudaStream_t stream, ffi::AnyBuffer y0, ffi::AnyBuffer params,
                      ffi::AnyBuffer t_span, ffi::AnyBuffer t_eval,
                      ffi::Result<ffi::AnyBuffer> ys, ffi::Result<ffi::AnyBuffer> t_final,
                      ffi::Result<ffi::AnyBuffer> y_final, ffi::Result<ffi::AnyBuffer> stats,
                      ffi::Result<ffi::AnyBuffer> t_events, ffi::Result<ffi::AnyBuffer> y_events,
                      ffi::Result<ffi::AnyBuffer> event_counts,
                      ffi::Result<ffi::AnyBuffer> dense_t, ffi::Result<ffi::AnyBuffer> dense_f,
                      int64_t dense_steps, std::string_view name,
                      ffi::Span<const double> rtol, ffi::Span<const double> atol,
                      double first_step, double max_step, int64_t max_steps, int64_t n_events,
                      ffi::Span<const int64_t> event_kinds, ffi::Span<const double> event_consts,
                      ffi::Span<const int64_t> event_directions,
                      ffi::Span<const int64_t> event_terminal, int64_t sensitivities,
                      std::string_view device_code) {
  auto invalid = [&](const std::string& what) {
    return ffi::Error::InvalidArgument(UserPrefix(name) + what);
  };
  Dop853Shape shape;
  if (const std::string bad = GetDop853Shape(
          y0, params, t_span, t_eval, *ys, *t_final, *y_final, *stats, *t_events, *y_events,
          *event_counts, *dense_t, *dense_f, rtol.size(), atol.size(), n_events,
          {event_kinds.size(), event_consts.size(), event_directions.size(),
           event_terminal.size()},
          sensitivities != 0, dense_steps, &shape);
      !bad.empty()) {
    return invalid(bad);
  }
  const int64_t count = shape.count, n = shape.n, np = shape.np, n_aug = shape.n_aug;
  const int64_t m = shape.m, kslots = shape.kslots;
  if (device_code.empty()) return invalid("the user's functions came without device code");
  if (n > ode_user::kMaxState) {
    return invalid("states of at most " + std::to_string(ode_user::kMaxState) + " components");
  }
  const int bound = UserBound(n_aug, sensitivities != 0);
  if (bound == 0) return invalid("the state (with sensitivities) is too large for the kernels");
  ode_user::Args<T> a{};
  a.count = count;
  a.n = n;
  a.np = np;
  a.m = m;
  a.kslots = kslots;
  a.y0 = y0.typed_data<T>();
  a.params = params.typed_data<T>();
  a.span = t_span.typed_data<T>();
  a.t_eval = t_eval.typed_data<T>();
  a.ys = ys->typed_data<T>();
  a.t_final = t_final->typed_data<T>();
  a.y_final = y_final->typed_data<T>();
  a.stats = stats->typed_data<int32_t>();
  a.t_events = t_events->typed_data<T>();
  a.y_events = y_events->typed_data<T>();
  a.counts = event_counts->typed_data<int32_t>();
  a.dense_steps = dense_steps;
  a.dense_t = dense_steps > 0 ? dense_t->typed_data<T>() : nullptr;
  a.dense_f = dense_steps > 0 ? dense_f->typed_data<T>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    a.rtol[i] = T(rtol[i]);
    a.atol[i] = T(atol[i]);
  }
  a.first_step = T(first_step);
  a.max_step = T(max_step);
  a.max_steps = max_steps;
  a.n_events = static_cast<int32_t>(n_events);
  for (int64_t e = 0; e < n_events; ++e) {
    if (event_kinds[e] == 0 && n < 3) return invalid("a radius event needs n >= 3");
    a.kinds[e] = static_cast<int32_t>(event_kinds[e]);
    a.direction[e] = static_cast<int32_t>(event_directions[e]);
    a.radius[e] = T(event_consts[e]);
    a.terminal[e] = event_terminal[e];
  }
  if (count == 0) return ffi::Error::Success();

  StreamContext ctx(reinterpret_cast<CUstream>(stream), UserPrefix(name));
  if (!ctx.ok()) return ctx.error();
  const std::string kernel =
      ode_user::KernelPrefix(sensitivities != 0) + std::to_string(bound);
  auto fn = UserKernel<T>(ctx, name, device_code, kernel, stream);
  if (!fn.has_value()) return fn.error();
  const Driver& drv = ctx.driver();
  void* argv[] = {&a};
  const unsigned blocks = static_cast<unsigned>((count + ode_user::kBlock - 1) / ode_user::kBlock);
  if (CUresult r = drv.launch(*fn, blocks, 1, 1, ode_user::kBlock, 1, 1, 0,
                              reinterpret_cast<CUstream>(stream), argv, nullptr);
      r != CUDA_SUCCESS) {
    // The workspace lives in local memory, which the driver reserves for every thread the GPU
    // can hold: large states can exhaust it.
    int local = 0;
    drv.func_get_attribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, *fn);
    return ffi::Error::Internal(UserPrefix(name) + "kernel launch failed: " + drv.Describe(r) +
                                " (kernel " + kernel + ": " + std::to_string(local) +
                                " bytes of local memory per thread)");
  }
  return ffi::Error::Success();
}

template <typename T>
ffi::Error Dop853Typed(cudaStream_t stream, ffi::AnyBuffer y0, ffi::AnyBuffer params,
                       ffi::AnyBuffer t_span, ffi::AnyBuffer t_eval,
                       ffi::Result<ffi::AnyBuffer> ys, ffi::Result<ffi::AnyBuffer> t_final,
                       ffi::Result<ffi::AnyBuffer> y_final, ffi::Result<ffi::AnyBuffer> stats,
                       ffi::Result<ffi::AnyBuffer> t_events, ffi::Result<ffi::AnyBuffer> y_events,
                       ffi::Result<ffi::AnyBuffer> event_counts,
                       ffi::Result<ffi::AnyBuffer> dense_t, ffi::Result<ffi::AnyBuffer> dense_f,
                       int64_t dense_steps, ffi::Span<const double> model,
                       ffi::Span<const double> rtol, ffi::Span<const double> atol,
                       double first_step, double max_step,
                       int64_t max_steps, int64_t n_events, ffi::Span<const int64_t> event_kinds,
                       ffi::Span<const double> event_consts,
                       ffi::Span<const int64_t> event_directions,
                       ffi::Span<const int64_t> event_terminal, int64_t sensitivities) {
  Dop853Shape shape;
  if (const std::string bad = GetDop853Shape(
          y0, params, t_span, t_eval, *ys, *t_final, *y_final, *stats, *t_events, *y_events,
          *event_counts, *dense_t, *dense_f, rtol.size(), atol.size(), n_events,
          {event_kinds.size(), event_consts.size(), event_directions.size(),
           event_terminal.size()},
          sensitivities != 0, dense_steps, &shape);
      !bad.empty()) {
    return Invalid(bad);
  }
  const int64_t count = shape.count, np = shape.np, m = shape.m, kslots = shape.kslots;
  if (shape.n != kN) return Invalid("the built-in models need n = 6");
  if (sensitivities != 0 && np > kMaxParams) {
    return Invalid("derivatives on CUDA take at most 2 parameter columns");
  }
  Dop853Config<T> config;
  if (!config.model.Decode(model.begin(), static_cast<int64_t>(model.size()))) {
    return Invalid("malformed built-in model constants");
  }
  if (np < config.model.num_params()) return Invalid("the model needs its parameter");
  for (int i = 0; i < kN; ++i) {
    config.rtol[i] = T(rtol[i]);
    config.atol[i] = T(atol[i]);
  }
  config.first_step = T(first_step);
  config.max_step = T(max_step);
  config.max_steps = max_steps;
  config.n_events = static_cast<int>(n_events);
  for (int64_t e = 0; e < n_events; ++e) {
    if (event_kinds[e] != 0) return Invalid("event functions need a user right-hand side");
    config.radius[e] = T(event_consts[e]);
    config.direction[e] = static_cast<int>(event_directions[e]);
    config.terminal[e] = event_terminal[e];
  }
  const Dop853Buffers<T> b{count, np, m, kslots, dense_steps,
                           y0.typed_data<T>(), params.typed_data<T>(), t_span.typed_data<T>(),
                           t_eval.typed_data<T>(), ys->typed_data<T>(),
                           t_final->typed_data<T>(), y_final->typed_data<T>(),
                           stats->typed_data<int32_t>(), t_events->typed_data<T>(),
                           y_events->typed_data<T>(), event_counts->typed_data<int32_t>(),
                           dense_steps > 0 ? dense_t->typed_data<T>() : nullptr,
                           dense_steps > 0 ? dense_f->typed_data<T>() : nullptr};
  return LaunchStatus("jaxext.ode.dop853", LaunchDop853<T>(stream, config, b, sensitivities != 0));
}

#define JAXEXT_DOP853_CUDA_PARAMS                                                            \
  cudaStream_t stream, ffi::AnyBuffer y0, ffi::AnyBuffer params, ffi::AnyBuffer t_span,          \
      ffi::AnyBuffer t_eval, ffi::Result<ffi::AnyBuffer> ys, ffi::Result<ffi::AnyBuffer> t_final, \
      ffi::Result<ffi::AnyBuffer> y_final, ffi::Result<ffi::AnyBuffer> stats,                     \
      ffi::Result<ffi::AnyBuffer> t_events, ffi::Result<ffi::AnyBuffer> y_events,                 \
      ffi::Result<ffi::AnyBuffer> event_counts, ffi::Result<ffi::AnyBuffer> dense_t,             \
      ffi::Result<ffi::AnyBuffer> dense_f, int64_t rhs_id, std::string_view name,                \
      ffi::Span<const double> model, ffi::Span<const double> rtol, ffi::Span<const double> atol, \
      double first_step, double max_step, int64_t max_steps, int64_t n_events,                   \
      ffi::Span<const int64_t> event_kinds, ffi::Span<const int64_t> event_ids,                  \
      ffi::Span<const double> event_consts, ffi::Span<const int64_t> event_directions,           \
      ffi::Span<const int64_t> event_terminal, int64_t jac_id, int64_t sensitivities,            \
      int64_t dense_steps, std::string_view device_code

// Execute: rhs_id 0 runs a built-in model; otherwise the user's functions in device_code.
ffi::Error Dop853Impl(JAXEXT_DOP853_CUDA_PARAMS) {
  if (stats->element_type() != ffi::DataType::S32 ||
      event_counts->element_type() != ffi::DataType::S32) {
    return Invalid("stats and event counts must be int32");
  }
  auto run = [&](auto zero) {
    using T = decltype(zero);
    if (rhs_id != 0) {
      return UserDop853<T>(stream, y0, params, t_span, t_eval, ys, t_final, y_final, stats,
                           t_events, y_events, event_counts, dense_t, dense_f, dense_steps,
                           name, rtol, atol, first_step,
                           max_step, max_steps, n_events, event_kinds, event_consts,
                           event_directions, event_terminal, sensitivities, device_code);
    }
    return Dop853Typed<T>(stream, y0, params, t_span, t_eval, ys, t_final, y_final, stats,
                          t_events, y_events, event_counts, dense_t, dense_f, dense_steps, model,
                          rtol, atol, first_step,
                          max_step, max_steps, n_events, event_kinds, event_consts,
                          event_directions, event_terminal, sensitivities);
  };
  switch (y0.element_type()) {
    case ffi::DataType::F32:
      return run(0.0f);
    case ffi::DataType::F64:
      return run(0.0);
    default:
      return Invalid("float32 or float64 states only");
  }
}

// Initialize: links the user's functions into the integrator's kernels before any CUDA graph
// capture (execute links them too if this stage did not run).
ffi::Error Dop853InitializeImpl(JAXEXT_DOP853_CUDA_PARAMS) {
  if (rhs_id == 0 || device_code.empty()) return ffi::Error::Success();
  StreamContext ctx(reinterpret_cast<CUstream>(stream), UserPrefix(name));
  if (!ctx.ok()) return ctx.error();
  switch (y0.element_type()) {
    case ffi::DataType::F32: {
      auto module = UserKernel<float>(ctx, name, device_code, "");
      return module.has_value() ? ffi::Error::Success() : module.error();
    }
    case ffi::DataType::F64: {
      auto module = UserKernel<double>(ctx, name, device_code, "");
      return module.has_value() ? ffi::Error::Success() : module.error();
    }
    default:
      return Invalid("float32 or float64 states only");
  }
}

#undef JAXEXT_DOP853_CUDA_PARAMS

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    JaxextDop853CudaInitialize, Dop853InitializeImpl,
    JAXEXT_DOP853_STAGE_BINDING(ffi::ExecutionStage::kInitialize,
                                ffi::PlatformStream<cudaStream_t>));
// Command-buffer compatible: the same launch for the same attributes, no host synchronisation,
// no allocation (user modules are linked in the initialize stage, outside any capture).
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextDop853Cuda, Dop853Impl,
                              JAXEXT_DOP853_BINDING(ffi::PlatformStream<cudaStream_t>),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
