#include "jaxext/cuda/sph_cuda.h"

#include <cstdint>
#include <limits>
#include <string>

#include <cuda_runtime_api.h>

#include "jaxext/kernels/sph.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

constexpr int kBlock = 256;

ffi::Error Launched(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return ffi::Error::Internal(std::string(op) + ": CUDA launch failed: " +
                                cudaGetErrorString(err));
  }
  return ffi::Error::Success();
}

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kBlock - 1) / kBlock, int64_t{1} << 20));
}

// The normalisations, by value (at most 169 doubles).
struct Norms {
  double v[sph::Size(sph::kMaxL)];
};

// The recurrence runs in double for either dtype, as on the CPU (float32 would overflow at high l).
template <typename T>
__global__ void SphKernel(const T* __restrict__ v, T* __restrict__ y, int64_t m, int lmax,
                          Norms norms) {
  const int size = sph::Size(lmax);
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  double row[sph::Size(sph::kMaxL)];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m;
       i += stride) {
    sph::SolidHarmonics<double>(lmax, v[3 * i], v[3 * i + 1], v[3 * i + 2], norms.v, row);
    for (int k = 0; k < size; ++k) y[i * size + k] = static_cast<T>(row[k]);
  }
}

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
  if (m == 0) return ffi::Error::Success();
  Norms n{};
  for (int64_t i = 0; i < size; ++i) n.v[i] = norms[i];
  SphKernel<T><<<Blocks(m), kBlock, 0, stream>>>(vectors.typed_data<T>(), out->typed_data<T>(), m,
                                                 static_cast<int>(lmax), n);
  return Launched("jaxext spherical_harmonics");
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

// flag = 1 if the ids are not sorted ascending (the flag was zeroed before).
__global__ void CheckSortedKernel(const int32_t* __restrict__ id, int64_t e, int32_t* flag) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = 1 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < e;
       i += stride) {
    if (id[i] < id[i - 1]) *flag = 1;
  }
}

// out[s, k] = sum over the rows of segment s, in row order; NaN everywhere if *flag is set.
template <typename T>
__global__ void SegmentSumKernel(const T* __restrict__ x, const int32_t* __restrict__ id, int64_t e,
                                 int64_t segments, int64_t f, const int32_t* __restrict__ flag,
                                 T* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const bool unsorted = *flag != 0;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < segments * f;
       q += stride) {
    if (unsorted) {
      y[q] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const int64_t s = q / f, k = q % f;
    int64_t lo = 0, hi = e;  // the first row with id >= s
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (id[mid] < s) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    T acc = T(0);
    for (int64_t row = lo; row < e && id[row] == s; ++row) acc += x[row * f + k];
    y[q] = acc;
  }
}

template <typename T>
ffi::Error SegmentSumTyped(cudaStream_t stream, ffi::AnyBuffer data, ffi::AnyBuffer ids,
                           ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> flag) {
  const auto out_dims = out->dimensions();
  const int64_t e = static_cast<int64_t>(ids.element_count());
  if (out_dims.size() < 1 || flag->element_count() != 1 ||
      flag->element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: bad results");
  }
  const int64_t segments = out_dims[0];
  const int64_t f = segments > 0 ? static_cast<int64_t>(out->element_count()) / segments : 0;
  if (static_cast<int64_t>(data.element_count()) != e * f && segments > 0) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: bad shapes");
  }
  int32_t* flag_p = flag->typed_data<int32_t>();
  if (cudaError_t err = cudaMemsetAsync(flag_p, 0, sizeof(int32_t), stream); err != cudaSuccess) {
    return ffi::Error::Internal(std::string("jaxext segment_sum: cudaMemsetAsync failed: ") +
                                cudaGetErrorString(err));
  }
  if (e > 1) {
    CheckSortedKernel<<<Blocks(e), kBlock, 0, stream>>>(ids.typed_data<int32_t>(), e, flag_p);
  }
  if (segments * f > 0) {
    SegmentSumKernel<T><<<Blocks(segments * f), kBlock, 0, stream>>>(
        data.typed_data<T>(), ids.typed_data<int32_t>(), e, segments, f, flag_p,
        out->typed_data<T>());
  }
  return Launched("jaxext segment_sum");
}

ffi::Error SegmentSumImpl(cudaStream_t stream, ffi::AnyBuffer data, ffi::AnyBuffer ids,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> flag) {
  if (ids.element_type() != ffi::DataType::S32) {
    return ffi::Error::InvalidArgument("jaxext segment_sum: int32 segment ids");
  }
  switch (data.element_type()) {
    case ffi::DataType::F32:
      return SegmentSumTyped<float>(stream, data, ids, out, flag);
    case ffi::DataType::F64:
      return SegmentSumTyped<double>(stream, data, ids, out, flag);
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
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>(),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace cuda
}  // namespace jaxext
