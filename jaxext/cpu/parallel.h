// Splitting an element-wise loop over XLA's intra-op thread pool, asynchronously.
//
// The handler returns an ffi::Future that completes once every chunk has run: no thread ever blocks
// waiting for another, so concurrent executions (many Python threads calling at once) cannot
// deadlock the pool. Small inputs run inline on the calling thread.
#ifndef JAXEXT_CPU_PARALLEL_H_
#define JAXEXT_CPU_PARALLEL_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstdint>
#include <type_traits>
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

// fn(begin, end) as an ffi::Error, whether fn returns one or nothing.
template <typename F>
xla::ffi::Error CallChunk(F& fn, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<std::invoke_result_t<F&, int64_t, int64_t>, xla::ffi::Error>) {
    return fn(begin, end);
  } else {
    fn(begin, end);
    return xla::ffi::Error::Success();
  }
}

// Runs fn(begin, end) over [0, n) in at most (threads + 1) chunks of at least `grain` elements:
// the calling thread takes the last chunk itself. `fn` returns void, or an ffi::Error: the first
// failing chunk's error then completes the future (the other chunks still run).
template <typename F>
xla::ffi::Future ParallelFor(xla::ffi::ThreadPool& pool, int64_t n, int64_t grain, F fn) {
  auto run = [fn](int64_t begin, int64_t end) mutable { return CallChunk(fn, begin, end); };
  // A few chunks per thread (the caller works too), so that uneven chunk costs and a pool that
  // is busier than its thread count suggests still balance.
  const int64_t max_chunks = std::max<int64_t>(1, 4 * (pool.num_threads() + 1));
  const int64_t chunks = std::min<int64_t>(max_chunks, std::max<int64_t>(1, n / grain));
  if (chunks <= 1) {
    xla::ffi::Error err = run(int64_t{0}, n);
    return err.failure() ? ErrorFuture(std::move(err)) : ReadyFuture();
  }
  xla::ffi::CountDownPromise done(chunks);
  const int64_t step = (n + chunks - 1) / chunks;
  for (int64_t c = 0; c + 1 < chunks; ++c) {
    const int64_t begin = c * step, end = std::min(n, begin + step);
    pool.Schedule([run, begin, end, done]() mutable { done.CountDown(1, run(begin, end)); });
  }
  done.CountDown(1, run((chunks - 1) * step, n));
  return xla::ffi::Future(done);
}

// Runs fn(block, begin, end) over [0, n) in at most threads + 1 blocks of at least `grain`
// elements (block = 0, 1, ... in index order), then finish(blocks) once, on whichever thread ends
// the last block, before the future completes: a reduction whose blocks each keep a partial
// result that finish combines in block order (deterministic for a given number of threads).
template <typename F, typename G>
xla::ffi::Future ParallelForReduce(xla::ffi::ThreadPool& pool, int64_t n, int64_t grain, F fn,
                                   G finish) {
  const int64_t blocks = std::min<int64_t>(pool.num_threads() + 1,
                                           std::max<int64_t>(1, n / std::max<int64_t>(1, grain)));
  const int64_t step = (n + blocks - 1) / blocks;
  if (blocks <= 1) {
    fn(int64_t{0}, int64_t{0}, n);
    finish(int64_t{1});
    return ReadyFuture();
  }
  auto left = std::make_shared<std::atomic<int64_t>>(blocks);
  auto run = [fn, finish, left, blocks](int64_t b, int64_t begin, int64_t end) mutable {
    fn(b, begin, end);
    if (left->fetch_sub(1) == 1) finish(blocks);
  };
  xla::ffi::CountDownPromise done(blocks);
  for (int64_t b = 0; b + 1 < blocks; ++b) {
    const int64_t begin = std::min(n, b * step), end = std::min(n, begin + step);
    pool.Schedule([run, b, begin, end, done]() mutable {
      run(b, begin, end);
      done.CountDown(1, xla::ffi::Error::Success());
    });
  }
  run(blocks - 1, std::min(n, (blocks - 1) * step), n);
  done.CountDown(1, xla::ffi::Error::Success());
  return xla::ffi::Future(done);
}

// Runs fn(begin, end) over [0, n) in blocks of `block` indices handed out on demand: for work whose
// cost varies a lot between indices (one ODE trajectory per index), no thread waits on another's
// static share. The calling thread works too; at most threads + 1 workers. Then then() once, on
// whichever worker ends last, before the future completes (a pass over what every block wrote);
// it runs even when a block failed, and the first failing block's error completes the future.
template <typename F, typename G>
xla::ffi::Future ParallelForDynamic(xla::ffi::ThreadPool& pool, int64_t n, int64_t block, F fn,
                                    G then) {
  block = std::max<int64_t>(1, block);
  const int64_t blocks = (n + block - 1) / block;
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(pool.num_threads() + 1, blocks));
  auto next = std::make_shared<std::atomic<int64_t>>(0);
  auto left = std::make_shared<std::atomic<int64_t>>(workers);
  auto work = [fn, then, next, left, n, block]() mutable -> xla::ffi::Error {
    xla::ffi::Error first = xla::ffi::Error::Success();
    for (;;) {
      const int64_t begin = next->fetch_add(block);
      if (begin >= n) break;
      xla::ffi::Error err = CallChunk(fn, begin, std::min(n, begin + block));
      if (err.failure() && !first.failure()) first = std::move(err);
    }
    if (left->fetch_sub(1) == 1) then();  // every other worker is done
    return first;
  };
  if (workers <= 1) {
    xla::ffi::Error err = work();
    return err.failure() ? ErrorFuture(std::move(err)) : ReadyFuture();
  }
  xla::ffi::CountDownPromise done(workers);
  for (int64_t w = 0; w + 1 < workers; ++w) {
    pool.Schedule([work, done]() mutable { done.CountDown(1, work()); });
  }
  done.CountDown(1, work());
  return xla::ffi::Future(done);
}

template <typename F>
xla::ffi::Future ParallelForDynamic(xla::ffi::ThreadPool& pool, int64_t n, int64_t block, F fn) {
  return ParallelForDynamic(pool, n, block, std::move(fn), [] {});
}

}  // namespace cpu
}  // namespace jaxext

#endif  // JAXEXT_CPU_PARALLEL_H_
