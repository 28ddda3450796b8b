"""jax-md's NequIP on jaxext's kernels: the same model, the same parameters, the same numbers.

    from jax_md import energy
    from jaxext.equivariant import jax_md as jaxext_jax_md

    with jaxext_jax_md.nequip():        # models traced inside this block use jaxext's kernels
      init_fn, energy_fn = energy.nequip_neighbor_list(displacement, box, cfg)
      params = init_fn(key, positions, nbrs)
      e, g = jax.jit(jax.value_and_grad(energy_fn, argnums=1))(params, positions, nbrs)

    jaxext_jax_md.install()             # or for the whole program (uninstall() undoes it)

jax-md (0.2.29, `jax_md._nn.nequip`) builds its NequIP interaction on e3nn-jax: spherical
harmonics of the edge vectors, a per-edge "uvu" tensor product of the sender's features with them
(weights from a radial MLP), and `e3nn.index_add` onto the receivers. Inside `nequip()` (or after
`install()`), that module's names resolve to jaxext's instead:

* `NequIPConvolution` becomes a subclass of jax-md's own, with the same name, attributes and
  parameter tree, whose gather, tensor product and scatter are one fused kernel
  (`e3nn_ops.tensor_product_conv`: no per-edge array of the product). Its radial MLP (`MLP`, the
  same parameters) returns its last hidden layer and last kernel (columns in the fused kernel's
  order), whose product the fused kernel makes per receiver: no per-edge array of weights
  either. The self-connection, the linear layers and the gate stay e3nn-jax's.
* its `e3nn.spherical_harmonics` and `e3nn.index_add` become jaxext's (`spherical_harmonics`,
  the deterministic `segment_sum`).

jax-md looks these names up while a model is traced, so the substitution applies to what is traced
(the first call of a jitted function) inside the block; a function already traced keeps what it was
traced with. Parameters initialised either way are identical and interchangeable. Energies, forces
and parameter gradients agree with jax-md's own to rounding (tests/jax_md_test.py).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

try:
  import e3nn_jax as e3nn
  import flax.linen as nn
  from jax_md._nn import nequip as _nequip
  from jax_md._nn import util as _nn_util
except ImportError as err:  # pragma: no cover - exercised only where jax-md is missing
  raise ImportError(
      f"jaxext.equivariant.jax_md needs jax-md (0.2.29), flax and e3nn-jax (missing: {err.name})"
  ) from err

from jaxext.equivariant import e3nn_ops
from jaxext.equivariant.flax import _dense_factors
from jaxext.equivariant import segment_sum as _segment_sum
from jaxext.equivariant import spherical_harmonics as _spherical_harmonics

__all__ = ["install", "nequip", "uninstall"]

_ORIGINAL = {"e3nn": _nequip.e3nn, "NequIPConvolution": _nequip.NequIPConvolution}


def _sh(irreps_out: Any, input: Any, normalize: bool = False, normalization: Any = None,
        **unused: Any) -> Any:
  """e3nn.spherical_harmonics on jaxext's kernel; an IrrepsArray back whatever came in."""
  out = _spherical_harmonics(irreps_out, input, normalize=normalize, normalization=normalization)
  if isinstance(out, e3nn.IrrepsArray):
    return out
  return e3nn.IrrepsArray(_sh_irreps(irreps_out), out)


def _sh_irreps(irreps_out: Any) -> Any:
  """The irreps e3nn.spherical_harmonics gives for its first argument (an int l: that degree; a
  list: those degrees; parity (-1)^l). Not jaxext's own wrapping of a "1o" IrrepsArray: that
  refuses odd-l harmonics labelled even ("1x1e", jax-md's default sh_irreps), which e3nn-jax
  accepts for plain arrays."""
  if isinstance(irreps_out, (int, np.integer)):
    irreps_out = [int(irreps_out)]
  if isinstance(irreps_out, (list, tuple)) and all(isinstance(l, (int, np.integer))
                                                   for l in irreps_out):
    return e3nn.Irreps([(1, (int(l), (-1) ** int(l))) for l in irreps_out])
  return e3nn.Irreps(irreps_out)


def _index_add(indices: Any, input: Any, *, out_dim: int, **unused: Any) -> Any:
  """e3nn.index_add(indices, input, out_dim=n) as jaxext's deterministic segment_sum."""
  return _segment_sum(input, indices, out_dim)


class _E3nn(types.ModuleType):
  """e3nn_jax, but for the two functions above."""

  spherical_harmonics = staticmethod(_sh)
  index_add = staticmethod(_index_add)

  def __getattr__(self, name: str) -> Any:
    return getattr(e3nn, name)


_E3NN = _E3nn("e3nn_jax (jaxext.equivariant.jax_md)")


class MLP(_nn_util.MLP):
  """jax-md's radial MLP (its parameters: Dense_0..k, same shapes and initialisers), returned as
  its last hidden layer and its last layer's kernel, whose columns come in `order` (the fused
  kernel's): the weights are hidden @ kernel, which the fused kernel makes per receiver
  (`weights_kernel`), so no (edges x weights) array is made in the forward pass, gathered or
  scatter-added. jax-md's MLP has no bias (use_bias=False), which this relies on."""

  order: tuple[int, ...] = ()

  @nn.compact
  def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    if self.use_bias:
      raise NotImplementedError("the factored radial MLP needs a last layer without bias")
    phi = _nn_util.get_nonlinearity_by_name(self.nonlinearity)
    for width in self.features[:-1]:
      x = phi(nn.Dense(width, use_bias=self.use_bias,
                       kernel_init=_nn_util.normal(self.scalar_mlp_std))(x))
    # nn.Dense makes (and initialises) the kernel as jax-md's, then returns what its dot_general
    # returns (no bias to add): the two factors.
    hidden, kernel = nn.Dense(self.features[-1], use_bias=False, kernel_init=_nn_util.normal(1.0),
                              dot_general=_dense_factors)(x)
    return hidden, kernel[:, np.asarray(self.order, np.int32)]


