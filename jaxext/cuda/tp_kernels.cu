#include "jaxext/cuda/tp_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <cuda_runtime_api.h>

#include "jaxext/common/tp_fast_path.h"
#include "jaxext/cuda/grid.h"
#include "jaxext/cuda/warp_sums.h"
#include "jaxext/kernels/conv_tasks.h"
#include "jaxext/kernels/tp.h"

namespace jaxext {
namespace cuda {
namespace {

constexpr int kTpThreads = 64;

// An edge naming a node out of range makes the whole result NaN (the CPU raises instead): the
// ranges then do not run from 0 to the edges. Only their first and last entries are read here,
// which is all the lowering passes of an order a call does not walk (conv.py's _walked_graph).
// The tasks come from the lowering (made from these ranges); a set with more pieces than partial
// rows also gives NaN, so that none is written past them.
__device__ bool GraphBad(const TpGraph& g, int64_t rows, bool node_rows) {
  if (g.senders == nullptr) return false;
  bool bad = g.recv_ranges[0] != 0 || g.recv_ranges[g.n_receivers] != g.n_edges ||
             g.send_ranges[0] != 0 || g.send_ranges[g.n_senders] != g.n_edges;
  if (node_rows && g.tasks != nullptr) {
    bad = bad || g.tasks[0] != 0 ||
          static_cast<int64_t>(g.tasks[rows]) - rows > g.partial_rows;
  }
  return bad;
}

// Node rows: how many tasks, task t, and the row it writes (conv_tasks.h).
__device__ int64_t NodeTasks(const TpGraph& g, int64_t rows) {
  return g.tasks == nullptr ? rows : static_cast<int64_t>(g.tasks[rows]);
}

__device__ conv::Task NodeTask(const TpGraph& g, int64_t rows, int64_t t) {
  if (g.tasks == nullptr) return conv::Task{t, g.ranges[t], g.ranges[t + 1], -1, 1};
  return conv::FindTask(g.tasks, g.ranges, rows, static_cast<int64_t>(g.tasks[rows]) - rows, t,
                        g.task_edges);
}

template <typename T>
__device__ T* TaskRow(const TpGraph& g, const TpOperands<T>& ops, const conv::Task& k,
                      int64_t width) {
  return k.slot < 0 ? ops.result + k.node * width : static_cast<T*>(g.partial) + k.slot * width;
}

// Each cut node's result: its partial rows, then its own row (its last piece), added in that
// order. One block per node (strided), its threads over the row.
template <typename T>
__global__ void ConvJoinKernel(const __grid_constant__ TpGraph g, T* result, int64_t rows,
                               int64_t width) {
  if (GraphBad(g, rows, true)) return;  // every row is NaN already
  if (g.tasks[rows] == rows) return;     // nothing cut (the common case)
  const T* partial = static_cast<const T*>(g.partial);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t pieces = static_cast<int64_t>(g.tasks[r + 1]) - g.tasks[r];
    if (pieces <= 1) continue;
    const int64_t first = conv::FirstSlot(g.tasks, r);
    const bool inside = first >= 0 && first + pieces - 1 <= g.partial_rows;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      T& own = result[r * width + c];
      own = inside ? conv::JoinElement(partial, first, pieces, width, c, own)
                   : T(NAN);  // not from the lowering's tasks
    }
  }
}

// The contribution of one set of rows (x, y, w, o: e3nn layout) to `acc` (the result row, e3nn
// layout), for the elements this thread owns.
template <typename T, int kMode>
__device__ void TpAddRow(const TpTables<T>& t, const T* __restrict__ x, const T* __restrict__ y,
                         const T* __restrict__ w, const T* __restrict__ o, T* __restrict__ acc,
                         int lane, bool lane_rows) {
  for (int64_t p = 0; p < t.n_paths; ++p) {
    const tp::Path q = t.paths[p];
    for (int64_t e = q.begin; e < q.end; ++e) {
      const int64_t i = t.ci[e], j = t.cj[e], k = t.ck[e];
      if constexpr (kMode == tp::kY) {
        if (lane_rows) {  // every lane: its channels' share, into its own row
          T dot = T(0);
          for (int64_t u = lane; u < q.mul; u += kTpThreads) {
            dot += w[q.w + u] * x[q.x + u * q.dx + i] * o[q.out + u * q.dout + k];
          }
          acc[q.y + j] += t.cv[e] * dot;
          continue;
        }
        if ((q.y + j) % kTpThreads != lane) continue;
        T dot = T(0);
        for (int64_t u = 0; u < q.mul; ++u) {
          dot += w[q.w + u] * x[q.x + u * q.dx + i] * o[q.out + u * q.dout + k];
        }
        acc[q.y + j] += t.cv[e] * dot;
      } else {
        const T s = t.cv[e] * y[q.y + j];
        for (int64_t u = lane; u < q.mul; u += kTpThreads) {
          if constexpr (kMode == tp::kOut) {
            acc[q.out + u * q.dout + k] += s * w[q.w + u] * x[q.x + u * q.dx + i];
          } else if constexpr (kMode == tp::kX) {
            acc[q.x + u * q.dx + i] += s * w[q.w + u] * o[q.out + u * q.dout + k];
          } else {  // kW
            acc[q.w + u] += s * x[q.x + u * q.dx + i] * o[q.out + u * q.dout + k];
          }
        }
      }
    }
  }
}

// A convolution's node row adds its edges in kTpGroups interleaved groups (edge q of the node's
// sorted list goes to group q mod kTpGroups), each into its own accumulator row in shared memory;
// the groups' rows are then added in group order. Still one owner per element and a fixed order
// (deterministic), with kTpGroups times the threads: a layer's ~1000 nodes alone gave an H100
// 0.3 waves. Rows with one edge or none (plain products, the y and w cotangents) use one group.
// The y cotangent (few components, each a sum over channels) gives every lane its own row instead
// (stride width + 1 against bank conflicts), summed over the lanes in lane order at the end.
constexpr int kTpGroups = 8;
// Dynamic shared memory per block, below the 48 KB a launch gets without an opt-in, leaving room
// for the 1 KB of shared memory cuobjdump reports for the kernel itself (sm_90).
constexpr int64_t kTpSharedLimit = 40 * 1024;

template <typename T, int kMode>
__global__ void __launch_bounds__(kTpThreads * kTpGroups)
    TpKernel(const __grid_constant__ TpTables<T> t, const __grid_constant__ TpOperands<T> ops,
             const __grid_constant__ TpGraph g, int use_shared) {
  extern __shared__ __align__(16) unsigned char tp_shared[];
  const int lane = threadIdx.x % kTpThreads;
  const int group = threadIdx.x / kTpThreads;
  const int groups = blockDim.x / kTpThreads;
  const int64_t* d = ops.dims;
  const int64_t width = d[kMode];
  const bool lane_rows = kMode == tp::kY && use_shared;
  const int64_t stride = width + 1;
  const bool node_rows = g.senders != nullptr && (kMode == tp::kOut || kMode == tp::kX);
  const bool bad = GraphBad(g, ops.rows, node_rows);
  // Rows, or (node rows) tasks: a node's edges, or a piece of them.
  const int64_t items = node_rows && !bad ? NodeTasks(g, ops.rows) : ops.rows;
  for (int64_t r = blockIdx.x; r < items; r += gridDim.x) {
    conv::Task task{r, 0, 0, -1, 1};
    if (node_rows && !bad) task = NodeTask(g, ops.rows, r);
    T* out = node_rows && !bad ? TaskRow(g, ops, task, width) : ops.result + r * width;
    if (bad) {
      for (int64_t c = threadIdx.x; c < width; c += blockDim.x) out[c] = T(NAN);
      continue;
    }
    // This group's (or lane's) accumulator: its row of shared memory, or the result row itself.
    T* acc = !use_shared ? out
             : lane_rows ? reinterpret_cast<T*>(tp_shared) + lane * stride
                         : reinterpret_cast<T*>(tp_shared) + group * width;
    if (lane_rows) {
      for (int64_t c = 0; c < width; ++c) acc[c] = T(0);
    } else {
      for (int64_t c = lane; c < width; c += kTpThreads) acc[c] = T(0);
    }
    __syncthreads();  // zeroed by one thread, accumulated by another
    auto add = [&](int64_t xr, int64_t er, int64_t orow) {
      const T* no = nullptr;
      TpAddRow<T, kMode>(t, ops.slot[tp::kX] ? ops.slot[tp::kX] + xr * d[tp::kX] : no,
                         ops.slot[tp::kY] ? ops.slot[tp::kY] + er * d[tp::kY] : no,
                         ops.slot[tp::kW] ? ops.slot[tp::kW] + er * d[tp::kW] : no,
                         ops.slot[tp::kOut] ? ops.slot[tp::kOut] + orow * d[tp::kOut] : no, acc,
                         lane, lane_rows);
    };
    if (g.senders == nullptr) {
      if (group == 0) add(r, r, r);
    } else if (kMode == tp::kY || kMode == tp::kW) {  // one edge per result row
      if (group == 0) add(g.senders[r], r, g.receivers[r]);
    } else {  // a node: its (task's) edges in sorted order, interleaved over the groups
      for (int64_t q = task.begin + group; q < task.end; q += groups) {
        const int32_t k = g.order[q];
        add(g.senders[k], k, g.receivers[k]);
      }
    }
    __syncthreads();  // every group done
    if (use_shared) {
      const T* rows = reinterpret_cast<const T*>(tp_shared);
      const int n_rows = lane_rows ? kTpThreads : groups;
      const int64_t row_stride = lane_rows ? stride : width;
      for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
        T sum = rows[c];
        for (int q = 1; q < n_rows; ++q) sum += rows[q * row_stride + c];
        out[c] = sum;
      }
      __syncthreads();  // before the next row reuses the accumulators
    }
  }
}

