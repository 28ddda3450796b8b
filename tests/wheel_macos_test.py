"""The macOS arm64 wheel (//:wheel_macos_arm64), read where no macOS runs it.

What can go wrong on a Mac that a Linux machine can see: the library's architecture, the minimum
macOS it was built for (the tag must not promise older), the libraries it needs (macOS has only
libSystem to offer), an unsigned library (arm64 macOS refuses to map unsigned code), references a
two-level namespace cannot bind (flat lookups), an FFI handler jaxext registers but the library
does not export, and a package that differs from the one that runs: its Python files must be byte
for byte those of //tests:wheel_plain, the same form of the package built for Linux, which
//tests:wheel_plain_test installs and runs (every op under jit, vmap and grad).
"""

import base64
import csv
import hashlib
import io
import os
import re
import sys
import tempfile
import zipfile

import pytest

_SITE = os.path.dirname(os.path.abspath(os.environ["JAXEXT_AUDITWHEEL_SITE"]))
sys.path.insert(0, _SITE)  # macholib and pyelftools, pinned beside auditwheel
from elftools.elf.elffile import ELFFile  # noqa: E402
from macholib import mach_o  # noqa: E402
from macholib.MachO import MachO  # noqa: E402
from macholib.SymbolTable import SymbolTable  # noqa: E402

_LIBRARY = "jaxext/cpu/jaxext_cpu_handlers.so"
_LIBSYSTEM = "/usr/lib/libSystem.B.dylib"


def _wheel(env):
  wheel_dir = os.environ[env]
  wheels = [f for f in os.listdir(wheel_dir) if f.endswith(".whl")]
  assert len(wheels) == 1, wheels
  return os.path.join(wheel_dir, wheels[0])


@pytest.fixture(scope="module")
def wheel():
  with zipfile.ZipFile(_wheel("JAXEXT_WHEEL_DIR")) as z:
    return {n: z.read(n) for n in z.namelist()}


@pytest.fixture(scope="module")
def macho(wheel):
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "lib.so")
    with open(path, "wb") as f:
      f.write(wheel[_LIBRARY])
    m = MachO(path)
    assert len(m.headers) == 1, "a universal binary"
    header = m.headers[0]
    return header, SymbolTable(m, header)


def _commands(header, cmd):
  return [(c, data) for lc, c, data in header.commands if lc.cmd == cmd]


def test_name_tags_and_metadata(wheel):
  name = os.path.basename(_wheel("JAXEXT_WHEEL_DIR"))
  major, minor = (int(v) for v in os.environ["JAXEXT_MACOS_MIN"].split("."))
  import jaxext
  assert name == f"jaxext-{jaxext.__version__}-py3-none-macosx_{major}_{minor}_arm64.whl", name
  dist = f"jaxext-{jaxext.__version__}.dist-info"
  tag = re.search(r"^Tag: (.*)$", wheel[f"{dist}/WHEEL"].decode(), re.M).group(1)
  assert f"jaxext-{jaxext.__version__}-{tag}.whl" == name
  assert "Root-Is-Purelib: false" in wheel[f"{dist}/WHEEL"].decode()
  meta = wheel[f"{dist}/METADATA"].decode()
  assert re.search(r"^Requires-Python: >=3\.11$", meta, re.M), meta[:400]
  assert re.search(r"^Requires-Dist: jaxlib>=0\.\d+", meta, re.M)
  rows = list(csv.reader(io.StringIO(wheel[f"{dist}/RECORD"].decode())))
  assert {r[0] for r in rows} == set(wheel)
  for path, digest, size in rows:
    if path.endswith("RECORD"):
      continue
    want = base64.urlsafe_b64encode(hashlib.sha256(wheel[path]).digest()).rstrip(b"=").decode()
    assert digest == f"sha256={want}" and int(size) == len(wheel[path]), path


def test_same_package_as_the_plain_wheel_that_runs(wheel):
  with zipfile.ZipFile(_wheel("JAXEXT_PLAIN_WHEEL_DIR")) as z:
    plain = {n: z.read(n) for n in z.namelist()}
  package = lambda files: {n for n in files if not n.startswith("jaxext-")}
  assert package(wheel) == package(plain), package(wheel) ^ package(plain)
  for n in package(wheel) - {_LIBRARY}:
    assert wheel[n] == plain[n], n
  assert not [n for n in wheel if n.endswith(".so") and n != _LIBRARY]  # no extension module
  # Same metadata but the tag.
  dist = [n for n in wheel if n.endswith(".dist-info/METADATA")][0]
  assert wheel[dist] == plain[dist]


