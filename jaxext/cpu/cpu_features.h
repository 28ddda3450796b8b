// x86-64 microarchitecture levels of the running CPU, read with CPUID/XGETBV (0 elsewhere).
//
// The per-CPU clones of clones.h are picked at load time by an ifunc resolver the compiler emits;
// it reads the levels from the CPU model variables of the compiler's runtime (libgcc, compiler-rt).
// zig's runtime has none, so under clang cpu_features.cc defines them (or under GCC with
// JAXEXT_PROVIDE_CPU_MODEL), filled from the same CPUID reading, inside each shared object
// (hidden). tests/cpu_features_test.cc checks that the compiler's own
// __builtin_cpu_supports agrees with X86Level() on the machine it runs on.
#ifndef JAXEXT_CPU_CPU_FEATURES_H_
#define JAXEXT_CPU_CPU_FEATURES_H_

namespace jaxext::cpu {

// 1 (baseline x86-64), 2, 3 (AVX2 + FMA...) or 4 (AVX-512 F/BW/CD/DQ/VL), with the operating
// system's support for the vector registers checked; 0 on other architectures.
int X86Level();

}  // namespace jaxext::cpu

#endif  // JAXEXT_CPU_CPU_FEATURES_H_
