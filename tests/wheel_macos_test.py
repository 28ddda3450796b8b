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
import struct
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
  for cmd in (mach_o.LC_LOAD_WEAK_DYLIB, mach_o.LC_REEXPORT_DYLIB, mach_o.LC_LOAD_UPWARD_DYLIB,
              mach_o.LC_LAZY_LOAD_DYLIB, mach_o.LC_RPATH):
    assert cmd not in loads, mach_o.LC_NAMES.get(cmd, cmd)
  needed = [data.split(b"\0", 1)[0].decode()
            for lc, _, data in header.commands if lc.cmd == mach_o.LC_LOAD_DYLIB]
  assert needed == [_LIBSYSTEM], needed  # libc++ is linked in (jaxext's own), as on Linux
  ids = [data.split(b"\0", 1)[0].decode()
         for lc, _, data in header.commands if lc.cmd == mach_o.LC_ID_DYLIB]
  assert ids == ["@rpath/jaxext_cpu_handlers.so"], ids  # not a path of the build machine
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


def _uleb(data, i):
  value = shift = 0
  while True:
    byte = data[i]
    i += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if byte < 0x80:
      return value, i


def _weak_bound_names(header, raw):
  """The symbol names of the library's weak-binding opcodes (LC_DYLD_INFO's weak_bind stream):
  what dyld binds to the first definition of that name in any loaded image."""
  infos = [c for lc, c, _ in header.commands
           if lc.cmd in (mach_o.LC_DYLD_INFO, mach_o.LC_DYLD_INFO_ONLY)]
  assert len(infos) == 1, "no LC_DYLD_INFO (chained fixups are not read here)"
  data = raw[infos[0].weak_bind_off:infos[0].weak_bind_off + infos[0].weak_bind_size]
  names, i = set(), 0
  while i < len(data):
    opcode, imm = data[i] & 0xF0, data[i] & 0x0F
    i += 1
    if opcode == 0x00:  # DONE
      continue
    if opcode == 0x40:  # SET_SYMBOL_TRAILING_FLAGS_IMM: a C string
      end = data.index(b"\0", i)
      if not imm & 0x8:  # BIND_SYMBOL_FLAGS_NON_WEAK_DEFINITION: a strong override, not a lookup
        names.add(data[i:end].decode())
      i = end + 1
    elif opcode in (0x20, 0x60, 0x70, 0x80, 0xA0):  # SET_DYLIB_ORDINAL_ULEB, SET_ADDEND_SLEB,
      _, i = _uleb(data, i)  # SET_SEGMENT_AND_OFFSET_ULEB, ADD_ADDR_ULEB, DO_BIND_ADD_ADDR_ULEB
    elif opcode == 0xC0:  # DO_BIND_ULEB_TIMES_SKIPPING_ULEB                (a SLEB skips alike)
      _, i = _uleb(data, i)
      _, i = _uleb(data, i)
    elif opcode in (0x10, 0x30, 0x50, 0x90, 0xB0):  # the immediate forms and DO_BIND
      pass
    else:
      raise AssertionError(f"unknown bind opcode {opcode:#x} at {i - 1}")
  return names


@pytest.fixture(scope="module")
def weak_bound(wheel, macho):
  return _weak_bound_names(macho[0], wheel[_LIBRARY])


def test_weak_bindings_are_read(weak_bound):
  """The reader below sees the allocation functions' weak bindings (and nothing it cannot parse)."""
  assert {"__Znwm", "__ZdlPv"} <= weak_bound, sorted(weak_bound)[:10]


# Weak bindings dyld may resolve into another image, by design: the C++ allocation functions
# (the process's one pair, whichever image defines them first, for allocation and release alike),
# and std::bad_variant_access's destructor, which libc++ keeps outside its ABI namespace (its
# layout is std::exception's).
_SHARED_BY_DESIGN = re.compile(r"^(__Z(nw|na|dl|da)|__ZNSt18bad_variant_accessD[12]Ev$)")
# Names no other image defines: jaxext's own code and jaxext's own libc++ (ABI namespace
# std::__jaxext: @jaxext_zig//:macos_libcxx).
_OWN = ("St8__jaxext", "N6jaxext")
# Instantiations of the XLA FFI headers' templates (handler vtables): not unique to jaxext by
# name. Another image exporting the very same instantiation would capture them; a known residual
# risk (docs/releasing.md), kept visible here rather than counted as jaxext's own.
_XLA_FFI = "N3xla3ffi"


def test_no_weak_binding_resolves_into_macos_libcxx(macho, weak_bound):
  """dyld resolves a weak binding to the first loaded image exporting the name, whatever the
  two-level namespace says (exported weak definitions included), and zig's linker weak-binds even
  hidden weak definitions: with zig's own libc++ (ABI namespace std::__1, as macOS's
  /usr/lib/libc++.1.dylib, which jaxlib loads first) the library's stream vtables and locale facet
  ids would be macOS's. Its libc++ is jaxext's own (std::__jaxext), and nothing of std::__1 is in
  it at all."""
  _, symbols = macho
  stray = sorted(n for n in weak_bound if not _SHARED_BY_DESIGN.match(n)
                 and not any(own in n for own in _OWN) and _XLA_FFI not in n)
  assert not stray, (len(stray), stray[:8])
  assert not [n for n in weak_bound if "St3__1" in n]
  names = {(n.decode() if isinstance(n, bytes) else n) for _, n in symbols.nlists}
  assert not [n for n in names if "St3__1" in n], "std::__1 (zig's or macOS's libc++) inside"
  assert [n for n in names if "St8__jaxext" in n]  # jaxext's libc++ is the one linked in


def test_library_is_signed_ad_hoc_over_every_page(wheel, macho):
  """arm64 macOS maps no unsigned code, and kills a process that maps a page whose hash differs
  from its signature's: zig's linker signs ad hoc; nothing after the link may change a byte."""
  header, _ = macho
  raw = wheel[_LIBRARY]
  sigs = [c for lc, c, _ in header.commands if lc.cmd == mach_o.LC_CODE_SIGNATURE]
  assert len(sigs) == 1
  off, size = sigs[0].dataoff, sigs[0].datasize
  blob = raw[off:off + size]
  magic, _, count = struct.unpack_from(">III", blob, 0)
  assert magic == 0xFADE0CC0, hex(magic)  # embedded signature SuperBlob
  directories = []
  for k in range(count):
    slot, at = struct.unpack_from(">II", blob, 12 + 8 * k)
    if slot == 0:  # CSSLOT_CODEDIRECTORY
      directories.append(at)
  assert len(directories) == 1
  cd = directories[0]
  (magic, _, _, flags, hash_off, _, _, n_code, code_limit, hash_size, hash_type, _,
   page_log2) = struct.unpack_from(">IIIIIIIIIBBBB", blob, cd)
  assert magic == 0xFADE0C02, hex(magic)  # CodeDirectory
  assert flags & 0x2, hex(flags)  # CS_ADHOC
  assert hash_type == 2 and hash_size == 32  # SHA-256
  assert code_limit == off  # everything before the signature is covered
  page = 1 << page_log2
  assert n_code == -(-code_limit // page)
  for k in range(n_code):
    want = blob[cd + hash_off + 32 * k:cd + hash_off + 32 * (k + 1)]
    got = hashlib.sha256(raw[k * page:min((k + 1) * page, code_limit)]).digest()
    assert got == want, f"page {k} differs from its signed hash"
