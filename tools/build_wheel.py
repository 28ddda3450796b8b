"""Builds jaxext's platform wheel (run by the `jaxext_wheel` rule in jaxext/jaxext.bzl).

The wheel's tags are read off what was built, not assumed:
* python/abi tag: the CPython the extensions were compiled for (python_info.json of @jaxext_python);
* platform tag: the one auditwheel (pinned, @jaxext_auditwheel) computes from the extension
  modules: the wheel is first written with the plain `linux_<arch>` tag, `auditwheel show` names
  the most compatible manylinux policy its symbol versions and libraries satisfy, and the wheel is
  written again under that tag. A wheel that fits no manylinux policy is an error. A macOS
  wheel's (Mach-O) is `macosx_<minimum macOS>_<arch>`, its library's LC_BUILD_VERSION as macholib
  (pinned beside auditwheel) reads it.
* With --requires_python (the CPU handlers as a plain library, no extension module): `py3-none`,
  for every CPython from that version on.
Output is byte-for-byte reproducible: sorted entries, fixed timestamps and permissions.
"""

import argparse
import base64
import hashlib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)
_MACHINES = {0x3E: "x86_64", 0xB7: "aarch64"}
_MACHO_MAGIC = b"\xcf\xfa\xed\xfe"  # 64-bit little-endian Mach-O


def elf_machine(data: bytes) -> str:
  """The architecture of a 64-bit little-endian ELF file, as wheel tags name it."""
  if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
    raise ValueError("not a 64-bit little-endian ELF file")
  machine = _MACHINES.get(struct.unpack_from("<H", data, 18)[0])
  if machine is None:
    raise ValueError("unsupported ELF machine")
  return machine


def macos_tag(path: str, site: str) -> str:
  """The platform tag of a macOS wheel holding the Mach-O library at `path`:
  `macosx_<major>_<minor>_<arch>` of the minimum macOS its LC_BUILD_VERSION names (from macOS 11 on,
  pip matches the major version only, so the minor must be 0)."""
  sys.path.insert(0, site)
  try:
    from macholib.MachO import MachO  # pinned beside auditwheel (@jaxext_auditwheel)
    from macholib.mach_o import CPU_TYPE_NAMES, LC_BUILD_VERSION
  finally:
    sys.path.remove(site)
  headers = MachO(path).headers
  if len(headers) != 1:
    raise SystemExit(f"{os.path.basename(path)}: a universal binary ({len(headers)} architectures)")
  header = headers[0]
  arch = {"ARM64": "arm64", "x86_64": "x86_64"}.get(CPU_TYPE_NAMES.get(header.header.cputype))
  if arch is None:
    raise SystemExit(f"{os.path.basename(path)}: unsupported Mach-O CPU {header.header.cputype}")
  versions = [cmd.minos for lc, cmd, _ in header.commands if lc.cmd == LC_BUILD_VERSION]
  if len(versions) != 1:
    raise SystemExit(f"{os.path.basename(path)}: no single LC_BUILD_VERSION (minimum macOS)")
  major, minor = versions[0] >> 16, (versions[0] >> 8) & 0xFF
  if major >= 11 and minor:  # pip offers only macosx_<major>_0 from 11 on: the tag would promise more
    raise SystemExit(f"{os.path.basename(path)}: minimum macOS {major}.{minor}; from macOS 11 on, "
                     "build for <major>.0")
  return f"macosx_{major}_{minor}_{arch}"


