#include "jaxext/cuda/sph_cuda.h"

#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/launch.h"
#include "jaxext/cuda/sph_kernels.h"
#include "jaxext/kernels/sph.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

template <typename T>
ffi::Error SphTyped(cudaStream_t stream, ffi::AnyBuffer vectors, ffi::Result<ffi::AnyBuffer> out,
                    int64_t lmax, ffi::Span<const double> norms) {
  const int64_t size = (lmax + 1) * (lmax + 1);
  const int64_t m = static_cast<int64_t>(vectors.element_count()) / 3;
  if (lmax < 0 || lmax > sph::kMaxL || static_cast<int64_t>(norms.size()) != size ||
      static_cast<int64_t>(vectors.element_count()) != 3 * m ||
      static_cast<int64_t>(out->element_count()) != m * size) {
    return ffi::Error::InvalidArgument("jaxext spherical_harmonics: bad shapes");
  }
  return LaunchStatus("jaxext spherical_harmonics",
                      LaunchSphericalHarmonics<T>(stream, vectors.typed_data<T>(),
                                                  out->typed_data<T>(), m,
                                                  static_cast<int>(lmax), norms.begin()));
}

ffi::Error SphImpl(cudaStream_t stream, ffi::AnyBuffer vectors, ffi::Result<ffi::AnyBuffer> out,
                   int64_t lmax, ffi::Span<const double> norms) {
  switch (vectors.element_type()) {
    case ffi::DataType::F32:
      return SphTyped<float>(stream, vectors, out, lmax, norms);
    case ffi::DataType::F64:
      return SphTyped<double>(stream, vectors, out, lmax, norms);
    default:
      return ffi::Error::InvalidArgument("jaxext spherical_harmonics: float32/64 only");
  }
}

// data (e x f), ids (e), the segments' row ranges and tasks (segments + 1 each, from the
// lowering) -> the sums (segments x f), the unsorted flag, the cut segments' partial rows.
template <typename T>
ffi::Error SegmentSumTyped(cudaStream_t stream, ffi::AnyBuffer data, ffi::AnyBuffer ids,
                           ffi::AnyBuffer ranges, ffi::AnyBuffer tasks,
                           ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> flag,
                           ffi::Result<ffi::AnyBuffer> partial, int64_t task_rows) {
  const auto out_dims = out->dimensions();
  const auto partial_dims = partial->dimensions();
  const int64_t e = static_cast<int64_t>(ids.element_count());
  if (out_dims.size() < 1 || flag->element_count() != 1 ||
      flag->element_type() != ffi::DataType::S32 || partial_dims.size() < 1 ||
      partial->element_type() != out->element_type()) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: bad results");
  }
  const int64_t segments = out_dims[0];
  const int64_t partial_rows = partial_dims[0];
  const int64_t f = segments > 0 ? static_cast<int64_t>(out->element_count()) / segments : 0;
  if (segments > 0 && (static_cast<int64_t>(data.element_count()) != e * f ||
                       static_cast<int64_t>(partial->element_count()) != partial_rows * f)) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: bad shapes");
  }
  if (ranges.element_type() != ffi::DataType::S32 || tasks.element_type() != ffi::DataType::S32 ||
      static_cast<int64_t>(ranges.element_count()) != segments + 1 ||
      static_cast<int64_t>(tasks.element_count()) != segments + 1 || task_rows < 1) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: bad segment ranges or tasks");
  }
  int32_t* flag_p = flag->typed_data<int32_t>();
  if (cudaError_t err = cudaMemsetAsync(flag_p, 0, sizeof(int32_t), stream); err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxext segment_sum: cudaMemsetAsync failed: ") +
                                cudaGetErrorString(err));
  }
  return LaunchStatus(
      "jaxext segment_sum",
      LaunchSegmentSum<T>(stream, data.typed_data<T>(), ids.typed_data<int32_t>(),
                          ranges.typed_data<int32_t>(), tasks.typed_data<int32_t>(), e, segments,
                          f, partial_rows, task_rows, flag_p, partial->typed_data<T>(),
                          out->typed_data<T>()));
}

ffi::Error SegmentSumImpl(cudaStream_t stream, ffi::AnyBuffer data, ffi::AnyBuffer ids,
                          ffi::AnyBuffer ranges, ffi::AnyBuffer tasks,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> flag,
                          ffi::Result<ffi::AnyBuffer> partial, int64_t task_rows) {
  if (ids.element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: int32 segment ids");
  }
  switch (data.element_type()) {
    case ffi::DataType::F32:
      return SegmentSumTyped<float>(stream, data, ids, ranges, tasks, out, flag, partial,
                                    task_rows);
    case ffi::DataType::F64:
      return SegmentSumTyped<double>(stream, data, ids, ranges, tasks, out, flag, partial,
                                     task_rows);
    default:
      return ffi::Error::InvalidArgument("jaxext segment_sum: float32/64 only");
  }
}

}  // namespace

// Both: the same launches for the same shapes, no host synchronisation, no allocation.
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextSphCuda, SphImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("lmax")
                                  .Attr<ffi::Span<const double>>("norms"),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextSegmentSumCuda, SegmentSumImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("task_rows"),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
