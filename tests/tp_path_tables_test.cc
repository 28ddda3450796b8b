// Tests of jaxext/common/tp_path_tables.h (the CUDA tensor product's per-path tables) against
// the sparse entries they regroup: random paths of every size the kernel takes, repeated (i, k)
// and j entries, then the sums the kernel forms from the tables (M = sum c y per (i, k), and the
// y cotangent sum c N per y component) against the same sums taken entry by entry, bitwise (the
// tables keep the entries' order). Also the widths the paths reach, and the flags: l > 3 makes
// the tables inapplicable (ok false), an entry outside its path invalid.
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "jaxext/common/tp_path_tables.h"
#include "jaxext/kernels/tp.h"
#include "tests/expect.h"

namespace {

struct Product {
  std::vector<jaxext::tp::Path> paths;
  std::vector<bool> shared_y, shared_out;  // the next path reuses this one's block
  std::vector<int64_t> ci, cj, ck;
  std::vector<double> cv;
};

// n_paths random paths (x, out blocks laid out one after another), each with random entries.
Product Random(std::mt19937_64& rng, int n_paths, bool allow_large) {
  const int64_t sizes[] = {1, 3, 5, 7, 9};
  auto pick = [&](int n) { return static_cast<int64_t>(rng() % n); };
  Product p;
  int64_t x = 0, y = 0, w = 0, out = 0;
  for (int n = 0; n < n_paths; ++n) {
    jaxext::tp::Path q{};
    const bool reuse_y = n > 0 && p.shared_y.back(), reuse_out = n > 0 && p.shared_out.back();
    q.mul = reuse_out ? p.paths.back().mul : 1 + pick(70);
    q.dx = sizes[pick(allow_large ? 5 : 4)];
    q.dy = reuse_y ? p.paths.back().dy : sizes[pick(4)];
    q.dout = reuse_out ? p.paths.back().dout : sizes[pick(4)];
    q.x = x;
    q.y = y;
    q.w = w;
    q.out = out;
    x += q.mul * q.dx;
    w += q.mul;
    // The next path may share this one's y block (same size) or out block (same multiplicity
    // and size: what jaxext's specs make when paths add into one output irrep).
    const bool share_y = pick(2), share_out = pick(2);
    y += share_y ? 0 : q.dy;
    out += share_out ? 0 : q.mul * q.dout;
    p.shared_y.push_back(share_y);
    p.shared_out.push_back(share_out);
    q.begin = static_cast<int64_t>(p.cv.size());
    const int64_t entries = pick(8) == 0 ? 0 : 1 + pick(3 * q.dx * q.dout);  // some none
    for (int64_t e = 0; e < entries; ++e) {
      p.ci.push_back(pick(static_cast<int>(q.dx)));
      p.cj.push_back(pick(static_cast<int>(q.dy)));
      p.ck.push_back(pick(static_cast<int>(q.dout)));
      p.cv.push_back(std::uniform_real_distribution<double>(-1, 1)(rng));
    }
    q.end = static_cast<int64_t>(p.cv.size());
    p.paths.push_back(q);
  }
  return p;
}

jaxext::TpPathTables Build(const Product& p) {
  return jaxext::BuildTpPathTables(p.paths.data(), static_cast<int64_t>(p.paths.size()),
                                   p.ci.data(), p.cj.data(), p.ck.data(), p.cv.data(),
                                   static_cast<int64_t>(p.cv.size()));
}

}  // namespace

