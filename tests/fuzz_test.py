"""Fuzzing every FFI handler through its primitive's `bind` (issue #30): every exported primitive,
and the transit's forward- and reverse-mode ones. Random attributes and operands,
consistent and not, eagerly and under jit, each primitive's cases in a child process. Every case
must end in a result (arrays of the abstract evaluation's shapes) or a Python exception, never in a
signal, a hang or an exit. A case that kills the child is reported by primitive and seed (rerun it
alone with `JAXEXT_FUZZ_ONLY=<primitive>:<seed>`) and the child restarts after it.

The operands are built to get past the abstract evaluation most of the time (mostly consistent,
then one thing perturbed: a range, an ordering, a size, an attribute, an edge value), since the
handlers are what is fuzzed. Derandomised: seeds 0..N-1 per primitive (N = JAXEXT_FUZZ_CASES,
default 40), the same cases on every run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

CASES = int(os.environ.get("JAXEXT_FUZZ_CASES", "40"))
# Seconds without progress before a case counts as a hang: the slowest case takes a few seconds,
# ten times that under --config=asan on a busy 2-core machine.
CASE_TIMEOUT_S = 120

EDGE = np.array([0.0, -0.0, 1.0, -1.0, 0.5, np.nan, np.inf, -np.inf, 1e308, -1e308, 5e-324,
                 1e-310, 2.0**31, -(2.0**31), 1e6, 3.14159])


# ---------------------------------------------------------------------------------------------
# Generators: rng -> (operands, params). Run in the child (they import jax and jaxext).


def _dtype(rng, floats_only=False):
  choices = [np.float64] * 4 + [np.float32] * 3
  if not floats_only:
    choices += [np.int32, np.float16, np.complex64]
  return np.dtype(choices[rng.integers(len(choices))])


def _floats(rng, shape, dtype, edge=0.3):
  x = rng.normal(size=shape) * 10.0 ** rng.integers(-3, 4)
  if x.size:
    mask = rng.random(shape) < edge
    x = np.where(mask, rng.choice(EDGE, size=shape), x)
  with np.errstate(all="ignore"):
    return np.asarray(x).astype(dtype)


def _shape(rng, max_ndim=3):
  dims = [0, 1, 1, 2, 3, 4, 7, 17]
  return tuple(int(rng.choice(dims)) for _ in range(rng.integers(0, max_ndim + 1)))


def _perturb_int(rng, value):
  return int(rng.choice([value, value, value, value + 1, value - 1, 0, -1, -value, 2**31 - 1,
                         value * 1000 + 7]))


def _ints(rng, shape, low, high, dtype=np.int32):
  """Mostly in [low, high); some out of range, negative or extreme."""
  x = rng.integers(low, max(high, low + 1), size=shape).astype(np.int64)
  if x.size and rng.random() < 0.5:
    mask = rng.random(shape) < 0.2
    x = np.where(mask, rng.choice([-1, high, high + 5, -(2**31), 2**31 - 1], size=shape), x)
  info = np.iinfo(dtype)
  return np.clip(x, info.min, info.max).astype(dtype)


def gen_kepler(rng):
  dtype = _dtype(rng)
  shape = _shape(rng)
  m = _floats(rng, shape, dtype)
  e = _floats(rng, shape if rng.random() < 0.9 else _shape(rng), dtype)
  e = np.abs(e) % 2 if rng.random() < 0.5 and e.dtype.kind == "f" else e
  return (m, e), {}


def gen_limbdark(rng):
  from jaxext.limbdark import MAX_ORDER
  dtype = _dtype(rng, floats_only=rng.random() < 0.8)
  shape = _shape(rng)
  order = int(rng.choice([0, 1, 2, 3, MAX_ORDER, MAX_ORDER + 1]))
  b = _floats(rng, shape, dtype)
  r = _floats(rng, shape if rng.random() < 0.6 else (), dtype)
  lead = shape[:rng.integers(0, len(shape) + 1)] if rng.random() < 0.3 else ()
  u = _floats(rng, lead + (order,), dtype)
  grad = [False, True, 2, 3, -1][rng.integers(5) if rng.random() < 0.3 else rng.integers(3)]
  return (b, r, u), dict(grad=grad)


def gen_transit(rng):
  from jaxext.transit import MAX_ORDER, NUM_PARAMS
  dtype = _dtype(rng, floats_only=rng.random() < 0.8)
  rows = _shape(rng, 2)
  points = _shape(rng, 1)
  t = _floats(rng, rows + points, dtype)
  q = _floats(rng, rows + (NUM_PARAMS if rng.random() < 0.9 else NUM_PARAMS + 1,), dtype)
  # Mostly physical parameters (period > 0, a > 1, ...) so that the kernel runs its full path.
  if rng.random() < 0.6 and q.size:
    q = np.abs(q) + np.asarray(1.5, dtype)
  order = int(rng.choice([0, 1, 2, MAX_ORDER, MAX_ORDER + 1]))
  u = _floats(rng, rows + (order,), dtype)
  grad = bool(rng.random() < 0.4)
  oversample = int(rng.choice([1, 1, 3, 0, -2, 2**31 + 1, 1000]))
  return (t, q, u), dict(grad=grad, oversample=oversample)


def gen_transit_lin(rng):
  """The forward-mode handler (jaxext_transit_lin_*): the operands and their tangents."""
  (t, q, u), params = gen_transit(rng)
  tangents = tuple(_floats(rng, x.shape if rng.random() < 0.9 else _shape(rng), x.dtype)
                   for x in (t, q, u))
  return (t, q, u) + tangents, dict(oversample=params["oversample"])


def gen_transit_vjp(rng):
  """The reverse-mode handler (jaxext_transit_vjp_*): the operands and a cotangent."""
  (t, q, u), params = gen_transit(rng)
  ct = _floats(rng, t.shape if rng.random() < 0.9 else _shape(rng), t.dtype)
  return (t, q, u, ct), dict(oversample=params["oversample"])


def gen_sph(rng):
  dtype = _dtype(rng, floats_only=rng.random() < 0.8)
  shape = _shape(rng, 2) + ((3,) if rng.random() < 0.9 else (int(rng.integers(0, 5)),))
  lmax = int(rng.choice([0, 1, 2, 3, 7, 12, 13, -1, -5, 40, 10**6]))
  return (_floats(rng, shape, dtype),), dict(lmax=lmax)


def _irreps(rng, y=False):
  terms = []
  for _ in range(rng.integers(0, 4)):
    mul = 1 if y and rng.random() < 0.8 else int(rng.choice([0, 1, 2, 3, 4]))
    l = int(rng.choice([0, 1, 2, 3, 7]))
    if rng.random() < 0.05:
      l = int(rng.choice([-1, 13]))
    terms.append((mul, l, int(rng.choice([1, -1]))))
  return tuple(terms)


def _module(name):
  import importlib
  return importlib.import_module(name)  # jaxext.equivariant's names are its functions


def _tp_setup(rng):
  """A random (irreps_x, irreps_y, irreps_out) key and its spec; a known-good key where the random
  one is unusable (bad irreps: their errors are checked elsewhere, the kernels are wanted here)."""
  tp = _module("jaxext.equivariant.tensor_product")
  tx = _irreps(rng)
  ty = _irreps(rng, y=True)
  to = tuple(t for t in _irreps(rng))
  if rng.random() < 0.7 and tx and ty:  # an output every x term reaches: paths exist
    to = tuple((m, l1, p1 * p2) for m, l1, p1 in tx for _, l2, p2 in ty[:1] if l1 >= 0)
  key = (tx, ty, to)
  try:
    return key, tp._spec(*key)
  except Exception:  # noqa: BLE001
    key = (((2, 0, 1), (2, 1, -1)), ((1, 0, 1), (1, 1, -1)), ((2, 0, 1), (2, 1, -1)))
    return key, tp._spec(*key)


def gen_tp(rng):
  key, spec = _tp_setup(rng)
  dtype = _dtype(rng, floats_only=rng.random() < 0.9)
  mode = int(rng.choice([3, 3, 3, 0, 1, 2, -1, 4]))
  rows = int(rng.choice([0, 1, 3, 8]))
  ops = []
  for s in (s for s in range(4) if s != (mode if 0 <= mode < 4 else 3)):
    d = spec.dims[s] if rng.random() < 0.95 else spec.dims[s] + 1
    ops.append(_floats(rng, (rows if rng.random() < 0.95 else rows + 1, d), dtype))
  return tuple(ops), dict(mode=mode, key=key)


def _conv_graph(rng):
  """A random graph's eight operands (conv()'s), some perturbed, and its sizes."""
  import jax.numpy as jnp
  cv = _module("jaxext.equivariant.conv")
  n_send, n_recv, e = (int(rng.choice([0, 1, 3, 6])) for _ in range(3))
  snd = rng.integers(0, max(n_send, 1), e).astype(np.int32)
  rcv = rng.integers(0, max(n_recv, 1), e).astype(np.int32)
  graph = [np.asarray(g) for g in cv._graph(jnp.asarray(snd), jnp.asarray(rcv), n_send, n_recv)]
  # Perturb some of the eight graph operands: out-of-range ids, shuffled orders, broken ranges.
  for _ in range(rng.integers(0, 3)):
    i = int(rng.integers(len(graph)))
    g = graph[i].copy()
    if g.size:
      j = int(rng.integers(g.size))
      g[j] = _perturb_int(rng, int(g[j]))
      if rng.random() < 0.3:
        rng.shuffle(g)
    elif rng.random() < 0.5:
      g = np.zeros(1, np.int32)
    if rng.random() < 0.1:
      g = g.astype(np.int64)
    graph[i] = g
  return graph, (n_send, e, n_recv)


def gen_conv(rng):
  key, spec = _tp_setup(rng)
  dtype = _dtype(rng, floats_only=rng.random() < 0.9)
  graph, (n_send, e, n_recv) = _conv_graph(rng)
  mode = int(rng.choice([3, 3, 3, 0, 1, 2]))
  rows = {0: n_send, 1: e, 2: e, 3: n_recv}
  ops = [_floats(rng, (rows[s], spec.dims[s]), dtype) for s in range(4) if s != mode]
  return tuple(ops) + tuple(graph), dict(mode=mode, key=key)


def gen_conv_factored(rng):
  """conv's factored weights (w = h @ kernel made by the handler, per receiver in chunks)."""
  key, spec = _tp_setup(rng)
  dtype = _dtype(rng, floats_only=rng.random() < 0.9)
  graph, (n_send, e, n_recv) = _conv_graph(rng)
  k = int(rng.choice([0, 1, 3, 9]))
  off = lambda n: n if rng.random() < 0.95 else n + 1
  ops = (_floats(rng, (n_send, spec.dims[0]), dtype), _floats(rng, (e, spec.dims[1]), dtype),
         _floats(rng, (off(e), k), dtype), _floats(rng, (off(k), off(spec.dims[2])), dtype))
  return ops + tuple(graph), dict(key=key)


