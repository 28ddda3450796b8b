"""Reads `bazel aquery --output=text` of compile actions and checks that each one's effective
optimisation level (GCC takes the last -O flag) is -O2 or higher. Prints one line per action.

Usage: check_optimised.py AQUERY_TEXT. Exits non-zero when an action is unoptimised or when there
are none (a query that matched nothing proves nothing)."""

import re
import sys


def main():
  actions, current = [], None
  with open(sys.argv[1]) as f:
    for line in f:
      m = re.match(r"action '(.*)'", line)
      if m:
        current = [m.group(1), None]
        actions.append(current)
      elif current is not None:
        for flag in re.findall(r"(?:^|\s)-O(\d|s|fast|g)?(?=\s|\\|$)", line):
          current[1] = flag or "1"
  bad = 0
  for name, level in actions:
    ok = level in ("2", "3", "fast")
    bad += not ok
    print(f"{'ok ' if ok else 'BAD'} -O{level or ' (none: -O0)'}  {name}")
  print(f"{len(actions)} compile actions, {bad} unoptimised")
  return 1 if bad or not actions else 0


if __name__ == "__main__":
  sys.exit(main())
