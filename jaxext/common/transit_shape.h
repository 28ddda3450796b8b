// The transit op's problem size, as the handlers check it (transit_shapes.h) and the CUDA kernels'
// launchers take it (jaxext/cuda/transit_kernels.h). Plain types: the kernels' half includes it
// without the FFI checks.
#ifndef JAXEXT_COMMON_TRANSIT_SHAPE_H_
#define JAXEXT_COMMON_TRANSIT_SHAPE_H_

#include <cstdint>

namespace jaxext {

struct TransitShape {
  int64_t points;     // P
  int64_t groups;     // G: light curves (rows of q and u)
  int order;          // n: columns of u
  int oversample;     // K
  int64_t per_group;  // P / G
};

}  // namespace jaxext

#endif  // JAXEXT_COMMON_TRANSIT_SHAPE_H_