def gen_conv_bwd(rng):
  """conv()'s cotangents: of x, y, h and kernel (factored: one walk by sender), or of x, y, w
  (any subset asked for)."""
  ops, params = gen_conv_factored(rng)
  factored = rng.random() < 0.6
  if not factored:  # plain weights (their width the irreps', but sometimes not)
    dw = _module("jaxext.equivariant.tensor_product")._spec(*params["key"]).dims[2]
    dw = dw if rng.random() < 0.95 else dw + 1
    ops = ops[:2] + (_floats(rng, (np.shape(ops[1])[0], dw), ops[0].dtype),) + ops[4:]
  n = 4 if factored else 3
  graph = ops[n:]
  n_recv = max(int(np.shape(graph[3])[0]) - 1, 0)
  dout = _module("jaxext.equivariant.tensor_product")._spec(*params["key"]).dims[3]
  off = lambda n: n if rng.random() < 0.95 else n + 1
  ct = _floats(rng, (off(n_recv), off(dout)), ops[0].dtype)
  which = tuple(bool(b) for b in rng.random(n) < 0.6)
  return ops[:n] + (ct,) + graph, dict(key=params["key"], which=which)


def gen_gather(rng):
  dtype = _dtype(rng)
  n = int(rng.choice([0, 1, 4]))
  x = _floats(rng, (n,) + _shape(rng, 2), dtype)
  idx = _ints(rng, (int(rng.choice([0, 1, 5])),), 0, n,
              np.int32 if rng.random() < 0.8 else np.int64)
  return (x, idx), {}


