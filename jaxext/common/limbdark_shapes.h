// Buffer checks shared by the CPU and CUDA handlers of the limbdark op.
#ifndef JAXEXT_COMMON_LIMBDARK_SHAPES_H_
#define JAXEXT_COMMON_LIMBDARK_SHAPES_H_

#include <cstdint>
#include <string>

#include "jaxext/common/ffi_helpers.h"
#include "jaxext/kernels/limbdark.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {

struct LimbdarkShape {
  int64_t points;  // P
  int64_t groups;  // G: rows of u
  int order;       // n: columns of u
  int64_t r_stride;  // 1: one radius per point; 0: one radius for all points
  int64_t per_group;  // P / G: point i uses row i / per_group of u
};

// b holds P elements, r P or 1 (shared), u is [G, n] with G dividing P (G >= 1 when P > 0),
// n <= kMaxOrder; flux has P elements and, for the gradient target (grad_counts = the element
// counts of dflux/db, dflux/dr, dflux/du; nullptr otherwise), so do dflux/db and dflux/dr, while
// dflux/du has P n.
inline xla::ffi::Error GetLimbdarkShape(size_t b_count, size_t r_count,
                                        xla::ffi::Span<const int64_t> u_dims, size_t flux_count,
                                        const size_t* grad_counts, LimbdarkShape* shape) {
  if (u_dims.size() < 1) {
    return xla::ffi::Error::InvalidArgument("jaxext limbdark: u must have rank >= 1");
  }
  const int64_t n = u_dims.back();
  int64_t groups = 1;
  for (size_t i = 0; i + 1 < u_dims.size(); ++i) groups *= u_dims[i];
  const int64_t points = static_cast<int64_t>(b_count);
  if (static_cast<int64_t>(r_count) != points && r_count != 1) {
    return xla::ffi::Error::InvalidArgument("jaxext limbdark: b and r differ in size");
  }
  if (n > limbdark::kMaxOrder) {
    return xla::ffi::Error::InvalidArgument("jaxext limbdark: limb-darkening order " +
                                            std::to_string(n) + " exceeds the maximum " +
                                            std::to_string(limbdark::kMaxOrder));
  }
  if (points > 0 && (groups < 1 || points % groups != 0)) {
    return xla::ffi::Error::InvalidArgument(
        "jaxext limbdark: the rows of u (" + std::to_string(groups) +
        ") do not divide the number of points (" + std::to_string(points) + ")");
  }
  if (xla::ffi::Error err = CheckElementCounts("limbdark", b_count, {flux_count}); err.failure()) {
    return err;
  }
  if (grad_counts != nullptr) {
    if (xla::ffi::Error err = CheckElementCounts("limbdark", b_count, {grad_counts[0], grad_counts[1]});
        err.failure()) {
      return err;
    }
    if (grad_counts[2] != b_count * static_cast<size_t>(n)) {
      return xla::ffi::Error::InvalidArgument("jaxext limbdark: dflux/du has the wrong size");
    }
  }
  shape->points = points;
  shape->groups = groups;
  shape->order = static_cast<int>(n);
  shape->r_stride = (static_cast<int64_t>(r_count) == points) ? 1 : 0;
  shape->per_group = groups > 0 && points > 0 ? points / groups : 1;
  return xla::ffi::Error::Success();
}

}  // namespace jaxext

#endif  // JAXEXT_COMMON_LIMBDARK_SHAPES_H_
