// Helpers shared by every platform's handlers and extension modules.
#ifndef JAXEXT_COMMON_FFI_HELPERS_H_
#define JAXEXT_COMMON_FFI_HELPERS_H_

#include <initializer_list>
#include <string>
#include <type_traits>

#include "xla/ffi/api/c_api.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {

// OK when every buffer holds `n` elements; otherwise an InvalidArgument naming the op.
inline xla::ffi::Error CheckElementCounts(const char* op, size_t n, std::initializer_list<size_t> counts) {
  for (size_t c : counts) {
    if (c != n) {
      return xla::ffi::Error::InvalidArgument(
          std::string("jaxext ") + op +
          ": all operands and results must have the same number of elements");
    }
  }
  return xla::ffi::Error::Success();
}

}  // namespace jaxext

#if defined(PYBIND11_VERSION_MAJOR)
namespace jaxext {

// Wraps an XLA FFI handler symbol in the capsule jax.ffi.register_ffi_target expects, checking its
// signature at compile time.
template <typename T>
pybind11::capsule EncapsulateFfiHandler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "an XLA FFI handler has the signature XLA_FFI_Error*(XLA_FFI_CallFrame*)");
  return pybind11::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace jaxext
#endif

#endif  // JAXEXT_COMMON_FFI_HELPERS_H_
