// The `_cpu_ops` extension module: registrations() -> {target name: FFI handler capsule}.
#include "jaxext/cpu/conv_cpu.h"
#include "jaxext/cpu/kepler_cpu.h"
#include "jaxext/cpu/limbdark_cpu.h"
#include "jaxext/cpu/native_registry.h"
#include "jaxext/cpu/numba_cpu.h"
#include "jaxext/cpu/ode_cpu.h"
#include "jaxext/cpu/sph_cpu.h"
#include "jaxext/cpu/tp_cpu.h"
#include "jaxext/cpu/transit_cpu.h"
#include "pybind11/pybind11.h"
// after pybind11: enables EncapsulateFfiHandler
#include "jaxext/common/ffi_helpers.h"
#include "xla/ffi/api/c_api.h"

namespace py = pybind11;

PYBIND11_MODULE(_cpu_ops, m) {
  m.doc() = "jaxext CPU kernels exposed as XLA FFI handlers";
  m.def("registrations", []() {
    py::dict d;
    d["jaxext_kepler_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextKeplerCpuF32);
    d["jaxext_kepler_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextKeplerCpuF64);
    d["jaxext_limbdark_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextLimbdarkCpuF32);
    d["jaxext_limbdark_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextLimbdarkCpuF64);
    d["jaxext_limbdark_grad_f32"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextLimbdarkGradCpuF32);
    d["jaxext_limbdark_grad_f64"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextLimbdarkGradCpuF64);
    d["jaxext_limbdark_hess_f32"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextLimbdarkHessCpuF32);
    d["jaxext_limbdark_hess_f64"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextLimbdarkHessCpuF64);
    d["jaxext_transit_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitCpuF32);
    d["jaxext_transit_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitCpuF64);
    d["jaxext_transit_grad_f32"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitGradCpuF32);
    d["jaxext_transit_grad_f64"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitGradCpuF64);
    d["jaxext_transit_lin_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitLinCpuF32);
    d["jaxext_transit_lin_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitLinCpuF64);
    d["jaxext_transit_vjp_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitVjpCpuF32);
    d["jaxext_transit_vjp_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTransitVjpCpuF64);
    d["jaxext_numba_call"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextNumbaCallCpu);
    d["jaxext_dop853"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextDop853Cpu);
    d["jaxext_sph"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextSphCpu);
    d["jaxext_segment_sum"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextSegmentSumCpu);
    d["jaxext_conv"] = jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextConvCpu);
    d["jaxext_conv_factored"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextConvFactoredCpu);
    d["jaxext_conv_factored_bwd"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextConvFactoredBwdCpu);
    d["jaxext_tensor_product"] =
        jaxext::EncapsulateFfiHandler(jaxext::cpu::JaxextTensorProductCpu);
    return d;
  });
  // Native functions compiled by Numba (numba_kernel entry points, ode right-hand sides, events,
  // Jacobians), by content id (native_registry.h); and an ode right-hand side's lanes form.
  auto registrar = [](void (*register_in)(int64_t, uintptr_t)) {
    return [register_in](int64_t id, uintptr_t address) {
      if (address == 0) throw py::value_error("null native function address");
      register_in(id, address);
    };
  };
  m.def("register_native_function", registrar(&jaxext::cpu::RegisterNativeFunction),
        py::arg("function_id"), py::arg("address"));
  m.def("register_native_lanes", registrar(&jaxext::cpu::RegisterNativeLanes),
        py::arg("function_id"), py::arg("address"));
  m.def("ode_simd_lane_runs", &jaxext::cpu::OdeSimdLaneRuns);
  m.attr("xla_ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
}
