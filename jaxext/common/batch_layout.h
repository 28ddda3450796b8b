// vmap="sequential" inside a handler: the batch axes of the operands of one call, walked natively
// (jaxext/cpu/numba_cpu.cc, jaxext/cuda/numba_cuda.cc). Operand i carries batch axis j when bit j
// of its mask is set; its carried axes lead its dimensions, in axis order, and the rest (the core)
// is what one kernel call sees. Buffers are row-major and dense.
#ifndef JAXEXT_COMMON_BATCH_LAYOUT_H_
#define JAXEXT_COMMON_BATCH_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace jaxext {

// Batch axes a mask (an int64) can describe.
constexpr int64_t kMaxBatchAxes = 62;

class BatchLayout {
 public:
  explicit BatchLayout(int64_t nbatch) : size_(nbatch, -1) {}

  int64_t nbatch() const { return static_cast<int64_t>(size_.size()); }

  // Adds an operand of `rank` dims (`width` bytes per element) with batch mask `mask`: sets
  // `batch_rank` (its leading dims that are batch axes) and `stride` (bytes per step along each
  // batch axis; 0 where it does not carry one). Returns "" or what is wrong with the operand.
  std::string Add(const int64_t* dims, size_t rank, int64_t width, int64_t mask,
                  size_t* batch_rank, std::vector<int64_t>* stride) {
    size_t nb = 0;
    for (int64_t j = 0; j < nbatch(); ++j) nb += (mask >> j) & 1;
    if (nb > rank) return "got an operand with fewer axes than batch axes";
    int64_t bytes = width;  // of one core slice, then of ever larger blocks
    for (size_t d = nb; d < rank; ++d) bytes *= dims[d];
    std::vector<int64_t> own(nb);
    for (size_t k = nb; k-- > 0;) {
      own[k] = bytes;
      bytes *= dims[k];
    }
    stride->assign(size_.size(), 0);
    for (int64_t j = 0, k = 0; j < nbatch(); ++j) {
      if (!((mask >> j) & 1)) continue;
      if (size_[j] != -1 && size_[j] != dims[k]) {
        return "got operands that disagree on a batch axis";
      }
      size_[j] = dims[k];
      (*stride)[j] = own[k++];
    }
    *batch_rank = nb;
    return "";
  }

  // Batch slices in all (0 if any axis is empty); -1 if an axis is carried by no operand.
  int64_t Count() const {
    int64_t total = 1;
    for (int64_t s : size_) {
      if (s < 0) return -1;
      total *= s;
    }
    return total;
  }

  // `index` (nbatch entries) := the multi-index of slice number `step`, last axis fastest.
  void Unravel(int64_t step, int64_t* index) const {
    for (int64_t j = nbatch() - 1; j >= 0; --j) {
      index[j] = step % size_[j];
      step /= size_[j];
    }
  }

  // Advances `index` to the next slice (an odometer, last axis fastest).
  void Next(int64_t* index) const {
    for (int64_t j = nbatch() - 1; j >= 0; --j) {
      if (++index[j] < size_[j]) return;
      index[j] = 0;
    }
  }

  // Bytes from an operand's start to slice `index`, given its `stride` from Add.
  int64_t Offset(const std::vector<int64_t>& stride, const int64_t* index) const {
    int64_t offset = 0;
    for (int64_t j = 0; j < nbatch(); ++j) offset += index[j] * stride[j];
    return offset;
  }

 private:
  std::vector<int64_t> size_;  // per batch axis; -1 until an operand carries it
};

}  // namespace jaxext

#endif  // JAXEXT_COMMON_BATCH_LAYOUT_H_
