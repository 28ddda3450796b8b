// One path of the CUDA tensor product's per-path kernel (jaxext/cuda/tp_kernels.cu), as its
// tables (tp_path_tables.h, built on the host) hold it. Plain types: the kernels' half includes
// it without the host-side builder.
#ifndef JAXEXT_COMMON_TP_FAST_PATH_H_
#define JAXEXT_COMMON_TP_FAST_PATH_H_

#include <cstdint>

namespace jaxext {

// Offsets in int32: blocks of x, y, w, out in their rows; multiplicity; 2l+1 of x and out; the
// offset of its (dx, dout) block of M.
struct TpFastPath {
  int32_t x, y, w, out, mul, dx, dout, moff;
};

}  // namespace jaxext

#endif  // JAXEXT_COMMON_TP_FAST_PATH_H_