// --- The per-path kernel (used whenever TpFast::ok) ---------------------------------------------
//
// One warp per row task (an edge, a plain product's row, or a share of a node's edges), its lanes
// over the channels u. Per edge, the warp first builds M = sum_j c y[j] (a dense dx x dout matrix
// per path, in the warp's shared memory; every lane owns some of its elements), then each lane
// runs every path for its channels with the path's sizes fixed at compile time (a switch over
// 2l+1 in {1, 3, 5, 7}): the channel's x (or out cotangent) values in registers, M read as a
// broadcast, the products summed in registers and added once per (path, channel, component) to
// the warp's accumulator row in shared memory. The y cotangent sums over channels: each lane
// keeps its channels' share of N = sum_u w x (outer) o per path in registers, and the warp adds
// the lanes by shuffles in a fixed pattern. Node rows split their edges over the block's warps,
// whose rows are added in warp order. Deterministic: every sum has one owner and a fixed order.
constexpr int kTpWarp = 32;
static_assert(kTpWarp == kWarpLanes);
constexpr int kTpFastWarps = 8;
// Shared memory per block of this kernel: under the 48 KB a launch gets without an opt-in.
constexpr int64_t kTpFastSharedLimit = 46 * 1024;

// Calls fn(DX, DO) with a path's sizes (2l+1 in {1, 3, 5, 7}) as std::integral_constants, so
// that fn's per-channel arrays and loops have sizes fixed at compile time.
template <int DX, typename Fn>
__device__ __forceinline__ void TpWithDout(int dout, Fn&& fn) {
  using std::integral_constant;
  switch (dout) {
    case 1: fn(integral_constant<int, DX>{}, integral_constant<int, 1>{}); break;
    case 3: fn(integral_constant<int, DX>{}, integral_constant<int, 3>{}); break;
    case 5: fn(integral_constant<int, DX>{}, integral_constant<int, 5>{}); break;
    default: fn(integral_constant<int, DX>{}, integral_constant<int, 7>{}); break;
  }
}

