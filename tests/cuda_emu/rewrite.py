"""Rewrites a CUDA source (.cu) as C++ for the CPU emulation (tests/cuda_emu/README.md).

Two constructs are not C++ and no macro can express them:
  kernel<<<grid, block, shared, stream>>>(args)  ->  ::jaxext_emu::Launch(grid, block, shared,
                                                     stream, <a lambda calling kernel>)(args)
  extern __shared__ T name[];                     ->  T* const name = <the block's dynamic shared
                                                     memory>
  __shared__ T name[N]...;                        ->  a static thread_local array, poisoned (0xff)
                                                     when a block first reaches it
Everything else (the qualifiers, threadIdx, barriers, shuffles) is device.h's, force-included.

Usage: rewrite.py SRC.cu OUT.cc
"""

from __future__ import annotations

import re
import sys

# A kernel name, qualified or not, with one level of template arguments.
_LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
_STATIC_SHARED = re.compile(
    r"(?<!extern )__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:\s]*?)\s+(\w+)"
    r"((?:\s*\[[^\]]+\])+)\s*;")
_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:\s]*?)\s+(\w+)\s*\[\s*\]\s*;")


def rewrite(text: str) -> str:
  text = _EXTERN_SHARED.sub(
      lambda m: (f"{m.group(1)}* const {m.group(2)} = "
                 f"reinterpret_cast<{m.group(1)}*>(::jaxext_emu::DynamicShared());"), text)
  text = _STATIC_SHARED.sub(
      lambda m: (f"static thread_local {m.group(1)} {m.group(2)}{m.group(3)}; "
                 f"::jaxext_emu::StaticShared(&{m.group(2)}, sizeof({m.group(2)}));"), text)
  text = _LAUNCH.sub(lambda m: (f"::jaxext_emu::Launch({m.group(2).strip()}, [=](auto&... a) "
                 f"{{ {m.group(1)}(a...); }})("), text)
  for left in ("<<<", "__shared__"):
    if left in text:
      line = text[:text.index(left)].count("\n") + 1
      raise SystemExit(f"rewrite.py: line {line}: `{left}` in a form it does not know")
  return text


def main(argv: list[str]) -> int:
  if len(argv) != 3:
    print(__doc__, file=sys.stderr)
    return 2
  with open(argv[1], encoding="utf-8") as f:
    text = f.read()
  out = f"// Rewritten from {argv[1]} by tests/cuda_emu/rewrite.py: do not edit.\n" + rewrite(text)
  with open(argv[2], "w", encoding="utf-8") as f:
    f.write(out)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
