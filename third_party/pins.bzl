"""Every pinned external input of jaxext, in one place.

Three kinds of pins live here:

* DEBIAN_*: the Bazel 7 toolchain root that `tools/bazel` provisions when no Bazel >= 7 is installed
  (read by that script with sed, so keep one `"name": "version",` entry per line).
* PYTHON: the interpreter whose headers extensions are built against and which runs the tests.
* PYTHON_PACKAGES: wheels fetched by pip with `--require-hashes` (build-time headers: pybind11 and
  the XLA FFI headers shipped in jaxlib; test-time packages: everything else).
* CUDA_*: NVIDIA's CUDA 13.0 toolkit wheels (nvcc, crt, nvvm, cudart, cccl), fetched the same way,
  and only when a CUDA build is asked for (`--config=cuda`).

The jaxlib pin doubles as the FFI API floor: extensions built against its headers (FFI API 0.3)
load in this jaxlib and every newer one, so the wheel's Requires-Dist says `jaxlib>=JAXLIB_FLOOR`.
"""

DEBIAN_SUITE = "forky"

DEBIAN_PACKAGES = {
    "bazel-bootstrap": "7.7.1+ds-8+b1",
    "ca-certificates": "20260816+nmu1",
    "g++": "4:16.1.0-3",
    "g++-15": "15.3.0-4",  # nvcc 13.0's newest supported host compiler (CUDA builds only)
    "python3.14": "3.14.8-1",
    "python3.14-dev": "3.14.8-1",
    "python3.14-venv": "3.14.8-1",
}

PYTHON = {
    "version": "3.14.8",  # major.minor must match exactly (ABI); a patch mismatch only warns
    "index_url": "https://pypi.org/simple",
}

# The FFI headers are taken from this jaxlib; it is also the oldest jaxlib jaxext supports.
JAXLIB_FLOOR = "0.10.0"

# name -> (version, sha256 of the wheel for CPython 3.14 / manylinux x86_64 or py3-none-any)
PYTHON_PACKAGES = {
    # Benchmark anchors (//benchmarks:limbdark): jaxoplanet and its pure-Python dependencies.
    "equinox": ("0.13.8", "ca004348533cc30a63ebe8823d7dd4bb626dce17743d40bbddb89b402ef2a240"),
    "jaxoplanet": ("0.2.0", "2b1f63ea2e51d2d44c97938183d2ce019bc9e1810e018428d3248372eb641dac"),
    "jaxtyping": ("0.3.11", "8a4bedc4e3f963fa82df41bd13c7ebc2bad925601eb48614c65798f21329d4e3"),
    "typing-extensions": ("4.16.0", "481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8"),
    "wadler-lindig": ("0.1.8", "8671e8c98449ae3f4e4ba720eccd63a502b3983042f8d112b49a9c6be49e8d92"),
    "absl-py": ("2.5.1", "721200f2f0e9960f2ca9dc3a2a706b201f5f75d812c158f059cbbe29eeafbdb8"),
    "iniconfig": ("2.3.1", "9121e2c1fdb355232495be3194c8dfe87ccc2d5dee45947b78e68f499790d7a7"),
    "jax": ("0.10.0", "76c42ba163c8db3dc2e449e225b888c0edfb623ded31efdc96d85e0fda1d26e8"),
    "jaxlib": ("0.10.0", "2a42cf04c0f88bc03b150a17fa7ddbb2f40e096667ec8a1b840ed87913e6e735"),
    "ml-dtypes": ("0.6.0", "8f490c003369ce60e514a0c3b12374f05274c101fee1bead6740ec8a564032b0"),
    "mpmath": ("1.4.1", "dc4f0ea2304480d4a9a48a94c1020571558ade522b44a6912efac63a586e140f"),
    "numpy": ("2.5.5", "c48960d420e90cf305cb1fde0d4e6082cc90512cda87a9acf0b6e04e91cf4abe"),
    "opt-einsum": ("3.4.0", "69bb92469f86a1565195ece4ac0323943e83477171b91d24c35afe028a90d7cd"),
    "packaging": ("26.3", "d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c"),
    "pluggy": ("1.7.0", "7dd7b0d8832ba3cb632c306926ded123429211b83641b35dc5c41ad2d34f9bec"),
    "pybind11": ("3.1.0", "b8488090f8acffbcb6b5d6a85571a6827a0a2981ffb75e5a0b27b87c4a6b7dd0"),
    "pygments": ("2.21.0", "2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9"),
    "pytest": ("9.2.0", "07acdcf88ec174f907dc01af70bf52d49b014bbab03faeeade31c96b18c2e588"),
    "scipy": ("1.18.1", "ac0333bdf38309aa3dcbe7e3fa7ea29e7a2c37c6ea306a757b700ded8e4596ad"),
}

# NVIDIA's CUDA toolkit as PyPI wheels: name -> (version, sha256 of the manylinux x86_64 wheel).
# They install into one tree (nvidia/cu13/{bin,include,lib,nvvm}) laid out as nvcc expects.
CUDA_VERSION = "13.0"

CUDA_PACKAGES = {
    "nvidia-cuda-cccl": ("13.0.85", "e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649"),
    # cuobjdump only inspects what was built (tests/cuda_build_test.sh); none is published for
    # 13.0, and a newer one reads 13.0 binaries.
    "nvidia-cuda-cuobjdump": ("13.2.51", "95c69d3ddf0c2c1f535ec44c3433a66aeee19f588d9d22f73356e20b25f12b50"),
    "nvidia-cuda-crt": ("13.0.88", "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4"),
    "nvidia-cuda-nvcc": ("13.0.88", "56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03"),
    "nvidia-cuda-runtime": ("13.0.96", "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"),
    "nvidia-nvvm": ("13.0.88", "c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0"),
}

# Host compiler nvcc runs (it rejects GCC newer than 15); sm_90 machine code plus compute_90 PTX,
# which newer GPUs JIT-compile.
CUDA_HOST_COMPILER = "g++-15"

CUDA_CAPABILITIES = ["sm_90"]

# batman (Kreidberg 2015), the C anchor of //benchmarks:limbdark. PyPI has only its source
# distribution; third_party/batman builds the quadratic-law extension with Bazel's C toolchain.
# GPL-3.0: used by the benchmark only, never linked into or shipped with jaxext.
BATMAN = {
    "version": "2.5.2",
    "url": "https://files.pythonhosted.org/packages/99/99/70dc1d3c143f3765514eea61ff2f068ae93ea0f51a9dcd591e723b56893e/batman_package-2.5.2.tar.gz",
    "sha256": "c97fae5485ab0baadf39d221a945692da0bcc2286ef8eab1599e739718347239",
    "strip_prefix": "batman_package-2.5.2",
}
