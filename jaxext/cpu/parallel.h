// Splitting an element-wise loop over XLA's intra-op thread pool, asynchronously.
//
// The handler returns an ffi::Future that completes once every chunk has run: no thread ever blocks
// waiting for another, so concurrent executions (many Python threads calling at once) cannot
// deadlock the pool. Small inputs run inline on the calling thread.
#ifndef JAXEXT_CPU_PARALLEL_H_
#define JAXEXT_CPU_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace jaxext {
namespace cpu {

inline xla::ffi::Future ReadyFuture() {
  xla::ffi::Promise promise;
  promise.SetAvailable();
  return xla::ffi::Future(promise);
}

inline xla::ffi::Future ErrorFuture(xla::ffi::Error error) {
  xla::ffi::Promise promise;
  promise.SetError(std::move(error));
  return xla::ffi::Future(promise);
}

// Runs fn(begin, end) over [0, n) in at most (threads + 1) chunks of at least `grain` elements:
// the calling thread takes the last chunk itself.
template <typename F>
xla::ffi::Future ParallelFor(xla::ffi::ThreadPool& pool, int64_t n, int64_t grain, F fn) {
  // A few chunks per thread (the caller works too), so that uneven chunk costs and a pool that
  // is busier than its thread count suggests still balance.
  const int64_t max_chunks = std::max<int64_t>(1, 4 * (pool.num_threads() + 1));
  const int64_t chunks = std::min<int64_t>(max_chunks, std::max<int64_t>(1, n / grain));
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return ReadyFuture();
  }
  xla::ffi::CountDownPromise done(chunks);
  const int64_t step = (n + chunks - 1) / chunks;
  for (int64_t c = 0; c + 1 < chunks; ++c) {
    const int64_t begin = c * step, end = std::min(n, begin + step);
    pool.Schedule([fn, begin, end, done]() mutable {
      fn(begin, end);
      done.CountDown();
    });
  }
  fn((chunks - 1) * step, n);
  done.CountDown();
  return xla::ffi::Future(done);
}

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_PARALLEL_H_
