#include "jaxext/cpu/native_registry.h"

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace jaxext {
namespace cpu {
namespace {

std::shared_mutex& RegistryMutex() {
  static auto* mu = new std::shared_mutex;
  return *mu;
}

std::unordered_map<int64_t, uintptr_t>& Registry() {
  static auto* registry = new std::unordered_map<int64_t, uintptr_t>;
  return *registry;
}

std::unordered_map<int64_t, uintptr_t>& LanesRegistry() {
  static auto* registry = new std::unordered_map<int64_t, uintptr_t>;
  return *registry;
}

void Register(std::unordered_map<int64_t, uintptr_t>& registry, int64_t id, uintptr_t address) {
  std::unique_lock<std::shared_mutex> lock(RegistryMutex());
  registry[id] = address;
}

uintptr_t Lookup(const std::unordered_map<int64_t, uintptr_t>& registry, int64_t id) {
  std::shared_lock<std::shared_mutex> lock(RegistryMutex());
  auto it = registry.find(id);
  return it == registry.end() ? 0 : it->second;
}

}  // namespace

void RegisterNativeFunction(int64_t id, uintptr_t address) { Register(Registry(), id, address); }
uintptr_t LookupNativeFunction(int64_t id) { return Lookup(Registry(), id); }
void RegisterNativeLanes(int64_t id, uintptr_t address) { Register(LanesRegistry(), id, address); }
uintptr_t LookupNativeLanes(int64_t id) { return Lookup(LanesRegistry(), id); }

}  // namespace cpu
}  // namespace jaxext

// The registry's C entry point, exported by the handler library (ffi_handler_library), which has
// no Python module: jaxext._ffi calls it through ctypes. 0 on success, -1 for a null address.
extern "C" __attribute__((visibility("default"))) int JaxextRegisterNativeFunction(
    int64_t id, uintptr_t address) {
  if (address == 0) return -1;
  jaxext::cpu::RegisterNativeFunction(id, address);
  return 0;
}

// The same for a function's lanes form (RegisterNativeLanes).
extern "C" __attribute__((visibility("default"))) int JaxextRegisterNativeLanes(int64_t id,
                                                                               uintptr_t address) {
  if (address == 0) return -1;
  jaxext::cpu::RegisterNativeLanes(id, address);
  return 0;
}
