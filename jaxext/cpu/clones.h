// Per-CPU clones of the CPU handlers' hot loops: a function marked JAXEXT_CPU_CLONES is compiled
// for AVX-512 (x86-64-v4), AVX2+FMA (x86-64-v3) and baseline x86-64, and the dynamic loader picks
// the best clone for the running CPU (target_clones, GCC and clang; other architectures get one
// version). Functions it calls are compiled per clone only if inlined (always_inline helpers, or
// JAXEXT_CPU_FLATTEN on the clone). The loader's choice reads the CPU model of the compiler's
// runtime, which cpu_features.cc provides where the runtime lacks it (zig's). Built with
// --//jaxext/cpu:cpu_clones=false (JAXEXT_NO_CPU_CLONES, as .bazelrc's test builds), each
// function is compiled once, for the baseline, and nothing is flattened. (With GCC, the ODE
// models' lanes take about six minutes per dtype with the clones, flattened: RunLanes' stages
// inline the model twelve times per clone. The wheels' zig clang is quicker.)
//
// clang (20-22) emits calls from a clone to a function of internal linkage (anonymous namespace,
// local class) that it did not inline as references to an undefined external symbol: keep what
// clones call out of anonymous namespaces and local classes (the shared object then fails to
// load, "undefined symbol", which every test sees).
#ifndef JAXEXT_CPU_CLONES_H_
#define JAXEXT_CPU_CLONES_H_

#if defined(__x86_64__) && defined(__GNUC__) && !defined(JAXEXT_NO_CPU_CLONES)
#define JAXEXT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define JAXEXT_CPU_FLATTEN __attribute__((flatten))
#else
#define JAXEXT_CPU_CLONES
#define JAXEXT_CPU_FLATTEN
#endif

#endif  // JAXEXT_CPU_CLONES_H_