template <typename Fn>
__device__ __forceinline__ void TpWithSizes(int dx, int dout, Fn&& fn) {
  switch (dx) {
    case 1: TpWithDout<1>(dout, fn); break;
    case 3: TpWithDout<3>(dout, fn); break;
    case 5: TpWithDout<5>(dout, fn); break;
    default: TpWithDout<7>(dout, fn); break;
  }
}

// The per-channel pieces of the w and y cotangents, shared by their modes and the edge
// cotangents' pass (same expressions, same order: the same sums).
// w's cotangent of one channel: x^T M o.
template <typename T, int DX, int DO>
__device__ __forceinline__ T TpChannelXMO(const T* __restrict__ M, const T (&xv)[DX],
                                          const T (&ov)[DO]) {
  T s = T(0);
#pragma unroll
  for (int i = 0; i < DX; ++i) {
    T t = T(0);
#pragma unroll
    for (int k = 0; k < DO; ++k) t += M[i * DO + k] * ov[k];
    s += xv[i] * t;
  }
  return s;
}

// Adds one channel's w x (outer) o to this lane's share n of N.
template <typename T, int DX, int DO>
__device__ __forceinline__ void TpAddChannelN(T (&n)[DX * DO], T wu, const T (&xv)[DX],
                                              const T (&ov)[DO]) {
#pragma unroll
  for (int i = 0; i < DX; ++i) {
    const T a = wu * xv[i];
#pragma unroll
    for (int k = 0; k < DO; ++k) n[i * DO + k] += a * ov[k];
  }
}

