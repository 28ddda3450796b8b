// The `_cuda_ops` extension module: registrations() -> {target name: FFI handler capsule}, for
// platform "CUDA". Same target names as the CPU module: the lowering picks the platform.
#include "jaxext/cuda/conv_cuda.h"
#include "jaxext/cuda/kepler_cuda.h"
#include "jaxext/cuda/limbdark_cuda.h"
#include "jaxext/cuda/numba_cuda.h"
#include "jaxext/cuda/ode_cuda.h"
#include "jaxext/cuda/sph_cuda.h"
#include "jaxext/cuda/tp_cuda.h"
#include "jaxext/cuda/transit_cuda.h"
#include "pybind11/pybind11.h"
// after pybind11: enables EncapsulateFfiHandler
#include "jaxext/common/ffi_helpers.h"
#include "xla/ffi/api/c_api.h"

namespace py = pybind11;

PYBIND11_MODULE(_cuda_ops, m) {
  m.doc() = "jaxext CUDA kernels exposed as XLA FFI handlers";
  m.def("registrations", []() {
    py::dict d;
    d["jaxext_kepler_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextKeplerCudaF32);
    d["jaxext_kepler_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextKeplerCudaF64);
    d["jaxext_limbdark_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextLimbdarkCudaF32);
    d["jaxext_limbdark_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextLimbdarkCudaF64);
    d["jaxext_limbdark_grad_f32"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextLimbdarkGradCudaF32);
    d["jaxext_limbdark_grad_f64"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextLimbdarkGradCudaF64);
    d["jaxext_limbdark_hess_f32"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextLimbdarkHessCudaF32);
    d["jaxext_limbdark_hess_f64"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextLimbdarkHessCudaF64);
    d["jaxext_transit_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitCudaF32);
    d["jaxext_transit_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitCudaF64);
    d["jaxext_transit_grad_f32"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitGradCudaF32);
    d["jaxext_transit_grad_f64"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitGradCudaF64);
    d["jaxext_transit_lin_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitLinCudaF32);
    d["jaxext_transit_lin_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitLinCudaF64);
    d["jaxext_transit_vjp_f32"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitVjpCudaF32);
    d["jaxext_transit_vjp_f64"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTransitVjpCudaF64);
    // jaxext.ode.dop853: links user functions before any graph capture, then launches.
    py::dict dop853;
    dop853["initialize"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextDop853CudaInitialize);
    dop853["execute"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextDop853Cuda);
    d["jaxext_dop853"] = dop853;
    // jaxext.equivariant (products and convolutions copy their tables to the device first).
    d["jaxext_sph"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextSphCuda);
    d["jaxext_segment_sum"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextSegmentSumCuda);
    py::dict tp;
    tp["initialize"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTensorProductCudaInitialize);
    tp["execute"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTensorProductCuda);
    d["jaxext_tensor_product"] = tp;
    py::dict tp_edge_cts;
    tp_edge_cts["initialize"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTensorProductEdgeCtsCudaInitialize);
    tp_edge_cts["execute"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextTensorProductEdgeCtsCuda);
    d["jaxext_tensor_product_edge_cts"] = tp_edge_cts;
    py::dict conv;
    conv["initialize"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextConvCudaInitialize);
    conv["execute"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextConvCuda);
    d["jaxext_conv"] = conv;
    py::dict edge_cts;
    edge_cts["initialize"] =
        jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextConvEdgeCtsCudaInitialize);
    edge_cts["execute"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextConvEdgeCtsCuda);
    d["jaxext_conv_edge_cts"] = edge_cts;
    // jaxext.numba_cuda_kernel: loads its module before any graph capture, then launches.
    py::dict numba;
    numba["initialize"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextNumbaCallCudaInitialize);
    numba["execute"] = jaxext::EncapsulateFfiHandler(jaxext::cuda::JaxextNumbaCallCuda);
    d["jaxext_numba_cuda_call"] = numba;
    return d;
  });
  m.attr("xla_ffi_api_version") = py::make_tuple(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR);
}