def test_library_is_arm64_for_the_tagged_macos(macho):
  header, _ = macho
  assert header.header.magic == mach_o.MH_MAGIC_64
  assert mach_o.CPU_TYPE_NAMES.get(header.header.cputype) == "ARM64"
  assert header.header.filetype == mach_o.MH_DYLIB
  assert header.header.flags & mach_o.MH_TWOLEVEL  # two-level namespace (no flat lookups)
  builds = _commands(header, mach_o.LC_BUILD_VERSION)
  assert len(builds) == 1 and not _commands(header, mach_o.LC_VERSION_MIN_MACOSX)
  build = builds[0][0]
  assert build.platform == 1  # PLATFORM_MACOS
  major, minor = (int(v) for v in os.environ["JAXEXT_MACOS_MIN"].split("."))
  assert (build.minos >> 16, (build.minos >> 8) & 0xFF) == (major, minor), hex(build.minos)


def test_library_needs_only_libsystem_and_is_signed(macho):
  header, symbols = macho
  loads = [lc.cmd for lc, _, _ in header.commands]
  assert mach_o.LC_LOAD_WEAK_DYLIB not in loads and mach_o.LC_REEXPORT_DYLIB not in loads
  assert mach_o.LC_RPATH not in loads
  needed = [data.split(b"\0", 1)[0].decode()
            for lc, _, data in header.commands if lc.cmd == mach_o.LC_LOAD_DYLIB]
  assert needed == [_LIBSYSTEM], needed  # libc++ is linked in (zig's), as on Linux
  ids = [data.split(b"\0", 1)[0].decode()
         for lc, _, data in header.commands if lc.cmd == mach_o.LC_ID_DYLIB]
  assert ids == ["@rpath/jaxext_cpu_handlers.so"], ids  # not a path of the build machine
  assert mach_o.LC_CODE_SIGNATURE in loads  # arm64 macOS maps no unsigned code
  # Every undefined symbol binds to libSystem, the first (only) library: ordinal 1, none looked up
  # in the flat namespace (0xfe) or in the library itself.
  ordinals = {(nlist.n_desc >> 8) & 0xFF for nlist, _ in symbols.undefsyms}
  assert ordinals == {1}, (ordinals, [n for nl, n in symbols.undefsyms if (nl.n_desc >> 8) != 1][:10])
  names = {n.decode() if isinstance(n, bytes) else n for _, n in symbols.undefsyms}
  assert {"_malloc", "_free"} <= names  # the table was read
  assert not [n for n in names if n.startswith(("_Py", "__Py"))]  # no CPython inside


def _exported_macho(symbols):
  return {(n.decode() if isinstance(n, bytes) else n)[1:] for _, n in symbols.extdefsyms}


def test_library_exports_every_handler_jaxext_registers(macho):
  _, symbols = macho
  exported = _exported_macho(symbols)
  from jaxext import _ffi
  want = {s.format("Cpu") for s in _ffi._SYMBOLS.values()}
  for platforms in _ffi._STAGED_SYMBOLS.values():
    staged = platforms.get("cpu")
    if staged is not None:
      want |= {staged} if isinstance(staged, str) else set(staged.values())
  want |= {"JaxextRegisterNativeFunction", "JaxextRegisterNativeLanes"}
  assert want <= exported, sorted(want - exported)
  # ... and the same handlers as the Linux plain library, which runs.
  with zipfile.ZipFile(_wheel("JAXEXT_PLAIN_WHEEL_DIR")) as z:
    elf = ELFFile(io.BytesIO(z.read(_LIBRARY)))
  dynsym = elf.get_section_by_name(".dynsym")
  linux = {s.name for s in dynsym.iter_symbols()
           if s["st_shndx"] != "SHN_UNDEF" and s.name.startswith("Jaxext")}
  assert {s for s in exported if s.startswith("Jaxext")} == linux