def gen_segment_sum(rng):
  dtype = _dtype(rng, floats_only=rng.random() < 0.8)
  e = int(rng.choice([0, 1, 5, 33]))
  num = int(rng.choice([0, 1, 3, 8, -1]))
  ids = _ints(rng, (e if rng.random() < 0.9 else e + 1,), 0, max(num, 1),
              np.int32 if rng.random() < 0.85 else np.int64)
  if rng.random() < 0.5:
    ids = np.sort(ids)
  data = _floats(rng, (e,) + _shape(rng, 2), dtype)
  return (data, ids), dict(num_segments=num, sorted=bool(rng.random() < 0.5))


_KERNEL = None


def _numba_kernel():
  global _KERNEL
  if _KERNEL is None:
    import jax
    import jaxext

    @jaxext.numba_kernel(outputs=lambda x, y: jax.ShapeDtypeStruct(x.shape, x.dtype))
    def axpy(x, y, out, scale=2.0):
      # Reads and writes only inside what each array has, whatever the shapes it is given.
      n = min(x.shape[0], y.shape[0], out.shape[0])
      for i in range(n):
        out[i] = scale * x[i] + y[i]

    _KERNEL = axpy
  return _KERNEL


def gen_numba_call(rng):
  import jax
  kern = _numba_kernel()
  dtype = np.dtype(rng.choice([np.float64, np.float32]))
  consistent = rng.random() < 0.6
  nbatch = int(rng.choice([0, 1, 2])) if consistent else int(rng.choice([0, 1, 2, -1]))
  size = int(rng.choice([0, 1, 3]))
  n = int(rng.choice([0, 2, 5]))
  batch_shape = (size,) * max(nbatch, 0)
  full = (1 << max(nbatch, 0)) - 1
  bmasks = [full if consistent else int(rng.choice([full, 0, 1, 7])) for _ in range(3)]
  x = _floats(rng, batch_shape[:bin(bmasks[0]).count("1")] + (n,), dtype)
  y = _floats(rng, batch_shape[:bin(bmasks[1]).count("1")] +
              (n if consistent else int(rng.choice([n, 1])),), dtype)
  out_shape = (n if consistent else int(rng.choice([n, 0, n + 3])),)
  if not consistent and rng.random() < 0.2:
    out_shape = ()
  outs = (jax.core.ShapedArray(out_shape, dtype),)
  scale = float(rng.choice([2.0, np.nan])) if consistent else int(rng.integers(-3, 3))
  items = (("scale", scale),)
  # `content` is the compiled code's id (a cache key); the lowering compiles for what it gets.
  return (x, y), dict(kernel=kern, content=int(rng.integers(1, 2**62)), items=items, outs=outs,
                      nbatch=nbatch, bmasks=tuple(bmasks))


