#include "jaxext/cuda/numba_cuda.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cuda.h"
#include "jaxext/common/batch_layout.h"
#include "jaxext/common/numba_array_abi.h"
#include "jaxext/cuda/driver.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cuda {
namespace {

// Loaded kernels, per (context, module id). Modules are never unloaded: a kernel lives as long as
// executables that may launch it, which jaxext cannot see; there is one module per distinct
// kernel and signature.
struct ModuleKey {
  CUcontext ctx;
  int64_t id;
  int64_t shared_mem;  // the function's dynamic shared memory grant is part of what is cached
  bool operator==(const ModuleKey& o) const {
    return ctx == o.ctx && id == o.id && shared_mem == o.shared_mem;
  }
};
struct ModuleKeyHash {
  size_t operator()(const ModuleKey& k) const {
    return std::hash<const void*>()(k.ctx) ^ (std::hash<int64_t>()(k.id) * 0x9e3779b97f4a7c15ULL) ^
           std::hash<int64_t>()(k.shared_mem);
  }
};

std::mutex& CacheMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

std::unordered_map<ModuleKey, CUfunction, ModuleKeyHash>& Cache() {
  static auto* cache = new std::unordered_map<ModuleKey, CUfunction, ModuleKeyHash>;
  return *cache;
}

std::string Prefix(std::string_view name) {
  return "jaxext.numba_cuda_kernel '" + std::string(name) + "': ";
}

// The kernel's function in the current context `ctx`, loading its module on first use there.
ffi::ErrorOr<CUfunction> GetFunction(const StreamContext& ctx, std::string_view name,
                                     std::string_view ptx, std::string_view entry,
                                     int64_t module_id, int64_t shared_mem) {
  const Driver& drv = ctx.driver();
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto it = Cache().find({ctx.get(), module_id, shared_mem});
  if (it != Cache().end()) return it->second;

  const std::string ptx_z(ptx);  // the driver wants a NUL-terminated image
  const std::string entry_z(entry);
  char log[4096] = {0};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log) - 1))};
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  std::string error;
  CUresult r = drv.module_load(&module, ptx_z.c_str(), 2, options, values);
  if (r != CUDA_SUCCESS) {
    error = "loading its PTX failed: " + drv.Describe(r) + (log[0] ? std::string(": ") + log : "");
  } else if ((r = drv.module_get_function(&fn, module, entry_z.c_str())) != CUDA_SUCCESS) {
    error = "its PTX has no kernel " + entry_z + ": " + drv.Describe(r);
  } else if (shared_mem > 48 * 1024 &&
             (r = drv.func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(shared_mem))) != CUDA_SUCCESS) {
    error = "cannot grant " + std::to_string(shared_mem) + " bytes of shared memory: " +
            drv.Describe(r);
  }
  if (!error.empty()) {
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kInternal, Prefix(name) + error));
  }
  Cache().emplace(ModuleKey{ctx.get(), module_id, shared_mem}, fn);
  return fn;
}

ffi::Error InitializeImpl(CUstream stream, ffi::RemainingArgs, ffi::RemainingRets,
                          std::string_view name, std::string_view ptx, std::string_view entry,
                          int64_t module_id, ffi::Span<const int64_t>, ffi::Span<const int64_t>,
                          int64_t shared_mem, ffi::Span<const int64_t>, ffi::Span<const double>,
                          ffi::Span<const int64_t>, int64_t, ffi::Span<const int64_t>) {
  StreamContext ctx(stream, Prefix(name));
  if (!ctx.ok()) return ctx.error();
  auto fn = GetFunction(ctx, name, ptx, entry, module_id, shared_mem);
  return fn.has_value() ? ffi::Error::Success() : fn.error();
}

