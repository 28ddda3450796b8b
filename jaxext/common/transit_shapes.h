// Buffer checks shared by the CPU and CUDA handlers of the transit op.
#ifndef JAXEXT_COMMON_TRANSIT_SHAPES_H_
#define JAXEXT_COMMON_TRANSIT_SHAPES_H_

#include <cstdint>
#include <string>

#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/transit.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {

struct TransitShape {
  int64_t points;     // P
  int64_t groups;     // G: light curves (rows of q and u)
  int order;          // n: columns of u
  int oversample;     // K
  int64_t per_group;  // P / G
};

// t holds P elements, q is [G, 10], u is [G, n] (n <= kMaxOrder), G divides P; flux has P
// elements and, for the gradient target (grad_counts = element counts of dflux/dq, dflux/du),
// dflux/dq has 10 P and dflux/du n P.
inline xla::ffi::Error GetTransitShape(size_t t_count, xla::ffi::Span<const int64_t> q_dims,
                                       xla::ffi::Span<const int64_t> u_dims, int64_t oversample,
                                       size_t flux_count, const size_t* grad_counts,
                                       TransitShape* shape) {
  using xla::ffi::Error;
  if (q_dims.size() < 1 || q_dims.back() != transit::kNumParams) {
    return Error::InvalidArgument("jaxext transit: q must be [..., 10]");
  }
  if (u_dims.size() != q_dims.size()) {
    return Error::InvalidArgument("jaxext transit: q and u must have the same leading axes");
  }
  int64_t groups = 1;
  for (size_t i = 0; i + 1 < q_dims.size(); ++i) {
    if (q_dims[i] != u_dims[i]) {
      return Error::InvalidArgument("jaxext transit: q and u must have the same leading axes");
    }
    groups *= q_dims[i];
  }
  const int64_t n = u_dims.back();
  if (n > limbdark::kMaxOrder) {
    return Error::InvalidArgument("jaxext transit: limb-darkening order " + std::to_string(n) +
                                  " exceeds the maximum " + std::to_string(limbdark::kMaxOrder));
  }
  if (oversample < 1 || oversample > (1 << 20)) {
    return Error::InvalidArgument("jaxext transit: oversample must be in [1, 2^20]");
  }
  const int64_t points = static_cast<int64_t>(t_count);
  if (points > 0 && (groups < 1 || points % groups != 0)) {
    return Error::InvalidArgument("jaxext transit: the light curves (" + std::to_string(groups) +
                                  ") do not divide the number of points (" +
                                  std::to_string(points) + ")");
  }
  if (flux_count != t_count) {
    return Error::InvalidArgument("jaxext transit: flux and t differ in size");
  }
  if (grad_counts != nullptr &&
      (grad_counts[0] != t_count * transit::kNumParams ||
       grad_counts[1] != t_count * static_cast<size_t>(n))) {
    return Error::InvalidArgument("jaxext transit: derivative outputs have the wrong size");
  }
  shape->points = points;
  shape->groups = groups;
  shape->order = static_cast<int>(n);
  shape->oversample = static_cast<int>(oversample);
  shape->per_group = groups > 0 && points > 0 ? points / groups : 1;
  return Error::Success();
}

}  // namespace jaxext

#endif  // JAXEXT_COMMON_TRANSIT_SHAPES_H_
