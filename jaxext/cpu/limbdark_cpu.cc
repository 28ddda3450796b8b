#include "jaxext/cpu/limbdark_cpu.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "jaxext/common/ffi_helpers.h"
#include "jaxext/common/limbdark_shapes.h"
#include "jaxext/cpu/clones.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/limbdark.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

// Tens of ns per point: below this many points a thread hand-off costs more than it saves.
constexpr int64_t kGrain = 4096;

// Laws of order <= 2 go through the lane-parallel path (limbdark::EvaluateLanes), cloned for
// AVX-512, AVX2+FMA and baseline x86-64 (clones.h) like the Kepler loop; higher orders through
// Evaluate.
// Always inlined into the target_clones wrappers below, so each gets its own vector code.
template <bool kGrad, typename T>
inline __attribute__((always_inline)) void LanesLoop(const T* b, const T* r, int64_t rs, int64_t n,
                                                     const limbdark::Law& law, T* flux, T* dfdb,
                                                     T* dfdr, T* dfdu) {
  const int order = law.order;
  for (int64_t i = 0; i < n; i += limbdark::kLanes) {
    const int count = static_cast<int>(n - i < limbdark::kLanes ? n - i : limbdark::kLanes);
    limbdark::EvaluateLanes<kGrad, T>(b + i, r + i * rs, rs, count, law, flux + i,
                                      kGrad ? dfdb + i : nullptr, kGrad ? dfdr + i : nullptr,
                                      kGrad ? dfdu + i * order : nullptr);
  }
}

JAXEXT_CPU_CLONES void LanesF64(const double* b, const double* r, int64_t rs, int64_t n,
                                const limbdark::Law& law, double* flux) {
  LanesLoop<false, double>(b, r, rs, n, law, flux, nullptr, nullptr, nullptr);
}
JAXEXT_CPU_CLONES void LanesF32(const float* b, const float* r, int64_t rs, int64_t n,
                                const limbdark::Law& law, float* flux) {
  LanesLoop<false, float>(b, r, rs, n, law, flux, nullptr, nullptr, nullptr);
}
JAXEXT_CPU_CLONES void LanesGradF64(const double* b, const double* r, int64_t rs, int64_t n,
                                    const limbdark::Law& law, double* flux, double* dfdb,
                                    double* dfdr, double* dfdu) {
  LanesLoop<true, double>(b, r, rs, n, law, flux, dfdb, dfdr, dfdu);
}
JAXEXT_CPU_CLONES void LanesGradF32(const float* b, const float* r, int64_t rs, int64_t n,
                                    const limbdark::Law& law, float* flux, float* dfdb,
                                    float* dfdr, float* dfdu) {
  LanesLoop<true, float>(b, r, rs, n, law, flux, dfdb, dfdr, dfdu);
}

// The clone for this dtype and kind.
template <bool kGrad, typename T>
void Lanes(const T* b, const T* r, int64_t rs, int64_t n, const limbdark::Law& law, T* flux,
           T* dfdb, T* dfdr, T* dfdu) {
  constexpr bool kF64 = std::is_same<T, double>::value;
  if constexpr (kGrad && kF64) {
    LanesGradF64(b, r, rs, n, law, flux, dfdb, dfdr, dfdu);
  } else if constexpr (kGrad) {
    LanesGradF32(b, r, rs, n, law, flux, dfdb, dfdr, dfdu);
  } else if constexpr (kF64) {
    LanesF64(b, r, rs, n, law, flux);
  } else {
    LanesF32(b, r, rs, n, law, flux);
  }
}

template <bool kGrad, typename T>
void LimbdarkLoop(const T* b, const T* r, int64_t rs, const T* u, int order, int64_t per_group,
                  int64_t begin, int64_t end, T* flux, T* dfdb, T* dfdr, T* dfdu) {
  limbdark::Law law;
  int64_t i = begin;
  while (i < end) {
    const int64_t g = i / per_group;
    limbdark::MakeLaw(u + g * order, order, &law);
    const int64_t stop = std::min(end, (g + 1) * per_group);
    if (order <= 2) {
      Lanes<kGrad, T>(b + i, r + i * rs, rs, stop - i, law, flux + i, kGrad ? dfdb + i : nullptr,
                      kGrad ? dfdr + i : nullptr, kGrad ? dfdu + i * order : nullptr);
      i = stop;
      continue;
    }
    for (; i < stop; ++i) limbdark::EvaluateAt<kGrad, T>(b, r, rs, law, i, flux, dfdb, dfdr, dfdu);
  }
}

