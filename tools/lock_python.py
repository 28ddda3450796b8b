#!/usr/bin/env python3
"""Regenerates the hashed Python lock files of jaxext's hermetic test environments.

    python3 tools/lock_python.py            # every set of third_party/python/requirements_*.in
    python3 tools/lock_python.py newest     # one set
    python3 tools/lock_python.py --keep-pins   # add new requirements, move no existing pin
                                               # (a CPython new to a lock keeps them where it can)
    python3 tools/lock_python.py --lock-for 3.11   # the newest jax set's lock with cp311 wheels
    python3 tools/lock_python.py --entries LOCK --python 3.11 [--arch aarch64] [--only jax,...]
                                               # LOCK's lines for CPython 3.11, markers decided

Each `third_party/python/requirements_<set>.in` (the jax version of the set plus the common
`requirements.in`) is resolved by pip, once per CPython of `PYTHON_VERSIONS` in
`third_party/pins.bzl`, for CPython wheels on manylinux x86_64 (no source builds; a `# platform:
aarch64` line in the `.in` file selects that architecture instead), and written to
`requirements_lock_<set>.txt`: one `name==version` line per package with the sha256 of every wheel
the supported Pythons install (a version that differs between Pythons gets one line per Python,
with an environment marker). A Python for which the set cannot be resolved (jaxlib 0.10.0 has no
CPython 3.15 wheels) is left out, and the lock's `# python-versions:` header says which are in;
the repository rule (third_party/python/python_repository.bzl) refuses the others with that reason.

Resolution needs network access to the package index (`--index-url`, default PyPI) and a pip new
enough for `--report`; the tool makes a scratch virtual environment with one if the running pip is
older. Re-run it when a `.in` file changes, and commit the lock files.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYDIR = os.path.join(ROOT, "third_party", "python")
PINS = os.path.join(ROOT, "third_party", "pins.bzl")

# Platforms the test environments run on: the toolchain root (glibc 2.4x) and machines like it.
# A `.in` file's `# platform: <arch>` line selects another architecture (default x86_64).
def platforms(arch: str) -> list[str]:
  return [f"manylinux2014_{arch}"] + [f"manylinux_2_{n}_{arch}" for n in range(17, 40)]


def arch_of(infile: str) -> str:
  with open(infile) as f:
    for line in f:
      m = re.match(r"#\s*platform:\s*(\w+)", line)
      if m:
        return m.group(1)
  return "x86_64"
PIP = "pip==26.3"


def pins_value(name: str):
  """A top-level constant of pins.bzl (Starlark literals are Python literals)."""
  tree = ast.parse(open(PINS).read(), PINS)
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == name for t in node.targets):
      return ast.literal_eval(node.value)
  raise KeyError(f"{name} not in {PINS}")


def normalize(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def pip_command(scratch: str) -> list[str]:
  """A pip with --report and --python-version checks that work across versions."""
  try:
    out = subprocess.run([sys.executable, "-m", "pip", "--version"], check=True,
                         capture_output=True, text=True).stdout
    major = int(re.match(r"pip (\d+)", out).group(1))
  except (subprocess.CalledProcessError, AttributeError):
    major = 0
  if major >= 24:
    return [sys.executable, "-m", "pip"]
  venv = os.path.join(scratch, "pip-venv")
  subprocess.run([sys.executable, "-m", "venv", venv], check=True)
  py = os.path.join(venv, "bin", "python")
  subprocess.run([py, "-m", "pip", "install", "--isolated", "--quiet", "--disable-pip-version-check",
                  PIP], check=True)
  return [py, "-m", "pip"]


def _marker_class():
  try:
    from packaging.markers import Marker
  except ImportError:
    from pip._vendor.packaging.markers import Marker
  return Marker


def flatten(infile: str, version: str, out: list[str] | None = None,
            arch: str = "x86_64") -> list[str]:
  """The requirement lines of `infile` (following `-r`) that apply to CPython `version`.

  pip evaluates environment markers against the Python running it, not `--python-version`, so a
  line such as `pkg==1; python_version < "3.15"` is decided here, per target Python.
  """
  out = [] if out is None else out
  with open(infile) as f:
    for raw in f:
      line = raw.split("#", 1)[0].strip()
      if not line:
        continue
      if line.startswith("-r "):
        flatten(os.path.join(os.path.dirname(infile), line[3:].strip()), version, out, arch)
        continue
      req, _, marker = line.partition(";")
      if applies(marker, version, arch):
        out.append(req.strip())
  return out


def applies(marker: str, version: str, arch: str) -> bool:
  """Whether an environment marker (empty: always) holds for CPython `version` on Linux `arch`."""
  env = {"python_version": version, "python_full_version": version + ".0",
         "implementation_name": "cpython", "platform_system": "Linux", "sys_platform": "linux",
         "platform_machine": arch}
  return not marker.strip() or _marker_class()(marker.strip()).evaluate(env)


def lock_entries(lockfile: str, version: str, arch: str) -> list[tuple[str, list[str]]]:
  """The entries of a lock file that apply to CPython `version`: (`name==version`, its
  `--hash=sha256:...` options), markers decided here (as in `flatten`) and dropped."""
  entries: list[tuple[str, str, list[str]]] = []
  with open(lockfile) as f:
    for raw in f:
      line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
      if line.startswith("--hash") and entries:
        entries[-1][2].append(line)
      elif line:
        req, _, marker = line.partition(";")
        entries.append((req.strip(), marker, []))
  return [(req, hashes) for req, marker, hashes in entries if applies(marker, version, arch)]


def current_pins(lockfile: str, version: str, arch: str) -> list[str]:
  """The `name==version` lines of an existing lock that apply to CPython `version`."""
  if not os.path.exists(lockfile):
    return []
  return [req for req, _ in lock_entries(lockfile, version, arch)]


def lock_for(version: str) -> str | None:
  """The lock file of the newest jax set (JAX_SETS of pins.bzl) with wheels for CPython
  `version`, or None."""
  sets = [(k, v) for k, v in pins_value("JAX_SETS").items() if k != "default"]
  for name, _ in sorted(sets, key=lambda kv: [int(x) for x in kv[1].split(".")], reverse=True):
    lockfile = os.path.join(PYDIR, f"requirements_lock_{name}.txt")
    if version in locked_versions(lockfile):
      return lockfile
  return None


def locked_versions(lockfile: str) -> set[str]:
  """The CPythons an existing lock was resolved for (its `# python-versions:` header)."""
  if not os.path.exists(lockfile):
    return set()
  with open(lockfile) as f:
    for line in f:
      if line.startswith("# python-versions:"):
        return set(line.split(":", 1)[1].split())
  return set()


def resolve(pip: list[str], infile: str, version: str, index_url: str,
            scratch: str, keep: str | None = None) -> dict[str, tuple[str, str]] | str:
  """{name: (version, sha256)} for CPython `version`, or the reason it cannot be resolved.
  `keep`: an existing lock whose versions constrain the resolution (only new packages move)."""
  flat = os.path.join(scratch, f"flat-{os.path.basename(infile)}-{version}.txt")
  arch = arch_of(infile)
  lines = flatten(infile, version, arch=arch)
  if keep:
    constraints = os.path.join(scratch, f"keep-{os.path.basename(infile)}-{version}.txt")
    with open(constraints, "w") as f:
      f.write("\n".join(current_pins(keep, version, arch)) + "\n")
    lines.append(f"-c {constraints}")
  with open(flat, "w") as f:
    f.write("\n".join(lines) + "\n")
  report = os.path.join(scratch, f"report-{os.path.basename(infile)}-{version}.json")
  tag = "cp" + version.replace(".", "")
  cmd = pip + ["install", "--isolated", "--disable-pip-version-check", "--dry-run",
               "--ignore-installed", "--quiet", "--report", report, "--only-binary=:all:",
               "--python-version", version, "--implementation", "cp", "--abi", tag,
               "--abi", "abi3", "--abi", "none", "--target", os.path.join(scratch, "target"),
               "--index-url", index_url, "-r", flat]
  for p in platforms(arch):
    cmd += ["--platform", p]
  res = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(infile))
  if res.returncode != 0:
    # pip's first ERROR line may only list versions it ignored; the reason comes after it.
    lines = [l for l in res.stderr.splitlines()
             if l.startswith("ERROR") and not l.startswith("ERROR: Ignored")]
    why = (lines[0] if lines else res.stderr.strip().splitlines()[-1]).removeprefix("ERROR: ")
    return re.sub(r" \(from versions: [^)]*\)", "", why)
  with open(report) as f:
    data = json.load(f)
  out = {}
  for item in data["install"]:
    name = normalize(item["metadata"]["name"])
    sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
    out[name] = (item["metadata"]["version"], sha)
  return out


def lock(set_name: str, versions: list[str], index_url: str, pip: list[str], scratch: str,
         keep: bool = False) -> str:
  infile = os.path.join(PYDIR, f"requirements_{set_name}.in")
  lockfile = os.path.join(PYDIR, f"requirements_lock_{set_name}.txt")
  per_python, skipped = {}, {}
  locked = locked_versions(lockfile) if keep else set()
  for v in versions:
    r = resolve(pip, infile, v, index_url, scratch, lockfile if keep else None)
    if isinstance(r, str) and keep and v not in locked:
      # A Python new to this lock: where the pins of the others have no wheels for it (NumPy's
      # newest for an older CPython), it gets its own versions.
      print(f"  {set_name}: Python {v}: not with the current pins ({r}); resolved alone",
            file=sys.stderr)
      r = resolve(pip, infile, v, index_url, scratch)
    if isinstance(r, str):
      skipped[v] = r
      print(f"  {set_name}: Python {v} left out: {r}", file=sys.stderr)
    else:
      per_python[v] = r
      print(f"  {set_name}: Python {v}: {len(r)} packages", file=sys.stderr)
  if not per_python:
    raise SystemExit(f"{infile}: no Python of {versions} resolves")
  names = sorted(set().union(*per_python.values()))
  lines = [
      f"# Generated by tools/lock_python.py from requirements_{set_name}.in; do not edit.",
      "# Every wheel is pinned by its sha256 (pip --require-hashes); CPython wheels for manylinux "
      + arch_of(infile) + ".",
      "# python-versions: " + " ".join(sorted(per_python, key=lambda s: tuple(map(int, s.split("."))))),
  ]
  for v, why in skipped.items():
    lines.append(f"# python {v} not supported: {why}")
  for name in names:
    by_version: dict[str, list[str]] = {}
    for v, pkgs in per_python.items():
      if name in pkgs:
        by_version.setdefault(pkgs[name][0], []).append(v)
    for pkg_version, pythons in sorted(by_version.items()):
      hashes = sorted({per_python[v][name][1] for v in pythons})
      marker = ""
      if len(pythons) != len(per_python):
        marker = " ; " + " or ".join(f'python_version == "{v}"' for v in sorted(pythons))
      lines.append(f"{name}=={pkg_version}{marker} \\")
      lines += [f"    --hash=sha256:{h} \\" for h in hashes[:-1]]
      lines.append(f"    --hash=sha256:{hashes[-1]}")
  return "\n".join(lines) + "\n"


def print_entries(lockfile: str, version: str, arch: str, only: str) -> None:
  """The lock's entries for CPython `version` (`only`: those packages), as a requirements file."""
  want = {normalize(n) for n in only.split(",") if n}
  for req, hashes in lock_entries(lockfile, version, arch):
    if not want or normalize(re.split(r"[=<>!~ ]", req, maxsplit=1)[0]) in want:
      print(" \\\n    ".join([req] + hashes))


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("sets", nargs="*", help="set names (default: every requirements_<set>.in)")
  p.add_argument("--lock-for", metavar="3.X",
                 help="only print the lock file of the newest jax set with wheels for CPython 3.X")
  p.add_argument("--entries", metavar="LOCK",
                 help="only print LOCK's entries for --python's CPython (markers decided: pip "
                      "judges them by the Python running it), as a requirements file")
  p.add_argument("--python", help="with --entries: the CPython (3.X)")
  p.add_argument("--arch", default="x86_64", help="with --entries: the machine (x86_64)")
  p.add_argument("--only", default="", help="with --entries: these packages (comma-separated)")
  p.add_argument("--index-url", default=pins_value("PYTHON")["index_url"])
  p.add_argument("--keep-pins", action="store_true",
                 help="keep every version the current lock pins (add what a .in file gained, "
                      "move nothing else)")
  args = p.parse_args()
  if args.lock_for:
    lockfile = lock_for(args.lock_for)
    if lockfile is None:
      raise SystemExit(f"no jax set's lock file has wheels for CPython {args.lock_for}")
    print(lockfile)
    return
  if args.entries:
    if not args.python:
      p.error("--entries needs --python")
    print_entries(args.entries, args.python, args.arch, args.only)
    return
  sets = args.sets or sorted(
      m.group(1) for f in os.listdir(PYDIR) if (m := re.fullmatch(r"requirements_(\w+)\.in", f)))
  versions = list(pins_value("PYTHON")["versions"])
  with tempfile.TemporaryDirectory() as scratch:
    pip = pip_command(scratch)
    for s in sets:
      text = lock(s, versions, args.index_url, pip, scratch, args.keep_pins)
      path = os.path.join(PYDIR, f"requirements_lock_{s}.txt")
      with open(path, "w") as f:
        f.write(text)
      print(f"wrote {os.path.relpath(path, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
  main()