// The warp's N block: every lane's share added by shuffles (WarpSums: ~DX DO shuffles, not
// 5 DX DO), each element written by one lane.
template <typename T, int DX, int DO>
__device__ __forceinline__ void TpStoreWarpN(const T (&n)[DX * DO], T* __restrict__ N,
                                             int lane) {
  WarpSums(n, lane, [N](int t, T sum) { N[t] = sum; });
}

// The K values of channel u of a row's irrep block starting at `begin`, into registers.
template <typename T, int K>
__device__ __forceinline__ void TpLoadChannel(const T* __restrict__ row, int64_t begin, int u,
                                              T (&v)[K]) {
#pragma unroll
  for (int i = 0; i < K; ++i) v[i] = row[begin + u * K + i];
}

// M = sum_j c y[j] for every path (the lanes over its elements).
template <typename T>
__device__ __forceinline__ void TpBuildM(const TpFast<T>& f, const T* __restrict__ y,
                                         T* __restrict__ M, int lane) {
  for (int pos = lane; pos < f.m_size; pos += kTpWarp) {
    T s = T(0);
    for (int e = f.m_begin[pos]; e < f.m_begin[pos + 1]; ++e) s += f.m_v[e] * y[f.m_j[e]];
    M[pos] = s;
  }
}

// Adds y's cotangent row, contracted from N, to acc (the lanes over its components).
template <typename T>
__device__ __forceinline__ void TpAddYRow(const TpFast<T>& f, const T* __restrict__ N,
                                          T* __restrict__ acc, int lane) {
  for (int jg = lane; jg < f.ny; jg += kTpWarp) {
    T s = T(0);
    for (int e = f.y_begin[jg]; e < f.y_begin[jg + 1]; ++e) s += f.y_v[e] * N[f.y_pos[e]];
    acc[jg] += s;
  }
}

// One path for this lane's channels. M: the path's (dx, dout) block (kY: N's block, written
// here). acc: the warp's accumulator row (the result's layout).
template <typename T, int kMode, int DX, int DO>
__device__ __forceinline__ void TpFastPathRow(const TpFastPath& q, T* __restrict__ M,
                                              const T* __restrict__ x, const T* __restrict__ w,
                                              const T* __restrict__ o, T* __restrict__ acc,
                                              int lane) {
  if constexpr (kMode == tp::kY) {
    T n[DX * DO];
#pragma unroll
    for (int t = 0; t < DX * DO; ++t) n[t] = T(0);
    for (int u = lane; u < q.mul; u += kTpWarp) {
      T xv[DX], ov[DO];
      TpLoadChannel(x, q.x, u, xv);
      TpLoadChannel(o, q.out, u, ov);
      TpAddChannelN<T, DX, DO>(n, w[q.w + u], xv, ov);
    }
    TpStoreWarpN<T, DX, DO>(n, M, lane);
  } else {
    for (int u = lane; u < q.mul; u += kTpWarp) {
      const T wu = w == nullptr ? T(0) : w[q.w + u];
      if constexpr (kMode == tp::kOut) {
        T xv[DX];
        TpLoadChannel(x, q.x, u, xv);
        T* a = acc + q.out + u * DO;
#pragma unroll
        for (int k = 0; k < DO; ++k) {
          T s = T(0);
#pragma unroll
          for (int i = 0; i < DX; ++i) s += xv[i] * M[i * DO + k];
          a[k] += wu * s;
        }
      } else if constexpr (kMode == tp::kX) {
        T ov[DO];
        TpLoadChannel(o, q.out, u, ov);
        T* a = acc + q.x + u * DX;
#pragma unroll
        for (int i = 0; i < DX; ++i) {
          T s = T(0);
#pragma unroll
          for (int k = 0; k < DO; ++k) s += M[i * DO + k] * ov[k];
          a[i] += wu * s;
        }
      } else {  // kW
        T xv[DX], ov[DO];
        TpLoadChannel(x, q.x, u, xv);
        TpLoadChannel(o, q.out, u, ov);
        acc[q.w + u] += TpChannelXMO<T, DX, DO>(M, xv, ov);
      }
    }
  }
}

