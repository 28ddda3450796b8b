#include "jaxext/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>

#include <cstdint>
#include <initializer_list>
#endif

namespace jaxext::cpu {

#if defined(__x86_64__)
namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs Leaf(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs();
  return r;
}

bool All(unsigned word, std::initializer_list<int> bits) {
  for (int b : bits) {
    if (!((word >> b) & 1u)) return false;
  }
  return true;
}

uint64_t Xcr0() {  // the register state the operating system saves (XGETBV, ecx = 0)
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

int ComputeLevel() {
  const Regs l1 = Leaf(1), l7 = Leaf(7, 0), ext = Leaf(0x80000001u);
  // x86-64-v2: SSE3, SSSE3, CX16, SSE4.1, SSE4.2, POPCNT; LAHF/SAHF.
  if (!All(l1.c, {0, 9, 13, 19, 20, 23}) || !All(ext.c, {0})) return 1;
  // x86-64-v3: FMA, MOVBE, OSXSAVE, AVX, F16C; BMI1, AVX2, BMI2; LZCNT; XMM and YMM state saved.
  if (!All(l1.c, {12, 22, 27, 28, 29}) || !All(l7.b, {3, 5, 8}) || !All(ext.c, {5})) return 2;
  const uint64_t xcr0 = Xcr0();
  if ((xcr0 & 0x6) != 0x6) return 2;
  // x86-64-v4: AVX512F, DQ, CD, BW, VL; opmask, ZMM_Hi256 and Hi16_ZMM state saved.
  if (!All(l7.b, {16, 17, 28, 30, 31}) || (xcr0 & 0xE0) != 0xE0) return 3;
  return 4;
}

}  // namespace

// No static cache (no guard variable, no call out of this file): ifunc resolvers call this while
// the shared object's relocations are being applied. CPUID costs well under a microsecond.
int X86Level() { return ComputeLevel(); }
#else
int X86Level() { return 0; }
#endif

}  // namespace jaxext::cpu

#if defined(__x86_64__) && (defined(__clang__) || defined(JAXEXT_PROVIDE_CPU_MODEL))
// The CPU model of libgcc and compiler-rt, whose layout GCC and clang share. Defined for every
// clang build (zig's runtime has none; where compiler-rt or libgcc has one, this hidden copy is
// the one this shared object's resolvers bind to, with the same layout), and on request
// (JAXEXT_PROVIDE_CPU_MODEL) for GCC builds whose runtime lacks it. The resolvers of
// target_clones("arch=x86-64-vN") test bit N - 2 of __cpu_features2[2] (seen in the code both
// compilers emit); the clones use nothing else, so every other field stays 0 ("not supported":
// a resolver asking for anything else picks the baseline code). Hidden: each shared object has
// its own, bound locally, so the resolvers can call it while relocations are still being applied.
extern "C" {
__attribute__((visibility("hidden"))) struct {
  unsigned int vendor, type, subtype, features[1];
} __cpu_model;
__attribute__((visibility("hidden"))) unsigned int __cpu_features2[3];

__attribute__((visibility("hidden"))) int __cpu_indicator_init(void) {
  // ComputeLevel (internal linkage) directly: a call through the PLT could jump through a GOT slot
  // not yet relocated, since resolvers run while relocations are being applied.
  const int level = jaxext::cpu::ComputeLevel();
  unsigned int bits = 0;
  for (int v = 2; v <= level; ++v) bits |= 1u << (v - 2);
  __cpu_features2[2] = bits;
  return 0;
}
}
#endif