def auditwheel_tag(wheel: str, site: str) -> str:
  """The platform tag `auditwheel show` gives `wheel` (the most compatible policy it satisfies)."""
  env = dict(os.environ, PYTHONPATH=site, PYTHONDONTWRITEBYTECODE="1")
  res = subprocess.run([sys.executable, "-m", "auditwheel", "show", "--json", wheel],
                       capture_output=True, text=True, env=env)
  if res.returncode != 0:
    raise SystemExit(f"auditwheel show {os.path.basename(wheel)} failed:\n{res.stdout}{res.stderr}")
  report = json.loads(res.stdout)
  tag = report["overall_tag"]
  if not tag.startswith("manylinux_"):
    text = subprocess.run([sys.executable, "-m", "auditwheel", "show", wheel],
                          capture_output=True, text=True, env=env).stdout
    raise SystemExit(f"the extension modules fit no manylinux policy (auditwheel: {tag}):\n{text}")
  return tag


def read_version(path: str) -> str:
  with open(path) as f:
    m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
  if not m:
    raise ValueError(f"no __version__ in {path}")
  return m.group(1)


def record_hash(data: bytes) -> str:
  digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
  return f"sha256={digest}"


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--out_dir", required=True)
  p.add_argument("--version_file", required=True)
  p.add_argument("--python_info", required=True)
  p.add_argument("--jaxlib_floor", required=True)
  p.add_argument("--license", required=True)
  p.add_argument("--readme", required=True)
  p.add_argument("--auditwheel_site", required=True, help="directory holding auditwheel")
  p.add_argument("--requires_python", help="a py3-none wheel (no extension module) for this "
                 "CPython and newer")
  p.add_argument("--file", action="append", default=[], help="DEST=SRC")
  args = p.parse_args()

  version = read_version(args.version_file)
  if args.requires_python:
    py_tag, abi_tag = "py3", "none"
    major, minor = args.requires_python.split(".")[:2]
    requires = f">={major}.{minor}"
  else:
    with open(args.python_info) as f:
      info = json.load(f)
    py_tag = abi_tag = info["python_tag"]
    major, minor = info["python_version"].split(".")[:2]
    requires = f">={major}.{minor},<{major}.{int(minor) + 1}"

  files = {}
  for spec in args.file:
    dest, src = spec.split("=", 1)
    with open(src, "rb") as f:
      files[dest] = f.read()
  # Packages need their __init__.py even where Bazel's layout has none.
  for dest in list(files):
    parts = dest.split("/")[:-1]
    for i in range(1, len(parts) + 1):
      init = "/".join(parts[:i]) + "/__init__.py"
      files.setdefault(init, b"")
  extensions = {d: b for d, b in files.items() if d.endswith(".so")}
  if not extensions:
    raise ValueError("no extension modules in the wheel")
  files_base = dict(files)

  def write(platform: str, out_dir: str, compression=zipfile.ZIP_DEFLATED) -> str:
    return write_wheel(dict(files_base), version, f"{py_tag}-{abi_tag}-{platform}", requires,
                       args, out_dir, compression)

  macho = {d for d, data in extensions.items() if data[:4] == _MACHO_MAGIC}
  if macho:
    if len(macho) != len(extensions):
      raise ValueError(f"Mach-O and other shared objects in one wheel: {sorted(extensions)}")
    with tempfile.TemporaryDirectory() as tmp:
      tags = set()
      for dest in sorted(macho):
        path = os.path.join(tmp, os.path.basename(dest))
        with open(path, "wb") as f:
          f.write(extensions[dest])
        tags.add(macos_tag(path, args.auditwheel_site))
    if len(tags) != 1:
      raise ValueError(f"Mach-O libraries for several platforms: {sorted(tags)}")
    plat = tags.pop()
  else:
    machines = {elf_machine(data) for data in extensions.values()}
    if len(machines) != 1:
      raise ValueError(f"extension modules for several machines: {machines}")
    # The probe auditwheel reads is stored uncompressed: only the final wheel pays for deflating.
    with tempfile.TemporaryDirectory() as tmp:
      probe = write(f"linux_{machines.pop()}", tmp, zipfile.ZIP_STORED)
      plat = auditwheel_tag(probe, args.auditwheel_site)
  os.makedirs(args.out_dir, exist_ok=True)
  print(os.path.basename(write(plat, args.out_dir)))


