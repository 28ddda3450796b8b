#include "jaxext/cpu/numba_cpu.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

std::shared_mutex& RegistryMutex() {
  static auto* mu = new std::shared_mutex;
  return *mu;
}

std::unordered_map<int64_t, NumbaEntry>& Registry() {
  static auto* registry = new std::unordered_map<int64_t, NumbaEntry>;
  return *registry;
}

NumbaEntry Lookup(int64_t id) {
  std::shared_lock<std::shared_mutex> lock(RegistryMutex());
  auto it = Registry().find(id);
  return it == Registry().end() ? nullptr : it->second;
}

constexpr int kMaxBatchAxes = 62;

ffi::Error NumbaCallImpl(ffi::RemainingArgs args, ffi::RemainingRets rets, int64_t kernel_id,
                         std::string_view name, ffi::Span<const double> fparams,
                         ffi::Span<const int64_t> iparams, int64_t nbatch,
                         ffi::Span<const int64_t> bmasks) {
  const NumbaEntry entry = Lookup(kernel_id);
  if (entry == nullptr) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jaxext.numba_kernel '" + std::string(name) +
                          "' is not compiled in this process (an executable from jax's "
                          "compilation cache or a deserialized jax.export?): call the kernel once "
                          "in this process, with the same dtypes and ranks, before running it");
  }
  const size_t n_args = args.size(), n_ops = args.size() + rets.size();
  if (bmasks.size() != n_ops || nbatch < 0 || nbatch > kMaxBatchAxes) {
    return ffi::Error::InvalidArgument("jaxext.numba_kernel '" + std::string(name) +
                                       "': inconsistent batching attributes");
  }
  std::vector<ffi::AnyBuffer> ops;
  ops.reserve(n_ops);
  for (size_t i = 0; i < n_args; ++i) {
    auto b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    ops.push_back(*b);
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto b = rets.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    ops.push_back(**b);
  }

  // Per operand: its batch axes (those set in its mask), then its core dimensions.
  std::vector<int64_t> core_shapes;
  std::vector<int64_t> batch_size(nbatch, 1);
  std::vector<std::vector<int64_t>> batch_stride(n_ops);  // bytes per step of each batch axis
  std::vector<char*> base(n_ops);
  for (size_t i = 0; i < n_ops; ++i) {
    auto dims = ops[i].dimensions();
    const int64_t mask = bmasks[i];
    int64_t nb = 0;
    for (int64_t j = 0; j < nbatch; ++j) nb += (mask >> j) & 1;
    if (nb > static_cast<int64_t>(dims.size())) {
      return ffi::Error::InvalidArgument("jaxext.numba_kernel '" + std::string(name) +
                                         "': an operand has fewer axes than its batch axes");
    }
    int64_t core = 1;
    for (size_t d = nb; d < dims.size(); ++d) {
      core_shapes.push_back(dims[d]);
      core *= dims[d];
    }
    const int64_t width = static_cast<int64_t>(ffi::ByteWidth(ops[i].element_type()));
    // Row-major: the stride of batch axis k (k-th of the operand's own batch axes) is the product
    // of every later dimension.
    std::vector<int64_t> own_strides(nb);
    int64_t stride = core * width;
    for (int64_t k = nb - 1; k >= 0; --k) {
      own_strides[k] = stride;
      stride *= dims[k];
    }
    batch_stride[i].assign(nbatch, 0);
    int64_t k = 0;
    for (int64_t j = 0; j < nbatch; ++j) {
      if ((mask >> j) & 1) {
        batch_stride[i][j] = own_strides[k];
        if (batch_size[j] != 1 && batch_size[j] != dims[k]) {
          return ffi::Error::InvalidArgument("jaxext.numba_kernel '" + std::string(name) +
                                             "': operands disagree on a batch axis");
        }
        batch_size[j] = dims[k];
        ++k;
      }
    }
    base[i] = static_cast<char*>(ops[i].untyped_data());
  }
  int64_t total = 1;
  for (int64_t s : batch_size) total *= s;
  if (total == 0) return ffi::Error::Success();

  // fparams/iparams are never empty: the Python side pads each with one placeholder.
  std::vector<void*> data(n_ops);
  std::vector<int64_t> index(nbatch, 0);
  int32_t status = 0;
  for (int64_t step = 0; step < total; ++step) {
    for (size_t i = 0; i < n_ops; ++i) {
      int64_t offset = 0;
      for (int64_t j = 0; j < nbatch; ++j) offset += index[j] * batch_stride[i][j];
      data[i] = base[i] + offset;
    }
    status = 0;
    entry(data.data(), core_shapes.data(), fparams.begin(), iparams.begin(), &status);
    if (status != 0) {
      return ffi::Error(ffi::ErrorCode::kInternal,
                        "jaxext.numba_kernel '" + std::string(name) +
                            "' raised an exception (Numba's nopython mode does not say which; "
                            "run the kernel's Python function on NumPy arrays to see it)");
    }
    for (int64_t j = nbatch - 1; j >= 0; --j) {  // odometer over the batch axes, last fastest
      if (++index[j] < batch_size[j]) break;
      index[j] = 0;
    }
  }
  return ffi::Error::Success();
}

}  // namespace

void RegisterNumbaKernel(int64_t id, NumbaEntry entry) {
  std::unique_lock<std::shared_mutex> lock(RegistryMutex());
  Registry()[id] = entry;
}

bool IsNumbaKernelRegistered(int64_t id) { return Lookup(id) != nullptr; }

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextNumbaCallCpu, NumbaCallImpl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("kernel_id")
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const double>>("fparams")
                                  .Attr<ffi::Span<const int64_t>>("iparams")
                                  .Attr<int64_t>("nbatch")
                                  .Attr<ffi::Span<const int64_t>>("bmasks"));

}  // namespace cpu
}  // namespace jaxext
