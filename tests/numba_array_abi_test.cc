// Tests of jaxext/common/numba_array_abi.h: the kernel parameters jaxext's CUDA handler passes for
// a Numba array, against the values Numba itself gives such an array (NumPy's C-order strides,
// worked out by hand below), for ranks 0 to 3 and several item sizes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "jaxext/common/numba_array_abi.h"
#include "tests/expect.h"

namespace {

void Check(std::vector<int64_t> dims, int64_t itemsize, int64_t nitems,
           std::vector<int64_t> strides) {
  const size_t rank = dims.size();
  std::vector<int64_t> slots(jaxext::NumbaArraySlots(rank) + 1, -7);  // one guard slot
  alignas(8) static char buffer[8];
  jaxext::WriteNumbaArray(slots.data(), buffer, dims.data(), rank, itemsize);
  EXPECT_EQ(slots.size() - 1, 5 + 2 * rank);
  EXPECT_EQ(slots[0], 0);  // meminfo
  EXPECT_EQ(slots[1], 0);  // parent
  EXPECT_EQ(slots[2], nitems);
  EXPECT_EQ(slots[3], itemsize);
  EXPECT_EQ(slots[4], reinterpret_cast<intptr_t>(buffer));
  for (size_t d = 0; d < rank; ++d) {
    EXPECT_EQ(slots[5 + d], dims[d]);
    EXPECT_EQ(slots[5 + rank + d], strides[d]);
  }
  EXPECT_EQ(slots.back(), -7);  // nothing written past the array's parameters
  alignas(8) static char other[8];
  jaxext::SetNumbaArrayData(slots.data(), other);
  EXPECT_EQ(slots[jaxext::kNumbaArrayDataSlot], reinterpret_cast<intptr_t>(other));
  EXPECT_EQ(slots[2], nitems);
}

}  // namespace

int main() {
  // np.empty(shape, dtype).strides, and .size
  Check({}, 8, 1, {});                              // 0-d float64
  Check({5}, 4, 5, {4});                            // float32[5]
  Check({0}, 8, 0, {8});                            // empty
  Check({3, 7}, 8, 21, {56, 8});                    // float64[3, 7]
  Check({2, 3, 4}, 1, 24, {12, 4, 1});              // bool[2, 3, 4]
  Check({4, 0, 3}, 4, 0, {0, 12, 4});               // int32[4, 0, 3]
  Check({1 << 20, 1 << 12}, 8, int64_t{1} << 32, {int64_t{8} << 12, 8});  // more than 2^31 items

  const double x = -1.5e-300;
  const int64_t bits = jaxext::NumbaFloatSlot(x);
  double back;
  std::memcpy(&back, &bits, sizeof back);
  if (back != x) {
    ++jaxext_test::Failures();
    std::printf("FAILED: float slot does not round-trip\n");
  }
  EXPECT_EQ(jaxext::NumbaFloatSlot(1.0), 0x3ff0000000000000LL);

  return jaxext_test::ExpectResult();
}
