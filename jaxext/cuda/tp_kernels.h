// The kernels of jaxext.equivariant's tensor product and convolution on CUDA (tp_kernels.cu),
// launched by their handlers (tp_cuda.cc, conv_cuda.cc through tp_cuda_common.h). Plain types
// only (see kepler_kernels.h).
//
// Tables: the paths and Clebsch-Gordan entries, copied to the device by the handlers.
//
// Two kernels. The per-path kernel (TpFastKernel) runs whenever every path has l <= 3 in x and
// out; the generic kernel (TpKernel) otherwise.
//
// Generic kernel: one block per result row (a tensor product's row; a convolution's node, adding
// its edges in sorted order, or one edge for the y and w cotangents), its threads over the channels u
// of each path. Every element of the result row is owned by one thread, which adds its terms in a
// fixed order (edges, paths, Clebsch-Gordan entries) into an accumulator in shared memory:
// deterministic, no atomics. The y cotangent sums over channels, so there a thread owns y
// components instead and loops over u itself. Node rows split their edges over thread groups
// (see kTpGroups in tp_kernels.cu).
//
// A convolution's node rows are tasks (jaxext/kernels/conv_tasks.h): a node's edges, or, for a
// run longer than task_edges (a hub, or jax-md's padding node), a piece of them written to a
// partial row; a join kernel then adds each cut node's pieces in order. Both kernels run one task
// per block.
#ifndef JAXEXT_CUDA_TP_KERNELS_H_
#define JAXEXT_CUDA_TP_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "jaxext/common/tp_fast_path.h"
#include "jaxext/kernels/tp.h"

namespace jaxext {
namespace cuda {

// Device copies of the per-path kernel's tables (jaxext/common/tp_path_tables.h explains them),
// values in T; ok, valid and need as there.
template <typename T>
struct TpFast {
  const TpFastPath* paths = nullptr;
  const int32_t *m_begin = nullptr, *m_j = nullptr, *y_begin = nullptr, *y_pos = nullptr;
  const T *m_v = nullptr, *y_v = nullptr;
  int32_t n_paths = 0, m_size = 0, ny = 0;
  bool ok = false;
  // Row widths the paths need in slots x, y, w, out (checked against the call's dims); `valid`:
  // every entry's (i, j, k) lies inside its path's blocks.
  int64_t need[4] = {0, 0, 0, 0};
  bool valid = true;
};

// Device copies of the tables (cv in T).
template <typename T>
struct TpTables {
  const tp::Path* paths = nullptr;
  const int64_t *ci = nullptr, *cj = nullptr, *ck = nullptr;
  const T* cv = nullptr;
  int64_t n_paths = 0;
  TpFast<T> fast;
};

// Rows of the four slots for result row r, for a plain product (all rows r) or a convolution.
struct TpGraph {
  const int32_t* senders = nullptr;     // null: a plain product
  const int32_t* receivers = nullptr;
  const int32_t* order = nullptr;       // the result's node: its edges, sorted (by_recv / by_send)
  const int32_t* ranges = nullptr;
  // Every edge's nodes are in range iff the receivers' and senders' ranges each cover all edges
  // (Python builds them from per-node counts of the ids in range, so an out-of-range id falls
  // outside them). Of these two only the first and last entries are read (GraphBad), besides
  // `ranges`, the walked one: for the order a call does not walk, the lowering passes ranges
  // holding only those entries and no sort behind them (conv.py's _walked_graph).
  const int32_t* recv_ranges = nullptr;  // n_receivers + 1
  const int32_t* send_ranges = nullptr;  // n_senders + 1
  int64_t n_senders = 0, n_receivers = 0, n_edges = 0;
  // A convolution's node rows cut into tasks of at most task_edges edges (conv_tasks.h): `tasks`
  // the running task counts (rows + 1, made by the Python lowering from `ranges`), `partial` the
  // rows (of the result's width and type) of the pieces but each node's last, partial_rows of
  // them. Null tasks: one task per node row.
  const int32_t* tasks = nullptr;
  void* partial = nullptr;
  int64_t partial_rows = 0;
  int64_t task_edges = 0;
};

template <typename T>
struct TpOperands {
  const T* slot[4];   // x, y, w, out cotangent (the result's slot: null)
  int64_t dims[4];
  T* result;
  int64_t rows;       // result rows
};

// Launches the per-path kernel where it applies (JAXEXT_TP_CUDA_KERNEL=generic: never), else
// TpKernel, for ops.rows rows on `stream`. The tables' validity and widths are the caller's to
// check (tp_cuda_common.h's RunTp).
template <typename T>
cudaError_t LaunchTp(cudaStream_t stream, int mode, const TpTables<T>& t,
                     const TpOperands<T>& ops, const TpGraph& g);

// The y and w cotangents of a convolution's edges together (the transpose of conv's result with
// respect to both): `y` the edge harmonics, `ops` the operands of mode kY (x, w, the out cotangent;
// result: y's cotangent), `dw` the w cotangent's rows (ops.rows of them, dims[kW] wide). With the
// per-path kernel, one warp per edge reads the edge's x and out-cotangent rows once for both;
// otherwise the two modes' own launches. Same checks as LaunchTp's (the caller's).
template <typename T>
cudaError_t LaunchTpEdgeCts(cudaStream_t stream, const TpTables<T>& t, const T* y,
                            const TpOperands<T>& ops, T* dw, const TpGraph& g);

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_TP_KERNELS_H_
