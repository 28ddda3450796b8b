"""Registration of jaxext's XLA FFI targets, the way jaxlib registers its LAPACK and cuSOLVER ops.

Each platform's extension module exposes `registrations()`, a dict of target name -> FFI handler
capsule. Importing this module registers every target of every platform whose extension is present
(CPU always; CUDA when the CUDA extension was built and its runtime loads).

A wheel built with the CPU handlers as a plain library (the macOS wheel; `jaxext_wheel`'s
plain_library) holds `jaxext/cpu/jaxext_cpu_handlers.so` and no `_cpu_ops`; its handlers are
registered through ctypes, as below.

Alternatively, `JAXEXT_HANDLER_LIBRARIES="cpu=/path/libjaxext_cpu_handlers.so,CUDA=/path/..."`
registers the handlers from plain shared libraries (`ffi_handler_library` targets) through ctypes
instead: no Python ABI inside them, so they load in any CPython (used by tools/gpu_checks.py on
machines whose Python differs from the build's).

Tests only: `JAXEXT_CUDA_EMULATION=/path/libjaxext_cuda_emu_handlers.so` registers the CUDA
handlers built to run on the CPU (tests/cuda_emu) as the CPU's, in place of the CPU's own, and
jaxext._jax_compat then lowers every op the CUDA way: a CPU process runs what a GPU would.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import os
import threading
from typing import Any

import jax

_lock = threading.Lock()
_registered: dict[str, tuple[str, ...]] = {}
_libraries: dict[str, ctypes.CDLL] = {}  # platform -> handler library, in that mode

# platform name used by XLA -> extension module
_EXTENSIONS = {
    "cpu": "jaxext.cpu._cpu_ops",
    "CUDA": "jaxext.cuda._cuda_ops",
}


# platform -> the plain handler library a package may hold in place of its extension module
_PACKAGED_LIBRARIES = {"cpu": os.path.join(os.path.dirname(__file__), "cpu",
                                           "jaxext_cpu_handlers.so")}


def _packaged_library(platform: str) -> str | None:
  """The plain handler library of `platform` in this package, where it holds one and no extension
  module (an extension present is always the one used)."""
  path = _PACKAGED_LIBRARIES.get(platform)
  if path is None or not os.path.isfile(path):
    return None
  if importlib.util.find_spec(_EXTENSIONS[platform]) is not None:
    return None
  return path


def _load(platform: str):
  try:
    return importlib.import_module(_EXTENSIONS[platform])
  except ImportError:
    if platform == "cpu":
      raise
    return None


# FFI target name -> exported C symbol, `{}` standing for the platform (Cpu or Cuda).
_SYMBOLS = {
    "jaxext_kepler_f32": "JaxextKepler{}F32",
    "jaxext_kepler_f64": "JaxextKepler{}F64",
    "jaxext_limbdark_f32": "JaxextLimbdark{}F32",
    "jaxext_limbdark_f64": "JaxextLimbdark{}F64",
    "jaxext_limbdark_grad_f32": "JaxextLimbdarkGrad{}F32",
    "jaxext_limbdark_grad_f64": "JaxextLimbdarkGrad{}F64",
    "jaxext_limbdark_hess_f32": "JaxextLimbdarkHess{}F32",
    "jaxext_limbdark_hess_f64": "JaxextLimbdarkHess{}F64",
    "jaxext_transit_f32": "JaxextTransit{}F32",
    "jaxext_transit_f64": "JaxextTransit{}F64",
    "jaxext_transit_grad_f32": "JaxextTransitGrad{}F32",
    "jaxext_transit_grad_f64": "JaxextTransitGrad{}F64",
    "jaxext_transit_lin_f32": "JaxextTransitLin{}F32",
    "jaxext_transit_lin_f64": "JaxextTransitLin{}F64",
    "jaxext_transit_vjp_f32": "JaxextTransitVjp{}F32",
    "jaxext_transit_vjp_f64": "JaxextTransitVjp{}F64",
}

# Targets whose handlers differ in shape between platforms: name -> {platform: symbol, or
# {execution stage: symbol}}.
_STAGED_SYMBOLS: dict[str, dict[str, Any]] = {
    "jaxext_dop853": {"cpu": "JaxextDop853Cpu",
                      "cuda": {"initialize": "JaxextDop853CudaInitialize",
                               "execute": "JaxextDop853Cuda"}},
    "jaxext_numba_call": {"cpu": "JaxextNumbaCallCpu"},
    "jaxext_numba_cuda_call": {"cuda": {"initialize": "JaxextNumbaCallCudaInitialize",
                                        "execute": "JaxextNumbaCallCuda"}},
    "jaxext_sph": {"cpu": "JaxextSphCpu", "cuda": "JaxextSphCuda"},
    "jaxext_segment_sum": {"cpu": "JaxextSegmentSumCpu", "cuda": "JaxextSegmentSumCuda"},
    "jaxext_conv_factored": {"cpu": "JaxextConvFactoredCpu"},  # (CUDA: w = h @ kernel, then conv)
    "jaxext_conv_factored_bwd": {"cpu": "JaxextConvFactoredBwdCpu"},
    "jaxext_conv": {"cpu": "JaxextConvCpu",
                    "cuda": {"initialize": "JaxextConvCudaInitialize",
                             "execute": "JaxextConvCuda"}},
    # conv's edge harmonics' and weights' cotangents in one call (CPU: each mode's own call)
    "jaxext_conv_edge_cts": {"cuda": {"initialize": "JaxextConvEdgeCtsCudaInitialize",
                                      "execute": "JaxextConvEdgeCtsCuda"}},
    "jaxext_tensor_product": {"cpu": "JaxextTensorProductCpu",
                              "cuda": {"initialize": "JaxextTensorProductCudaInitialize",
                                       "execute": "JaxextTensorProductCuda"}},
    # the product's y and w cotangents in one call (CPU: each mode's own call)
    "jaxext_tensor_product_edge_cts": {
        "cuda": {"initialize": "JaxextTensorProductEdgeCtsCudaInitialize",
                 "execute": "JaxextTensorProductEdgeCtsCuda"}},
}


def _register(name: str, handler, platform: str) -> None:
  # Handler traits (CUDA graph compatibility) are declared by the handlers themselves.
  jax.ffi.register_ffi_target(name, handler, platform=platform, api_version=1)


def _register_library(platform: str, path: str, on: str | None = None) -> list[str]:
  """The handlers of `platform` in the library at `path`, registered for XLA's platform `on`
  (default: `platform`; the emulation's CUDA handlers: "cpu", where those it lacks are skipped)."""
  lib = ctypes.CDLL(os.path.abspath(path))
  emulated = on is not None and on != platform
  on = on or platform
  _libraries[platform] = lib
  if platform == "cpu":
    for symbol in ("JaxextRegisterNativeFunction", "JaxextRegisterNativeLanes"):
      fn = getattr(lib, symbol)
      fn.argtypes, fn.restype = [ctypes.c_int64, ctypes.c_size_t], ctypes.c_int
  names = []
  for name, symbol in _SYMBOLS.items():
    symbol = symbol.format("Cpu" if platform == "cpu" else "Cuda")
    if emulated and not hasattr(lib, symbol):
      continue
    _register(name, jax.ffi.pycapsule(getattr(lib, symbol)), on)
    names.append(name)
  for name, platforms in _STAGED_SYMBOLS.items():
    staged = platforms.get("cpu" if platform == "cpu" else "cuda")
    if staged is None:
      continue
    symbols = {"": staged} if isinstance(staged, str) else staged
    if emulated and not all(hasattr(lib, s) for s in symbols.values()):
      continue
    if isinstance(staged, str):
      handler = jax.ffi.pycapsule(getattr(lib, staged))
    else:
      handler = {stage: jax.ffi.pycapsule(getattr(lib, s)) for stage, s in staged.items()}
    _register(name, handler, on)
    names.append(name)
  return names


def register_all() -> dict[str, tuple[str, ...]]:
  """Registers every available FFI target once; returns {platform: target names}."""
  with _lock:
    if _registered:
      return _registered
    emulation = os.environ.get("JAXEXT_CUDA_EMULATION", "")
    if emulation:
      _registered["CUDA"] = tuple(sorted(_register_library("CUDA", emulation, on="cpu")))
      return _registered
    libraries = os.environ.get("JAXEXT_HANDLER_LIBRARIES", "")
    if libraries:
      for spec in libraries.split(","):
        platform, _, path = spec.partition("=")
        if platform not in _EXTENSIONS or not path:
          raise ValueError(f"JAXEXT_HANDLER_LIBRARIES: expected platform=path with platform in "
                           f"{sorted(_EXTENSIONS)}; got {spec!r}")
        _registered[platform] = tuple(sorted(_register_library(platform, path)))
      return _registered
    for platform in _EXTENSIONS:
      packaged = _packaged_library(platform)
      if packaged is not None:
        _registered[platform] = tuple(sorted(_register_library(platform, packaged)))
        continue
      module = _load(platform)
      if module is None:
        continue
      names = []
      # A handler is a capsule, or a dict {execution stage: capsule}.
      for name, handler in module.registrations().items():
        _register(name, handler, platform)
        names.append(name)
      _registered[platform] = tuple(sorted(names))
    return _registered


def _xla_platform(platform: str) -> str:
  """XLA's name of a platform jaxext has handlers for ("cpu", "CUDA"), from either spelling."""
  name = {"cpu": "cpu", "cuda": "CUDA"}.get(platform.lower())
  if name is None:
    raise ValueError(f"jaxext has handlers for the platforms cpu and cuda; got {platform!r}")
  return name


def declared_targets(platform: str) -> tuple[str, ...]:
  """Every FFI target a complete build of this version of jaxext has on `platform` ("cpu" or
  "cuda"), whether or not this installation has that platform's handlers."""
  key = _xla_platform(platform).lower()
  return tuple(sorted([*_SYMBOLS, *(n for n, p in _STAGED_SYMBOLS.items() if key in p)]))


@functools.cache
def _runs_here(platform: str) -> bool:
  """Whether this process has a jax backend for `platform` (its backends are made once)."""
  try:
    return bool(jax.devices(platform.lower()))
  except RuntimeError:
    return False


def lowering_targets(platform: str) -> tuple[str, ...] | None:
  """The FFI targets a lowering for `platform` may call.

  The handlers registered here, where this build has the platform's. Else, for a platform this
  process does not run (jax.export(..., platforms=("cuda",)) on a machine without a GPU, or
  ("cpu", "cuda") together): those of a complete build of this version, the one that must run
  what is exported; for a platform it runs: None (it would fail there).
  """
  platform = _xla_platform(platform)
  registered = register_all()
  if platform in registered:
    return registered[platform]
  if not _runs_here(platform):
    return declared_targets(platform)
  return None


def has_target(platform: str, name: str) -> bool:
  """Whether a lowering for `platform` may call the FFI target `name` (lowering_targets)."""
  return name in (lowering_targets(platform) or ())


def require(platform: str, op: str) -> None:
  """Raises NotImplementedError naming `op` where a lowering for `platform` has no handlers."""
  if lowering_targets(platform) is None:
    raise NotImplementedError(
        f"{op} has no {_xla_platform(platform)} kernel in this build of jaxext (available: "
        f"{', '.join(register_all()) or 'none'})")


def disabled_checks() -> list[jax.export.DisabledSafetyCheck]:
  """The jax.export safety checks to disable so that jax.export serializes jaxext's calls:

      exported = jax.export.export(jax.jit(f), disabled_checks=jaxext.disabled_checks())(x)

  jax refuses to serialize a call to an FFI target it does not know to be stable; this lists
  every target of jaxext's, on every platform. An exported function runs where this version of
  jaxext is installed (importing jaxext registers its handlers); the targets' operands and
  attributes may change between versions, as jax.export's stability promise covers only jax's
  own targets.
  """
  names = sorted({*declared_targets("cpu"), *declared_targets("CUDA")})
  return [jax.export.DisabledSafetyCheck.custom_call(name) for name in names]


def register_native_function(function_id: int, address: int, *, lanes: bool = False) -> None:
  """Makes a native function compiled in this process (Numba: numba_kernel entry points, ODE
  right-hand sides, events, Jacobians) known to the CPU handlers under its content id, in the
  extension module or in the handler library, whichever registered the handlers. lanes=True: the
  address is the lanes form of the function registered under function_id (an ODE right-hand side
  evaluated for 8 trajectories at once, jaxext/cpu/ode_cpu_internal.h's NativeRhsLanes)."""
  if not address:
    raise ValueError("null native function address")
  register_all()
  lib = _libraries.get("cpu")
  if lib is None:
    module = _load("cpu")
    (module.register_native_lanes if lanes else module.register_native_function)(
        function_id, address)
    return
  register = lib.JaxextRegisterNativeLanes if lanes else lib.JaxextRegisterNativeFunction
  if register(function_id, address) != 0:
    raise ValueError("null native function address")


def _family(prefix: str) -> tuple[str, ...]:
  """The per-dtype (and per-derivative) targets of one op family, as _SYMBOLS lists them."""
  return tuple(name for name in _SYMBOLS if name.startswith(prefix))


# Public op -> (the FFI targets it lowers to, the optional module it also needs). The ops computed
# in jax.numpy (sky_separation, equivariant.gather) run wherever jax does and are not listed.
_OPS = {
    "kepler": (_family("jaxext_kepler_"), None),
    "limb_dark_flux": (_family("jaxext_limbdark_"), None),
    "quadratic_limb_dark_flux": (_family("jaxext_limbdark_"), None),
    "transit_light_curve": (_family("jaxext_transit_"), None),
    "numba_kernel": (("jaxext_numba_call",), "numba"),
    "numba_cuda_kernel": (("jaxext_numba_cuda_call",), "numba_cuda"),
    "ode.dop853": (("jaxext_dop853",), None),
    "equivariant.spherical_harmonics": (("jaxext_sph",), None),
    "equivariant.tensor_product": (("jaxext_tensor_product",), None),
    "equivariant.segment_sum": (("jaxext_segment_sum",), None),
    "equivariant.conv": (("jaxext_conv",), None),
}


def platforms() -> dict[str, tuple[str, ...]]:
  """Which platforms each op can run on in this installation: {op: ("cpu", "cuda") or a part}.

  An op is listed for a platform when every FFI handler it lowers to is registered there (the CUDA
  ones when jaxext was built with CUDA and its runtime loads; no GPU is needed to register them)
  and the optional package it needs is installed (Numba for `numba_kernel`, numba-cuda for
  `numba_cuda_kernel`; found without importing it, so a broken installation still shows here and
  fails on first use with the package's own error). Ops written in jax.numpy (`sky_separation`, `equivariant.gather`) run on
  every platform jax has and are not listed. Python right-hand sides of `ode.dop853` need Numba
  (and numba-cuda on CUDA); its built-in models need nothing more.

      >>> jaxext.platforms()["kepler"]
      ('cpu',)
  """
  registered = {("cpu" if p == "cpu" else "cuda"): set(names)
                for p, names in register_all().items()}
  out: dict[str, tuple[str, ...]] = {}
  for op, (targets, module) in _OPS.items():
    if module is not None and importlib.util.find_spec(module) is None:
      out[op] = ()
      continue
    out[op] = tuple(p for p in ("cpu", "cuda") if set(targets) <= registered.get(p, set()))
  return out
