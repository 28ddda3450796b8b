// How a convolution's node rows are cut into tasks of bounded work, shared by the CPU handler
// (conv_cpu.cc) and the CUDA kernels (tp_kernels.cu); the CUDA segment sum (sph_kernels.cu) cuts
// its segments' runs of rows the same way (a segment for a node, its rows for the edges).
//
// A node row adds the edges of its run in the sorted edge order (ranges[r] .. ranges[r + 1]).
// Runs are not of one length: jax-md pads its neighbour lists with edges that all go to one dummy
// node (a fifth of the edges of a typical system), and a hub node in any graph does the same. One
// task per node leaves that node's task running long after the others (measured on an H200: a
// conv 28 times slower than with the padding spread over the nodes).
//
// So a run of more than `task_edges` edges is cut into pieces of task_edges (the last one
// shorter). tasks[r] (an exclusive running count, tasks[0] = 0) is node r's first task; node r
// has tasks[r + 1] - tasks[r] >= 1 tasks (an empty run has one, which writes zeros). Each piece
// but a node's last writes its sum to a partial row (slot tasks[r] - r + piece), the last piece
// to the node's own row, and the node's result is then, in this order,
//     partial[0] + partial[1] + ... + partial[pieces - 2] + own row.
// Deterministic: every task sums its edges as an uncut run would, and the pieces are added in a
// fixed order; a run of at most task_edges edges is summed exactly as before.
//
// The partial rows needed: a run of n > task_edges edges has floor((n - 1) / task_edges) extra
// pieces, <= floor(n / task_edges), so their sum is <= floor(edges / task_edges) =
// PartialRows(edges, task_edges) (equal for one run of task_edges + 1 edges).
#ifndef JAXEXT_KERNELS_CONV_TASKS_H_
#define JAXEXT_KERNELS_CONV_TASKS_H_

#include <cstdint>

#include "jaxext/kernels/platform.h"

namespace jaxext {
namespace conv {

// Edges per task: a few times a molecular graph's mean degree (20-60), so that such graphs are
// never cut, while a padded run of 25,000 edges becomes ~200 tasks. jaxext/equivariant/conv.py
// passes the same number to the CUDA handler (as an attribute; the tasks are made there).
constexpr int32_t kTaskEdges = 128;

// Tasks of a run of `edges` edges (<= 0: one task, writing zeros).
JAXEXT_HD_FUNC int64_t RunTasks(int64_t edges, int64_t task_edges) {
  return edges <= task_edges ? 1 : (edges + task_edges - 1) / task_edges;
}

// Partial rows enough for any graph of `edges` edges.
JAXEXT_HD_FUNC int64_t PartialRows(int64_t edges, int64_t task_edges) {
  return edges / task_edges;
}

// What task t does: add the sorted edges [begin, end) of `node` into row `slot` of the partial
// rows, or (slot < 0) into the node's own row; `pieces` is the node's task count.
struct Task {
  int64_t node;
  int64_t begin, end;
  int64_t slot;
  int64_t pieces;
};

// Task t (0 <= t < tasks[nodes]) of the tasks of nodes [0, nodes): a binary search for the last
// node whose first task is at or before t. `tasks` must be as above (tasks[0] = 0, each node's
// count RunTasks of its run); `ranges` the same nodes' runs; `extra` = tasks[nodes] - nodes.
// Since r <= tasks[r] <= r + extra, task t's node lies in [t - extra, t]: with nothing cut
// (extra = 0) no search at all, and log2(extra + 1) steps otherwise.
template <typename TaskInt, typename RangeInt>
JAXEXT_HD_FUNC Task FindTask(const TaskInt* tasks, const RangeInt* ranges, int64_t nodes,
                             int64_t extra, int64_t t, int64_t task_edges) {
  // tasks[lo] <= t < tasks[hi]: tasks[t - extra] <= t, and tasks[t + 1] >= t + 1.
  int64_t lo = t - extra > 0 ? t - extra : 0;
  int64_t hi = t + 1 < nodes ? t + 1 : nodes;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(tasks[mid]) <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  Task k;
  k.node = lo;
  k.pieces = static_cast<int64_t>(tasks[lo + 1]) - static_cast<int64_t>(tasks[lo]);
  const int64_t piece = t - static_cast<int64_t>(tasks[lo]);
  k.begin = static_cast<int64_t>(ranges[lo]) + piece * task_edges;
  const bool last = piece == k.pieces - 1;
  k.end = last ? static_cast<int64_t>(ranges[lo + 1]) : k.begin + task_edges;
  k.slot = last ? -1 : static_cast<int64_t>(tasks[lo]) - lo + piece;
  return k;
}

// Node r's first partial row (its pieces - 1 partial rows follow it).
template <typename TaskInt>
JAXEXT_HD_FUNC int64_t FirstSlot(const TaskInt* tasks, int64_t r) {
  return static_cast<int64_t>(tasks[r]) - r;
}

// Element c of a cut node's result (pieces > 1): its partial rows from `first` (rows of `width`),
// then `own` (its last piece's sum), added in that order, the order both platforms use.
template <typename T>
JAXEXT_HD_FUNC T JoinElement(const T* partial, int64_t first, int64_t pieces, int64_t width,
                             int64_t c, T own) {
  T sum = partial[first * width + c];
  for (int64_t j = 1; j + 1 < pieces; ++j) sum += partial[(first + j) * width + c];
  return sum + own;
}

}  // namespace conv
}  // namespace jaxext

#endif  // JAXEXT_KERNELS_CONV_TASKS_H_