def gen_dop853(rng):
  from jaxext import ode
  dtype = np.dtype(rng.choice([np.float64, np.float64, np.float32]))
  count = int(rng.choice([0, 1, 3]))
  model = ode.models.earth(j2=bool(rng.random() < 0.5))
  constants = list(model.constants())
  if rng.random() < 0.2:  # malformed constants: cut, extended, band count out of range
    which = rng.integers(3)
    if which == 0:
      constants = constants[:int(rng.integers(0, len(constants)))]
    elif which == 1:
      constants = constants + [1.0] * int(rng.integers(1, 5))
    else:
      constants[8] = float(rng.choice([-1, 1e9, np.nan, 3]))
      constants[5] = 1.0
  n = 6 if rng.random() < 0.85 else int(rng.choice([0, 1, 2, 3, 7]))
  np_ = int(rng.choice([0, 0, 1, 3]))
  r = 7000.0 + rng.uniform(0, 1000, count)
  y0 = np.zeros((count, n))
  if n >= 6:
    y0[:, 0] = r
    y0[:, 4] = np.sqrt(ode.models.EARTH_MU / r)
  if rng.random() < 0.2 and y0.size:
    y0.flat[int(rng.integers(y0.size))] = rng.choice(EDGE)
  params = np.abs(_floats(rng, (count, np_), np.float64, edge=0.1))
  span = np.tile([0.0, float(rng.choice([1000.0, -500.0, 0.0, 1e7]))], (count, 1))
  if rng.random() < 0.15 and span.size:
    span.flat[int(rng.integers(span.size))] = rng.choice([np.nan, np.inf, 1e300])
  m = int(rng.choice([0, 1, 4]))
  t_eval = np.sort(rng.uniform(0, 1000.0, m))
  if rng.random() < 0.2 and m:
    t_eval = t_eval[::-1].copy()
  # Half the cases keep dop853's own kind of attributes (the kernel runs), half perturb them.
  bad = rng.random() < 0.5
  pick = lambda good, wrong: (rng.choice(good + wrong) if bad else rng.choice(good)).item()
  tol = lambda: tuple(float(pick([1e-8, 1e-3], [0.0, -1.0, np.nan, np.inf]))
                      for _ in range(int(pick([n], [0, 1, n + 1]))))
  rtol, atol = tol(), tol()
  events = []
  for _ in range(int(rng.choice([0, 0, 1, 2]))):
    events.append((int(pick([0], [1, 5])), 0, float(pick([6800.0, 0.0], [np.nan])),
                   int(pick([0, 1, -1], [7])), int(pick([1, 2, 0], [-1]))))
  if bad and rng.random() < 0.1:
    events = [(0, 0, 6800.0, 0, 1)] * (_module("jaxext.ode.dop853").MAX_EVENTS + 1)
  cast = lambda a: a.astype(dtype)
  return (cast(y0), cast(params), cast(span), cast(t_eval)), dict(
      user=None, name="fuzz", model=tuple(constants), rtol=rtol, atol=atol,
      first_step=float(pick([0.0, 0.0, 1.0, 1e9], [-1.0, np.nan])),
      max_step=float(pick([np.inf, np.inf, 10.0], [0.0, -1.0, np.nan])),
      max_steps=int(pick([2000, 1000, 1], [0, -5])), events=tuple(events),
      event_slots=int(pick([1, 1, 2], [0, -1])), sensitivities=bool(rng.random() < 0.3))


