"""Builds jaxext's platform wheel (run by the `jaxext_wheel` rule in jaxext/jaxext.bzl).

The wheel's tags are read off what was built, not assumed:
* python/abi tag: the CPython the extensions were compiled for (python_info.json of @jaxext_python);
* platform tag: manylinux_2_NN_<arch>, NN the newest GLIBC_2.NN symbol version any extension
  module requires (read from the ELF .gnu.version_r section of each .so), raised where a required
  GLIBCXX_ version is newer than that manylinux policy's libstdc++ allows.
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
import zipfile

_EPOCH = (1980, 1, 1, 0, 0, 0)
_SHT_GNU_VERNEED = 0x6FFFFFFE


def elf_glibc_requirements(data: bytes) -> tuple[str, set[str]]:
  """Returns (machine, {'GLIBC_2.NN', ...}) for a 64-bit little-endian ELF shared object."""
  if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
    raise ValueError("not a 64-bit little-endian ELF file")
  machine = {0x3E: "x86_64", 0xB7: "aarch64"}.get(struct.unpack_from("<H", data, 18)[0])
  if machine is None:
    raise ValueError("unsupported ELF machine")
  shoff, = struct.unpack_from("<Q", data, 0x28)
  shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
  sections = []
  for i in range(shnum):
    (_name, sh_type, _flags, _addr, offset, size, link, _info, _align,
     _entsize) = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    sections.append((sh_type, offset, size, link))
  versions = set()
  for sh_type, offset, size, link in sections:
    if sh_type != _SHT_GNU_VERNEED:
      continue
    strtab = sections[link][1]
    pos = offset
    while True:
      _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, pos)
      apos = pos + aux
      for _ in range(cnt):
        _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", data, apos)
        end = data.index(b"\0", strtab + name)
        versions.add(data[strtab + name:end].decode())
        apos += anext
      if nxt == 0:
        break
      pos += nxt
  return machine, versions


# The oldest manylinux glibc whose reference distributions ship each libstdc++ symbol version
# (auditwheel's policies: manylinux2014 -> 3.4.19, _2_28 (RHEL 8, GCC 8) -> 3.4.25,
# _2_31 (Ubuntu 20.04, GCC 10) -> 3.4.28, _2_34 (RHEL 9, GCC 11) -> 3.4.29,
# _2_35 (Ubuntu 22.04, GCC 12) -> 3.4.30, _2_39 (Ubuntu 24.04, GCC 14) -> 3.4.33).
GLIBCXX_FLOOR = [((3, 4, 19), (2, 17)), ((3, 4, 25), (2, 28)), ((3, 4, 28), (2, 31)),
                 ((3, 4, 29), (2, 34)), ((3, 4, 30), (2, 35)), ((3, 4, 33), (2, 39))]


def glibc_needed(versions: set[str]) -> tuple[int, int]:
  """The manylinux glibc (major, minor) that satisfies every GLIBC_/GLIBCXX_ version needed."""
  newest = (2, 17)  # manylinux2014 is the floor anyone still ships
  for v in versions:
    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", v)
    if m:
      newest = max(newest, (int(m.group(1)), int(m.group(2))))
    m = re.fullmatch(r"GLIBCXX_(\d+)\.(\d+)\.(\d+)", v)
    if m:
      want = tuple(int(g) for g in m.groups())
      floors = [glibc for cxx, glibc in GLIBCXX_FLOOR if cxx >= want]
      if not floors:
        raise ValueError(f"{v} is newer than any manylinux policy known here")
      newest = max(newest, floors[0])
  return newest


def platform_tag(extensions: dict[str, bytes]) -> str:
  machines, newest = set(), (2, 17)
  for name, data in extensions.items():
    machine, versions = elf_glibc_requirements(data)
    machines.add(machine)
    newest = max(newest, glibc_needed(versions))
  if len(machines) != 1:
    raise ValueError(f"extension modules for several machines: {machines}")
  return f"manylinux_{newest[0]}_{newest[1]}_{machines.pop()}"


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
  p.add_argument("--file", action="append", default=[], help="DEST=SRC")
  args = p.parse_args()

  version = read_version(args.version_file)
  with open(args.python_info) as f:
    info = json.load(f)
  py_tag = info["python_tag"]
  major, minor = info["python_version"].split(".")[:2]

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
  plat = platform_tag(extensions)
  tag = f"{py_tag}-{py_tag}-{plat}"
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
      f"Requires-Python: >={major}.{minor},<{major}.{int(minor) + 1}",
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
      'Requires-Dist: numba-cuda[cu13]>=0.30.4; extra == "numba-cuda"',
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

  wheel_name = f"jaxext-{version}-{tag}.whl"
  os.makedirs(args.out_dir, exist_ok=True)
  with zipfile.ZipFile(os.path.join(args.out_dir, wheel_name), "w", zipfile.ZIP_DEFLATED) as z:
    # dist-info last, RECORD at the very end, as installers expect.
    order = sorted(files, key=lambda d: (d.startswith(dist_info), d == record_name, d))
    for dest in order:
      zi = zipfile.ZipInfo(dest, date_time=_EPOCH)
      mode = 0o755 if dest.endswith(".so") else 0o644
      zi.external_attr = (0o100000 | mode) << 16
      zi.compress_type = zipfile.ZIP_DEFLATED
      z.writestr(zi, files[dest], compresslevel=9)
  print(wheel_name)


if __name__ == "__main__":
  main()