// One edge (or plain row): x, y, w, o its rows (the result's slot null); acc the warp's
// accumulator row; M the warp's M (or N) buffer. (Copying the rows into shared memory first,
// with coalesced loads, was measured no faster on an H200: it costs occupancy.)
template <typename T, int kMode>
__device__ void TpFastEdge(const TpFast<T>& f, const T* __restrict__ x, const T* __restrict__ y,
                           const T* __restrict__ w, const T* __restrict__ o, T* __restrict__ acc,
                           T* __restrict__ M, int lane) {
  if constexpr (kMode != tp::kY) {
    TpBuildM(f, y, M, lane);
    __syncwarp();
  }
  for (int p = 0; p < f.n_paths; ++p) {
    const TpFastPath q = f.paths[p];
    TpWithSizes(q.dx, q.dout, [&](auto dx, auto dout) {
      TpFastPathRow<T, kMode, decltype(dx)::value, decltype(dout)::value>(q, M + q.moff, x, w, o,
                                                                          acc, lane);
    });
  }
  if constexpr (kMode == tp::kY) {
    __syncwarp();  // N complete
    TpAddYRow(f, M, acc, lane);
  }
  __syncwarp();  // before the next edge rewrites M
}

// Shared memory per warp, in elements: M (or N), then the accumulator row; even, so that rows
// stay 8-byte aligned.
__host__ __device__ inline int64_t TpFastPerWarp(int32_t m_size, int64_t width) {
  return (static_cast<int64_t>(m_size) + width + 1) / 2 * 2;
}

template <typename T, int kMode>
__global__ void __launch_bounds__(kTpWarp * kTpFastWarps)
    TpFastKernel(const __grid_constant__ TpFast<T> f, const __grid_constant__ TpOperands<T> ops,
                 const __grid_constant__ TpGraph g, int64_t per_warp) {
  extern __shared__ __align__(16) unsigned char tp_shared[];
  const int lane = threadIdx.x % kTpWarp;
  const int warp = threadIdx.x / kTpWarp;
  const int warps = blockDim.x / kTpWarp;
  const int64_t* d = ops.dims;
  const int64_t width = d[kMode];
  T* const base = reinterpret_cast<T*>(tp_shared);
  T* const M = base + warp * per_warp;
  T* const acc = M + f.m_size;
  auto row = [&](int s, int64_t r) -> const T* {
    return ops.slot[s] == nullptr ? nullptr : ops.slot[s] + r * d[s];
  };
  const bool node_rows = g.senders != nullptr && (kMode == tp::kOut || kMode == tp::kX);
  const bool bad = GraphBad(g, ops.rows, node_rows);
  if (node_rows) {
    if (bad) {
      for (int64_t r = blockIdx.x; r < ops.rows; r += gridDim.x) {
        T* out = ops.result + r * width;
        for (int64_t c = threadIdx.x; c < width; c += blockDim.x) out[c] = T(NAN);
      }
      return;
    }
    // One task per block (strided): a node's edges, or a piece of them (conv_tasks.h).
    const int64_t n_tasks = NodeTasks(g, ops.rows);
    for (int64_t t = blockIdx.x; t < n_tasks; t += gridDim.x) {
      const conv::Task task = NodeTask(g, ops.rows, t);
      T* out = TaskRow(g, ops, task, width);
      for (int64_t c = lane; c < width; c += kTpWarp) acc[c] = T(0);
      __syncwarp();
      for (int64_t q = task.begin + warp; q < task.end; q += warps) {
        const int32_t k = g.order[q];
        TpFastEdge<T, kMode>(f, row(tp::kX, g.senders[k]), row(tp::kY, k), row(tp::kW, k),
                             row(tp::kOut, g.receivers[k]), acc, M, lane);
      }
      __syncthreads();  // every warp's row complete
      for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
        T sum = base[f.m_size + c];
        for (int v = 1; v < warps; ++v) sum += base[v * per_warp + f.m_size + c];
        out[c] = sum;
      }
      __syncthreads();  // before the next node reuses the rows
    }
    return;
  }
  // One task per warp: a plain product's row, or one edge (the y and w cotangents).
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * warps + warp; r < ops.rows;
       r += static_cast<int64_t>(gridDim.x) * warps) {
    T* out = ops.result + r * width;
    if (bad) {
      for (int64_t c = lane; c < width; c += kTpWarp) out[c] = T(NAN);
      continue;
    }
    int64_t xr = r, orow = r;
    if (g.senders != nullptr) {
      xr = g.senders[r];
      orow = g.receivers[r];
    }
    for (int64_t c = lane; c < width; c += kTpWarp) acc[c] = T(0);
    __syncwarp();
    TpFastEdge<T, kMode>(f, row(tp::kX, xr), row(tp::kY, r), row(tp::kW, r), row(tp::kOut, orow),
                         acc, M, lane);
    for (int64_t c = lane; c < width; c += kTpWarp) out[c] = acc[c];
    __syncwarp();  // before the next task zeroes the row
  }
}

