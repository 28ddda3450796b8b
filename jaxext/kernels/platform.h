// Macros shared by the math headers, which are compiled both by the host C++ compiler (CPU
// handlers) and by nvcc (CUDA kernels).
#ifndef JAXEXT_KERNELS_PLATFORM_H_
#define JAXEXT_KERNELS_PLATFORM_H_

#if defined(__CUDACC__)
#define JAXEXT_HD __host__ __device__ __forceinline__
#define JAXEXT_UNROLL _Pragma("unroll")
#else
#define JAXEXT_HD inline __attribute__((always_inline))
#define JAXEXT_UNROLL _Pragma("GCC unroll 4")
#endif

#endif  // JAXEXT_KERNELS_PLATFORM_H_
