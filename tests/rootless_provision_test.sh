#!/usr/bin/env bash
# tools/bazel provisions its toolchain root without root: as an unprivileged user with a
# subordinate uid/gid range (mmdebstrap in a user namespace), from a fresh cache, then builds and
# runs a test there. A user without such a range gets an error that says what to ask an
# administrator for, and no root.
#
# Run by .ci/run as root (not a Bazel test): it installs mmdebstrap and uidmap on the host, makes
# two scratch users and removes them again. About four minutes (the provisioning).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || fail "run as root (it creates scratch users)"

if ! command -v mmdebstrap >/dev/null || ! command -v newuidmap >/dev/null; then
  apt-get install -y -q --no-install-recommends mmdebstrap uidmap >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends mmdebstrap uidmap >/dev/null; }
fi
scratch=$(mktemp -d /var/tmp/jaxext-rootless.XXXXXX)  # not /tmp: a toolchain root is gigabytes
chmod 755 "$scratch"
users=(jaxext-rootless jaxext-nosubids)
cleanup() {
  set +e
  for u in "${users[@]}"; do
    if id "$u" >/dev/null 2>&1; then
      pkill -KILL -u "$u" 2>/dev/null
      for _ in 1 2 3 4 5 6 7 8 9 10; do pgrep -u "$u" >/dev/null || break; sleep 1; done
      userdel "$u" 2>/dev/null
    fi
    sed -i "/^$u:/d" /etc/subuid /etc/subgid 2>/dev/null
  done
  rm -rf "$scratch"
}
trap cleanup EXIT
for u in "${users[@]}"; do
  id "$u" >/dev/null 2>&1 || useradd --no-create-home --home-dir "$scratch/$u" --shell /bin/bash "$u"
  touch /etc/subuid /etc/subgid
  sed -i "/^$u:/d" /etc/subuid /etc/subgid
  mkdir -p "$scratch/$u"
  # The checkout as committed, owned by the user (the user cannot read root's clone).
  git -C "$top" archive --format=tar HEAD | tar -x -C "$scratch/$u"
  chown -R "$u:" "$scratch/$u"
done
usermod --add-subuids 300000-365535 --add-subgids 300000-365535 jaxext-rootless

as() {  # as USER COMMAND...: in the user's checkout, with a fresh cache of its own
  local u=$1; shift
  runuser -u "$u" -- env -i HOME="$scratch/$u" PATH=/usr/local/bin:/usr/bin:/bin \
    JAXEXT_CACHE_DIR="$scratch/$u/.cache" JAXEXT_FORCE_TOOLCHAIN_ROOT=1 \
    bash -c 'cd "$HOME" && "$@"' bash "$@"
}

# 1. No subordinate ids: a clear error, and nothing provisioned.
if as jaxext-nosubids tools/bazel --version >"$scratch/nosub.out" 2>&1; then
  cat "$scratch/nosub.out"; fail "provisioning without subordinate ids succeeded?"
fi
cat "$scratch/nosub.out"
grep -q "needs: a subordinate uid range for jaxext-nosubids" "$scratch/nosub.out" ||
  fail "the error does not name the missing subordinate uid range"
grep -q "Ask an administrator" "$scratch/nosub.out" || fail "the error does not say whom to ask"
compgen -G "$scratch/jaxext-nosubids/.cache/toolchain-*/.jaxext-complete" >/dev/null &&
  fail "a toolchain root was left behind"

# 2. With them: provisions from nothing, then a C++ test builds and passes.
if ! as jaxext-rootless tools/bazel test //tests:kepler_math_test >"$scratch/rootless.out" 2>&1; then
  tail -n 40 "$scratch/rootless.out"; fail "tools/bazel test as an unprivileged user failed"
fi
grep '^\[tools/bazel\]' "$scratch/rootless.out"
tail -n 3 "$scratch/rootless.out"
record=$(echo "$scratch"/jaxext-rootless/.cache/toolchain-*/etc/jaxext-toolchain.versions)
[[ -f "$record" ]] || fail "no record of the root's versions"
owner=$(stat -c %U "$(dirname "$record")")
[[ "$owner" == jaxext-rootless ]] || fail "the root's files belong to $owner, not the user"
echo "rootless provisioning: OK"
