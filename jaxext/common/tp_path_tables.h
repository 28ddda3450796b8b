// The tables of the CUDA tensor product's per-path kernel (jaxext/cuda/tp_kernels.cu),
// built on the host from a product's paths and sparse Clebsch-Gordan entries (jaxext/kernels/
// tp.h). Plain C++ (no CUDA): tested on any machine by tests/tp_path_tables_test.cc.
//
// Per path, the kernel forms M = sum_j c y[j] as a dense (dx, dout) matrix (one per edge, shared
// by every channel), then each channel's product is a dense contraction with M. So the entries
// are regrouped by M element: m_begin[pos] .. m_begin[pos + 1] are the entries of element
// pos = moff + i * dout + k, each with its y index (in the row, the path's y offset included) and
// value. The y cotangent runs the other way, ybar[jg] = sum over jg's entries of c * N[pos] (N:
// M's counterpart summed over channels): y_begin[jg] .. y_begin[jg + 1] over y_pos and y_v. Both
// groupings keep the entries' table order: every sum has a fixed order.
#ifndef JAXEXT_COMMON_TP_PATH_TABLES_H_
#define JAXEXT_COMMON_TP_PATH_TABLES_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "jaxext/common/tp_fast_path.h"
#include "jaxext/kernels/tp.h"

namespace jaxext {

struct TpPathTables {
  std::vector<TpFastPath> paths;
  std::vector<int32_t> m_begin, m_j, y_begin, y_pos;
  std::vector<double> m_v, y_v;
  int32_t m_size = 0, ny = 0;
  // ok: the per-path kernel applies (2l+1 of every path's x and out in {1, 3, 5, 7}, i.e.
  // l <= 3, and every offset within int32); valid: every path and entry lies inside its blocks
  // (else neither kernel may run); need: the row widths the paths reach in slots x, y, w, out.
  bool ok = true, valid = true;
  int64_t need[4] = {0, 0, 0, 0};
};

inline TpPathTables BuildTpPathTables(const tp::Path* paths, int64_t n_paths, const int64_t* ci,
                                      const int64_t* cj, const int64_t* ck, const double* cv,
                                      int64_t n_entries) {
  TpPathTables h;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  auto odd_small = [](int64_t d) { return d == 1 || d == 3 || d == 5 || d == 7; };
  auto narrow = [&](int64_t v) { return static_cast<int32_t>(std::min(v, kMax)); };
  struct Entry {
    int64_t pos, jg;
    double v;
  };
  std::vector<Entry> entries;
  int64_t moff = 0;
  for (int64_t p = 0; p < n_paths; ++p) {
    const tp::Path q = paths[p];
    if (q.mul < 0 || q.dx < 1 || q.dy < 1 || q.dout < 1 || q.x < 0 || q.y < 0 || q.w < 0 ||
        q.out < 0 || q.begin < 0 || q.end < q.begin || q.end > n_entries) {
      h.valid = false;
      return h;
    }
    h.need[tp::kX] = std::max(h.need[tp::kX], q.x + q.mul * q.dx);
    h.need[tp::kY] = std::max(h.need[tp::kY], q.y + q.dy);
    h.need[tp::kW] = std::max(h.need[tp::kW], q.w + q.mul);
    h.need[tp::kOut] = std::max(h.need[tp::kOut], q.out + q.mul * q.dout);
    if (!odd_small(q.dx) || !odd_small(q.dout)) h.ok = false;
    h.paths.push_back({narrow(q.x), narrow(q.y), narrow(q.w), narrow(q.out), narrow(q.mul),
                       narrow(q.dx), narrow(q.dout), narrow(moff)});
    for (int64_t e = q.begin; e < q.end; ++e) {
      const int64_t i = ci[e], j = cj[e], k = ck[e];
      if (i < 0 || i >= q.dx || j < 0 || j >= q.dy || k < 0 || k >= q.dout) {
        h.valid = false;
        return h;
      }
      entries.push_back({moff + i * q.dout + k, q.y + j, cv[e]});
    }
    moff += q.dx * q.dout;
  }
  for (int s = 0; s < 4; ++s) {
    if (h.need[s] > kMax) h.ok = false;
  }
  if (moff > kMax || static_cast<int64_t>(entries.size()) > kMax) h.ok = false;
  if (!h.ok) return h;
  h.m_size = static_cast<int32_t>(moff);
  h.ny = static_cast<int32_t>(h.need[tp::kY]);
  std::vector<int32_t> order(entries.size());
  auto group = [&](int32_t groups, auto key, std::vector<int32_t>* begin,
                   std::vector<int32_t>* index, std::vector<double>* value, auto other) {
    for (size_t n = 0; n < order.size(); ++n) order[n] = static_cast<int32_t>(n);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t l, int32_t r) { return key(entries[l]) < key(entries[r]); });
    begin->assign(static_cast<size_t>(groups) + 1, 0);
    for (int32_t n : order) {
      ++(*begin)[key(entries[n]) + 1];
      index->push_back(static_cast<int32_t>(other(entries[n])));
      value->push_back(entries[n].v);
    }
    for (int32_t g = 0; g < groups; ++g) (*begin)[g + 1] += (*begin)[g];
  };
  group(h.m_size, [](const Entry& e) { return e.pos; }, &h.m_begin, &h.m_j, &h.m_v,
        [](const Entry& e) { return e.jg; });
  group(h.ny, [](const Entry& e) { return e.jg; }, &h.y_begin, &h.y_pos, &h.y_v,
        [](const Entry& e) { return e.pos; });
  return h;
}

}  // namespace jaxext

#endif  // JAXEXT_COMMON_TP_PATH_TABLES_H_