// --- The y and w cotangents of an edge together (per-path tables) ------------------------------
//
// Both read the edge's x and out-cotangent rows channel by channel: the w cotangent as the kW
// mode does (M = sum_j c y[j] built first, then x^T M o per channel), the y cotangent as the kY
// mode (each lane's share of N = sum_u w x (outer) o, added over the warp by shuffles). One warp
// per edge does both from one load of each channel's x and o values, in the same order as the two
// modes' own kernels: the same sums.

// One path for this lane's channels: M its (dx, dout) block of M, N of N (written here), accw the
// warp's w-cotangent row.
template <typename T, int DX, int DO>
__device__ __forceinline__ void TpFastPathEdgeCts(const TpFastPath& q, const T* __restrict__ M,
                                                  T* __restrict__ N, const T* __restrict__ x,
                                                  const T* __restrict__ w,
                                                  const T* __restrict__ o, T* __restrict__ accw,
                                                  int lane) {
  T n[DX * DO];
#pragma unroll
  for (int t = 0; t < DX * DO; ++t) n[t] = T(0);
  for (int u = lane; u < q.mul; u += kTpWarp) {
    T xv[DX], ov[DO];
    TpLoadChannel(x, q.x, u, xv);
    TpLoadChannel(o, q.out, u, ov);
    accw[q.w + u] += TpChannelXMO<T, DX, DO>(M, xv, ov);
    TpAddChannelN<T, DX, DO>(n, w[q.w + u], xv, ov);
  }
  TpStoreWarpN<T, DX, DO>(n, N, lane);
}

// Shared memory per warp, in elements: M, N, the w-cotangent row, the y-cotangent row; even.
__host__ __device__ inline int64_t TpEdgeCtsPerWarp(int32_t m_size, int64_t dy, int64_t dw) {
  return (2 * static_cast<int64_t>(m_size) + dy + dw + 1) / 2 * 2;
}

// One warp per edge (strided); ops: mode kY's operands, y the harmonics, dw the w cotangent.
template <typename T>
__global__ void __launch_bounds__(kTpWarp * kTpFastWarps)
    TpFastEdgeCtsKernel(const __grid_constant__ TpFast<T> f,
                        const __grid_constant__ TpOperands<T> ops, const T* __restrict__ y_rows,
                        T* __restrict__ dw, const __grid_constant__ TpGraph g, int64_t per_warp) {
  extern __shared__ __align__(16) unsigned char tp_shared[];
  const int lane = threadIdx.x % kTpWarp;
  const int warp = threadIdx.x / kTpWarp;
  const int warps = blockDim.x / kTpWarp;
  const int64_t* d = ops.dims;
  T* const M = reinterpret_cast<T*>(tp_shared) + warp * per_warp;
  T* const N = M + f.m_size;
  T* const accw = N + f.m_size;
  T* const accy = accw + d[tp::kW];
  const bool bad = GraphBad(g, ops.rows, false);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * warps + warp; r < ops.rows;
       r += static_cast<int64_t>(gridDim.x) * warps) {
    T* const out_y = ops.result + r * d[tp::kY];
    T* const out_w = dw + r * d[tp::kW];
    if (bad) {
      for (int64_t c = lane; c < d[tp::kY]; c += kTpWarp) out_y[c] = T(NAN);
      for (int64_t c = lane; c < d[tp::kW]; c += kTpWarp) out_w[c] = T(NAN);
      continue;
    }
    const int64_t xr = g.senders != nullptr ? g.senders[r] : r;
    const int64_t orow = g.senders != nullptr ? g.receivers[r] : r;
    const T* const x = ops.slot[tp::kX] + xr * d[tp::kX];
    const T* const y = y_rows + r * d[tp::kY];
    const T* const w = ops.slot[tp::kW] + r * d[tp::kW];
    const T* const o = ops.slot[tp::kOut] + orow * d[tp::kOut];
    for (int64_t c = lane; c < d[tp::kW]; c += kTpWarp) accw[c] = T(0);
    for (int64_t c = lane; c < d[tp::kY]; c += kTpWarp) accy[c] = T(0);
    TpBuildM(f, y, M, lane);
    __syncwarp();  // M complete, the rows zeroed
    for (int p = 0; p < f.n_paths; ++p) {
      const TpFastPath q = f.paths[p];
      TpWithSizes(q.dx, q.dout, [&](auto dx, auto dout) {
        TpFastPathEdgeCts<T, decltype(dx)::value, decltype(dout)::value>(
            q, M + q.moff, N + q.moff, x, w, o, accw, lane);
      });
    }
    __syncwarp();  // N and the w row complete
    TpAddYRow(f, N, accy, lane);
    __syncwarp();  // the y row complete
    for (int64_t c = lane; c < d[tp::kY]; c += kTpWarp) out_y[c] = accy[c];
    for (int64_t c = lane; c < d[tp::kW]; c += kTpWarp) out_w[c] = accw[c];
    __syncwarp();  // before the next edge rewrites M, N and the rows
  }
}

