#include "jaxext/cpu/sph_cpu.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "jaxext/cpu/clones.h"
#include "jaxext/cpu/parallel.h"
#include "jaxext/kernels/sph.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

// The rows [begin, end) of SphTyped for a compile-time lmax: the recurrence's loops then have
// constant bounds and unroll completely (jaxext/kernels/sph.h).
template <int L, typename T>
JAXEXT_HD void SphRowsL(const T* __restrict__ v, const double* __restrict__ nrm, int64_t begin,
                        int64_t end, T* __restrict__ y) {
  constexpr int64_t size = sph::Size(L);
  double row[size];
  // One vector at a time: clang would vectorise across vectors with scatters into y (a stride
  // of Size(L)), which ran 3x slower than row stores once y outgrows the caches (float64, L = 3).
#if defined(__clang__)
#pragma clang loop vectorize(disable)
#endif
  for (int64_t i = begin; i < end; ++i) {
    sph::SolidHarmonics<double>(L, v[3 * i], v[3 * i + 1], v[3 * i + 2], nrm, row);
    for (int64_t k = 0; k < size; ++k) y[i * size + k] = static_cast<T>(row[k]);
  }
}

// ... for the lmax among Ls (a chain of compares, each SphRowsL inlined).
template <typename T, int... Ls>
JAXEXT_HD void SphRowsAnyL(std::integer_sequence<int, Ls...>, int l, const T* v, const double* nrm,
                           int64_t begin, int64_t end, T* y) {
  (void)((l == Ls && (SphRowsL<Ls>(v, nrm, begin, end, y), true)) || ...);
}

// ... for lmax = 0..kMaxL, per CPU (AVX-512 / AVX2 / baseline clones, each with its own code): the
// recurrence compiled once for baseline x86-64 with a runtime lmax, clang's code ran 1.6x GCC's
// (its loops kept, a division per term).
#define JAXEXT_SPH_ROWS(T)                                                                      \
  JAXEXT_CPU_CLONES void SphRows(int l, const T* v, const double* nrm, int64_t begin,           \
                                 int64_t end, T* y) {                                           \
    SphRowsAnyL(std::make_integer_sequence<int, sph::kMaxL + 1>(), l, v, nrm, begin, end, y);   \
  }
JAXEXT_SPH_ROWS(float)
JAXEXT_SPH_ROWS(double)
#undef JAXEXT_SPH_ROWS

template <typename T>
ffi::Future SphTyped(ffi::ThreadPool& pool, ffi::AnyBuffer vectors, ffi::Result<ffi::AnyBuffer> out,
                     int64_t lmax, ffi::Span<const double> norms) {
  const int64_t size = sph::Size(static_cast<int>(lmax));
  const int64_t m = static_cast<int64_t>(vectors.element_count()) / 3;
  if (lmax < 0 || lmax > sph::kMaxL || static_cast<int64_t>(norms.size()) != size ||
      static_cast<int64_t>(vectors.element_count()) != 3 * m ||
      static_cast<int64_t>(out->element_count()) != m * size) {
    return ErrorFuture(ffi::Error::InvalidArgument("jaxext spherical_harmonics: bad shapes"));
  }
  // The recurrence runs in double for either dtype: its intermediate values grow like (2l-1)!!
  // |v|^l before the normalisation shrinks them, which overflows float32 early (l = 12 at
  // |v| ~ 180).
  double nrm[sph::Size(sph::kMaxL)];
  for (int64_t i = 0; i < size; ++i) nrm[i] = norms[i];
  const T* v = vectors.typed_data<T>();
  T* y = out->typed_data<T>();
  const int l = static_cast<int>(lmax);
  return ParallelFor(pool, m, std::max<int64_t>(1, 65536 / size),
                     [=](int64_t begin, int64_t end) { SphRows(l, v, nrm, begin, end, y); });
}

ffi::Future SphImpl(ffi::ThreadPool pool, ffi::AnyBuffer vectors, ffi::Result<ffi::AnyBuffer> out,
                    int64_t lmax, ffi::Span<const double> norms) {
  switch (vectors.element_type()) {
    case ffi::DataType::F32:
      return SphTyped<float>(pool, vectors, out, lmax, norms);
    case ffi::DataType::F64:
      return SphTyped<double>(pool, vectors, out, lmax, norms);
    default:
      return ErrorFuture(ffi::Error::InvalidArgument("jaxext spherical_harmonics: float32/64 only"));
  }
}

