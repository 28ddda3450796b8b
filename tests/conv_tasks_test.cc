// Tests of jaxext/kernels/conv_tasks.h (how the convolution's node runs are cut into tasks, on the
// CPU and in the CUDA kernels): for random graphs (runs of 0 to 2000 edges, cut at 128 and at
// 1 to 5 edges), every task found by FindTask against the tasks enumerated node by node here:
// each sorted edge position covered exactly once, each piece inside its node's run, every piece
// but a node's last exactly task_edges long and in its own partial row (unique, below
// PartialRows, FirstSlot + piece), the last in the node's own row; a run of n > task_edges edges
// cut into ceil(n / task_edges) tasks, a shorter or empty one into one; and the join's order.
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "jaxext/kernels/conv_tasks.h"
#include "tests/expect.h"

namespace {

namespace conv = jaxext::conv;

void CheckGraph(const std::vector<int64_t>& runs, int64_t task_edges) {
  const int64_t nodes = static_cast<int64_t>(runs.size());
  std::vector<int32_t> ranges(1, 0);
  std::vector<int64_t> tasks(1, 0);
  for (int64_t n : runs) {
    ranges.push_back(static_cast<int32_t>(ranges.back() + n));
    const int64_t want = n <= task_edges ? 1 : (n + task_edges - 1) / task_edges;
    EXPECT_EQ(conv::RunTasks(n, task_edges), want);
    tasks.push_back(tasks.back() + conv::RunTasks(n, task_edges));
  }
  const int64_t edges = ranges.back(), n_tasks = tasks.back();
  const int64_t extra = n_tasks - nodes, partial_rows = conv::PartialRows(edges, task_edges);
  if (extra > partial_rows) {
    EXPECT_EQ(extra, partial_rows);  // the bound the partial rows are allocated by
    return;
  }
  std::vector<int> covered(static_cast<size_t>(edges), 0), slot_used(
                                                                static_cast<size_t>(extra), 0);
  int64_t t = 0;
  for (int64_t r = 0; r < nodes; ++r) {
    const int64_t pieces = tasks[r + 1] - tasks[r];
    for (int64_t p = 0; p < pieces; ++p, ++t) {
      const conv::Task k = conv::FindTask(tasks.data(), ranges.data(), nodes, extra, t, task_edges);
      EXPECT_EQ(k.node, r);
      EXPECT_EQ(k.pieces, pieces);
      EXPECT_EQ(k.begin, ranges[r] + p * task_edges);
      const bool last = p == pieces - 1;
      EXPECT_EQ(k.end, last ? ranges[r + 1] : k.begin + task_edges);
      EXPECT_EQ(k.begin <= k.end && k.end <= ranges[r + 1], 1);
      EXPECT_EQ(k.slot, last ? -1 : conv::FirstSlot(tasks.data(), r) + p);
      if (!last) {
        EXPECT_EQ(k.slot >= 0 && k.slot < extra, 1);
        if (k.slot >= 0 && k.slot < extra) ++slot_used[static_cast<size_t>(k.slot)];
      }
      for (int64_t q = k.begin; q < k.end && q < edges; ++q) ++covered[static_cast<size_t>(q)];
    }
  }
  for (int c : covered) EXPECT_EQ(c, 1);
  for (int c : slot_used) EXPECT_EQ(c, 1);
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261128);
  // The cases at the cut: empty, one edge, task_edges - 1, task_edges, + 1, two tasks exactly,
  // + 1, many; and jax-md's padding (one run of a fifth of the edges, last).
  CheckGraph({}, 128);
  CheckGraph({0}, 128);
  CheckGraph({0, 1, 127, 128, 129, 256, 257, 1500}, 128);
  CheckGraph({129}, 128);  // the bound reached: one partial row for 129 edges
  std::vector<int64_t> padded(300, 34);
  padded.push_back(2576);
  CheckGraph(padded, 128);
  // JoinElement adds the partial rows in order, then the own row: ((1e17 + 1) - 1e17) + 1 = 1,
  // where the sum in reverse, or with the own row first, gives 0 (element 1 of rows of width 2).
  {
    const double partial[] = {0, 1e17, 0, 1.0, 0, -1e17};
    EXPECT_EQ(conv::JoinElement(partial, 0, 4, 2, 1, 1.0), 1);
    EXPECT_EQ(conv::JoinElement(partial, 1, 2, 2, 1, 5.0), 6);  // one partial row, then own
  }
  for (int g = 0; g < 3000; ++g) {
    const int64_t nodes = static_cast<int64_t>(rng() % 12);
    std::vector<int64_t> runs(static_cast<size_t>(nodes));
    for (int64_t& n : runs) {
      n = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % (rng() % 2 ? 2001 : 300));
    }
    CheckGraph(runs, 128);
    CheckGraph(runs, 1 + static_cast<int64_t>(rng() % 5));
  }
  return jaxext_test::ExpectResult();
}
