// CUDA device code run on the CPU (tests/cuda_emu/README.md): force-included (-include) into the
// emulated build's copies of jaxext's .cu files (rewritten by rewrite.py: launches and dynamic
// shared memory) and into its CUDA handlers.
//
// Every CUDA thread is a fiber with its own stack; a block's fibers run on the calling thread one
// at a time, each until its next barrier (__syncthreads, __syncwarp, or the two inside a warp
// shuffle), in thread order, and a barrier releases once every thread it waits for has reached it
// (emu.cc). Blocks run one after another. So a kernel's arithmetic, indexing, shared memory and
// barriers run as written; what cannot show here is timing and memory ordering on the device.
// A launch the device would refuse (more than 1024 threads, more than 48 KB of dynamic shared
// memory, an empty grid) fails the same way, and threads that wait at different barriers forever
// (a barrier under divergent control flow) fail the launch instead of hanging.
#ifndef JAXEXT_TESTS_CUDA_EMU_DEVICE_H_
#define JAXEXT_TESTS_CUDA_EMU_DEVICE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) alignas(n)
// A block's static shared memory: blocks run one at a time on one thread. rewrite.py turns each
// `__shared__` array into such a variable poisoned at each block's first use (StaticShared), and
// `extern __shared__` arrays (the dynamic shared memory) into the block's buffer.

namespace jaxext_emu {

struct Thread {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};

// The running CUDA thread (set by the scheduler before each switch to a fiber).
extern thread_local Thread* self;

void SyncThreads();
void SyncWarp();
// The running thread's 8-byte slot in its warp's exchange area, and lane `lane`'s.
unsigned char* ExchangeSlot(int lane);
int Lane();
unsigned char* DynamicShared();
// A static __shared__ array of `bytes` at p, reached by a thread: poisoned (0xff) once per block.
void StaticShared(void* p, size_t bytes);

// Runs body() as every thread of every block of the launch; cudaGetLastError reports failures.
// body: a callable as void(void*), called with `arg`.
void RunGrid(dim3 grid, dim3 block, size_t shared, void (*body)(void*), void* arg);

template <typename T>
T ShuffleXor(T v, int lane_mask, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  const int lane = Lane();
  std::memcpy(ExchangeSlot(lane), &v, sizeof(T));
  SyncWarp();
  int src = lane ^ lane_mask;
  // In a later group of `width` lanes than the caller's: its own value, as CUDA's.
  if (src / width > lane / width) src = lane;
  T out;
  std::memcpy(&out, ExchangeSlot(src), sizeof(T));
  SyncWarp();  // before any lane's next shuffle overwrites its slot
  return out;
}

// A launch's arguments, copied once as a launch copies them; every thread then calls the kernel
// (through `kernel`, a generic lambda, so that its template arguments are deduced as in the
// original launch) with them, and the kernel's by-value parameters are that thread's own.
template <typename F>
struct Launcher {
  dim3 grid, block;
  size_t shared;
  F kernel;

  template <typename... A>
  void operator()(A&&... args) const {
    struct Call {
      F kernel;
      std::tuple<std::decay_t<A>...> params;
    } call{kernel, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    RunGrid(grid, block, shared,
            [](void* p) {
              auto* c = static_cast<Call*>(p);
              std::apply(c->kernel, c->params);
            },
            &call);
  }
};

// `kernel<<<grid, block, shared, stream>>>(args)`, rewritten by rewrite.py as
// `::jaxext_emu::Launch(grid, block, shared, stream, [=](auto&... a) { kernel(a...); })(args)`.
template <typename F>
Launcher<F> Launch(dim3 grid, dim3 block, size_t shared, cudaStream_t, F kernel) {
  return Launcher<F>{grid, block, shared, kernel};
}
template <typename F>
Launcher<F> Launch(dim3 grid, dim3 block, size_t shared, F kernel) {
  return Launcher<F>{grid, block, shared, kernel};
}
template <typename F>
Launcher<F> Launch(dim3 grid, dim3 block, F kernel) {
  return Launcher<F>{grid, block, 0, kernel};
}

}  // namespace jaxext_emu

#define threadIdx (::jaxext_emu::self->thread_idx)
#define blockIdx (::jaxext_emu::self->block_idx)
#define blockDim (::jaxext_emu::self->block_dim)
#define gridDim (::jaxext_emu::self->grid_dim)
#define warpSize 32

inline void __syncthreads() { ::jaxext_emu::SyncThreads(); }
// Only full-warp masks occur in jaxext's kernels; the emulation waits for every lane.
inline void __syncwarp(unsigned = 0xffffffffu) { ::jaxext_emu::SyncWarp(); }
template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  return ::jaxext_emu::ShuffleXor(v, lane_mask, width);
}
inline float __fdividef(float a, float b) { return a / b; }
// CUDA's global min and max (device functions for every arithmetic type).
template <typename A, typename B>
std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B>
std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}

#endif  // JAXEXT_TESTS_CUDA_EMU_DEVICE_H_
