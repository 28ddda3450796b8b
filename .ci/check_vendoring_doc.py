#!/usr/bin/env python3
"""The vendoring instructions are what CI builds: every `bazel_dep(...)` line (and module extension
line) of the Starlark blocks of README.md and docs/vendoring.md is in tests/consumer/MODULE.bazel,
every symbol those blocks `load(...)` and every `@jaxext//...` label they name is in a BUILD file
of tests/consumer; the lines of the WORKSPACE-mode block are in tests/consumer/WORKSPACE.

    python3 .ci/check_vendoring_doc.py   # from the repository root; exit 1 naming what differs
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONSUMER = ROOT / "tests" / "consumer"


def starlark_blocks(path):
  return re.findall(r"```starlark\n(.*?)```", path.read_text(), re.S)


def main():
  module = (CONSUMER / "MODULE.bazel").read_text()
  workspace = (CONSUMER / "WORKSPACE").read_text()
  builds = "\n".join(p.read_text() for p in CONSUMER.rglob("BUILD.bazel"))
  missing = []
  for doc in (ROOT / "README.md", ROOT / "docs" / "vendoring.md"):
    for block in starlark_blocks(doc):
      if "local_repository(" in block:  # the WORKSPACE-mode block: its lines in the WORKSPACE
        for line in block.splitlines():
          line = line.split("#")[0].strip()
          if line.startswith("local_repository("):
            line = re.sub(r",\s*path\s*=.*", "", line)  # the consumer's own path to its copy
            if not re.search(r'local_repository\(\s*name = "jaxext"', workspace):
              missing.append(f"{doc.name}: {line} (not in tests/consumer/WORKSPACE)")
          elif line and line not in workspace:
            missing.append(f"{doc.name}: {line} (not in tests/consumer/WORKSPACE)")
        continue
      for line in block.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("bazel_dep(") and line not in module:
          missing.append(f"{doc.name}: {line} (not in tests/consumer/MODULE.bazel)")
        if "use_extension(" in line or ".requirements(" in line:  # MODULE.bazel lines, verbatim
          if line not in module:
            missing.append(f"{doc.name}: {line} (not in tests/consumer/MODULE.bazel)")
          continue
        if line.startswith("load("):
          source, *symbols = re.findall(r'"([^"]+)"', line)
          for sym in symbols:
            if not re.search(rf'load\("{re.escape(source)}"[^)]*"{re.escape(sym)}"', builds):
              missing.append(f"{doc.name}: {sym} from {source} (loaded by no BUILD file of "
                             "tests/consumer)")
        for label in re.findall(r'"(@jaxext//[^"]+)"', line):
          if f'"{label}"' not in builds:
            missing.append(f"{doc.name}: {label} (in no BUILD file of tests/consumer)")
  for m in missing:
    print(m)
  print("vendoring instructions match tests/consumer" if not missing else
        f"{len(missing)} difference(s)")
  return 1 if missing else 0


if __name__ == "__main__":
  sys.exit(main())