int main() {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 200; ++trial) {
    const Product p = Random(rng, 1 + trial % 13, false);
    const jaxext::TpPathTables t = Build(p);
    EXPECT_EQ(t.ok, 1);
    EXPECT_EQ(t.valid, 1);
    int64_t need[4] = {0, 0, 0, 0}, m_size = 0;
    for (const auto& q : p.paths) {
      need[0] = std::max(need[0], q.x + q.mul * q.dx);
      need[1] = std::max(need[1], q.y + q.dy);
      need[2] = std::max(need[2], q.w + q.mul);
      need[3] = std::max(need[3], q.out + q.mul * q.dout);
      m_size += q.dx * q.dout;
    }
    for (int s = 0; s < 4; ++s) EXPECT_EQ(t.need[s], need[s]);
    EXPECT_EQ(t.m_size, m_size);
    EXPECT_EQ(t.ny, need[1]);
    EXPECT_EQ(t.paths.size(), p.paths.size());
    EXPECT_EQ(t.m_begin.size(), m_size + 1);
    EXPECT_EQ(t.y_begin.size(), need[1] + 1);
    EXPECT_EQ(t.m_begin.back(), p.cv.size());
    EXPECT_EQ(t.y_begin.back(), p.cv.size());
    // M from the tables against M entry by entry (same order, so bitwise).
    std::vector<double> y(need[1]), n_vals(m_size);
    for (double& v : y) v = std::uniform_real_distribution<double>(-2, 2)(rng);
    for (double& v : n_vals) v = std::uniform_real_distribution<double>(-2, 2)(rng);
    std::vector<double> m_ref(m_size, 0.0), ybar_ref(need[1], 0.0);
    int64_t moff = 0;
    for (size_t n = 0; n < p.paths.size(); ++n) {
      const auto& q = p.paths[n];
      EXPECT_EQ(t.paths[n].moff, moff);
      EXPECT_EQ(t.paths[n].dx, q.dx);
      EXPECT_EQ(t.paths[n].dout, q.dout);
      EXPECT_EQ(t.paths[n].mul, q.mul);
      EXPECT_EQ(t.paths[n].x, q.x);
      EXPECT_EQ(t.paths[n].out, q.out);
      for (int64_t e = q.begin; e < q.end; ++e) {
        const int64_t pos = moff + p.ci[e] * q.dout + p.ck[e];
        m_ref[pos] += p.cv[e] * y[q.y + p.cj[e]];
      }
      moff += q.dx * q.dout;
    }
    // ybar in the tables' order: by y component, then entry order.
    for (int64_t jg = 0; jg < need[1]; ++jg) {
      moff = 0;
      for (const auto& q : p.paths) {
        for (int64_t e = q.begin; e < q.end; ++e) {
          if (q.y + p.cj[e] == jg) {
            ybar_ref[jg] += p.cv[e] * n_vals[moff + p.ci[e] * q.dout + p.ck[e]];
          }
        }
        moff += q.dx * q.dout;
      }
    }
    int bad_m = 0, bad_y = 0;
    for (int64_t pos = 0; pos < m_size; ++pos) {
      double s = 0.0;
      for (int32_t e = t.m_begin[pos]; e < t.m_begin[pos + 1]; ++e) s += t.m_v[e] * y[t.m_j[e]];
      bad_m += s != m_ref[pos];
    }
    for (int64_t jg = 0; jg < need[1]; ++jg) {
      double s = 0.0;
      for (int32_t e = t.y_begin[jg]; e < t.y_begin[jg + 1]; ++e) s += t.y_v[e] * n_vals[t.y_pos[e]];
      bad_y += s != ybar_ref[jg];
    }
    EXPECT_EQ(bad_m, 0);
    EXPECT_EQ(bad_y, 0);
  }
  // l = 4 (2l+1 = 9) in x or out: the per-path kernel does not apply; the product stays valid.
  int large = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const Product p = Random(rng, 6, true);
    bool has_large = false;
    for (const auto& q : p.paths) has_large |= q.dx == 9;
    const jaxext::TpPathTables t = Build(p);
    EXPECT_EQ(t.ok, !has_large);
    EXPECT_EQ(t.valid, 1);
    large += has_large;
  }
  EXPECT_EQ(large > 0, 1);
  // No paths at all: valid, applicable, nothing to build.
  {
    const Product none;
    const jaxext::TpPathTables t = Build(none);
    EXPECT_EQ(t.ok, 1);
    EXPECT_EQ(t.valid, 1);
    EXPECT_EQ(t.m_size, 0);
    EXPECT_EQ(t.ny, 0);
    EXPECT_EQ(t.m_begin.size(), 1);
    EXPECT_EQ(t.y_begin.size(), 1);
  }
  // An entry outside its path's blocks, or a path past the entries: invalid.
  Product p = Random(rng, 3, false);
  while (p.paths[1].end == p.paths[1].begin) p = Random(rng, 3, false);
  p.ck[p.paths[1].begin] = p.paths[1].dout;
  EXPECT_EQ(Build(p).valid, 0);
  p = Random(rng, 3, false);
  p.paths[2].end = static_cast<int64_t>(p.cv.size()) + 1;
  EXPECT_EQ(Build(p).valid, 0);
  return jaxext_test::ExpectResult();
}
