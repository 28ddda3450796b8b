// The consumer's own XLA FFI op, built with jaxext's macros and headers: y = factor * x on the CPU
// (float32 and float64), and the `_scale_ops` module whose registrations() hands its handlers to
// jax.ffi.register_ffi_target, as jaxext's own extension modules do.
#include <cstddef>

#include "pybind11/pybind11.h"  // first: ffi_helpers.h adds its capsule helper after pybind11
#include "jaxext/common/ffi_helpers.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace consumer {

template <ffi::DataType T>
ffi::Error Scale(ffi::Buffer<T> x, ffi::ResultBuffer<T> y, double factor) {
  const size_t n = x.element_count();
  if (ffi::Error e = jaxext::CheckElementCounts("consumer_scale", n, {y->element_count()});
      e.failure()) {
    return e;
  }
  const auto* in = x.typed_data();
  auto* out = y->typed_data();
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<ffi::NativeType<T>>(factor * in[i]);
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(ConsumerScaleF32, Scale<ffi::F32>,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<double>("factor"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ConsumerScaleF64, Scale<ffi::F64>,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Attr<double>("factor"));

}  // namespace consumer

PYBIND11_MODULE(_scale_ops, m) {
  m.def("registrations", []() {
    pybind11::dict d;
    d["consumer_scale_f32"] = jaxext::EncapsulateFfiHandler(consumer::ConsumerScaleF32);
    d["consumer_scale_f64"] = jaxext::EncapsulateFfiHandler(consumer::ConsumerScaleF64);
    return d;
  });
}
