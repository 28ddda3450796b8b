// Tests of jaxext/common/batch_layout.h (the batch axes the Numba kernels' handlers walk) against
// strides and slice offsets worked out by hand for NumPy-style row-major arrays.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "jaxext/common/batch_layout.h"
#include "tests/expect.h"

int main() {
  // Two batch axes (sizes 3, 4). x: float64[3, 4, 5] carries both; y: float32[4, 7] carries only
  // axis 1; out: float64[3, 4, 5] carries both.
  jaxext::BatchLayout layout(2);
  size_t nb;
  std::vector<int64_t> sx, sy, so;
  const int64_t x[] = {3, 4, 5}, y[] = {4, 7};
  EXPECT_EQ(layout.Add(x, 3, 8, 0b11, &nb, &sx).size(), 0);
  EXPECT_EQ(nb, 2);
  EXPECT_EQ(sx[0], 4 * 5 * 8);  // np.empty((3, 4, 5)).strides[0]
  EXPECT_EQ(sx[1], 5 * 8);
  EXPECT_EQ(layout.Add(y, 2, 4, 0b10, &nb, &sy).size(), 0);
  EXPECT_EQ(nb, 1);
  EXPECT_EQ(sy[0], 0);  // not carried
  EXPECT_EQ(sy[1], 7 * 4);
  EXPECT_EQ(layout.Add(x, 3, 8, 0b11, &nb, &so).size(), 0);
  EXPECT_EQ(layout.Count(), 12);

  // Walking the slices: Next from 0 agrees with Unravel, and offsets follow the strides.
  int64_t walk[2] = {0, 0}, direct[2];
  for (int64_t step = 0; step < 12; ++step) {
    layout.Unravel(step, direct);
    EXPECT_EQ(walk[0], direct[0]);
    EXPECT_EQ(walk[1], direct[1]);
    EXPECT_EQ(walk[0] * 4 + walk[1], step);  // last axis fastest
    EXPECT_EQ(layout.Offset(sx, walk), step * 5 * 8);
    EXPECT_EQ(layout.Offset(sy, walk), walk[1] * 7 * 4);
    layout.Next(walk);
  }
  EXPECT_EQ(walk[0], 0);  // wrapped around
  EXPECT_EQ(walk[1], 0);

  // Disagreeing sizes (whichever operand comes first), too few axes, an axis nobody carries.
  {
    jaxext::BatchLayout l(1);
    const int64_t a[] = {1, 3}, b[] = {5, 3};
    EXPECT_EQ(l.Add(a, 2, 8, 1, &nb, &sx).empty(), true);
    EXPECT_EQ(l.Add(b, 2, 8, 1, &nb, &sx).empty(), false);
  }
  {
    jaxext::BatchLayout l(2);
    const int64_t a[] = {5};
    EXPECT_EQ(l.Add(a, 1, 8, 0b11, &nb, &sx).empty(), false);
    EXPECT_EQ(l.Add(a, 1, 8, 0b01, &nb, &sx).empty(), true);
    EXPECT_EQ(l.Count(), -1);
  }
  {
    jaxext::BatchLayout l(1);
    const int64_t a[] = {0, 3};
    EXPECT_EQ(l.Add(a, 2, 8, 1, &nb, &sx).empty(), true);
    EXPECT_EQ(l.Count(), 0);
  }

  return jaxext_test::ExpectResult();
}
