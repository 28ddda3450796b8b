#!/usr/bin/env bash
# Runs tools/gpu_checks.py on a GPU machine section by section, each in its own process (a crash in
# one loses only that one), inside one deadline, into one merged report. From the repository root:
#
#   DEADLINE=570 tools/gpu_run.sh [section...] [-- gpu_checks.py arguments]
#
# Sections default to all of gpu_checks.py's (its --list-sections), in order; each gets the time
# left before the deadline (seconds from start), at most SECTION_CAP (300) seconds. Wheels under
# .whl (pure-Python peers such as e3nn-jax, jaxoplanet) are installed into /tmp/site first. Output: $OUT/log.txt and $OUT/gpu_checks.json ($OUT defaults to
# ./gpu_out). Exit status: non-zero if any section failed or ran out of time.
set -u
start=$(date +%s)
deadline=${DEADLINE:-570}
out=${OUT:-$PWD/gpu_out}
mkdir -p "$out"
sections=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sections+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#sections[@]} -eq 0 ] && mapfile -t sections < <(python3 tools/gpu_checks.py --list-sections)
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 - <<'PY'
import importlib.metadata as md
versions = {}
for name in ("jax", "jaxlib", "numpy", "numba", "numba-cuda", "diffrax", "e3nn-jax", "jaxoplanet"):
  try:
    versions[name] = md.version(name)
  except md.PackageNotFoundError:
    versions[name] = None
print(versions)
PY
} 2>&1 | tee "$out/log.txt"
status=0
for s in "${sections[@]}"; do
  left=$(( deadline - ($(date +%s) - start) ))
  if [ "$left" -le 10 ]; then echo "=== $s skipped: deadline" | tee -a "$out/log.txt"; status=1; continue; fi
  [ "$left" -gt "${SECTION_CAP:-300}" ] && left=${SECTION_CAP:-300}
  echo "=== $s (${left}s)" | tee -a "$out/log.txt"
  t0=$(date +%s)
  timeout -k 5 "$left" python3 tools/gpu_checks.py --only "$s" --report "$out/gpu_checks.json" "$@" 2>&1 \
    | tee -a "$out/log.txt"
  rc=${PIPESTATUS[0]}
  echo "=== $s exit $rc in $(( $(date +%s) - t0 ))s" | tee -a "$out/log.txt"
  [ "$rc" -ne 0 ] && status=1
done
exit $status