// out[id[row]] += x[row] for the rows in [r0, r1) whose id is in [s0, s1), in row order (f values
// per row), per CPU (AVX-512 / AVX2 / baseline clones: the adds are the cost once the rows stream).
// Not forced inline: inlined into the AVX-512 clone, clang's code for it measured 3x slower than
// its baseline out-of-line copy (and than GCC's clone).
template <typename T>
inline void AddRows(const T* x, const int32_t* id, int64_t r0, int64_t r1, int64_t s0, int64_t s1,
                    int64_t f, int64_t k0, int64_t k1, T* out) {
  for (int64_t row = r0; row < r1; ++row) {
    if (id[row] < s0 || id[row] >= s1) continue;
    T* dst = out + id[row] * f;
    const T* src = x + row * f;
    int64_t k = k0;
    for (; k + 16 <= k1; k += 16) {
      for (int c = 0; c < 16; ++c) dst[k + c] += src[k + c];
    }
    for (; k < k1; ++k) dst[k] += src[k];
  }
}

#define JAXEXT_ADD_ROWS(T)                                                                    \
  JAXEXT_CPU_CLONES void AddRowsCloned(const T* x, const int32_t* id, int64_t r0, int64_t r1, \
                                       int64_t s0, int64_t s1, int64_t f, int64_t k0,         \
                                       int64_t k1, T* out) {                                  \
    AddRows(x, id, r0, r1, s0, s1, f, k0, k1, out);                                           \
  }
JAXEXT_ADD_ROWS(float)
JAXEXT_ADD_ROWS(double)
#undef JAXEXT_ADD_ROWS

template <typename T>
ffi::Future SegmentSumTyped(ffi::ThreadPool& pool, ffi::AnyBuffer data, ffi::AnyBuffer ids,
                            ffi::Result<ffi::AnyBuffer> out, bool sorted) {
  const auto out_dims = out->dimensions();
  const int64_t e = static_cast<int64_t>(ids.element_count());
  if (out_dims.size() < 1) {
    return ErrorFuture(ffi::Error::InvalidArgument("jaxext segment_sum: bad output rank"));
  }
  const int64_t segments = out_dims[0];
  const int64_t f = segments > 0 ? static_cast<int64_t>(out->element_count()) / segments : 0;
  if (static_cast<int64_t>(data.element_count()) != e * f && segments > 0) {
    return ErrorFuture(ffi::Error::InvalidArgument("jaxext segment_sum: bad shapes"));
  }
  const int32_t* id = ids.typed_data<int32_t>();
  if (sorted) {
    for (int64_t i = 1; i < e; ++i) {
      if (id[i] < id[i - 1]) {
        return ErrorFuture(ffi::Error::InvalidArgument(
            "jaxext segment_sum: segment_ids are not sorted (row " + std::to_string(i) +
            "), but indices_are_sorted=True was promised"));
      }
    }
  }
  const T* x = data.typed_data<T>();
  T* y = out->typed_data<T>();
  // Every output value is its segment's rows added in row order, whatever the threads or
  // `sorted`. Ids outside [0, segments) are dropped.
  //   sorted: chunks of whole segments over the threads, each segment's rows contiguous (found by
  //   binary search);
  //   unsorted: one pass over the rows front to back on the calling thread, each added to its
  //   segment (no sort, no permuted copy, no random reads). Measured on 2 cores, 30000 x 576
  //   floats: 5.2 ms, against 5.9-7.7 ms for segment ranges over the threads (each reading its
  //   rows out of all), 8.5 ms for a counting sort and reads through it, 15-17 ms for column
  //   ranges over the threads, and 23 ms for the argsort and data[order] copy it replaces.
  if (sorted) {
    return ParallelFor(pool, segments, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, f)),
                       [=](int64_t s0, int64_t s1) {
                         std::fill(y + s0 * f, y + s1 * f, T(0));
                         const int64_t r0 =
                             std::lower_bound(id, id + e, static_cast<int32_t>(s0)) - id;
                         const int64_t r1 =
                             std::lower_bound(id + r0, id + e, static_cast<int32_t>(s1)) - id;
                         AddRowsCloned(x, id, r0, r1, s0, s1, f, 0, f, y);
                       });
  }
  std::fill(y, y + segments * f, T(0));
  AddRowsCloned(x, id, 0, e, 0, segments, f, 0, f, y);
  return ReadyFuture();
}

ffi::Future SegmentSumImpl(ffi::ThreadPool pool, ffi::AnyBuffer data, ffi::AnyBuffer ids,
                           ffi::Result<ffi::AnyBuffer> out, int64_t sorted) {
  if (ids.element_type() != ffi::DataType::S32) {
    return ErrorFuture(ffi::Error::InvalidArgument("jaxext segment_sum: int32 segment ids"));
  }
  switch (data.element_type()) {
    case ffi::DataType::F32:
      return SegmentSumTyped<float>(pool, data, ids, out, sorted != 0);
    case ffi::DataType::F64:
      return SegmentSumTyped<double>(pool, data, ids, out, sorted != 0);
    default:
      return ErrorFuture(ffi::Error::InvalidArgument("jaxext segment_sum: float32/64 only"));
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextSphCpu, SphImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("lmax")
                                  .Attr<ffi::Span<const double>>("norms"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextSegmentSumCpu, SegmentSumImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<int64_t>("sorted"));

}  // namespace cpu
}  // namespace jaxext