// JAXEXT_TP_CUDA_KERNEL=generic runs the generic kernel (TpKernel, otherwise only the fallback
// for l > 3) instead of the per-path one: for A/B comparisons, in a separate process.
bool TpFastWanted() {
  static const bool wanted = [] {
    const char* v = getenv("JAXEXT_TP_CUDA_KERNEL");
    return v == nullptr || strcmp(v, "generic") != 0;
  }();
  return wanted;
}

// Launches the per-path kernel if it applies (else returns false): its tables usable, one
// warp's shared memory within the limit, not switched off.
template <typename T>
bool LaunchTpFast(cudaStream_t stream, int mode, const TpFast<T>& f, const TpOperands<T>& ops,
                  const TpGraph& g) {
  if (!f.ok || !TpFastWanted()) return false;
  const int64_t per_warp = TpFastPerWarp(f.m_size, ops.dims[mode]);
  const int64_t warp_bytes = per_warp * static_cast<int64_t>(sizeof(T));
  if (warp_bytes <= 0) return false;  // nothing to hold (LaunchTp returns before: empty rows)
  const int64_t fit = kTpFastSharedLimit / warp_bytes;
  if (fit < 1) return false;
  const int warps = static_cast<int>(std::min<int64_t>(kTpFastWarps, fit));
  const bool node_rows = g.senders != nullptr && (mode == tp::kOut || mode == tp::kX);
  // Node rows: a block per task, at most rows + partial_rows of them.
  const int64_t blocks_wanted =
      node_rows ? ops.rows + (g.tasks != nullptr ? g.partial_rows : 0)
                : (ops.rows + warps - 1) / warps;
  const unsigned blocks = GridBlocks(blocks_wanted);
  const unsigned threads = static_cast<unsigned>(kTpWarp * warps);
  const size_t shared = static_cast<size_t>(warps * warp_bytes);
  switch (mode) {
    case tp::kOut:
      TpFastKernel<T, tp::kOut><<<blocks, threads, shared, stream>>>(f, ops, g, per_warp);
      break;
    case tp::kX:
      TpFastKernel<T, tp::kX><<<blocks, threads, shared, stream>>>(f, ops, g, per_warp);
      break;
    case tp::kY:
      TpFastKernel<T, tp::kY><<<blocks, threads, shared, stream>>>(f, ops, g, per_warp);
      break;
    default:
      TpFastKernel<T, tp::kW><<<blocks, threads, shared, stream>>>(f, ops, g, per_warp);
      break;
  }
  return true;
}

