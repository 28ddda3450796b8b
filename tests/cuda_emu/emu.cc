// The emulation's scheduler (device.h explains the model) and runtime (cuda_runtime_api.h).
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "tests/cuda_emu/device.h"

// Under AddressSanitizer (--config=asan) every switch between the fibers' stacks is announced
// (sanitizer/common_interface_defs.h), so that a report raised in a kernel's thread knows the
// stack it runs on (without it, ASan found a kernel's out-of-bounds read, then died unprinted).
#if defined(__SANITIZE_ADDRESS__)
#define JAXEXT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JAXEXT_EMU_ASAN 1
#endif
#endif
#ifdef JAXEXT_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
extern "C" void jaxext_emu_switch(void** save_sp, void* load_sp);
extern "C" void jaxext_emu_start();
#endif

namespace jaxext_emu {

thread_local Thread* self = nullptr;

namespace {

constexpr int kWarp = 32;
constexpr unsigned kMaxThreads = 1024;
constexpr size_t kMaxDynamicShared = 48 * 1024;
// Per fiber: kernels keep small arrays in registers (up to 7 x 7 doubles a path); frames of
// unoptimised or sanitised builds are larger.
constexpr size_t kStackBytes = 256 * 1024;

thread_local cudaError_t last_error = cudaSuccess;

void Fail(cudaError_t err, const char* what) {
  last_error = err;
  std::fprintf(stderr, "jaxext CUDA emulation: %s\n", what);
}

enum class State { kReady, kBlockBarrier, kWarpBarrier, kDone };

// Switching between fibers. On x86-64 a few instructions (the callee-saved registers, the SSE and
// x87 control words, the stack pointer); glibc's swapcontext also saves the signal mask, a system
// call per switch, which made the emulated equivariant tests spend half their time in the kernel.
#if defined(__x86_64__)
asm(R"(
  .pushsection .text
  .p2align 4
  .globl jaxext_emu_switch
  .hidden jaxext_emu_switch
  .type jaxext_emu_switch, @function
jaxext_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size jaxext_emu_switch, .-jaxext_emu_switch

  .p2align 4
  .globl jaxext_emu_start
  .hidden jaxext_emu_start
  .type jaxext_emu_start, @function
jaxext_emu_start:
  andq $-16, %rsp
  callq *%r12
  ud2
  .size jaxext_emu_start, .-jaxext_emu_start
  .popsection
)");

struct Context {
  void* sp = nullptr;
  // The stack's extent: a fiber's, or the calling thread's once a fiber has reported it.
  const void* bottom = nullptr;
  size_t size = 0;
};

// A fresh context on [stack, stack + bytes) that calls entry() (which never returns).
void MakeContext(Context* c, void* stack, size_t bytes, void (*entry)()) {
  c->bottom = stack;
  c->size = bytes;
  auto top = reinterpret_cast<uintptr_t>(stack) + bytes;
  top &= ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top) - 9;
  const uint32_t mxcsr = 0x1f80;  // the defaults: every exception masked, round to nearest
  const uint16_t fcw = 0x037f;
  std::memcpy(&frame[0], &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(&frame[0]) + 4, &fcw, 2);
  frame[1] = 0;                                              // r15
  frame[2] = 0;                                              // r14
  frame[3] = 0;                                              // r13
  frame[4] = reinterpret_cast<uint64_t>(entry);              // r12
  frame[5] = 0;                                              // rbx
  frame[6] = 0;                                              // rbp
  frame[7] = reinterpret_cast<uint64_t>(&jaxext_emu_start);  // return address
  frame[8] = 0;
  c->sp = frame;
}

void SwitchStacks(Context* from, Context* to) { jaxext_emu_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
  const void* bottom = nullptr;
  size_t size = 0;
};

void MakeContext(Context* c, void* stack, size_t bytes, void (*entry)()) {
  c->bottom = stack;
  c->size = bytes;
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}

void SwitchStacks(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// From `from` to `to`; returns when something switches back to `from`. *fake keeps `from`'s
// fake stack (ASan's frames for its stack-use-after-return checks) while it is switched out: one
// per fiber stack, reused by every fiber run on it (a fresh one per fiber cost a mapping each,
// doubling the emulated tests' time under ASan).
void Switch(Context* from, void** fake, Context* to) {
#ifdef JAXEXT_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, to->bottom, to->size);
#endif
  SwitchStacks(from, to);
#ifdef JAXEXT_EMU_ASAN
  __sanitizer_finish_switch_fiber(*fake, nullptr, nullptr);
#else
  (void)fake;
#endif
}

// First thing on a fiber's stack: completes the switch from `caller` (the scheduler), learning
// its stack's extent for the switches back, with the stack's fake stack `fake`.
void FiberStarted(Context* caller, void* fake) {
#ifdef JAXEXT_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, &caller->bottom, &caller->size);
#else
  (void)caller;
  (void)fake;
#endif
}

// A fiber's stack about to be reused after its fiber was abandoned (a launch failed with threads
// still waiting at barriers): the frames it left unreturned keep their redzones.
void ClearStack(void* stack, size_t bytes) {
#ifdef JAXEXT_EMU_ASAN
  __asan_unpoison_memory_region(stack, bytes);
#else
  (void)stack;
  (void)bytes;
#endif
}

// A fiber's stack: mapped once per thread slot and reused, a guard page below it.
struct Stack {
  void* base = nullptr;
  size_t bytes = 0;
  bool abandoned = false;  // its last fiber started and did not finish
  void* fake = nullptr;    // ASan's fake stack of the fibers run on it (Switch)
  Stack() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    bytes = kStackBytes + page;
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      std::perror("jaxext CUDA emulation: mmap");
      std::abort();
    }
    mprotect(base, page, PROT_NONE);
  }
  ~Stack() {
    ClearStack(base, bytes);  // (older ASan runtimes keep a region's poison past its munmap)
    munmap(base, bytes);
  }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
};

