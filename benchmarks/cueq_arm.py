"""cuequivariance-jax (0.13) arm of benchmarks/equivariant_bench.py's MACE-like layer.

    python benchmarks/cueq_arm.py [--method naive|uniform_1d]    # self-check against e3nn

`cueq_layer(nodes, weights)` returns f(pos, wp, x, snd, rcv) -> (N, 576), the same function as
equivariant_bench.layer("e3nn", weights, nodes): cuex.spherical_harmonics on the edge vectors,
then ONE cuex.segmented_polynomial call that gathers x[senders], takes the channelwise ("uvu")
product with Y and the per-edge weights and scatter-adds into receivers (no E x 576 array; on GPU
method "uniform_1d" is cuequivariance's fused CUDA kernel, float32 and float64; elsewhere
cuequivariance falls back to "naive", pure JAX, with a warning).

The descriptor is built here rather than taken from cue.descriptors.channelwise_tensor_product,
which gives every path its own output block (13 blocks "64x0e+64x1o+64x2e+64x0e+..." to be summed
afterwards) and its own normalisation. Ours has subscripts "u,iu,j,ku+ijk": weights (13 segments
of 64, in e3nn's instruction order, so e3nn's weight vector is used as is), x and the output in
cuequivariance's ir_mul layout (segments (ir.dim, 64)), Y (multiplicity 1), paths summed into the
output blocks with e3nn's coefficients: cue.clebsch_gordan = sqrt(2 l3 + 1) x e3nn's wigner 3j
(same real basis), and e3nn's "component" irrep / "element" path normalisation multiplies each
path by sqrt((2 l3 + 1) / n_paths(out)), i.e. coefficient = cue CG / sqrt(n_paths(out)).
uniform_1d needs the ir_mul layout (coefficient modes leading): x and the output are transposed
from / to e3nn's mul_ir layout (N x 576 each, cheap next to the E-sized work).
"""

import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

try:
  import cuequivariance as cue
  import cuequivariance_jax as cuex
except ImportError:
  cue = cuex = None

IRREPS_X = "64x0e+64x1o+64x2e"
IRREPS_SH = "0e+1o+2e+3o"
IRREPS_OUT = "64x0e+64x1o+64x2e"
# cuequivariance's execution method; None: its CUDA kernel on GPU, its pure-JAX fallback elsewhere.
METHOD = None
N_BASIS, HIDDEN, CUTOFF = 8, 64, 10.0


def default_method():
  return "uniform_1d" if jax.default_backend() == "gpu" else "naive"


def available():
  return cuex is not None


def paths(irreps_x=IRREPS_X, irreps_sh=IRREPS_SH, irreps_out=IRREPS_OUT):
  """(i1, i2, io) of every path, in jaxext.equivariant.paths' (= the e3nn instructions') order."""
  tx, ty, to = (cue.Irreps(cue.O3, s) for s in (irreps_x, irreps_sh, irreps_out))
  return [(i1, i2, io) for i1, (m1, ir1) in enumerate(tx) for i2, (_, ir2) in enumerate(ty)
          for io, (mo, iro) in enumerate(to) if m1 == mo and iro in ir1 * ir2]


def polynomial():
  """x[senders] (x) Y -> out, "uvu" weights, e3nn's coefficients; operands w, x, Y -> out."""
  tx, ty, to = (cue.Irreps(cue.O3, s) for s in (IRREPS_X, IRREPS_SH, IRREPS_OUT))
  assert all(m == 1 for m, _ in ty)
  ps = paths()
  d = cue.SegmentedTensorProduct.from_subscripts("u,iu,j,ku+ijk")
  for m, ir in tx:
    d.add_segment(1, (ir.dim, m))
  for _, ir in ty:
    d.add_segment(2, (ir.dim,))
  for m, ir in to:
    d.add_segment(3, (ir.dim, m))
  for i1, i2, io in ps:  # each path adds its own weight segment (operand 0) of 64
    n_in = sum(p[2] == io for p in ps)
    cg = cue.clebsch_gordan(tx[i1].ir, ty[i2].ir, to[io].ir)
    assert cg.shape[0] == 1
    d.add_path(None, i1, i2, io, c=cg[0] / math.sqrt(n_in))
  return cue.SegmentedPolynomial.eval_last_operand(d)


def mul_ir_to_ir_mul(a, irreps, inverse=False):
  out, i = [], 0
  for m, ir in cue.Irreps(cue.O3, irreps):
    blk = a[..., i:i + m * ir.dim]
    shape = (ir.dim, m) if inverse else (m, ir.dim)
    out.append(jnp.swapaxes(blk.reshape(a.shape[:-1] + shape), -1, -2).reshape(blk.shape))
    i += m * ir.dim
  return jnp.concatenate(out, axis=-1)


def cueq_sh(vec):
  """(E, 16), equal to equivariant_bench.e3nn_sh (normalize=True, component normalisation)."""
  rep = cue.IrrepsAndLayout(cue.Irreps(cue.O3, "1o"), cue.ir_mul)
  ls = [ir.l for _, ir in cue.Irreps(cue.O3, IRREPS_SH)]
  return cuex.spherical_harmonics(ls, cuex.RepArray(rep, vec), normalize=True).array


