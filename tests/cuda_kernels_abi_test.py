"""The .cu half of each CUDA op (`jaxext/cuda/<op>_kernels.cu`: kernels and their launchers) needs
nothing of a C++ runtime: its host objects, compiled by nvcc with nvcc's host compiler, then link
into libraries whose C++ runtime is another toolchain's (the wheels': zig's clang with libc++).

Checked on the objects themselves (`nm -u`): they may import the CUDA runtime and C functions,
and the guard functions of local statics (libc++abi has them as well), but no C++ symbol
(`_Z...`: a standard library function, a throw helper) and no other `__cxa_` / unwinding entry
point (exceptions are off: CUDA_KERNEL_COPTS). Run with --config=cuda (tag "cuda").
"""

import os
import shutil
import subprocess

import pytest

_OBJECTS = [p for p in os.environ.get("JAXEXT_TEST_KERNEL_OBJECTS", "").split() if p]
_ALLOWED_CXA = {"__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort",
                "__cxa_atexit"}


def _undefined(path):
  nm = shutil.which("nm")
  assert nm, "nm (binutils) is needed"
  out = subprocess.run([nm, "-u", path], capture_output=True, text=True, check=True).stdout
  return sorted({line.split()[-1] for line in out.splitlines() if line.strip()})


def _forbidden(symbols):
  return [s for s in symbols
          if s.startswith("_Z") or s in {"__gxx_personality_v0"} or s.startswith("_Unwind_")
          or (s.startswith("__cxa_") and s not in _ALLOWED_CXA)]


def test_objects_are_given():
  names = {os.path.basename(p) for p in _OBJECTS}
  for op in ("kepler", "limbdark", "ode", "sph", "tp", "transit"):
    assert f"{op}_kernels.pic.o" in names, (op, sorted(names))


@pytest.mark.parametrize("path", _OBJECTS, ids=os.path.basename)
def test_cuda_kernel_objects_need_no_cxx_runtime(path):
  symbols = _undefined(path)
  assert any(s.startswith("__cuda") or s.startswith("cuda") for s in symbols), symbols
  assert not _forbidden(symbols), _forbidden(symbols)


def test_the_check_can_fail():
  """The filter finds what a host object using the standard library imports."""
  assert _forbidden(["cudaGetLastError", "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE"
                     "9_M_createERmm", "__cxa_call_terminate", "__cxa_guard_acquire"]) == [
      "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm",
      "__cxa_call_terminate"]
