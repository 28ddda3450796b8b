#include "jaxext/cuda/driver.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

template <typename F>
void Resolve(void* lib, const char* symbol, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (fn == nullptr && error.empty()) error = std::string("libcuda.so.1 has no ") + symbol;
}

}  // namespace

std::string Driver::Describe(CUresult r) const {
  const char* s = nullptr;
  if (get_error_string == nullptr || get_error_string(r, &s) != CUDA_SUCCESS || s == nullptr) {
    return "CUDA error " + std::to_string(static_cast<int>(r));
  }
  return s;
}

const Driver& GetDriver() {
  static const Driver* driver = [] {
    auto* d = new Driver;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      d->error = std::string("cannot load the CUDA driver (libcuda.so.1): ") + (why ? why : "");
      return d;
    }
    Resolve(lib, "cuGetErrorString", d->get_error_string, d->error);
    Resolve(lib, "cuStreamGetCtx", d->stream_get_ctx, d->error);
    Resolve(lib, "cuCtxPushCurrent_v2", d->ctx_push, d->error);
    Resolve(lib, "cuCtxPopCurrent_v2", d->ctx_pop, d->error);
    Resolve(lib, "cuModuleLoadDataEx", d->module_load, d->error);
    Resolve(lib, "cuModuleGetFunction", d->module_get_function, d->error);
    Resolve(lib, "cuFuncSetAttribute", d->func_set_attribute, d->error);
    Resolve(lib, "cuFuncGetAttribute", d->func_get_attribute, d->error);
    Resolve(lib, "cuLaunchKernel", d->launch, d->error);
    Resolve(lib, "cuLinkCreate_v2", d->link_create, d->error);
    Resolve(lib, "cuLinkAddData_v2", d->link_add_data, d->error);
    Resolve(lib, "cuLinkComplete", d->link_complete, d->error);
    Resolve(lib, "cuLinkDestroy", d->link_destroy, d->error);
    return d;
  }();
  return *driver;
}

StreamContext::StreamContext(CUstream stream, std::string prefix) : drv_(GetDriver()) {
  if (!drv_.error.empty()) {
    error_ = ffi::Error(ffi::ErrorCode::kFailedPrecondition, prefix + drv_.error);
  } else if (CUresult r = drv_.stream_get_ctx(stream, &ctx_); r != CUDA_SUCCESS) {
    error_ = ffi::Error(ffi::ErrorCode::kInternal,
                        prefix + "cannot find XLA's CUDA context: " + drv_.Describe(r));
  } else if ((r = drv_.ctx_push(ctx_)) != CUDA_SUCCESS) {
    error_ = ffi::Error(ffi::ErrorCode::kInternal, prefix + "cuCtxPushCurrent: " + drv_.Describe(r));
  } else {
    pushed_ = true;
  }
}

StreamContext::~StreamContext() {
  CUcontext popped;
  if (pushed_) drv_.ctx_pop(&popped);
}

ffi::ErrorOr<CUmodule> LinkModule(const Driver& drv, const std::vector<LinkInput>& inputs) {
  char info[8192] = {0}, log[8192] = {0};
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {info, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(info) - 1)), log,
                    reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log) - 1))};
  CUlinkState state = nullptr;
  auto fail = [&](const std::string& what, CUresult r) {
    if (state != nullptr) drv.link_destroy(state);
    return ffi::Unexpected(ffi::Error(
        ffi::ErrorCode::kInternal,
        what + ": " + drv.Describe(r) + (log[0] ? std::string(": ") + log : std::string())));
  };
  CUresult r = drv.link_create(4, options, values, &state);
  if (r != CUDA_SUCCESS) return fail("cuLinkCreate", r);
  for (const LinkInput& input : inputs) {
    // PTX must be NUL-terminated for the driver; binary images are passed as they are.
    std::string text;
    void* data = const_cast<char*>(input.image.data());
    size_t size = input.image.size();
    if (input.kind == CU_JIT_INPUT_PTX) {
      text.assign(input.image);
      data = text.data();
      size = text.size() + 1;
    }
    r = drv.link_add_data(state, input.kind, data, size, input.name.c_str(), 0, nullptr, nullptr);
    if (r != CUDA_SUCCESS) return fail("linking " + input.name, r);
  }
  void* cubin = nullptr;
  size_t cubin_size = 0;
  r = drv.link_complete(state, &cubin, &cubin_size);
  if (r != CUDA_SUCCESS) return fail("cuLinkComplete", r);
  CUmodule module = nullptr;
  r = drv.module_load(&module, cubin, 0, nullptr, nullptr);  // before the state frees the cubin
  if (r != CUDA_SUCCESS) return fail("loading the linked module", r);
  drv.link_destroy(state);
  return module;
}

}  // namespace cuda
}  // namespace jaxext
