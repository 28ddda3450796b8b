// The emulation itself (device.h): shuffles, barriers, shared memory, indices, deduced kernel
// templates, and the launches a device refuses or that would hang on one.
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cuda_runtime_api.h>

#include "tests/expect.h"

namespace jaxext_emu_test {
cudaError_t LaunchWarpSum(const double* in, double* out, int blocks, int threads);
cudaError_t LaunchRotate(const int32_t* in, int32_t* out, int blocks, int threads, size_t shared);
cudaError_t LaunchIndex(int32_t* out, dim3 grid, dim3 block);
cudaError_t LaunchRotateRace(const int32_t* in, int32_t* out, int blocks, int threads);
cudaError_t LaunchStaticPoison(int32_t* out, int blocks);
cudaError_t LaunchDivergent(int32_t* out);
cudaError_t LaunchScale(const float* in, float* out, float factor, int64_t n);
}  // namespace jaxext_emu_test

namespace t = jaxext_emu_test;

int main() {
  // Warp sums: 4 blocks of 64 threads, values i (a sum per warp of 32 consecutive integers).
  {
    std::vector<double> in(256), out(8, -1);
    for (int i = 0; i < 256; ++i) in[i] = i;
    EXPECT_EQ(t::LaunchWarpSum(in.data(), out.data(), 4, 64), cudaSuccess);
    for (int w = 0; w < 8; ++w) EXPECT_EQ(out[w], 32.0 * 32 * w + 496);
  }
  // Barrier and dynamic shared memory: each thread reads its neighbour's value.
  {
    std::vector<int32_t> in(3 * 96), out(3 * 96, -1);
    for (int i = 0; i < 3 * 96; ++i) in[i] = 7 * i + 1;
    EXPECT_EQ(t::LaunchRotate(in.data(), out.data(), 3, 96, 96 * sizeof(int32_t)), cudaSuccess);
    for (int b = 0; b < 3; ++b) {
      for (int i = 0; i < 96; ++i) EXPECT_EQ(out[b * 96 + i], in[b * 96 + (i + 1) % 96]);
    }
  }
  // Without the barrier, both blocks (one run in thread order, one in reverse) read a slot not
  // yet written: 0xff bytes (-1).
  {
    std::vector<int32_t> in(2 * 64), out(2 * 64, 0);
    for (int i = 0; i < 2 * 64; ++i) in[i] = i;
    EXPECT_EQ(t::LaunchRotateRace(in.data(), out.data(), 2, 64), cudaSuccess);
    int wrong[2] = {0, 0};
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < 64; ++i) wrong[b] += out[b * 64 + i] != in[b * 64 + (i + 1) % 64];
    }
    EXPECT_EQ(wrong[0] > 0, 1);
    EXPECT_EQ(wrong[1] > 0, 1);
  }
  // Static shared memory read before it is written: poisoned in every block, not left over from
  // the block before.
  {
    std::vector<int32_t> out(6, 0);
    EXPECT_EQ(t::LaunchStaticPoison(out.data(), 3), cudaSuccess);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], -1);
  }
  // 3-d grids and blocks; static shared memory reset per block by the kernel itself.
  {
    const dim3 grid(2, 3, 2), block(4, 2, 3);
    std::vector<int32_t> out(12 * 24, -1);
    EXPECT_EQ(t::LaunchIndex(out.data(), grid, block), cudaSuccess);
    for (int b = 0; b < 12; ++b) {
      for (int i = 0; i < 24; ++i) {
        EXPECT_EQ(out[b * 24 + i], b * 1000 + i + (i == 23 ? 100000 * 24 : 0));
      }
    }
  }
  // A kernel template deduced from the launch's arguments, a grid-stride loop.
  {
    std::vector<float> in(1000), out(1000);
    for (int i = 0; i < 1000; ++i) in[i] = static_cast<float>(i);
    EXPECT_EQ(t::LaunchScale(in.data(), out.data(), 2.0f, 1000), cudaSuccess);
    for (int i = 0; i < 1000; ++i) EXPECT_EQ(out[i], 2 * i);
  }
  // What a device refuses: too many threads, too much dynamic shared memory, an empty grid; the
  // error is reported once (cudaGetLastError clears it) and the kernel never runs.
  {
    std::vector<double> in(2048, 1), out(64, -1);
    EXPECT_EQ(t::LaunchWarpSum(in.data(), out.data(), 1, 2048), cudaErrorInvalidConfiguration);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(out[0], -1);
    EXPECT_EQ(t::LaunchWarpSum(in.data(), out.data(), 0, 32), cudaErrorInvalidConfiguration);
    std::vector<int32_t> a(64), b(64);
    EXPECT_EQ(t::LaunchRotate(a.data(), b.data(), 1, 64, 49 * 1024), cudaErrorInvalidValue);
    EXPECT_EQ(t::LaunchRotate(a.data(), b.data(), 1, 64, 48 * 1024), cudaSuccess);
  }
  // A shuffle reading lanes past the block's last thread (48 threads: the second warp has 16).
  {
    std::vector<double> in(48, 1), out(2, 0);
    EXPECT_EQ(t::LaunchWarpSum(in.data(), out.data(), 1, 48), cudaErrorLaunchFailure);
  }
  // Threads at different barriers: a failed launch, not a hang.
  {
    std::vector<int32_t> out(32, 0);
    EXPECT_EQ(t::LaunchDivergent(out.data()), cudaErrorLaunchFailure);
    // and the next launch runs normally
    std::vector<double> in(32, 1), sum(1, 0);
    EXPECT_EQ(t::LaunchWarpSum(in.data(), sum.data(), 1, 32), cudaSuccess);
    EXPECT_EQ(sum[0], 32);
  }
  return jaxext_test::ExpectResult();
}
