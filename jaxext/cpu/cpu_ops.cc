// The `_cpu_ops` extension module: registrations() -> {target name: FFI handler capsule}.
#include <type_traits>

#include "jaxext/cpu/kepler_cpu.h"
#include "pybind11/pybind11.h"
#include "xla/ffi/api/c_api.h"

namespace py = pybind11;

namespace {

template <typename T>
py::capsule EncapsulateFfiHandler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "an XLA FFI handler has the signature XLA_FFI_Error*(XLA_FFI_CallFrame*)");
  return py::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

PYBIND11_MODULE(_cpu_ops, m) {
  m.doc() = "jaxext CPU kernels exposed as XLA FFI handlers";
  m.def("registrations", []() {
    py::dict d;
    d["jaxext_kepler_f32"] = EncapsulateFfiHandler(jaxext::cpu::JaxextKeplerCpuF32);
    d["jaxext_kepler_f64"] = EncapsulateFfiHandler(jaxext::cpu::JaxextKeplerCpuF64);
    return d;
  });
  m.attr("xla_ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
}
