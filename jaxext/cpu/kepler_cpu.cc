#include "jaxext/cpu/kepler_cpu.h"

#include <cstdint>
#include <utility>

#include "jaxext/common/ffi_helpers.h"
#include "jaxext/cpu/clones.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/kepler.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

// One element loop per dtype, cloned for AVX-512, AVX2+FMA and baseline x86-64; the dynamic loader
// picks the best clone for the running CPU (clones.h). The loop body is branch-free, so each clone
// vectorises.
JAXEXT_CPU_CLONES void KeplerLoopF64(const double* __restrict m, const double* __restrict e,
                                     double* __restrict s, double* __restrict c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) kepler::solve<double>(m[i], e[i], s + i, c + i);
}

JAXEXT_CPU_CLONES void KeplerLoopF32(const float* __restrict m, const float* __restrict e,
                                     float* __restrict s, float* __restrict c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) kepler::solve<float>(m[i], e[i], s + i, c + i);
}

inline void KeplerLoop(const double* m, const double* e, double* s, double* c, int64_t n) {
  KeplerLoopF64(m, e, s, c, n);
}
inline void KeplerLoop(const float* m, const float* e, float* s, float* c, int64_t n) {
  KeplerLoopF32(m, e, s, c, n);
}

// ~30 ns per element: below this many elements a thread hand-off costs more than it saves.
constexpr int64_t kGrain = 16384;

template <ffi::DataType dtype>
ffi::Future KeplerImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> mean_anomaly,
                       ffi::Buffer<dtype> eccentricity, ffi::ResultBuffer<dtype> sin_e,
                       ffi::ResultBuffer<dtype> cos_e) {
  const int64_t n = static_cast<int64_t>(mean_anomaly.element_count());
  if (ffi::Error err = CheckElementCounts(
          "kepler", mean_anomaly.element_count(),
          {eccentricity.element_count(), sin_e->element_count(), cos_e->element_count()});
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const auto* m = mean_anomaly.typed_data();
  const auto* e = eccentricity.typed_data();
  auto* s = sin_e->typed_data();
  auto* c = cos_e->typed_data();
  return ParallelFor(pool, n, kGrain, [=](int64_t begin, int64_t end) {
    KeplerLoop(m + begin, e + begin, s + begin, c + begin, end - begin);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextKeplerCpuF32, KeplerImpl<ffi::DataType::F32>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::DataType::F32>>()
                                  .Arg<ffi::Buffer<ffi::DataType::F32>>()
                                  .Ret<ffi::Buffer<ffi::DataType::F32>>()
                                  .Ret<ffi::Buffer<ffi::DataType::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextKeplerCpuF64, KeplerImpl<ffi::DataType::F64>,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::DataType::F64>>()
                                  .Arg<ffi::Buffer<ffi::DataType::F64>>()
                                  .Ret<ffi::Buffer<ffi::DataType::F64>>()
                                  .Ret<ffi::Buffer<ffi::DataType::F64>>());

}  // namespace cpu
}  // namespace jaxext
