"""Numba bridge benchmark: a Numba kernel called through jaxext.numba_kernel, against the same
computation in jnp, the same Numba function behind jax.pure_callback, and behind brainevent's
`numba_kernel` (its current PyPI release, pinned as a benchmark-only dependency: an FFI target
whose handler is a Python callback), measured in one run.

    tools/bazel run //benchmarks:numba [-- --rounds 7]

Two figures, interleaved rounds (this VM drifts), best round of each:
* per-call cost inside a compiled loop: y <- 0.5 y + x in a lax.fori_loop of 1000 iterations,
  16 and 1024 float64 elements, time per iteration;
* throughput: one call on 1e7 float64 elements, ns per element.
"""

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import numba
import numpy as np

jax.config.update("jax_enable_x64", True)

import jaxext  # noqa: E402

try:
  import brainevent  # noqa: E402
except ImportError:  # the anchor is optional: the other arms still run
  brainevent = None


def axpy_py(x, y, out, alpha):
  for i in range(x.shape[0]):
    out[i] = alpha * x[i] + y[i]


axpy = jaxext.numba_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype),
                           vmap="elementwise")(axpy_py)
axpy_numba = numba.njit(nogil=True)(axpy_py)


def axpy_callback(x, y, alpha):
  def host(a, b):
    out = np.empty_like(a)
    axpy_numba(np.asarray(a), np.asarray(b), out, alpha)
    return out
  return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x, y)


@numba.njit(nogil=True)
def axpy_half(x, y, out):  # brainevent passes no scalar parameters: alpha is compiled in
  for i in range(x.shape[0]):
    out[i] = 0.5 * x[i] + y[i]


def axpy_brainevent(x, y):
  kernel = brainevent.numba_kernel(axpy_half, outs=jax.ShapeDtypeStruct(x.shape, x.dtype))
  return kernel(x, y)


CASES = {
    "jaxext.numba_kernel": lambda x, y: axpy(x, y, alpha=0.5),
    "jnp": lambda x, y: 0.5 * x + y,
    "pure_callback + Numba": lambda x, y: axpy_callback(x, y, 0.5),
}
if brainevent is not None:
  CASES[f"brainevent {brainevent.__version__}"] = axpy_brainevent


def loop_fn(call, iters):
  return jax.jit(lambda x: jax.lax.fori_loop(0, iters, lambda i, y: call(y, x), x))


def best_times(fns, args, rounds):
  """Interleaved rounds: each round times every function once; returns the best per function."""
  for f in fns.values():
    jax.block_until_ready(f(*args))  # compile and warm
  best = {k: float("inf") for k in fns}
  for _ in range(rounds):
    for k, f in fns.items():
      t = time.perf_counter()
      jax.block_until_ready(f(*args))
      best[k] = min(best[k], time.perf_counter() - t)
  return best


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--rounds", type=int, default=7)
  p.add_argument("--iters", type=int, default=1000)
  p.add_argument("--big", type=int, default=10_000_000)
  args = p.parse_args()
  print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"jax {jax.__version__}, numba {numba.__version__}, CPython {platform.python_version()}; "
        f"brainevent {brainevent.__version__ if brainevent else 'not installed'}")
  for n in (16, 1024):
    x = jnp.linspace(0.0, 1.0, n)
    fns = {k: loop_fn(c, args.iters) for k, c in CASES.items()}
    best = best_times(fns, (x,), args.rounds)
    print(f"\nper call inside fori_loop, {n} float64 elements ({args.iters} iterations):")
    for k, t in best.items():
      print(f"  {k:24s} {t / args.iters * 1e6:9.3f} us/call   {t / best['jaxext.numba_kernel']:6.2f}x")
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=args.big))
  y = jnp.asarray(rng.normal(size=args.big))
  fns = {k: jax.jit(c) for k, c in CASES.items()}
  best = best_times(fns, (x, y), args.rounds)
  print(f"\none call on {args.big:.0e} float64 elements:")
  for k, t in best.items():
    print(f"  {k:24s} {t / args.big * 1e9:9.3f} ns/element   {t / best['jaxext.numba_kernel']:6.2f}x")
  ref = 0.5 * np.asarray(x) + np.asarray(y)
  for k, f in fns.items():  # every arm computes the same thing
    np.testing.assert_allclose(f(x, y), ref, rtol=1e-15, err_msg=k)


if __name__ == "__main__":
  main()
