#include "jaxext/cuda/sph_kernels.h"

#include <cstdint>
#include <limits>

#include <cuda_runtime_api.h>

#include "jaxext/cuda/grid.h"
#include "jaxext/kernels/conv_tasks.h"
#include "jaxext/kernels/sph.h"

namespace jaxext {
namespace cuda {
namespace {

constexpr int kBlock = 256;

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

// flag = 1 if the ids are not sorted ascending (the flag was zeroed before).
__global__ void CheckSortedKernel(const int32_t* __restrict__ id, int64_t e, int32_t* flag) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = 1 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < e;
       i += stride) {
    if (id[i] < id[i - 1]) *flag = 1;
  }
}

// flag = 2 unless the ranges and tasks are the lowering's: the tasks' running count from 0 with
// at most partial_rows extra pieces, the rows within [0, e), every segment's rows running forward
// and its task count RunTasks of its rows (one for an empty segment). Every task then reads rows
// in [0, e) and writes its own row or a partial row below partial_rows, whatever the handler is
// given; the kernels after this one check the flag alone.
__global__ void CheckSegmentTasksKernel(const int32_t* __restrict__ ranges,
                                        const int32_t* __restrict__ tasks, int64_t e,
                                        int64_t segments, int64_t partial_rows, int64_t task_rows,
                                        int32_t* flag) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (first == 0 && (tasks[0] != 0 || static_cast<int64_t>(tasks[segments]) - segments >
                     partial_rows || ranges[0] < 0 || ranges[segments] > e)) {
    *flag = 2;
  }
  for (int64_t s = first; s < segments; s += stride) {
    const int64_t rows = static_cast<int64_t>(ranges[s + 1]) - ranges[s];
    const int64_t count = static_cast<int64_t>(tasks[s + 1]) - tasks[s];
    if (rows < 0 || count != conv::RunTasks(rows, task_rows)) *flag = 2;
  }
}

// One thread per task and feature: a segment's sorted rows (ranges[s] .. ranges[s + 1]), or a
// piece of task_rows of them (jaxext/kernels/conv_tasks.h), added in row order into y (the
// segment's last piece) or a partial row (the others). NaN everywhere if the ids were found
// unsorted or the ranges and tasks are not the lowering's (*flag).
template <typename T>
__global__ void SegmentSumKernel(const T* __restrict__ x, const int32_t* __restrict__ ranges,
                                 const int32_t* __restrict__ tasks, int64_t segments, int64_t f,
                                 int64_t task_rows, const int32_t* __restrict__ flag,
                                 T* __restrict__ partial, T* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const bool nan = *flag != 0;
  const int64_t n_tasks = nan ? segments : static_cast<int64_t>(tasks[segments]);
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < n_tasks * f;
       q += stride) {
    if (nan) {
      y[q] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const int64_t t = q / f, k = q % f;
    const conv::Task task =
        conv::FindTask(tasks, ranges, segments, n_tasks - segments, t, task_rows);
    T acc = T(0);
    for (int64_t row = task.begin; row < task.end; ++row) acc += x[row * f + k];
    if (task.slot < 0) {
      y[task.node * f + k] = acc;
    } else {
      partial[task.slot * f + k] = acc;
    }
  }
}

// Each cut segment's sum: its partial rows, then its last piece's (in y), added in that order.
template <typename T>
__global__ void SegmentJoinKernel(const int32_t* __restrict__ tasks, int64_t segments, int64_t f,
                                  const int32_t* __restrict__ flag, const T* __restrict__ partial,
                                  T* __restrict__ y) {
  if (*flag != 0) return;                   // NaN everywhere already
  if (tasks[segments] == segments) return;  // nothing cut (the common case)
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       q < segments * f; q += stride) {
    const int64_t s = q / f, k = q % f;
    const int64_t pieces = static_cast<int64_t>(tasks[s + 1]) - tasks[s];
    if (pieces > 1) {
      y[q] = conv::JoinElement(partial, conv::FirstSlot(tasks, s), pieces, f, k, y[q]);
    }
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchSphericalHarmonics(cudaStream_t stream, const T* v, T* y, int64_t m, int lmax,
                                     const double* norms) {
  if (m == 0) return cudaSuccess;
  Norms n{};
  for (int i = 0; i < sph::Size(lmax); ++i) n.v[i] = norms[i];
  SphKernel<T><<<GridBlocks(m, kBlock), kBlock, 0, stream>>>(v, y, m, lmax, n);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSegmentSum(cudaStream_t stream, const T* x, const int32_t* ids,
                             const int32_t* ranges, const int32_t* tasks, int64_t e,
                             int64_t segments, int64_t f, int64_t partial_rows, int64_t task_rows,
                             int32_t* flag, T* partial, T* y) {
  if (e > 1) CheckSortedKernel<<<GridBlocks(e, kBlock), kBlock, 0, stream>>>(ids, e, flag);
  if (segments * f == 0) return cudaGetLastError();
  CheckSegmentTasksKernel<<<GridBlocks(segments, kBlock), kBlock, 0, stream>>>(
      ranges, tasks, e, segments, partial_rows, task_rows, flag);
  SegmentSumKernel<T><<<GridBlocks((segments + partial_rows) * f, kBlock), kBlock, 0, stream>>>(
      x, ranges, tasks, segments, f, task_rows, flag, partial, y);
  if (partial_rows > 0) {  // some segment may be cut
    SegmentJoinKernel<T><<<GridBlocks(segments * f, kBlock), kBlock, 0, stream>>>(
        tasks, segments, f, flag, partial, y);
  }
  return cudaGetLastError();
}

#define JAXEXT_INSTANTIATE(T)                                                                  \
  template cudaError_t LaunchSphericalHarmonics<T>(cudaStream_t, const T*, T*, int64_t, int,  \
                                                   const double*);                            \
  template cudaError_t LaunchSegmentSum<T>(cudaStream_t, const T*, const int32_t*,            \
                                           const int32_t*, const int32_t*, int64_t, int64_t,  \
                                           int64_t, int64_t, int64_t, int32_t*, T*, T*);
JAXEXT_INSTANTIATE(float)
JAXEXT_INSTANTIATE(double)
#undef JAXEXT_INSTANTIATE

}  // namespace cuda
}  // namespace jaxext