struct Fiber {
  Context ctx;
  Thread thread;
  State state = State::kReady;
  int warp = 0, lane = 0;
  std::unique_ptr<Stack> stack;
};

// One block being run on this OS thread.
struct Block {
  std::vector<Fiber> fibers;
  Context main{};
  void* main_fake = nullptr;
  int current = -1;
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  std::vector<unsigned char> shared;
  std::vector<uint64_t> exchange;  // kWarp slots per warp
  const char* fault = nullptr;     // a device-side error: the launch fails
};

// Static shared memory (rewrite.py registers each array as its kernel first reaches it): the
// generation of the block that last poisoned it. block_generation: the running block's (counted
// over every launch on this thread).
thread_local std::vector<std::pair<void*, uint64_t>> static_shared;
thread_local uint64_t block_generation = 0;

thread_local Block* running = nullptr;
thread_local std::vector<std::unique_ptr<Stack>> stack_pool;

void FiberMain() {
  Block* b = running;
  FiberStarted(&b->main, b->fibers[b->current].stack->fake);
  b->body(b->arg);
  Fiber& f = b->fibers[b->current];
  f.state = State::kDone;
  f.stack->abandoned = false;
  Switch(&f.ctx, &f.stack->fake, &b->main);  // never resumed
  std::abort();
}

// The running fiber waits in `state` until the scheduler releases it.
void Wait(State state) {
  Block* b = running;
  if (b == nullptr) {
    std::fprintf(stderr, "jaxext CUDA emulation: a barrier outside a kernel\n");
    std::abort();
  }
  Fiber& f = b->fibers[b->current];
  f.state = state;
  Switch(&f.ctx, &f.stack->fake, &b->main);
}

// Runs every thread of the block at `block_idx`; false if its threads deadlocked.
bool RunBlock(Block& b, dim3 grid, dim3 block, dim3 block_idx) {
  const size_t n = b.fibers.size();
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.state = State::kReady;
    f.thread.block_idx = block_idx;
    f.thread.block_dim = block;
    f.thread.grid_dim = grid;
    f.thread.thread_idx = dim3(static_cast<unsigned>(i % block.x),
                               static_cast<unsigned>(i / block.x % block.y),
                               static_cast<unsigned>(i / (block.x * block.y)));
    f.warp = static_cast<int>(i / kWarp);
    f.lane = static_cast<int>(i % kWarp);
    char* stack = static_cast<char*>(f.stack->base) + (f.stack->bytes - kStackBytes);
    if (f.stack->abandoned) ClearStack(stack, kStackBytes);
    f.stack->abandoned = true;
    MakeContext(&f.ctx, stack, kStackBytes, FiberMain);
  }
  // Uninitialised shared memory, as on the device: every byte 0xff (a float or double NaN).
  if (!b.shared.empty()) std::memset(b.shared.data(), 0xff, b.shared.size());
  ++block_generation;
  const size_t warps = (n + kWarp - 1) / kWarp;
  // Between two barriers the threads run in thread order, or in reverse order, alternately (and
  // alternately from block to block): a value read without the barrier that should order it
  // after its write is then read too early in one of the two.
  bool reverse = (block_idx.x + block_idx.y + block_idx.z) % 2 == 1;
  for (;; reverse = !reverse) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = reverse ? n - 1 - k : k;
      if (b.fibers[i].state != State::kReady) continue;
      b.current = static_cast<int>(i);
      self = &b.fibers[i].thread;
      Switch(&b.main, &b.main_fake, &b.fibers[i].ctx);
    }
    self = nullptr;
    b.current = -1;
    // Every thread is done or waiting: release the warps whose live lanes all wait at the warp
    // barrier, else the block if every live thread waits at the block barrier.
    bool released = false, live = false;
    for (size_t w = 0; w < warps; ++w) {
      bool all = true, any = false;
      for (size_t i = w * kWarp; i < n && i < (w + 1) * kWarp; ++i) {
        const State s = b.fibers[i].state;
        if (s == State::kDone) continue;
        any = true;
        all = all && s == State::kWarpBarrier;
      }
      live = live || any;
      if (any && all) {
        for (size_t i = w * kWarp; i < n && i < (w + 1) * kWarp; ++i) {
          if (b.fibers[i].state == State::kWarpBarrier) b.fibers[i].state = State::kReady;
        }
        released = true;
      }
    }
    if (!live) return true;
    if (released) continue;
    bool all = true;
    for (const Fiber& f : b.fibers) {
      all = all && (f.state == State::kDone || f.state == State::kBlockBarrier);
    }
    if (!all) return false;
    for (Fiber& f : b.fibers) {
      if (f.state == State::kBlockBarrier) f.state = State::kReady;
    }
  }
}

}  // namespace

