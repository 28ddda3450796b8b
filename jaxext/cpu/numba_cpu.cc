#include "jaxext/cpu/numba_cpu.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jaxext/common/batch_layout.h"
#include "jaxext/cpu/native_registry.h"
#include "jaxext/cpu/parallel.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxext {
namespace cpu {
namespace {

// Elements per parallel chunk: below this a thread hand-off costs more than it saves.
constexpr int64_t kGrainElements = 1 << 15;
// The allocation-free path's limits (operands, and their dimensions together).
constexpr size_t kFastOps = 32;
constexpr size_t kFastDims = 128;

// The error of a kernel that raised (its status out-parameter was set).
ffi::Error KernelRaised(std::string_view name) {
  return ffi::Error(ffi::ErrorCode::kInternal,
                    "jaxext.numba_kernel '" + std::string(name) +
                        "' raised an exception (Numba's nopython mode does not say which; run "
                        "the kernel's Python function on NumPy arrays to see it)");
}

struct Operand {
  char* base;
  int64_t width;                      // bytes per element
  int64_t core_elements;              // elements of one kernel call's view
  std::vector<int64_t> batch_stride;  // bytes per step of each batch axis (0: not batched)
  int64_t first_dim;                  // the core's first dimension (-1 for rank 0)
  size_t first_pos;                   // where that dimension sits in the concatenated shapes
  int64_t first_stride;               // bytes per step of that dimension
};

ffi::Future NumbaCallImpl(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                          int64_t kernel_id, std::string_view name,
                          ffi::Span<const double> fparams, ffi::Span<const int64_t> iparams,
                          int64_t nbatch, ffi::Span<const int64_t> bmasks, int64_t split) {
  auto fail = [&](ffi::ErrorCode code, const std::string& what) {
    return ErrorFuture(ffi::Error(code, "jaxext.numba_kernel '" + std::string(name) + "' " + what));
  };
  const NumbaEntry entry = LookupNativeFunctionAs<NumbaEntry>(kernel_id);
  if (entry == nullptr) {
    return fail(ffi::ErrorCode::kFailedPrecondition,
                "is not compiled in this process (an executable from jax's compilation cache or a "
                "deserialized jax.export?): call the kernel once in this process, with the same "
                "dtypes and ranks, before running it");
  }
  const size_t n_args = args.size(), n_ops = args.size() + rets.size();
  if (bmasks.size() != n_ops || nbatch < 0 || nbatch > kMaxBatchAxes) {
    return fail(ffi::ErrorCode::kInvalidArgument, "got inconsistent batching attributes");
  }
  // Operand i: the arguments, then the results.
  auto buffer_at = [&](size_t i) -> ffi::ErrorOr<ffi::AnyBuffer> {
    if (i < n_args) return args.get<ffi::AnyBuffer>(i);
    auto b = rets.get<ffi::AnyBuffer>(i - n_args);
    if (!b.has_value()) return ffi::Unexpected(b.error());
    return **b;
  };

  // Fast path, no heap allocation: one call, no batch axes, too small to be worth splitting.
  if (nbatch == 0 && n_ops <= kFastOps) {
    void* data[kFastOps];
    int64_t shapes[kFastDims];
    size_t pos = 0;
    int64_t max_elements = 0;
    bool fits = true;
    for (size_t i = 0; i < n_ops && fits; ++i) {
      auto b = buffer_at(i);
      if (!b.has_value()) return ErrorFuture(b.error());
      data[i] = b->untyped_data();
      auto dims = b->dimensions();
      fits = pos + dims.size() <= kFastDims;
      for (size_t d = 0; fits && d < dims.size(); ++d) shapes[pos++] = dims[d];
      max_elements = std::max<int64_t>(max_elements, b->element_count());
    }
    if (fits && (split == 0 || max_elements < 2 * kGrainElements)) {
      int32_t status = 0;
      entry(data, shapes, fparams.begin(), iparams.begin(), &status);
      return status != 0 ? ErrorFuture(KernelRaised(name)) : ReadyFuture();
    }
  }
  std::vector<ffi::AnyBuffer> buffers;
  buffers.reserve(n_ops);
  for (size_t i = 0; i < n_ops; ++i) {
    auto b = buffer_at(i);
    if (!b.has_value()) return ErrorFuture(b.error());
    buffers.push_back(*b);
  }

  // Per operand: its batch axes (those set in its mask), then the core dimensions the kernel sees.
  std::vector<int64_t> core_shapes;
  BatchLayout batches(nbatch);
  std::vector<Operand> ops(n_ops);
  int64_t max_core = 1;
  for (size_t i = 0; i < n_ops; ++i) {
    auto dims = buffers[i].dimensions();
    Operand& op = ops[i];
    op.width = static_cast<int64_t>(ffi::ByteWidth(buffers[i].element_type()));
    size_t nb;
    const std::string bad =
        batches.Add(dims.begin(), dims.size(), op.width, bmasks[i], &nb, &op.batch_stride);
    if (!bad.empty()) return fail(ffi::ErrorCode::kInvalidArgument, bad);
    op.core_elements = 1;
    op.first_pos = core_shapes.size();
    for (size_t d = nb; d < dims.size(); ++d) {
      core_shapes.push_back(dims[d]);
      op.core_elements *= dims[d];
    }
    max_core = std::max(max_core, op.core_elements);
    op.first_dim = dims.size() > nb ? dims[nb] : -1;
    op.first_stride = op.first_dim > 0 ? op.core_elements / op.first_dim * op.width : 0;
    op.base = static_cast<char*>(buffers[i].untyped_data());
  }
  const int64_t total = batches.Count();
  if (total < 0) {
    return fail(ffi::ErrorCode::kInvalidArgument, "got a batch axis no operand carries");
  }
  if (total == 0) return ReadyFuture();

  // The chunks may outlive this frame (they run on the pool): they own a copy of the name.
  const std::string kernel_name(name);
  // fparams/iparams are never empty: the Python side pads each with one placeholder.
  const double* fp = fparams.begin();
  const int64_t* ip = iparams.begin();

  // vmap="elementwise" without batch axes: every operand's first axis is independent, so it is
  // split across the pool (each chunk is one kernel call on a slice of rows).
  int64_t rows = -1;
  if (split != 0 && nbatch == 0) {
    rows = ops[0].first_dim;
    for (const Operand& op : ops) {
      if (op.first_dim != rows) rows = -1;
    }
  }
  if (rows > 1) {
    const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, max_core / rows));
    return ParallelFor(pool, rows, grain,
                       [=](int64_t begin, int64_t end) -> ffi::Error {
                         std::vector<void*> data(n_ops);
                         std::vector<int64_t> shapes = core_shapes;
                         for (size_t i = 0; i < n_ops; ++i) {
                           data[i] = ops[i].base + begin * ops[i].first_stride;
                           shapes[ops[i].first_pos] = end - begin;
                         }
                         int32_t status = 0;
                         entry(data.data(), shapes.data(), fp, ip, &status);
                         return status != 0 ? KernelRaised(kernel_name) : ffi::Error::Success();
                       });
  }

  // One kernel call per batch step (independent slices: split across the pool).
  const int64_t grain = std::max<int64_t>(1, kGrainElements / max_core);
  return ParallelFor(pool, total, grain, [=](int64_t begin, int64_t end) -> ffi::Error {
    std::vector<void*> data(n_ops);
    std::vector<int64_t> index(nbatch, 0);
    batches.Unravel(begin, index.data());
    for (int64_t step = begin; step < end; ++step) {
      for (size_t i = 0; i < n_ops; ++i) {
        data[i] = ops[i].base + batches.Offset(ops[i].batch_stride, index.data());
      }
      int32_t status = 0;
      entry(data.data(), core_shapes.data(), fp, ip, &status);
      if (status != 0) return KernelRaised(kernel_name);
      batches.Next(index.data());
    }
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxextNumbaCallCpu, NumbaCallImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<int64_t>("kernel_id")
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const double>>("fparams")
                                  .Attr<ffi::Span<const int64_t>>("iparams")
                                  .Attr<int64_t>("nbatch")
                                  .Attr<ffi::Span<const int64_t>>("bmasks")
                                  .Attr<int64_t>("split"));

}  // namespace cpu
}  // namespace jaxext