// The product's kernel (the per-path one where it applies); for a convolution's node rows cut
// into tasks, LaunchTp then joins the cut nodes' pieces.
template <typename T>
cudaError_t LaunchTpRows(cudaStream_t stream, int mode, const TpTables<T>& t,
                         const TpOperands<T>& ops, const TpGraph& g) {
  if (LaunchTpFast<T>(stream, mode, t.fast, ops, g)) return cudaGetLastError();
  const bool node_rows = g.senders != nullptr && (mode == tp::kOut || mode == tp::kX);
  const unsigned blocks =
      GridBlocks(ops.rows + (node_rows && g.tasks != nullptr ? g.partial_rows : 0));
  const int64_t row_bytes = ops.dims[mode] * static_cast<int64_t>(sizeof(T));
  int groups = node_rows ? kTpGroups : 1;
  while (groups > 1 && groups * row_bytes > kTpSharedLimit) --groups;
  // Accumulator rows: one per group, or (y cotangent) one per lane, padded by one element.
  const int64_t shared_bytes = mode == tp::kY
      ? kTpThreads * (ops.dims[mode] + 1) * static_cast<int64_t>(sizeof(T))
      : groups * row_bytes;
  const bool use_shared = shared_bytes <= kTpSharedLimit;
  const unsigned threads = static_cast<unsigned>(kTpThreads * groups);
  const size_t shared = use_shared ? static_cast<size_t>(shared_bytes) : 0;
  const int flag = use_shared ? 1 : 0;
  switch (mode) {
    case tp::kOut:
      TpKernel<T, tp::kOut><<<blocks, threads, shared, stream>>>(t, ops, g, flag);
      break;
    case tp::kX:
      TpKernel<T, tp::kX><<<blocks, threads, shared, stream>>>(t, ops, g, flag);
      break;
    case tp::kY:
      TpKernel<T, tp::kY><<<blocks, threads, shared, stream>>>(t, ops, g, flag);
      break;
    default:
      TpKernel<T, tp::kW><<<blocks, threads, shared, stream>>>(t, ops, g, flag);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t LaunchTp(cudaStream_t stream, int mode, const TpTables<T>& t,
                     const TpOperands<T>& ops, const TpGraph& g) {
  if (ops.rows == 0 || ops.dims[mode] == 0) return cudaSuccess;  // no elements
  if (cudaError_t err = LaunchTpRows<T>(stream, mode, t, ops, g); err != cudaSuccess) return err;
  const bool node_rows = g.senders != nullptr && (mode == tp::kOut || mode == tp::kX);
  if (!node_rows || g.tasks == nullptr || g.partial_rows == 0) return cudaSuccess;  // none cut
  ConvJoinKernel<T><<<GridBlocks(ops.rows, 4), 128, 0, stream>>>(g, ops.result, ops.rows,
                                                                 ops.dims[mode]);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchTpEdgeCts(cudaStream_t stream, const TpTables<T>& t, const T* y,
                            const TpOperands<T>& ops, T* dw, const TpGraph& g) {
  if (ops.rows == 0) return cudaSuccess;
  const TpFast<T>& f = t.fast;
  const int64_t dy_width = ops.dims[tp::kY], dw_width = ops.dims[tp::kW];
  const int64_t warp_bytes =
      TpEdgeCtsPerWarp(f.m_size, dy_width, dw_width) * static_cast<int64_t>(sizeof(T));
  const int64_t fit = warp_bytes > 0 ? kTpFastSharedLimit / warp_bytes : 0;
  if (f.ok && TpFastWanted() && fit >= 1 && dy_width > 0 &&
      dw_width > 0) {
    const int warps = static_cast<int>(std::min<int64_t>(kTpFastWarps, fit));
    TpFastEdgeCtsKernel<T><<<GridBlocks((ops.rows + warps - 1) / warps),
                             static_cast<unsigned>(kTpWarp * warps),
                             static_cast<size_t>(warps * warp_bytes), stream>>>(
        f, ops, y, dw, g, warp_bytes / static_cast<int64_t>(sizeof(T)));
    return cudaGetLastError();
  }
  // Each mode's own launch: y's cotangent from (x, w, o), then w's from (x, y, o).
  if (cudaError_t err = LaunchTp<T>(stream, tp::kY, t, ops, g); err != cudaSuccess) return err;
  TpOperands<T> w_ops = ops;
  w_ops.slot[tp::kY] = y;
  w_ops.slot[tp::kW] = nullptr;
  w_ops.result = dw;
  return LaunchTp<T>(stream, tp::kW, t, w_ops, g);
}

template cudaError_t LaunchTpEdgeCts<float>(cudaStream_t, const TpTables<float>&, const float*,
                                            const TpOperands<float>&, float*, const TpGraph&);
template cudaError_t LaunchTpEdgeCts<double>(cudaStream_t, const TpTables<double>&,
                                             const double*, const TpOperands<double>&, double*,
                                             const TpGraph&);

template cudaError_t LaunchTp<float>(cudaStream_t, int, const TpTables<float>&,
                                     const TpOperands<float>&, const TpGraph&);
template cudaError_t LaunchTp<double>(cudaStream_t, int, const TpTables<double>&,
                                      const TpOperands<double>&, const TpGraph&);

}  // namespace cuda
}  // namespace jaxext
