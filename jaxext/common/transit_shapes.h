// Buffer checks and FFI signatures shared by the CPU and CUDA handlers of the transit op (the
// bindings differ only in their context: thread pool or stream).
#ifndef JAXEXT_COMMON_TRANSIT_SHAPES_H_
#define JAXEXT_COMMON_TRANSIT_SHAPES_H_

#include <cstdint>
#include <string>

#include "jaxext/common/transit_shape.h"
#include "jaxext/kernels/limbdark.h"
#include "jaxext/kernels/transit.h"
#include "xla/ffi/api/ffi.h"

namespace jaxext {

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

// The forward-mode handler's tangents tt, tq, tu have the sizes of t, q and u.
inline xla::ffi::Error CheckTransitTangents(size_t t, size_t q, size_t u, size_t tt, size_t tq,
                                            size_t tu) {
  if (tt != t || tq != q || tu != u) {
    return xla::ffi::Error::InvalidArgument(
        "jaxext transit: tangents must have the shapes of t, q and u");
  }
  return xla::ffi::Error::Success();
}

// The reverse-mode handler: `blocks` of `block` points per light curve (the last one shorter),
// and the sizes of its cotangent (that of t) and of its per-block sums (10 and n per block).
inline xla::ffi::Error GetTransitVjpBlocks(const TransitShape& shape, int64_t block,
                                           size_t t_count, size_t ct_count, size_t sq_count,
                                           size_t su_count, int64_t* blocks) {
  using xla::ffi::Error;
  if (block < 1) return Error::InvalidArgument("jaxext transit: block must be positive");
  *blocks = shape.points == 0 ? 0 : (shape.per_group + block - 1) / block;
  const int64_t units = shape.groups * *blocks;
  if (ct_count != t_count || sq_count != static_cast<size_t>(units * transit::kNumParams) ||
      su_count != static_cast<size_t>(units * shape.order)) {
    return Error::InvalidArgument(
        "jaxext transit: the cotangent or the block sums have the wrong size");
  }
  return Error::Success();
}

}  // namespace jaxext

#define JAXEXT_TRANSIT_BUFFER(T) xla::ffi::Buffer<xla::ffi::DataType::T>
// (t, q, u): what every handler takes first.
#define JAXEXT_TRANSIT_INPUTS(Context, T) \
  xla::ffi::Ffi::Bind()                   \
      .Ctx<Context>()                     \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()    \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()    \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()
// -> flux. flux_series (0/1): whether the CPU may take the occultation from per-light-curve series
// in b (transit.h's FluxSeries; jaxext/transit.py decides from the global light-curve length, so
// a sharded call computes what the unsharded one does); the CUDA kernel ignores it.
#define JAXEXT_TRANSIT_BINDING(Context, T)                                  \
  JAXEXT_TRANSIT_INPUTS(Context, T)                                         \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Attr<int64_t>("oversample")                                          \
      .Attr<int64_t>("flux_series")
// -> (flux, dflux/dq, dflux/du).
#define JAXEXT_TRANSIT_GRAD_BINDING(Context, T)                             \
  JAXEXT_TRANSIT_INPUTS(Context, T)                                         \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Attr<int64_t>("oversample")
// (+ tt, tq, tu) -> the flux's tangent.
#define JAXEXT_TRANSIT_LIN_BINDING(Context, T)                              \
  JAXEXT_TRANSIT_INPUTS(Context, T)                                         \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Attr<int64_t>("oversample")
// (+ ct) -> (ct_t, per-block sums for q, for u).
#define JAXEXT_TRANSIT_VJP_BINDING(Context, T)                              \
  JAXEXT_TRANSIT_INPUTS(Context, T)                                         \
      .Arg<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Ret<JAXEXT_TRANSIT_BUFFER(T)>()                                      \
      .Attr<int64_t>("oversample")                                          \
      .Attr<int64_t>("block")

#endif  // JAXEXT_COMMON_TRANSIT_SHAPES_H_
