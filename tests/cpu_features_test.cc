// jaxext/cpu/cpu_features: the x86-64 level read with CPUID agrees with the compiler's own
// __builtin_cpu_supports, which reads the CPU model of the compiler's runtime (libgcc under GCC)
// or, under a toolchain without one (zig's clang), the model cpu_features.cc fills in. The ifunc
// resolvers of clones.h read the same bits, so this is the check that each machine gets the
// clone it can run (and a wrong bit layout fails here, not as SIGILL in a user's process).
#include <cstdio>

#include "jaxext/cpu/cpu_features.h"
#include "tests/expect.h"

int main() {
  const int level = jaxext::cpu::X86Level();
#if defined(__x86_64__)
  __builtin_cpu_init();
  std::printf("X86Level() = %d; __builtin_cpu_supports: v2 %d, v3 %d, v4 %d\n", level,
              !!__builtin_cpu_supports("x86-64-v2"), !!__builtin_cpu_supports("x86-64-v3"),
              !!__builtin_cpu_supports("x86-64-v4"));
  EXPECT_EQ(level >= 1 && level <= 4, 1);
  EXPECT_EQ(!!__builtin_cpu_supports("x86-64-v2"), level >= 2);
  EXPECT_EQ(!!__builtin_cpu_supports("x86-64-v3"), level >= 3);
  EXPECT_EQ(!!__builtin_cpu_supports("x86-64-v4"), level >= 4);
#else
  EXPECT_EQ(level, 0);
#endif
  return jaxext_test::ExpectResult();
}
