"""Registration of jaxext's XLA FFI targets, the way jaxlib registers its LAPACK and cuSOLVER ops.

Each platform's extension module exposes `registrations()`, a dict of target name -> FFI handler
capsule. Importing this module registers every target of every platform whose extension is present
(CPU always; CUDA when the CUDA extension was built and its runtime loads).
"""

from __future__ import annotations

import importlib
import threading

import jax

_lock = threading.Lock()
_registered: dict[str, tuple[str, ...]] = {}

# platform name used by XLA -> extension module
_EXTENSIONS = {
    "cpu": "jaxext.cpu._cpu_ops",
    "CUDA": "jaxext.cuda._cuda_ops",
}


def _load(platform: str):
  try:
    return importlib.import_module(_EXTENSIONS[platform])
  except ImportError:
    if platform == "cpu":
      raise
    return None


def register_all() -> dict[str, tuple[str, ...]]:
  """Registers every available FFI target once; returns {platform: target names}."""
  with _lock:
    if _registered:
      return _registered
    for platform in _EXTENSIONS:
      module = _load(platform)
      if module is None:
        continue
      names = []
      for name, capsule in module.registrations().items():
        jax.ffi.register_ffi_target(name, capsule, platform=platform, api_version=1)
        names.append(name)
      _registered[platform] = tuple(sorted(names))
    return _registered


def available_platforms() -> tuple[str, ...]:
  return tuple(register_all())