void SyncThreads() { Wait(State::kBlockBarrier); }
void SyncWarp() { Wait(State::kWarpBarrier); }

int Lane() { return running->fibers[running->current].lane; }

unsigned char* ExchangeSlot(int lane) {
  Block* b = running;
  const int warp = b->fibers[b->current].warp;
  const size_t i = static_cast<size_t>(warp) * kWarp + lane;
  if (i >= b->fibers.size() || b->fibers[i].state == State::kDone) {
    // Undefined on a device: a lane that has exited, or past the block's last thread.
    b->fault = "a warp shuffle read a lane that has exited or does not exist";
  }
  return reinterpret_cast<unsigned char*>(&b->exchange[i]);
}

unsigned char* DynamicShared() { return running->shared.data(); }

void StaticShared(void* p, size_t bytes) {
  for (auto& [q, generation] : static_shared) {
    if (q != p) continue;
    if (generation != block_generation) {
      std::memset(p, 0xff, bytes);
      generation = block_generation;
    }
    return;
  }
  std::memset(p, 0xff, bytes);
  static_shared.emplace_back(p, block_generation);
}

void RunGrid(dim3 grid, dim3 block, size_t shared, void (*body)(void*), void* arg) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreads || block.z > 64 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    Fail(cudaErrorInvalidConfiguration, "launch with an invalid configuration");
    return;
  }
  if (shared > kMaxDynamicShared) {
    Fail(cudaErrorInvalidValue, "launch asking for more than 48 KB of dynamic shared memory");
    return;
  }
  if (running != nullptr) {
    Fail(cudaErrorLaunchFailure, "a launch from inside a kernel");
    return;
  }
  Block b;
  b.body = body;
  b.arg = arg;
  b.fibers.resize(threads);
  while (stack_pool.size() < threads) stack_pool.push_back(std::make_unique<Stack>());
  for (size_t i = 0; i < threads; ++i) b.fibers[i].stack = std::move(stack_pool[i]);
  b.shared.resize(shared);
  b.exchange.resize((threads + kWarp - 1) / kWarp * kWarp);
  running = &b;
  bool ok = true;
  for (unsigned z = 0; z < grid.z && ok; ++z) {
    for (unsigned y = 0; y < grid.y && ok; ++y) {
      for (unsigned x = 0; x < grid.x && ok; ++x) ok = RunBlock(b, grid, block, dim3(x, y, z));
    }
  }
  running = nullptr;
  self = nullptr;
  for (size_t i = 0; i < threads; ++i) stack_pool[i] = std::move(b.fibers[i].stack);
  if (!ok) Fail(cudaErrorLaunchFailure, "threads of a block wait at different barriers");
  if (b.fault != nullptr) Fail(cudaErrorLaunchFailure, b.fault);
}

}  // namespace jaxext_emu

// --- The runtime ---------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  const cudaError_t err = jaxext_emu::last_error;
  jaxext_emu::last_error = cudaSuccess;
  return err;
}

cudaError_t cudaPeekAtLastError() { return jaxext_emu::last_error; }

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  // 256-byte aligned, as cudaMalloc's.
  *ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  return *ptr == nullptr ? cudaErrorMemoryAllocation : cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
