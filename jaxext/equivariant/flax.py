"""Flax modules on jaxext.equivariant's kernels (optional: needs flax and e3nn-jax installed).

    from jaxext.equivariant.flax import MessagePassing

    layer = MessagePassing(irreps_out="32x0e+32x1o+32x2e", sh_lmax=2, cutoff=5.0,
                           avg_num_neighbors=20.0)
    params = layer.init(key, node_features, vectors, senders, receivers)
    out = layer.apply(params, node_features, vectors, senders, receivers)   # an IrrepsArray

`MessagePassing` is the interaction block of NequIP/MACE-style potentials as one layer: the real
spherical harmonics of the edge vectors, a radial MLP of the edge lengths (Bessel functions times a
polynomial envelope) giving one weight per output channel, the product of each sender's features
with its edge's harmonics (every coupling path its own channels, `e3nn.tensor_product`'s layout),
weighted and summed over each receiver's edges, divided by the average neighbour count, and an
equivariant linear map to `irreps_out` (`e3nn.flax.Linear`). The radial MLP's last layer, the
product, the weighting and the sum are one fused kernel (`e3nn_ops.tensor_product_conv` with
`weights_kernel`): neither the per-edge weights nor the per-edge product is formed in the forward
pass.

`backend="e3nn"` computes the same layer with e3nn-jax alone (its harmonics, `tensor_product` and
`scatter_sum`) from the same parameters: the reference the tests compare with, and a switch for
users who want to check a model both ways.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

try:
  import e3nn_jax as e3nn
  import flax.linen as nn
  from e3nn_jax import flax as e3nn_flax
except ImportError as err:  # pragma: no cover - exercised only where flax or e3nn-jax is missing
  raise ImportError(
      "jaxext.equivariant.flax needs flax and e3nn-jax: pip install flax e3nn-jax "
      f"(missing: {err.name})") from err

import jax
import jax.numpy as jnp
import numpy as np

from jaxext.equivariant import e3nn_ops

__all__ = ["MessagePassing"]


def _dense_factors(lhs, kernel, dimension_numbers, precision=None, preferred_element_type=None):
  """A `dot_general` for a bias-free `nn.Dense` that returns its two factors (inputs, kernel)
  instead of their product, so that the layer's product can happen inside a fused kernel
  (`weights_kernel`) while flax makes and initialises the kernel as usual."""
  del dimension_numbers, precision, preferred_element_type  # (lhs's last axis, kernel's first)
  return lhs, kernel


class _RadialMLP(nn.Module):
  """`e3nn.flax.MultiLayerPerceptron(neurons, act, output_activation=False)` (its parameters:
  Dense_0..k, same shapes, initialisers and dtype, so either backend reads the other's), returned
  as its last hidden layer (the input itself when there is none) and its last layer's kernel with
  that layer's scale folded in: the output is hidden @ kernel, which the fused kernel makes per
  receiver (`weights_kernel`), so no (edges x weights) array is formed in the forward pass."""

  neurons: tuple[int, ...]
  act: Callable[[jax.Array], jax.Array] | None

  @nn.compact
  def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    normalization = e3nn.config("gradient_normalization")
    if isinstance(normalization, str):
      normalization = {"element": 0.0, "path": 1.0}[normalization]
    act = None if self.act is None else e3nn.normalize_function(self.act)

    def dense(width, alpha, **kw):
      return nn.Dense(width, use_bias=False, param_dtype=x.dtype,
                      kernel_init=nn.initializers.normal(
                          stddev=jnp.sqrt(alpha) ** (1.0 - normalization)), **kw)

    for width in self.neurons[:-1]:
      alpha = 1 / x.shape[-1]
      x = jnp.sqrt(alpha) ** normalization * dense(width, alpha)(x)
      if act is not None:
        x = act(x)

    # nn.Dense makes (and initialises) the kernel as e3nn-jax's MLP does, then returns what its
    # dot_general returns (no bias to add): the two factors.
    alpha = 1 / x.shape[-1]
    hidden, kernel = dense(self.neurons[-1], alpha, dot_general=_dense_factors)(x)
    return hidden, kernel * (jnp.sqrt(alpha) ** normalization).astype(kernel.dtype)


class MessagePassing(nn.Module):
  """One equivariant message-passing (interaction) block, NequIP/MACE style.

  Attributes:
    irreps_out: the irreps of the result (anything `e3nn.Irreps` takes). The product keeps the
      coupling paths whose output irrep appears in `irreps_out`; the final linear map mixes them
      into `irreps_out`'s multiplicities.
    sh_lmax: the edges' spherical harmonics have every degree 0..sh_lmax (parity (-1)^l).
    cutoff: the radial basis' cutoff (the edge lengths' units); edges at or beyond it carry zero
      weight, so their messages vanish smoothly.
    num_basis: the number of Bessel functions of the radial basis.
    radial_hidden: the radial MLP's hidden layer widths.
    radial_activation: its activation (default: SiLU).
    envelope_p: the polynomial envelope's order (e3nn-jax's `poly_envelope(p - 1, 2)`).
    avg_num_neighbors: the sum over a receiver's edges is divided by this (a constant of the
      dataset, as NequIP and MACE use).
    linear: whether to end with the equivariant linear map to irreps_out (else the result has the
      product's irreps, every path its own channels, regrouped).
    backend: "jaxext" (fused kernels) or "e3nn" (e3nn-jax's functions; the same numbers).
  """

  irreps_out: Any
  sh_lmax: int = 2
  cutoff: float = 5.0
  num_basis: int = 8
  radial_hidden: Sequence[int] = (64, 64)
  radial_activation: Callable[[jax.Array], jax.Array] = jax.nn.silu
  envelope_p: int = 6
  avg_num_neighbors: float = 1.0
  linear: bool = True
  backend: Literal["jaxext", "e3nn"] = "jaxext"

  @nn.compact
  def __call__(self, node_features: e3nn.IrrepsArray, vectors: jax.Array, senders: jax.Array,
               receivers: jax.Array) -> e3nn.IrrepsArray:
    """The block's result per node.

    Args:
      node_features: an `e3nn.IrrepsArray` of shape (num_nodes, dim).
      vectors: (num_edges, 3) edge vectors (receiver position minus sender position, or the
        convention of your model: only their direction and length are used), or an IrrepsArray
        "1o" of that shape.
      senders, receivers: (num_edges,) integer node indices of each edge's ends, in
        [0, num_nodes).

    Returns:
      an `e3nn.IrrepsArray` (num_nodes, irreps_out.dim) (or the product's irreps if not `linear`).
    """
    if not isinstance(node_features, e3nn.IrrepsArray):
      raise TypeError("node_features must be an e3nn.IrrepsArray (num_nodes, dim); got "
                      f"{type(node_features).__name__}")
    if node_features.ndim != 2:
      raise ValueError(f"node_features must be 2-D (num_nodes, dim); got {node_features.shape}")
    if self.backend not in ("jaxext", "e3nn"):
      raise ValueError(f"backend must be 'jaxext' or 'e3nn'; got {self.backend!r}")
    if not (isinstance(self.sh_lmax, (int, np.integer)) and self.sh_lmax >= 0):
      raise ValueError(f"sh_lmax must be a non-negative int; got {self.sh_lmax!r}")
    if not self.cutoff > 0:
      raise ValueError(f"cutoff must be positive; got {self.cutoff!r}")
    if not self.avg_num_neighbors > 0:
      raise ValueError(f"avg_num_neighbors must be positive; got {self.avg_num_neighbors!r}")
    irreps_out = e3nn.Irreps(self.irreps_out)
    vec = vectors.array if isinstance(vectors, e3nn.IrrepsArray) else jnp.asarray(vectors)
    if vec.ndim != 2 or vec.shape[-1] != 3:
      raise ValueError(f"vectors must have shape (num_edges, 3); got {vec.shape}")
    if not jnp.issubdtype(vec.dtype, jnp.floating):
      vec = vec.astype(node_features.dtype)
    num_edges = vec.shape[0]
    # (The ids go on as given: a graph of NumPy arrays is sorted once, by NumPy; see conv.)
    for ids, name in ((jnp.asarray(senders), "senders"), (jnp.asarray(receivers), "receivers")):
      if ids.shape != (num_edges,) or not jnp.issubdtype(ids.dtype, jnp.integer):
        raise ValueError(f"{name} must be integers of shape ({num_edges},) (one per edge); got "
                         f"{ids.dtype} {ids.shape}")
    num_nodes = node_features.shape[0]

    # The product's output irreps: every path whose irrep is in irreps_out, in e3nn's layout.
    filter_ir_out = [ir for _, ir in irreps_out]
    irreps_sh = e3nn.Irreps.spherical_harmonics(self.sh_lmax)
    irreps_tp = e3nn.tensor_product(node_features.irreps, irreps_sh,
                                    filter_ir_out=filter_ir_out).regroup()
    if irreps_tp.dim == 0:
      raise ValueError(f"no coupling path of {node_features.irreps} x {irreps_sh} reaches "
                       f"irreps_out {irreps_out}")

    # Radial weights: one per output channel (irrep copy) of the product and edge. A zero-length
    # edge (a node with itself) has no direction: it gets zero weight, and its length and direction
    # are taken at a stand-in vector so that no derivative is NaN.
    squared = jnp.sum(vec * vec, axis=-1)
    real = squared > 0
    vec = jnp.where(real[:, None], vec, jnp.asarray([0.0, 0.0, 1.0], vec.dtype))
    length = jnp.sqrt(jnp.where(real, squared, 1.0))
    inside = real & (length < self.cutoff)
    envelope = e3nn.poly_envelope(self.envelope_p - 1, 2)(jnp.minimum(length / self.cutoff, 1.0))
    basis = e3nn.bessel(length, self.num_basis, self.cutoff) * jnp.where(
        inside, envelope, 0.0)[:, None]
    neurons = tuple(self.radial_hidden) + (irreps_tp.num_irreps,)
    basis = basis.astype(node_features.dtype)
    sh_vec = e3nn.IrrepsArray("1o", vec)
    if self.backend == "jaxext":
      # The radial MLP's last layer inside the fused kernel: weights = hidden @ kernel, with the
      # rows of edges outside the cutoff zeroed in hidden (whatever the activation's f(0)).
      hidden, kernel = _RadialMLP(neurons, self.radial_activation, name="radial")(basis)
      hidden = hidden * inside[:, None].astype(hidden.dtype)
      sh = e3nn_ops.spherical_harmonics(irreps_sh, sh_vec, True)
      messages = e3nn_ops.tensor_product_conv(node_features, sh, senders, receivers, num_nodes,
                                              weights=hidden, weights_kernel=kernel,
                                              filter_ir_out=filter_ir_out)
    else:
      weights = e3nn_flax.MultiLayerPerceptron(neurons, act=self.radial_activation,
                                               output_activation=False, name="radial")(basis)
      weights = weights * inside[:, None].astype(weights.dtype)  # whatever the activation's f(0)
      sh = e3nn.spherical_harmonics(irreps_sh, sh_vec, normalize=True)
      per_edge = e3nn.tensor_product(node_features[jnp.asarray(senders)], sh,
                                     filter_ir_out=filter_ir_out)
      messages = e3nn.scatter_sum(per_edge * weights, dst=jnp.asarray(receivers),
                                  output_size=num_nodes)
    messages = messages / self.avg_num_neighbors
    if not self.linear:
      return messages
    return e3nn_flax.Linear(irreps_out, name="linear")(messages)