class NequIPConvolution(_nequip.NequIPConvolution):
  """jax-md's NequIP convolution (same attributes and parameters) with the message passing fused.

  The computation, step by step as jax-md's: the output irreps (scalars and gated non-scalars that
  some path reaches, then the gates); the self-connection; a linear map; the messages; division by
  the average neighbour count; a second linear map; the self-connection added; the gate."""

  @nn.compact
  def __call__(self, node_features: Any, node_attributes: Any, edge_sh: Any, edge_src: Any,
               edge_dst: Any, edge_embedded: Any) -> Any:
    Irrep, Irreps = e3nn.Irrep, e3nn.Irreps
    reach = lambda ir: _nequip.tp_path_exists(node_features.irreps, edge_sh.irreps, ir)
    scalars = Irreps([(m, ir) for m, ir in self.hidden_irreps if Irrep(ir).l == 0 and reach(ir)])
    gated = Irreps([(m, ir) for m, ir in self.hidden_irreps if Irrep(ir).l > 0 and reach(ir)])
    gate_ir = "0e" if reach("0e") else "0o"
    irreps_out = scalars + Irreps([(m, gate_ir) for m, _ in gated]) + gated

    if self.use_sc:
      self_connection = _nequip.FullyConnectedTensorProductE3nn(irreps_out)(node_features,
                                                                            node_attributes)
    h = _nequip.Linear(node_features.irreps)(node_features)

    # jax-md's paths, in its loop order: (term of h, output irrep, multiplicity). The radial MLP
    # gives mul weights per path in this order; e3nn-jax drops the paths whose input term is
    # statically zero (zero_flags: the first layer's non-scalars), and the fused kernel takes the
    # remaining paths' weights in the order of its sorted output.
    paths = [(i, ir_out, mul) for i, (mul, ir1) in enumerate(node_features.irreps)
             for _, ir2 in edge_sh.irreps for ir_out in ir1 * ir2 if ir_out in irreps_out]
    offsets = np.concatenate([[0], np.cumsum([mul for _, _, mul in paths])]).astype(np.int64)
    kept = [k for k, (i, _, _) in enumerate(paths) if not h.zero_flags[i]]
    _, sorting, _ = Irreps([(paths[k][2], paths[k][1]) for k in kept]).sort()
    by_sorted = np.argsort(sorting)
    order = np.concatenate([np.arange(offsets[kept[j]], offsets[kept[j] + 1])
                            for j in by_sorted]) if kept else np.zeros(0, np.int64)
    features = (self.radial_net_n_hidden,) * self.radial_net_n_layers + (int(offsets[-1]),)
    hidden, kernel = MLP(features, self.radial_net_nonlinearity, use_bias=False,
                         scalar_mlp_std=self.scalar_mlp_std,
                         order=tuple(int(c) for c in order))(edge_embedded)

    dtype = h.dtype
    # Not regrouped: the paths in jax-md's loop order over h's terms as they come (unsorted or
    # repeated irreps included), stably sorted by output irrep as jax-md sorts them; then merged
    # as its simplify() merges them.
    messages = e3nn_ops.tensor_product_conv(
        h.remove_zero_chunks(), edge_sh, edge_src, edge_dst, h.shape[0], weights=hidden,
        weights_kernel=kernel, filter_ir_out=irreps_out, regroup_output=False).simplify()
    h = messages.astype(dtype) / self.n_neighbors
    h = _nequip.Linear(irreps_out)(h)
    if self.use_sc:
      h = h + self_connection
    act = lambda parity: _nequip.get_nonlinearity_by_name(self.nonlinearities[parity])
    h = e3nn.gate(h, even_act=act("e"), odd_act=act("o"), even_gate_act=act("e"),
                  odd_gate_act=act("o"))
    return h.astype(dtype)  # IrrepsArray.astype: keeps the statically zero chunks' flags


SUPPORTED_JAX_MD = "0.2.29"


def _check_version() -> None:
  import importlib.metadata  # noqa: PLC0415
  version = importlib.metadata.version("jax-md")
  if version != SUPPORTED_JAX_MD:
    raise RuntimeError(
        f"jaxext.equivariant.jax_md reproduces jax-md {SUPPORTED_JAX_MD}'s NequIP convolution; "
        f"jax-md {version} is installed, whose model may differ: not routed")


def install() -> None:
  """Routes jax-md's NequIP through jaxext from now on (models traced afterwards). Raises
  RuntimeError unless the installed jax-md is the version this reproduces (0.2.29)."""
  _check_version()
  _nequip.e3nn = _E3NN
  _nequip.NequIPConvolution = NequIPConvolution


def uninstall() -> None:
  """Restores jax-md's own e3nn-jax calls (for models traced afterwards)."""
  _nequip.e3nn = _ORIGINAL["e3nn"]
  _nequip.NequIPConvolution = _ORIGINAL["NequIPConvolution"]


@contextlib.contextmanager
def nequip() -> Iterator[None]:
  """Within the block, jax-md's NequIP models are traced with jaxext's kernels; what was installed
  before the block (jaxext's or jax-md's own) is restored after it."""
  saved = (_nequip.e3nn, _nequip.NequIPConvolution)
  install()  # (checks the version before anything is replaced)
  try:
    yield
  finally:
    _nequip.e3nn, _nequip.NequIPConvolution = saved
