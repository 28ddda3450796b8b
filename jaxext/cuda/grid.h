// Grid sizes of the CUDA launches (the ops' .cu halves): enough blocks for the work, at most 2^20.
#ifndef JAXEXT_CUDA_GRID_H_
#define JAXEXT_CUDA_GRID_H_

#include <algorithm>
#include <cstdint>

namespace jaxext {
namespace cuda {

// Blocks for `items` of work, `per_block` per block (1: one block per item), at most 2^20.
inline unsigned GridBlocks(int64_t items, int64_t per_block = 1) {
  return static_cast<unsigned>(
      std::min<int64_t>((items + per_block - 1) / per_block, int64_t{1} << 20));
}

}  // namespace cuda
}  // namespace jaxext

#endif  // JAXEXT_CUDA_GRID_H_
