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

}  // namespace

void RegisterNativeFunction(int64_t id, uintptr_t address) {
  std::unique_lock<std::shared_mutex> lock(RegistryMutex());
  Registry()[id] = address;
}

uintptr_t LookupNativeFunction(int64_t id) {
  std::shared_lock<std::shared_mutex> lock(RegistryMutex());
  auto it = Registry().find(id);
  return it == Registry().end() ? 0 : it->second;
}

}  // namespace cpu
}  // namespace jaxext