def edge_weights(wp, vec, weights):
  """A copy of equivariant_bench.edge_weights (so that this file runs without jaxext)."""
  if weights == "random":
    return wp
  w1, w2 = wp
  r = jnp.sqrt(jnp.sum(vec * vec, axis=-1, keepdims=True))
  n = jnp.arange(1, N_BASIS + 1, dtype=vec.dtype)
  basis = math.sqrt(2 / CUTOFF) * jnp.sin(n * (math.pi / CUTOFF) * r) / r
  h = jax.nn.silu(basis @ w1 / math.sqrt(N_BASIS))
  return h @ w2 / math.sqrt(HIDDEN)


def cueq_layer(nodes, weights, method=None, edge_weights=edge_weights):
  """f(pos, wp, x, snd, rcv) -> (nodes, 576): equivariant_bench.layer("e3nn", weights, nodes)."""
  poly, method = polynomial(), method or METHOD or default_method()

  def f(pos, wp, x, snd, rcv):
    vec = pos[rcv] - pos[snd]
    w = edge_weights(wp, vec, weights)
    y = cueq_sh(vec)
    [out] = cuex.segmented_polynomial(
        poly, [w, mul_ir_to_ir_mul(x, IRREPS_X), y],
        [jax.ShapeDtypeStruct((nodes, poly.outputs[0].size), x.dtype)],
        indices=[None, snd, None, rcv], method=method, name="cueq_conv")
    return mul_ir_to_ir_mul(out, IRREPS_OUT, inverse=True)
  return f


# --- self-check against e3nn ---------------------------------------------------------------------

def _reference():
  """(make_problem, layer) from equivariant_bench, or local copies when jaxext is not built."""
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  try:
    import equivariant_bench as eb
    return eb.make_problem, eb.layer, eb.edge_weights, "equivariant_bench"
  except ImportError as e:
    print(f"equivariant_bench not importable ({e}); using local copies of its e3nn arm")
  import e3nn_jax as e3nn
  from e3nn_jax.legacy import FunctionalTensorProduct
  tp = FunctionalTensorProduct(e3nn.Irreps(IRREPS_X), e3nn.Irreps(IRREPS_SH),
                               e3nn.Irreps(IRREPS_OUT), [p + ("uvu", True) for p in paths()])

  def make_problem(nodes, edges, weights, seed=0):
    rng = np.random.default_rng(seed)
    snd = rng.integers(nodes, size=edges)
    rcv = (snd + rng.integers(1, nodes, size=edges)) % nodes
    pos, x = rng.normal(size=(nodes, 3)), rng.normal(size=(nodes, 576))
    wp = (rng.normal(size=(edges, 832)) if weights == "random" else
          (rng.normal(size=(N_BASIS, HIDDEN)), rng.normal(size=(HIDDEN, 832))))
    return pos, wp, x, snd.astype(np.int32), rcv.astype(np.int32)

  def layer(arm, weights, nodes):
    def f(pos, wp, x, snd, rcv):
      vec = pos[rcv] - pos[snd]
      w = edge_weights(wp, vec, weights)
      y = e3nn.spherical_harmonics(IRREPS_SH, vec, normalize=True, normalization="component").array
      row = lambda a, b, c: tp.left_right(c, e3nn.IrrepsArray(IRREPS_X, a),
                                          e3nn.IrrepsArray(IRREPS_SH, b)).array
      return jax.ops.segment_sum(jax.vmap(row)(x[snd], y, w), rcv, nodes)
    return f
  return make_problem, layer, edge_weights, "local copy"


def main():
  jax.config.update("jax_enable_x64", True)
  method = sys.argv[sys.argv.index("--method") + 1] if "--method" in sys.argv else default_method()
  make_problem, layer, ew, src = _reference()
  nodes, edges = 100, 3000
  print(f"cuequivariance {cue.__version__}, cuequivariance_jax {cuex.__version__}, jax "
        f"{jax.__version__}, {jax.devices()[0].platform}; method {method}; e3nn reference: {src}; "
        f"{len(paths())} paths, weights {polynomial().inputs[0].size}")
  rel = lambda a, b: float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
                           / np.max(np.abs(np.asarray(b, np.float64))))
  for weights in ("mlp", "random"):
    problem = make_problem(nodes, edges, weights)
    for dtype, tol in (("float64", 1e-10), ("float32", 1e-4)):
      cast = lambda a: jnp.asarray(a, dtype)
      pos, wp, x, snd, rcv = problem
      args = (cast(pos), jax.tree.map(cast, wp), cast(x), jnp.asarray(snd), jnp.asarray(rcv))
      fns = {"cueq": cueq_layer(nodes, weights, method, ew), "e3nn": layer("e3nn", weights, nodes)}
      res = {}
      for arm, f in fns.items():
        loss = lambda *a, f=f: jnp.sum(f(*a) ** 2)
        out = jax.jit(f)(*args)
        val, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(*args)
        assert out.dtype == jnp.dtype(dtype), (arm, out.dtype)
        res[arm] = dict(out=out, loss=val, d_pos=grads[0], d_wp=jax.tree.leaves(grads[1]))
      d = {k: max(rel(a, b) for a, b in zip(jax.tree.leaves(res["cueq"][k]),
                                             jax.tree.leaves(res["e3nn"][k])))
           for k in res["e3nn"]}
      print(f"  {weights:6s} {dtype}: max |cueq - e3nn| / max |e3nn|: " +
            ", ".join(f"{k} {v:.1e}" for k, v in d.items()))
      assert max(d.values()) < tol, (weights, dtype, d)
  print("ok")


if __name__ == "__main__":
  main()
