#!/usr/bin/env bash
# tools/bazel's toolchain root outlives its pins: provisions two scratch roots from a copy of
# tools/bazel and third_party/pins.bzl in which one pin names a version the suite does not have.
#
# 1. python3.13-venv pinned to a version that never existed: provisioning must succeed with the
#    suite's current python3.13-venv, say so, and record pinned and installed versions in the root.
# 2. bazel-bootstrap pinned to a Bazel major the suite does not carry: provisioning must stop with
#    an error that names Bazel and the majors, leaving no root behind.
#
# Needs what tools/bazel needs to provision (root, debootstrap, the Debian archive); run by .ci/run
# (not a Bazel test: it provisions roots of its own). About two minutes.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

workspace_with_pin() {  # workspace_with_pin DIR PACKAGE VERSION: a checkout copy with one pin changed
  local dir=$1 pkg=$2 ver=$3
  mkdir -p "$dir/tools" "$dir/third_party/offline_stubs"
  cp "$top/tools/bazel" "$top/tools/offline.bazelrc" "$dir/tools/"
  cp "$top/third_party/offline_stubs/rules_python_pip.sed" "$dir/third_party/offline_stubs/"
  sed "s|^\(    \"$pkg\": \)\"[^\"]*\"|\1\"$ver\"|" "$top/third_party/pins.bzl" >"$dir/third_party/pins.bzl"
  grep -q "^    \"$pkg\": \"$ver\"," "$dir/third_party/pins.bzl" || fail "could not set the $pkg pin"
}

# --- 1. a superseded pin --------------------------------------------------------------------------
gone="3.13.0~jaxext-never-existed-1"
workspace_with_pin "$scratch/ws1" python3.13-venv "$gone"
out=$(cd "$scratch/ws1" && JAXEXT_CACHE_DIR="$scratch/cache1" JAXEXT_FORCE_TOOLCHAIN_ROOT=1 \
  tools/bazel --version 2>"$scratch/err1") || { cat "$scratch/err1"; fail "provisioning failed"; }
cat "$scratch/err1"
[[ "$out" == "bazel 7."* ]] || fail "expected Bazel 7 from the root, got '$out'"
grep -q "pin python3.13-venv=$gone has left" "$scratch/err1" || fail "it did not say the pin was superseded"
record=$(echo "$scratch"/cache1/toolchain-*/etc/jaxext-toolchain.versions)
[[ -f "$record" ]] || fail "no record of installed versions in the root"
read -r _ pinned installed < <(grep '^python3.13-venv ' "$record")
[[ "$pinned" == "$gone" ]] || fail "record: pinned '$pinned'"
# The fallback is the suite's python3.13-venv, which must match the python3.13 installed beside it.
read -r _ _ interpreter < <(grep '^python3.13 ' "$record")
[[ -n "$installed" && "$installed" != "$gone" && "$installed" == "$interpreter" ]] ||
  fail "record: python3.13-venv installed '$installed', python3.13 '$interpreter'"
# Every other pin was still in the suite when this test was written; they must be exact.
if awk '$1 != "python3.13-venv" && $0 !~ /^#/ && $2 != $3 {bad = 1} END {exit !bad}' "$record"; then
  echo "note: other pins have left the suite too (refresh third_party/pins.bzl):"
  awk '$0 !~ /^#/ && $2 != $3' "$record"
fi
echo "superseded pin: OK (installed python3.13-venv $installed)"
rm -rf "$scratch/cache1"

# --- 2. a Bazel major the suite does not have ------------------------------------------------------
workspace_with_pin "$scratch/ws2" bazel-bootstrap "99.0.0+ds-1"
if (cd "$scratch/ws2" && JAXEXT_CACHE_DIR="$scratch/cache2" JAXEXT_FORCE_TOOLCHAIN_ROOT=1 \
    tools/bazel --version >/dev/null 2>"$scratch/err2"); then
  fail "provisioning accepted a Bazel of another major"
fi
cat "$scratch/err2"
grep -q "error: bazel-bootstrap 99.0.0+ds-1 has left the suite, whose Bazel is now 7\..* (major 7, not 99)" \
  "$scratch/err2" || fail "the error does not say which Bazel majors differ"
if compgen -G "$scratch/cache2/toolchain-*/.jaxext-complete" >/dev/null; then
  fail "a root was left behind"
fi
echo "Bazel major mismatch: OK (clear error, no root)"
