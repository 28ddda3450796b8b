// Kernels that exercise the emulation itself (emu_test.cc), written as CUDA.
#include <cstdint>

#include <cuda_runtime_api.h>

namespace jaxext_emu_test {

// Each warp sums its lanes' values by xor shuffles; lane 0 writes the warp's sum.
__global__ void WarpSumKernel(const double* in, double* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  double v = in[i];
  for (int s = 16; s > 0; s /= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
  if (threadIdx.x % 32 == 0) out[i / 32] = v;
}

// Thread t writes shared[t], then (after the barrier) reads its neighbour's, in dynamic shared
// memory: right only if the barrier holds every thread until all have written.
__global__ void RotateKernel(const int32_t* in, int32_t* out) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  int32_t* shared = reinterpret_cast<int32_t*>(shared_bytes);
  const int t = threadIdx.x;
  shared[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = shared[(t + 1) % blockDim.x];
}

// RotateKernel without its barrier: some thread reads its neighbour's slot before the neighbour
// wrote it (threads run in thread order between barriers in one block, in reverse in the next).
__global__ void RotateRaceKernel(const int32_t* in, int32_t* out) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  int32_t* shared = reinterpret_cast<int32_t*>(shared_bytes);
  const int t = threadIdx.x;
  shared[t] = in[blockIdx.x * blockDim.x + t];
  out[blockIdx.x * blockDim.x + t] = shared[(t + 1) % blockDim.x];
}

// Static shared memory and every index of a 3-d block and grid.
__global__ void IndexKernel(int32_t* out) {
  __shared__ int32_t count[1];
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) count[0] = 0;
  __syncthreads();
  const int64_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int64_t thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int64_t threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = static_cast<int32_t>(block * 1000 + thread);
  count[0] += 1;  // a race on a device; here threads run one at a time between barriers
  __syncthreads();
  if (thread == 0) out[block * threads + threads - 1] += 100000 * count[0];
}

// A barrier under divergent control flow: half the warp waits at __syncthreads, half at
// __syncwarp; no barrier can release.
__global__ void DivergentKernel(int32_t* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncwarp();
  }
  out[threadIdx.x] = 1;
}

// A kernel whose template argument the launch deduces from its arguments.
template <typename T>
__global__ void ScaleKernel(const T* in, T* out, T factor, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    out[i] = in[i] * factor;
  }
}

cudaError_t LaunchWarpSum(const double* in, double* out, int blocks, int threads) {
  WarpSumKernel<<<blocks, threads>>>(in, out);
  return cudaGetLastError();
}

cudaError_t LaunchRotate(const int32_t* in, int32_t* out, int blocks, int threads,
                         size_t shared) {
  RotateKernel<<<blocks, threads, shared>>>(in, out);
  return cudaGetLastError();
}

cudaError_t LaunchRotateRace(const int32_t* in, int32_t* out, int blocks, int threads) {
  RotateRaceKernel<<<blocks, threads, threads * sizeof(int32_t)>>>(in, out);
  return cudaGetLastError();
}

// Reads static shared memory before writing it: 0xff bytes in every block.
__global__ void StaticPoisonKernel(int32_t* out) {
  __shared__ int32_t slot[2];
  out[blockIdx.x * 2 + threadIdx.x] = slot[threadIdx.x];
  __syncthreads();
  slot[threadIdx.x] = 7;
}

cudaError_t LaunchStaticPoison(int32_t* out, int blocks) {
  StaticPoisonKernel<<<blocks, 2>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchIndex(int32_t* out, dim3 grid, dim3 block) {
  IndexKernel<<<grid, block>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchDivergent(int32_t* out) {
  DivergentKernel<<<1, 32, 0, nullptr>>>(out);
  return cudaGetLastError();
}

cudaError_t LaunchScale(const float* in, float* out, float factor, int64_t n) {
  ScaleKernel<<<3, 64>>>(in, out, factor, n);
  return cudaGetLastError();
}

}  // namespace jaxext_emu_test