template <ffi::DataType dtype>
ffi::Future LimbdarkImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> b, ffi::Buffer<dtype> r,
                         ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux) {
  LimbdarkShape shape;
  if (ffi::Error err = GetLimbdarkShape(b.element_count(), r.element_count(), u.dimensions(),
                                        flux->element_count(), nullptr, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  using T = ffi::NativeType<dtype>;
  const T* pb = b.typed_data();
  const T* pr = r.typed_data();
  const T* pu = u.typed_data();
  T* pf = flux->typed_data();
  const int order = shape.order;
  const int64_t rs = shape.r_stride;
  const int64_t per_group = shape.per_group;
  return ParallelFor(pool, shape.points, kGrain, [=](int64_t begin, int64_t end) {
    LimbdarkLoop<false, T>(pb, pr, rs, pu, order, per_group, begin, end, pf, nullptr, nullptr,
                           nullptr);
  });
}

template <ffi::DataType dtype>
ffi::Future LimbdarkGradImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> b, ffi::Buffer<dtype> r,
                             ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux,
                             ffi::ResultBuffer<dtype> dfdb, ffi::ResultBuffer<dtype> dfdr,
                             ffi::ResultBuffer<dtype> dfdu) {
  LimbdarkShape shape;
  const size_t grad_counts[] = {dfdb->element_count(), dfdr->element_count(),
                                dfdu->element_count()};
  if (ffi::Error err = GetLimbdarkShape(b.element_count(), r.element_count(), u.dimensions(),
                                        flux->element_count(), grad_counts, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  using T = ffi::NativeType<dtype>;
  const T* pb = b.typed_data();
  const T* pr = r.typed_data();
  const T* pu = u.typed_data();
  T* pf = flux->typed_data();
  T* pfb = dfdb->typed_data();
  T* pfr = dfdr->typed_data();
  T* pfu = dfdu->typed_data();
  const int order = shape.order;
  const int64_t rs = shape.r_stride;
  const int64_t per_group = shape.per_group;
  return ParallelFor(pool, shape.points, kGrain, [=](int64_t begin, int64_t end) {
    LimbdarkLoop<true, T>(pb, pr, rs, pu, order, per_group, begin, end, pf, pfb, pfr, pfu);
  });
}

// Second derivatives: outputs of the gradient form, then d2F/db2, d2F/db dr, d2F/dr2 [P] and
// d2F/db du, d2F/dr du [P, n] (limbdark::EvaluateHessian; no lane-parallel path).
template <ffi::DataType dtype>
ffi::Future LimbdarkHessImpl(ffi::ThreadPool pool, ffi::Buffer<dtype> b, ffi::Buffer<dtype> r,
                             ffi::Buffer<dtype> u, ffi::ResultBuffer<dtype> flux,
                             ffi::ResultBuffer<dtype> dfdb, ffi::ResultBuffer<dtype> dfdr,
                             ffi::ResultBuffer<dtype> dfdu, ffi::ResultBuffer<dtype> hbb,
                             ffi::ResultBuffer<dtype> hbr, ffi::ResultBuffer<dtype> hrr,
                             ffi::ResultBuffer<dtype> hbu, ffi::ResultBuffer<dtype> hru) {
  LimbdarkShape shape;
  const size_t grad_counts[] = {dfdb->element_count(), dfdr->element_count(),
                                dfdu->element_count()};
  if (ffi::Error err = GetLimbdarkShape(b.element_count(), r.element_count(), u.dimensions(),
                                        flux->element_count(), grad_counts, &shape);
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  const size_t points = b.element_count(), coefs = points * static_cast<size_t>(shape.order);
  if (ffi::Error err = CheckElementCounts("limbdark", points,
                                          {hbb->element_count(), hbr->element_count(),
                                           hrr->element_count()});
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  if (ffi::Error err = CheckElementCounts("limbdark", coefs,
                                          {hbu->element_count(), hru->element_count()});
      err.failure()) {
    return ErrorFuture(std::move(err));
  }
  using T = ffi::NativeType<dtype>;
  const T* pb = b.typed_data();
  const T* pr = r.typed_data();
  const T* pu = u.typed_data();
  T* out[9] = {flux->typed_data(), dfdb->typed_data(), dfdr->typed_data(), dfdu->typed_data(),
               hbb->typed_data(),  hbr->typed_data(),  hrr->typed_data(),  hbu->typed_data(),
               hru->typed_data()};
  const int order = shape.order;
  const int64_t rs = shape.r_stride;
  const int64_t per_group = shape.per_group;
  // A few times the cost of a gradient point: a smaller grain.
  return ParallelFor(pool, shape.points, kGrain / 4, [=](int64_t begin, int64_t end) {
    limbdark::Law law;
    int64_t group = -1;
    for (int64_t i = begin; i < end; ++i) {
      if (i / per_group != group) {
        group = i / per_group;
        limbdark::MakeLaw(pu + group * order, order, &law);
      }
      limbdark::EvaluateHessianAt<T>(pb, pr, rs, law, i, out[0], out[1], out[2], out[3], out[4],
                                     out[5], out[6], out[7], out[8]);
    }
  });
}

}  // namespace

#define JAXEXT_LIMBDARK_CPU_BINDING(T)          \
  ffi::Ffi::Bind()                              \
      .Ctx<ffi::ThreadPool>()                   \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Arg<ffi::Buffer<ffi::DataType::T>>()     \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

#define JAXEXT_LIMBDARK_GRAD_CPU_BINDING(T) \
  JAXEXT_LIMBDARK_CPU_BINDING(T)            \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

#define JAXEXT_LIMBDARK_HESS_CPU_BINDING(T) \
  JAXEXT_LIMBDARK_GRAD_CPU_BINDING(T)       \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>() \
      .Ret<ffi::Buffer<ffi::DataType::T>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkCpuF32, LimbdarkImpl<ffi::DataType::F32>,
                              JAXEXT_LIMBDARK_CPU_BINDING(F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkCpuF64, LimbdarkImpl<ffi::DataType::F64>,
                              JAXEXT_LIMBDARK_CPU_BINDING(F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkGradCpuF32, LimbdarkGradImpl<ffi::DataType::F32>,
                              JAXEXT_LIMBDARK_GRAD_CPU_BINDING(F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkGradCpuF64, LimbdarkGradImpl<ffi::DataType::F64>,
                              JAXEXT_LIMBDARK_GRAD_CPU_BINDING(F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkHessCpuF32, LimbdarkHessImpl<ffi::DataType::F32>,
                              JAXEXT_LIMBDARK_HESS_CPU_BINDING(F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextLimbdarkHessCpuF64, LimbdarkHessImpl<ffi::DataType::F64>,
                              JAXEXT_LIMBDARK_HESS_CPU_BINDING(F64));

}  // namespace cpu
}  // namespace jaxext