def _prim(name):
  import jaxext
  from jaxext import equivariant, ode, transit
  from jaxext.numba_bridge import kernel as nk
  return {
      "kepler_p": jaxext.kepler_p, "limbdark_p": jaxext.limbdark_p,
      "transit_p": transit.transit_p, "transit_lin_p": transit.transit_lin_p,
      "transit_vjp_p": transit.transit_vjp_p, "sph_p": equivariant.sph_p, "tp_p": equivariant.tp_p,
      "conv_p": equivariant.conv_p, "gather_p": equivariant.gather_p,
      "conv_factored_p": _module("jaxext.equivariant.conv")._conv_factored_p,
      "conv_bwd_p": _module("jaxext.equivariant.conv")._conv_bwd_p,
      "segment_sum_p": equivariant.segment_sum_p, "numba_call_p": nk.numba_call_p,
      "dop853_p": ode.dop853_p,
  }[name]


GENERATORS = {
    "kepler_p": gen_kepler, "limbdark_p": gen_limbdark, "transit_p": gen_transit,
    "transit_lin_p": gen_transit_lin, "transit_vjp_p": gen_transit_vjp,
    "sph_p": gen_sph, "tp_p": gen_tp, "conv_p": gen_conv, "gather_p": gen_gather,
    "conv_factored_p": gen_conv_factored, "conv_bwd_p": gen_conv_bwd,
    "segment_sum_p": gen_segment_sum, "numba_call_p": gen_numba_call, "dop853_p": gen_dop853,
}


