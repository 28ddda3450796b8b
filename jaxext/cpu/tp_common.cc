#include "jaxext/cpu/tp_common.h"

#include "jaxext/cpu/clones.h"

namespace jaxext {
namespace cpu {

// jaxext/kernels/tp.h's loops flattened into per-CPU clones (the channel loops vectorise 8 or 16
// wide where the CPU has AVX-512).
#define JAXEXT_TP_ACCUMULATE(T)                                                                 \
  JAXEXT_CPU_CLONES JAXEXT_CPU_FLATTEN void AccumulateRow(                                      \
      int mode, const tp::Path* paths, int64_t n_paths, const int64_t* ci, const int64_t* cj,   \
      const int64_t* ck, const T* cv, const T* x, const T* y, const T* w, const T* o, T* acc,   \
      T* scratch) {                                                                             \
    tp::AccumulateMode<T>(mode, paths, n_paths, ci, cj, ck, cv, x, y, w, o, acc, scratch);     \
  }
JAXEXT_TP_ACCUMULATE(double)
JAXEXT_TP_ACCUMULATE(float)
#undef JAXEXT_TP_ACCUMULATE

}  // namespace cpu
}  // namespace jaxext
