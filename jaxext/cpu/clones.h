// Per-CPU clones of the CPU handlers' hot loops: a function marked JAXEXT_CPU_CLONES is compiled
// for AVX-512 (x86-64-v4), AVX2+FMA (x86-64-v3) and baseline x86-64, and the dynamic loader picks
// the best clone for the running CPU (GCC's target_clones; other compilers get one version).
// Functions it calls are compiled per clone only if inlined (always_inline helpers, or
// JAXEXT_CPU_FLATTEN on the clone).
#ifndef JAXEXT_CPU_CLONES_H_
#define JAXEXT_CPU_CLONES_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define JAXEXT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define JAXEXT_CPU_FLATTEN __attribute__((flatten))
#else
#define JAXEXT_CPU_CLONES
#define JAXEXT_CPU_FLATTEN
#endif

#endif  // JAXEXT_CPU_CLONES_H_
