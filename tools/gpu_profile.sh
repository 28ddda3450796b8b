#!/usr/bin/env bash
# On a GPU machine, from the repository root: Nsight Compute over tools/gpu_profile.py's workloads
# (one process each, one profiled call each), a summary table, then compute-sanitizer's memcheck
# over the small workloads of jaxext's own kernels. `.gpu` holds the handler libraries
# (tools/gpu_checks.py's docstring); peers' wheels under .whl are installed first, as gpu_run.sh does.
#
#   DEADLINE=300 tools/gpu_profile.sh [workload...]
#
# Output under $OUT (default ./gpu_out): ncu_<workload>.csv and .log, ncu_summary.txt,
# memcheck.txt. Each step gets what is left of DEADLINE (seconds from start), at most CAP (120)
# seconds (name the workloads wanted: all eight and the memcheck need ~10 minutes); MEMCHECK=0 skips the memcheck. NCU_SECTIONS overrides the sections read. If the window
# finds no CUDA runtime to open it (the summary then says "no kernels"), NCU_FROM_START=1 profiles
# jaxext's kernels from the start instead (the warm-up call's too: twice each).
set -u
start=$(date +%s)
deadline=${DEADLINE:-300}
out=${OUT:-$PWD/gpu_out}
libs=${LIBS:-.gpu}
mkdir -p "$out"
workloads=("$@")
[ ${#workloads[@]} -eq 0 ] && mapfile -t workloads < <(python3 tools/gpu_profile.py list)
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
ncu=$(command -v ncu || ls -d /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
sanitizer=$(command -v compute-sanitizer || ls -d /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | tail -1)
left() { local l=$(( deadline - ($(date +%s) - start) )); [ "$l" -gt "${CAP:-120}" ] && l=${CAP:-120}; echo "$l"; }
sections=${NCU_SECTIONS:---section SpeedOfLight --section Occupancy --section LaunchStats}
window="--profile-from-start off"
[ "${NCU_FROM_START:-0}" = 1 ] && window="--profile-from-start on --kernel-name-base function --kernel-name regex:Tp|Conv|Segment|Sph|CheckSorted"
status=0
rm -f "$out"/ncu_*.csv "$out"/ncu_*.log "$out/memcheck.txt"  # a summary of this run's alone
csvs=()
if [ -z "$ncu" ]; then
  echo "gpu_profile: no ncu on this machine" | tee "$out/ncu_summary.txt"; status=1
else
  "$ncu" --version | tee "$out/ncu_version.txt"
  for w in ${workloads[@]+"${workloads[@]}"}; do
    l=$(left); if [ "$l" -le 10 ]; then echo "=== $w skipped: deadline"; status=1; continue; fi
    t0=$(date +%s)
    # shellcheck disable=SC2086
    timeout -k 5 "$l" "$ncu" --clock-control none $window $sections \
      --csv --page details python3 tools/gpu_profile.py run "$w" --libs "$libs" \
      > "$out/ncu_$w.csv" 2> "$out/ncu_$w.log"
    rc=$?
    echo "=== $w exit $rc in $(( $(date +%s) - t0 ))s"; tail -3 "$out/ncu_$w.log"
    csvs+=("$out/ncu_$w.csv")
    [ "$rc" -ne 0 ] && status=1
  done
  if [ ${#csvs[@]} -eq 0 ]; then
    echo "gpu_profile: no workload ran" | tee "$out/ncu_summary.txt"; status=1
  else
    python3 tools/gpu_profile.py summarize "${csvs[@]}" | tee "$out/ncu_summary.txt"
  fi
fi
if [ "${MEMCHECK:-1}" != 0 ] && [ -n "$sanitizer" ]; then
  for w in layer-fused-f32 padded-conv-f32 padded-segment-f32 layer-unfused-f32; do
    l=$(left); if [ "$l" -le 10 ]; then echo "=== memcheck $w skipped: deadline"; status=1; continue; fi
    echo "=== memcheck $w" >> "$out/memcheck.txt"
    # XLA's own allocations, not one preallocated pool: an overrun into a neighbouring buffer is
    # then out of any allocation (check on the jax at hand that "platform" still means that);
    # XLA's expected CUDA API errors are not reported.
    XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" XLA_PYTHON_CLIENT_PREALLOCATE=false \
      XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout -k 5 "$l" "$sanitizer" \
      --tool memcheck --report-api-errors no --error-exitcode 3 \
      python3 tools/gpu_profile.py run "$w" --small --libs "$libs" >> "$out/memcheck.txt" 2>&1
    rc=$?
    echo "=== memcheck $w exit $rc" | tee -a "$out/memcheck.txt"
    [ "$rc" -ne 0 ] && status=1
  done
fi
exit $status
