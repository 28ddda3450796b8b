"""jaxext.equivariant: E(3)-equivariant building blocks with e3nn-jax's conventions.

    Y = jaxext.equivariant.spherical_harmonics("0e+1o+2e+3o", edge_vectors)   # (E, 16)
    h = jaxext.equivariant.tensor_product(x, Y, w, "64x0e+64x1o", "0e+1o+2e+3o", "64x0e+64x1o")
    m = jaxext.equivariant.segment_sum(messages, receivers, num_nodes)        # deterministic
    xs = jaxext.equivariant.gather(x, senders)   # x[senders], its gradient a deterministic sum
    m = jaxext.equivariant.conv(x, Y, w, senders, receivers, n, "64x0e+64x1o", "0e+1o+2e+3o",
                                "64x0e+64x1o")                                 # fused, no E x dim

Results agree with e3nn-jax 0.21.0 number for number (tests/equivariant_test.py). CPU and CUDA
kernels; derivatives of every order.

e3nn-jax's types are taken as they are (duck-typed: e3nn_jax is never imported here): an
`Irreps` wherever an irreps string goes, `IrrepsArray`s for the arrays (their irreps stand in for
the irreps arguments), an `IrrepsArray` back when one came in. `spherical_harmonics` reads an int
as e3nn-jax does (that degree alone). The products take e3nn-jax's `irrep_normalization`,
`path_normalization` and `gradient_normalization`; unset options (and the harmonics'
normalization) follow `e3nn_jax.config` when e3nn_jax is imported. `jaxext.equivariant.e3nn_ops`
has e3nn-jax's own functions and layouts (`tensor_product` with every path its own channels,
sorted and regrouped; a fused `tensor_product_conv`) on these kernels.
"""

from jaxext.equivariant.conv import conv, conv_p
from jaxext.equivariant.gather import gather, gather_p
from jaxext.equivariant.segment import segment_sum, segment_sum_p
from jaxext.equivariant.spherical_harmonics import sph_p, spherical_harmonics
from jaxext.equivariant.tensor_product import paths, tensor_product, tp_p

__all__ = ["conv", "conv_p", "gather", "gather_p", "paths", "segment_sum", "segment_sum_p", "sph_p",
           "spherical_harmonics", "tensor_product", "tp_p"]
