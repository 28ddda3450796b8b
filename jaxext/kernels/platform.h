// Macros shared by the math headers, which are compiled both by the host C++ compiler (CPU
// handlers) and by nvcc (CUDA kernels).
#ifndef JAXEXT_KERNELS_PLATFORM_H_
#define JAXEXT_KERNELS_PLATFORM_H_

#if defined(__CUDACC__)
#define JAXEXT_HD __host__ __device__ __forceinline__
#define JAXEXT_HD_FUNC __host__ __device__ inline
#define JAXEXT_HD_CLONED __host__ __device__ inline
#define JAXEXT_UNROLL _Pragma("unroll")
#define JAXEXT_UNROLL_ALL _Pragma("unroll")
#else
#define JAXEXT_HD inline __attribute__((always_inline))
#define JAXEXT_HD_FUNC inline  // larger functions: the compiler decides
// Larger functions that the CPU's per-CPU clones (jaxext/cpu/clones.h) call: inlined into each
// clone, so that each gets its own vector code. GCC's flatten on a clone inlines every call
// beneath it; clang's inlines only the clone's own calls, and a function left out of line is
// compiled once, for baseline x86-64 (measured: the equivariant kernels 1.3-1.9x slower).
#define JAXEXT_HD_CLONED inline __attribute__((always_inline))
#define JAXEXT_UNROLL _Pragma("GCC unroll 4")
#define JAXEXT_UNROLL_ALL _Pragma("GCC unroll 16")
#endif

namespace jaxext {

// How many independent values a scalar type S carries side by side: 1 for float, double and
// dual numbers of them; L for jaxext/kernels/lanes.h's SIMD Lanes<T, L>, which specialises it
// (and dual.h for dual numbers of lanes). Math
// headers use it for what cannot be one vector operation (a table lookup per value).
template <typename S>
struct LaneCount {
  static constexpr int value = 1;
};

}  // namespace jaxext

#endif  // JAXEXT_KERNELS_PLATFORM_H_