ffi::Error ExecuteImpl(CUstream stream, ffi::RemainingArgs args, ffi::RemainingRets rets,
                       std::string_view name, std::string_view ptx, std::string_view entry,
                       int64_t module_id, ffi::Span<const int64_t> grid,
                       ffi::Span<const int64_t> block, int64_t shared_mem,
                       ffi::Span<const int64_t> pkinds, ffi::Span<const double> fparams,
                       ffi::Span<const int64_t> iparams, int64_t nbatch,
                       ffi::Span<const int64_t> bmasks) {
  auto invalid = [&](const std::string& what) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, Prefix(name) + what);
  };
  const size_t n_args = args.size(), n_ops = args.size() + rets.size();
  if (grid.size() != 3 || block.size() != 3) return invalid("grid and block need 3 entries");
  if (bmasks.size() != n_ops || nbatch < 0 || nbatch > kMaxBatchAxes) {
    return invalid("got inconsistent batching attributes");
  }
  for (int k = 0; k < 3; ++k) {
    if (grid[k] < 0 || block[k] < 0 || grid[k] > 0x7fffffff || block[k] > 1024) {
      return invalid("got an out-of-range grid or block");
    }
  }

  // Kernel parameters: each operand's array slots (its core dims: the batch axes are looped over
  // here), then the scalars.
  std::vector<int64_t> slots;
  std::vector<size_t> data_slot(n_ops);
  std::vector<char*> base(n_ops);
  std::vector<std::vector<int64_t>> batch_stride(n_ops);
  BatchLayout batches(nbatch);
  bool all_results_empty = rets.size() > 0;
  for (size_t i = 0; i < n_ops; ++i) {
    auto got = [&]() -> ffi::ErrorOr<ffi::AnyBuffer> {  // operand i: arguments, then results
      if (i < n_args) return args.get<ffi::AnyBuffer>(i);
      auto b = rets.get<ffi::AnyBuffer>(i - n_args);
      if (!b.has_value()) return ffi::Unexpected(b.error());
      return **b;
    }();
    if (!got.has_value()) return got.error();
    const ffi::AnyBuffer buffer = *got;
    auto dims = buffer.dimensions();
    const int64_t width = static_cast<int64_t>(ffi::ByteWidth(buffer.element_type()));
    size_t nb;
    const std::string bad =
        batches.Add(dims.begin(), dims.size(), width, bmasks[i], &nb, &batch_stride[i]);
    if (!bad.empty()) return invalid(bad);
    const size_t rank = dims.size() - nb;
    if (i >= n_args && buffer.element_count() > 0) all_results_empty = false;
    base[i] = static_cast<char*>(buffer.untyped_data());
    const size_t at = slots.size();
    slots.resize(at + NumbaArraySlots(rank));
    WriteNumbaArray(slots.data() + at, base[i], dims.begin() + nb, rank, width);
    data_slot[i] = at + kNumbaArrayDataSlot;
  }
  size_t nf = 0, ni = 0;
  for (int64_t kind : pkinds) {
    if (kind == 0 && nf < fparams.size()) {
      slots.push_back(NumbaFloatSlot(fparams[nf++]));
    } else if (kind == 1 && ni < iparams.size()) {
      slots.push_back(iparams[ni++]);
    } else if (kind != -1) {
      return invalid("got parameter kinds that do not match the parameters");
    }
  }

  const int64_t total = batches.Count();
  if (total < 0) return invalid("got a batch axis no operand carries");
  // Nothing to launch: no batch slice, an empty grid, or no output element to write (a kernel
  // could only read its possibly empty inputs out of bounds).
  const bool empty_launch = grid[0] * grid[1] * grid[2] == 0 || block[0] * block[1] * block[2] == 0;
  if (total == 0 || empty_launch || all_results_empty) return ffi::Error::Success();

  // Launch in the stream's context, whatever is current here.
  StreamContext ctx(stream, Prefix(name));
  if (!ctx.ok()) return ctx.error();
  auto fn = GetFunction(ctx, name, ptx, entry, module_id, shared_mem);
  if (!fn.has_value()) return fn.error();
  std::vector<void*> argv(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) argv[k] = &slots[k];
  const Driver& drv = ctx.driver();

  // One launch per batch slice (vmap="sequential"): the kernel sees one slice, as unbatched.
  // cuLaunchKernel copies the parameters at the call, so the slots are rewritten in place.
  std::vector<int64_t> index(nbatch, 0);
  for (int64_t t = 0; t < total; ++t) {
    if (nbatch > 0) {
      for (size_t i = 0; i < n_ops; ++i) {
        SetNumbaArrayData(&slots[data_slot[i] - kNumbaArrayDataSlot],
                          base[i] + batches.Offset(batch_stride[i], index.data()));
      }
    }
    CUresult r = drv.launch(*fn, static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                            static_cast<unsigned>(grid[2]), static_cast<unsigned>(block[0]),
                            static_cast<unsigned>(block[1]), static_cast<unsigned>(block[2]),
                            static_cast<unsigned>(shared_mem), stream, argv.data(), nullptr);
    if (r != CUDA_SUCCESS) {
      return ffi::Error(ffi::ErrorCode::kInternal,
                        Prefix(name) + "kernel launch failed: " + drv.Describe(r));
    }
    batches.Next(index.data());
  }
  return ffi::Error::Success();
}

}  // namespace

#define JAXEXT_NUMBA_CUDA_BINDING(stage)                 \
  ffi::Ffi::Bind<stage>()                                \
      .Ctx<ffi::PlatformStream<CUstream>>()              \
      .RemainingArgs()                                   \
      .RemainingRets()                                   \
      .Attr<std::string_view>("name")                    \
      .Attr<std::string_view>("ptx")                     \
      .Attr<std::string_view>("entry")                   \
      .Attr<int64_t>("module_id")                        \
      .Attr<ffi::Span<const int64_t>>("grid")            \
      .Attr<ffi::Span<const int64_t>>("block")           \
      .Attr<int64_t>("shared_mem")                       \
      .Attr<ffi::Span<const int64_t>>("pkinds")          \
      .Attr<ffi::Span<const double>>("fparams")          \
      .Attr<ffi::Span<const int64_t>>("iparams")         \
      .Attr<int64_t>("nbatch")                           \
      .Attr<ffi::Span<const int64_t>>("bmasks")

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextNumbaCallCudaInitialize, InitializeImpl,
                              JAXEXT_NUMBA_CUDA_BINDING(ffi::ExecutionStage::kInitialize));
// Command-buffer compatible: the same launches for the same attributes, no host synchronisation,
// no allocation (the module is loaded in the initialize stage, outside any capture).
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextNumbaCallCuda, ExecuteImpl,
                              JAXEXT_NUMBA_CUDA_BINDING(ffi::ExecutionStage::kExecute),
                              {ffi::Traits::kCmdBufferCompatible});

#undef JAXEXT_NUMBA_CUDA_BINDING

}  // namespace cuda
}  // namespace jaxext