def run_case(name: str, seed: int) -> list[str]:
  """One case, eagerly then under jit: 'result' or 'error: <type>: ...' per way, or one
  'skipped (...)' when the generator itself refused (raises otherwise)."""
  import jax
  rng = np.random.default_rng([seed, sum(map(ord, name))])
  try:
    operands, params = GENERATORS[name](rng)
  except Exception as err:  # noqa: BLE001 (the generator's own checks, e.g. a bad key)
    return [f"skipped ({type(err).__name__}: {str(err)[:200]})"]
  prim = _prim(name)
  outcomes = []
  for way in ("eager", "jit"):
    fn = (lambda *a: prim.bind(*a, **params))
    if way == "jit":
      fn = jax.jit(fn)
    try:
      outs = fn(*operands)
      outs = outs if isinstance(outs, (tuple, list)) else (outs,)
      for o in outs:
        np.asarray(o)  # waits for the computation
      outcomes.append("result")
    except Exception as err:  # noqa: BLE001 (any Python exception is an accepted outcome)
      outcomes.append(f"error: {type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
  return outcomes


def child(name: str, seeds: list[int], progress: str) -> None:
  import jax
  jax.config.update("jax_enable_x64", True)
  import jaxext  # noqa: F401
  with open(progress, "a") as log:
    for seed in seeds:
      log.write(json.dumps({"start": seed}) + "\n")
      log.flush()
      os.fsync(log.fileno())
      if name == "selftest" and seed == 1:
        os.kill(os.getpid(), signal.SIGSEGV)  # the harness must report this case
      if name == "selftest" and seed == 2:
        time.sleep(3600)  # the harness must report this case as a hang
      outcome = ["result"] if name == "selftest" else run_case(name, seed)
      log.write(json.dumps({"done": seed, "outcome": outcome}) + "\n")
      log.flush()


# ---------------------------------------------------------------------------------------------
# The parent: runs a primitive's cases in children, restarting after a case that kills one.


def fuzz(name: str, seeds: list[int], case_timeout: float = CASE_TIMEOUT_S):
  """{seed: outcome} for every case: the list of run_case's outcomes, or a string 'CRASH (...)'
  for a case that killed the child and 'HANG (...)' for one that made no progress for
  `case_timeout` seconds (the child is killed and the next case runs in a new one)."""
  results: dict[int, list[str] | str] = {}
  remaining = list(seeds)
  while remaining:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as progress, \
        tempfile.TemporaryFile("w+") as stderr:
      cmd = [sys.executable, __file__, "--child", name, progress.name,
             ",".join(map(str, remaining))]
      proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
      started, seen, last = None, 0, time.monotonic()
      while True:
        rc = proc.poll()
        lines = open(progress.name).read().splitlines()
        for line in lines[seen:]:
          rec = json.loads(line)
          if "start" in rec:
            started = rec["start"]
          else:
            results[rec["done"]] = rec["outcome"]
            started = None
        if len(lines) > seen:
          seen, last = len(lines), time.monotonic()
        if rc is not None:
          break
        if time.monotonic() - last > case_timeout:
          proc.kill()
          proc.wait()
          rc = "hang"
          break
        time.sleep(0.1)
      stderr.seek(0)
      tail = stderr.read()[-2000:]
    if rc == 0 and started is None and all(s in results for s in remaining):
      break
    if started is None:  # died before its first case (or between cases): nothing to blame
      raise AssertionError(f"fuzz child for {name} failed outside any case (rc {rc}):\n{tail}")
    if rc == "hang":
      results[started] = f"HANG (no progress in {case_timeout:g} s)"
    else:
      why = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
      results[started] = f"CRASH ({why}): {tail.strip().splitlines()[-1:] if tail else ''}"
    remaining = [s for s in remaining if s not in results]
  return results


def _show(outcome) -> str:
  return outcome if isinstance(outcome, str) else ", ".join(outcome)


def _seeds(name):
  only = os.environ.get("JAXEXT_FUZZ_ONLY")
  if only:
    prim, _, seed = only.partition(":")
    return [int(seed)] if prim == name else []
  return list(range(CASES))


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_fuzz_primitive(name):
  seeds = _seeds(name)
  if not seeds:
    pytest.skip("JAXEXT_FUZZ_ONLY selects another primitive")
  results = fuzz(name, seeds)
  for seed, outcome in sorted(results.items()):
    print(f"{name} seed {seed}: {_show(outcome)}")
  failures = {s: o for s, o in results.items() if isinstance(o, str)}  # crashes and hangs
  assert not failures, "\n".join(
      f"{name} seed {s}: {o}  (rerun: JAXEXT_FUZZ_ONLY={name}:{s})" for s, o in failures.items())
  assert sorted(results) == sorted(seeds)
  # The cases must reach the kernels: eager results, not only errors from the abstract evaluation.
  ran = sum(o[0] == "result" for o in results.values())
  assert ran >= len(seeds) // 4 or len(seeds) < 8, (
      f"only {ran} of {len(seeds)} {name} cases produced a result: the generator no longer "
      f"reaches the kernel; outcomes: {sorted(set(map(_show, results.values())))}")


