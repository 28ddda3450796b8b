// The CUDA driver API for handlers that load device code at run time (jaxext.numba_cuda_kernel's
// PTX, jaxext.ode's user right-hand sides linked into the integrator), opened with dlopen at first
// use: the handler libraries link no CUDA driver, so the same build loads on machines without one
// and jaxext's CPU ops never touch it.
#ifndef JAXEXT_CUDA_DRIVER_H_
#define JAXEXT_CUDA_DRIVER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cuda.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cuda {

struct Driver {
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*stream_get_ctx)(CUstream, CUcontext*) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext*) = nullptr;
  CUresult (*module_load)(CUmodule*, const void*, unsigned, CUjit_option*, void**) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*func_get_attribute)(int*, CUfunction_attribute, CUfunction) = nullptr;
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*link_create)(unsigned, CUjit_option*, void**, CUlinkState*) = nullptr;
  CUresult (*link_add_data)(CUlinkState, CUjitInputType, void*, size_t, const char*, unsigned,
                            CUjit_option*, void**) = nullptr;
  CUresult (*link_complete)(CUlinkState, void**, size_t*) = nullptr;
  CUresult (*link_destroy)(CUlinkState) = nullptr;
  std::string error;  // why the driver is unusable, if it is

  std::string Describe(CUresult r) const;
};

// The process's driver table (check `error` before use).
const Driver& GetDriver();

// Makes the CUDA context of XLA's stream current on this thread for the object's lifetime
// (whatever was current before is restored); `error()` says why not, if it could not. `prefix`
// starts every error message (e.g. "jaxext.ode.dop853 'name': ").
class StreamContext {
 public:
  StreamContext(CUstream stream, std::string prefix);
  ~StreamContext();
  StreamContext(const StreamContext&) = delete;
  StreamContext& operator=(const StreamContext&) = delete;

  const Driver& driver() const { return drv_; }
  CUcontext get() const { return ctx_; }
  const xla::ffi::Error& error() const { return error_; }
  bool ok() const { return pushed_; }

 private:
  const Driver& drv_;
  CUcontext ctx_ = nullptr;
  bool pushed_ = false;
  xla::ffi::Error error_ = xla::ffi::Error::Success();
};

// One input of a device link: an image of the given kind (CU_JIT_INPUT_PTX for PTX text, which
// need not be NUL-terminated here; CU_JIT_INPUT_FATBINARY, ...) and a name for error messages.
struct LinkInput {
  CUjitInputType kind;
  std::string_view image;
  std::string name;
};

// Links `inputs` with the driver's JIT linker (PTX is compiled for the context's device) and loads
// the result as a module in the current context. On failure, the linker's log is in the message.
xla::ffi::ErrorOr<CUmodule> LinkModule(const Driver& drv, const std::vector<LinkInput>& inputs);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_DRIVER_H_
