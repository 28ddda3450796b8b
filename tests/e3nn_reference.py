"""e3nn-jax's channelwise tensor product, the reference of jaxext.equivariant.tensor_product (and
of conv through it): e3nn-jax's legacy FunctionalTensorProduct with "uvu" instructions on the
paths jaxext enumerates, row by row. Shared by equivariant_test and property_test."""

import e3nn_jax as e3nn
import jax
from e3nn_jax.legacy import FunctionalTensorProduct

from jaxext import equivariant as eq


def tensor_product(x, y, w, irreps_x, irreps_y, irreps_out, **options):
  """options: FunctionalTensorProduct's irrep_normalization, path_normalization,
  gradient_normalization (unset: e3nn_jax.config's)."""
  instructions = [(i1, i2, io, "uvu", True) for i1, i2, io in eq.paths(irreps_x, irreps_y,
                                                                        irreps_out)]
  tp = FunctionalTensorProduct(e3nn.Irreps(irreps_x), e3nn.Irreps(irreps_y), e3nn.Irreps(irreps_out),
                               instructions, **options)
  row = lambda a, b, c: tp.left_right(c, e3nn.IrrepsArray(irreps_x, a),
                                      e3nn.IrrepsArray(irreps_y, b)).array
  return jax.vmap(row)(x, y, w)