def write_wheel(files, version, tag, requires_python, args, out_dir,
                compression=zipfile.ZIP_DEFLATED) -> str:
  """Writes jaxext-<version>-<tag>.whl into out_dir (metadata, RECORD); returns its path."""
  dist_info = f"jaxext-{version}.dist-info"
  with open(args.readme, "rb") as f:
    readme = f.read().decode()
  with open(args.license, "rb") as f:
    files[f"{dist_info}/licenses/LICENSE"] = f.read()
  metadata = "\n".join([
      "Metadata-Version: 2.4",
      "Name: jaxext",
      f"Version: {version}",
      "Summary: Custom JAX operations in C++ and CUDA, exposed through XLA's FFI",
      "License-Expression: MIT",
      "License-File: LICENSE",
      f"Requires-Python: {requires_python}",
      # Built against the FFI headers of jaxlib==jaxlib_floor; XLA accepts handlers built against
      # an FFI API no newer than its own, so any jaxlib from the floor on loads them.
      f"Requires-Dist: jax>={args.jaxlib_floor}",
      f"Requires-Dist: jaxlib>={args.jaxlib_floor}",
      "Requires-Dist: numpy>=1.26",
      # jaxext.numba_kernel: the extra installs Numba; the rest of jaxext imports without it.
      "Provides-Extra: numba",
      'Requires-Dist: numba>=0.68.1; extra == "numba"',
      # jaxext.numba_cuda_kernel: numba-cuda with NVIDIA's CUDA 13 libraries (libnvvm, libnvrtc).
      "Provides-Extra: numba-cuda",
      'Requires-Dist: numba>=0.68.1; extra == "numba-cuda"',
      'Requires-Dist: numba-cuda[cu13]>=0.30.4; extra == "numba-cuda" and sys_platform == "linux"',
      # The examples (examples/ of the source tree): their figures, and gray_scott's Numba kernel.
      "Provides-Extra: examples",
      'Requires-Dist: matplotlib>=3.8; extra == "examples"',
      'Requires-Dist: numba>=0.68.1; extra == "examples"',
      # jaxext.equivariant.flax: flax modules on the equivariant kernels, built with e3nn-jax's.
      "Provides-Extra: flax",
      'Requires-Dist: flax>=0.12.8; extra == "flax"',  # the oldest tested (jax 0.10)
      'Requires-Dist: e3nn-jax>=0.21.0; extra == "flax"',
      "Description-Content-Type: text/markdown",
      "",
      readme,
  ])
  files[f"{dist_info}/METADATA"] = metadata.encode()
  files[f"{dist_info}/WHEEL"] = "\n".join([
      "Wheel-Version: 1.0",
      "Generator: jaxext tools/build_wheel.py",
      "Root-Is-Purelib: false",
      f"Tag: {tag}",
      "",
  ]).encode()
  files[f"{dist_info}/top_level.txt"] = b"jaxext\n"
  record_name = f"{dist_info}/RECORD"
  record = io.StringIO()
  for dest in sorted(files):
    record.write(f"{dest},{record_hash(files[dest])},{len(files[dest])}\n")
  record.write(f"{record_name},,\n")
  files[record_name] = record.getvalue().encode()

  path = os.path.join(out_dir, f"jaxext-{version}-{tag}.whl")
  with zipfile.ZipFile(path, "w", compression) as z:
    # dist-info last, RECORD at the very end, as installers expect.
    order = sorted(files, key=lambda d: (d.startswith(dist_info), d == record_name, d))
    for dest in order:
      zi = zipfile.ZipInfo(dest, date_time=_EPOCH)
      mode = 0o755 if dest.endswith(".so") else 0o644
      zi.external_attr = (0o100000 | mode) << 16
      zi.compress_type = compression
      z.writestr(zi, files[dest], compresslevel=9 if compression == zipfile.ZIP_DEFLATED else None)
  return path


if __name__ == "__main__":
  main()
