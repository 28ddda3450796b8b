"""Counts test cases from one `bazel test` run: its summary lines and the JUnit XML of each target.

Usage: count_results.py BAZEL_LOG BAZEL_EXIT_CODE. Prints `N passed, N failed` as its last line;
exits non-zero when anything failed. A target that failed without a failing case in its XML (a
crash, a timeout, a build failure) counts as one failed case.
"""

import os
import re
import sys
import xml.etree.ElementTree as ET

STATUS = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|"
                    r"FAILED TO BUILD|INCOMPLETE|SKIPPED)\b")


def xml_counts(target):
  pkg, _, name = target[2:].partition(":")
  path = os.path.join("bazel-testlogs", pkg, name, "test.xml")
  if not os.path.exists(path):
    return None
  root = ET.parse(path).getroot()
  suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
  total = failed = skipped = 0
  for s in suites:
    total += int(s.get("tests", 0))
    failed += int(s.get("failures", 0)) + int(s.get("errors", 0))
    skipped += int(s.get("skipped", 0))
  return total - failed - skipped, failed


def main():
  log_path, bazel_rc = sys.argv[1], int(sys.argv[2])
  passed = failed = 0
  targets = 0
  with open(log_path, errors="replace") as f:
    for line in f:
      m = STATUS.match(line.strip())
      if not m:
        continue
      target, status = m.groups()
      targets += 1
      if status == "SKIPPED":  # incompatible with this configuration (e.g. CUDA-only): not run
        print(f"  {target}: SKIPPED (not run in this configuration)")
        continue
      counts = xml_counts(target) if status in ("PASSED", "FAILED", "FLAKY") else None
      if counts is None:
        p, fl = (1, 0) if status == "PASSED" else (0, 1)
      else:
        p, fl = counts
        if status != "PASSED" and status != "FLAKY" and fl == 0:
          fl = 1
      passed += p
      failed += fl
      print(f"  {target}: {status} ({p} passed, {fl} failed)")
  if bazel_rc != 0 and failed == 0:
    failed = 1  # the build or Bazel itself failed before any test could report
    print(f"  bazel exited with {bazel_rc} before reporting a failing test")
  if targets == 0 and bazel_rc == 0:
    print("  no test targets reported")
    failed = max(failed, 1)
  print(f"{passed} passed, {failed} failed")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
