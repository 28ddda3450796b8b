// jaxext/cuda/warp_sums.h under the emulation: WarpSums writes each of its K sums once, and each
// is WarpSum's of that value bit for bit (the product kernels' y cotangents depend on it: the
// same sums as before WarpSums replaced one WarpSum per value). The values span magnitudes from
// 1e-8 to 1e8 with both signs, so that another order of the same additions rounds differently
// (checked: the sequential sum differs in some of them).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "tests/expect.h"

namespace jaxext_warp_sums_test {
template <typename T, int K>
cudaError_t Launch(const T* in, T* sums, int32_t* writes, T* reference);
}  // namespace jaxext_warp_sums_test

namespace {

template <typename T>
bool SameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

int sequential_differs = 0;  // values whose lane-order sum differs from WarpSum's

template <typename T, int K>
void Check(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> exponent(-8, 8), sign(-1, 1);
  std::vector<T> in(32 * K), sums(K, T(-1)), reference(K, T(-2));
  std::vector<int32_t> writes(K, 0);
  for (T& v : in) v = static_cast<T>((sign(rng) < 0 ? -1 : 1) * std::pow(10.0, exponent(rng)));
  EXPECT_EQ((jaxext_warp_sums_test::Launch<T, K>(in.data(), sums.data(), writes.data(),
                                                  reference.data())),
            cudaSuccess);
  int wrong = 0, unwritten = 0;
  for (int t = 0; t < K; ++t) {
    wrong += !SameBits(sums[t], reference[t]);
    unwritten += writes[t] != 1;
    T sequential = T(0);
    for (int lane = 0; lane < 32; ++lane) sequential += in[lane * K + t];
    sequential_differs += !SameBits(sequential, reference[t]);
  }
  if (wrong || unwritten) {
    std::printf("K = %d, %zu-byte values: %d sums differ from WarpSum's, %d not written once\n",
                K, sizeof(T), wrong, unwritten);
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(unwritten, 0);
}

template <int K>
void CheckBoth(std::mt19937_64& rng) {
  for (int round = 0; round < 4; ++round) {
    Check<float, K>(rng);
    Check<double, K>(rng);
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261129);
  CheckBoth<1>(rng);
  CheckBoth<2>(rng);
  CheckBoth<3>(rng);
  CheckBoth<5>(rng);
  CheckBoth<7>(rng);
  CheckBoth<9>(rng);
  CheckBoth<15>(rng);
  CheckBoth<21>(rng);
  CheckBoth<25>(rng);
  CheckBoth<31>(rng);
  CheckBoth<32>(rng);
  CheckBoth<33>(rng);
  CheckBoth<35>(rng);
  CheckBoth<49>(rng);
  CheckBoth<64>(rng);
  CheckBoth<70>(rng);
  // The check can fail: the additions' order matters for these values.
  EXPECT_EQ(sequential_differs > 100, 1);
  return jaxext_test::ExpectResult();
}
