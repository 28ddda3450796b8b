// Native functions compiled in this process (by Numba: jaxext.numba_kernel's entry points,
// jaxext.ode's right-hand sides, events and Jacobians), known to the handlers by a 63-bit content
// id (a hash of the function's code and compiled signature, computed in Python), never by
// address: an executable restored from jax's compilation cache, or a jax.export'ed function,
// either finds the function compiled in this process or fails with an error naming it.
#ifndef JAXEXT_CPU_NATIVE_REGISTRY_H_
#define JAXEXT_CPU_NATIVE_REGISTRY_H_

#include <cstdint>

namespace jaxext {
namespace cpu {

void RegisterNativeFunction(int64_t id, uintptr_t address);

// The address registered for `id`, or 0.
uintptr_t LookupNativeFunction(int64_t id);

// The same as a function pointer of type F (nullptr when absent).
template <typename F>
F LookupNativeFunctionAs(int64_t id) {
  return reinterpret_cast<F>(LookupNativeFunction(id));
}

// A second form of the function registered under `id`: its lanes form (jaxext.ode's right-hand
// sides, ode_cpu_internal.h's NativeRhsLanes), which a handler may use instead when present.
void RegisterNativeLanes(int64_t id, uintptr_t address);
uintptr_t LookupNativeLanes(int64_t id);
template <typename F>
F LookupNativeLanesAs(int64_t id) {
  return reinterpret_cast<F>(LookupNativeLanes(id));
}

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_NATIVE_REGISTRY_H_