MALFORMED = {
    # What the fuzzing found the primitives accepted before checking (a hang for sph_p's lmax,
    # MLIR verifier errors or IndexErrors naming nothing for the others).
    "sph_p lmax": ("sph_p", lambda: ((np.ones((2, 3)),), dict(lmax=10**6)), "lmax"),
    "tp_p mode": ("tp_p", lambda: ((np.ones((1, 1)),) * 3, dict(
        mode=4, key=(((1, 0, 1),), ((1, 0, 1),), ((1, 0, 1),)))), "mode"),
    "tp_p key": ("tp_p", lambda: ((np.ones((1, 1)),) * 3, dict(
        mode=3, key=(((1, -1, 1),), ((1, 0, 1),), ((1, 0, 1),)))), "irreps_x"),
    "conv_p graph dtype": ("conv_p", lambda: (
        (np.ones((1, 1)),) * 3 + (np.zeros(1, np.int64), np.zeros(1, np.int32),
                                  np.zeros(1, np.int32), np.array([0, 1], np.int32),
                                  np.zeros(1, np.int32), np.array([0, 1], np.int32)),
        dict(mode=3, key=(((1, 0, 1),), ((1, 0, 1),), ((1, 0, 1),)))), "int32"),
    "segment_sum_p ids dtype": ("segment_sum_p", lambda: (
        (np.ones((2, 1)), np.zeros(2, np.int64)), dict(num_segments=1, sorted=False)), "int32"),
    "segment_sum_p negative count": ("segment_sum_p", lambda: (
        (np.ones((2, 1)), np.zeros(2, np.int32)), dict(num_segments=-1, sorted=False)),
        "num_segments"),
    "gather_p dtype": ("gather_p", lambda: ((np.ones((2, 1), np.int32), np.zeros(1, np.int32)),
                                            {}), "float32"),
    "transit_p oversample": ("transit_p", lambda: (
        (np.ones(3), np.ones((10,)), np.ones((2,))), dict(grad=False, oversample=2**21)),
        "oversample"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bind_raises_naming_the_parameter(case):
  import jax
  jax.config.update("jax_enable_x64", True)
  name, make, word = MALFORMED[case]
  operands, params = make()
  with pytest.raises(TypeError, match=word):
    jax.jit(lambda *a: _prim(name).bind(*a, **params))(*operands)


def test_numba_call_results_carry_every_batch_axis():
  """A result mask without the batch axes would tell the kernel core shapes its compiled
  signature does not have (reads and writes past the arrays in a general kernel)."""
  import jax
  jax.config.update("jax_enable_x64", True)
  kern = _numba_kernel()
  x = np.ones((3, 4))
  params = dict(kernel=kern, content=1, items=(("scale", 2.0),),
                outs=(jax.core.ShapedArray((4,), np.float64),), nbatch=1, bmasks=(1, 1, 0))
  with pytest.raises(TypeError, match="every result carries every batch axis"):
    jax.jit(lambda a, b: _prim("numba_call_p").bind(a, b, **params))(x, x)
  good = dict(params, bmasks=(1, 1, 1))
  (out,) = jax.jit(lambda a, b: _prim("numba_call_p").bind(a, b, **good))(x, x)
  np.testing.assert_array_equal(out, 3 * x)


def test_malformed_dop853_attributes_raise():
  import jax
  from jaxext import ode
  jax.config.update("jax_enable_x64", True)
  y0, p, span, te = np.ones((1, 6)), np.zeros((1, 0)), np.array([[0.0, 1.0]]), np.zeros(0)
  good = dict(user=None, name="m", model=tuple(ode.models.earth().constants().tolist()),
              rtol=(1e-6,) * 6, atol=(1e-9,) * 6, first_step=0.0, max_step=np.inf,
              max_steps=1000, events=(), event_slots=1, sensitivities=False)
  jax.jit(lambda *a: ode.dop853_p.bind(*a, **good))(y0, p, span, te)  # the baseline runs
  for change, word in [(dict(rtol=()), "rtol"), (dict(atol=(np.nan,) * 6), "atol"),
                       (dict(model=()), "model"), (dict(max_steps=0), "max_steps"),
                       (dict(event_slots=0, events=((0, 0, 6800.0, 0, 1),)), "event_slots"), (dict(first_step=-1.0), "first_step"),
                       (dict(max_step=0.0), "max_step"),
                       (dict(events=((1, 0, 0.0, 0, 1),)), r"events\[0\]"),
                       (dict(events=((0, 0, 6800.0, 7, 1),)), r"events\[0\]"),
                       (dict(dense_steps=-1), "dense_steps"),
                       (dict(dense_steps=2.5), "dense_steps")]:
    with pytest.raises(TypeError, match=word):
      jax.jit(lambda *a: ode.dop853_p.bind(*a, **{**good, **change}))(y0, p, span, te)
  # A dense output smaller than the steps taken: the first steps kept, nothing written past them
  # (ASan watches the buffers under --config=asan).
  outs = jax.jit(lambda *a: ode.dop853_p.bind(*a, **{**good, "dense_steps": 2}))(
      np.array([[7000.0, 0, 0, 0, 7.5, 0]]), p, np.array([[0.0, 3000.0]]), te)
  dense_t, dense_f = outs[-2:]
  assert dense_t.shape == (1, 3) and dense_f.shape == (1, 2, 8, 6)
  assert np.all(np.isfinite(dense_t)) and np.all(np.isfinite(dense_f)) and outs[3][0, 2] > 2


def test_dop853_handler_refuses_sizes_whose_products_overflow():
  """The handler checks its result sizes against dense_steps with overflow-checked products: a
  dense_steps near 2**62 whose products wrap to the small buffers given is refused, not used."""
  import jax
  jax.config.update("jax_enable_x64", True)
  from jaxext import _ffi
  _ffi.register_all()
  count, n = 4, 6
  shapes = [((count, 0, n), np.float64), ((count,), np.float64), ((count, n), np.float64),
            ((count, 4), np.int32), ((count, 0, 1), np.float64), ((count, 0, 1, n), np.float64),
            ((count, 0), np.int32), ((count, 1), np.float64), ((count, 0, 8, n), np.float64)]
  from jaxext.ode import models
  call = jax.ffi.ffi_call("jaxext_dop853", [jax.ShapeDtypeStruct(s, d) for s, d in shapes])
  attrs = dict(rhs_id=np.int64(0), name="m", model=np.asarray(models.earth().constants()),
               rtol=np.full(n, 1e-6), atol=np.full(n, 1e-9), first_step=np.float64(0),
               max_step=np.float64(np.inf), max_steps=np.int64(100), n_events=np.int64(0),
               event_kinds=np.zeros(1, np.int64), event_ids=np.zeros(1, np.int64),
               event_consts=np.zeros(1), event_directions=np.zeros(1, np.int64),
               event_terminal=np.zeros(1, np.int64), jac_id=np.int64(0),
               sensitivities=np.int64(0), dense_steps=np.int64(2**62), device_code="")
  y0 = np.tile([7000.0, 0, 0, 0, 7.5, 0], (count, 1))
  args = (y0, np.zeros((count, 0)), np.tile([0.0, 10.0], (count, 1)), np.zeros(0))
  with pytest.raises(Exception, match="dense output result shapes disagree"):
    jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(*args))


@pytest.mark.skipif("libasan" not in os.environ.get("LD_PRELOAD", ""),
                    reason="only under --config=asan (.bazelrc)")
def test_handlers_are_instrumented_under_asan():
  """The sanitizer suite runs instrumented handlers, not an uninstrumented build from a cache."""
  from jaxext.cpu import _cpu_ops
  with open(_cpu_ops.__file__, "rb") as f:
    code = f.read()
  assert b"__asan_report_load" in code and b"__ubsan_handle_" in code


def test_harness_reports_a_crash_and_a_hang():
  """The detector itself: a case that dies by SIGSEGV and one that hangs are reported, and the
  next case still runs."""
  results = fuzz("selftest", [0, 1, 2, 3], case_timeout=20)
  assert results[0] == ["result"] and results[3] == ["result"], results
  assert results[2] == "HANG (no progress in 20 s)", results
  # SIGSEGV; under AddressSanitizer (--config=asan) its handler reports it and aborts instead.
  assert results[1].startswith(("CRASH (signal SIGSEGV)", "CRASH (signal SIGABRT)")), results


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--child":
  child(sys.argv[2], [int(s) for s in sys.argv[4].split(",")], sys.argv[3])
