#!/usr/bin/env bash
# The CUDA extension carries sm_90 machine code and compute_90 PTX (for newer GPUs to JIT).
set -euo pipefail
cuobjdump=$1 module=$2
elf=$("$cuobjdump" --list-elf "$module")
ptx=$("$cuobjdump" --list-ptx "$module")
echo "$elf"; echo "$ptx"
grep -q "sm_90" <<<"$elf" || { echo "FAIL: no sm_90 machine code in $module"; exit 1; }
grep -q "sm_90" <<<"$ptx" || { echo "FAIL: no compute_90 PTX in $module"; exit 1; }
echo "PASS"
