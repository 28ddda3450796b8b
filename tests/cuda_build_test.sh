#!/usr/bin/env bash
# What --config=cuda built: the CUDA extension carries sm_90 machine code and compute_90 PTX (for
# newer GPUs to JIT), and the Python-independent handler library exports the CUDA handlers that
# jaxext/_ffi.py looks up by name (tools/gpu_checks.py depends on it), and neither links the CUDA
# driver.
set -euo pipefail
cuobjdump=$1 module=$2 handlers=$3
elf=$("$cuobjdump" --list-elf "$module")
ptx=$("$cuobjdump" --list-ptx "$module")
echo "$elf"; echo "$ptx"
grep -q "sm_90" <<<"$elf" || { echo "FAIL: no sm_90 machine code in $module"; exit 1; }
grep -q "sm_90" <<<"$ptx" || { echo "FAIL: no compute_90 PTX in $module"; exit 1; }
exported=$(nm -D --defined-only "$handlers")
echo "$exported"
for sym in JaxextKeplerCudaF32 JaxextKeplerCudaF64 JaxextLimbdarkCudaF32 JaxextLimbdarkCudaF64 \
    JaxextLimbdarkGradCudaF32 JaxextLimbdarkGradCudaF64 JaxextLimbdarkHessCudaF32 \
    JaxextLimbdarkHessCudaF64 JaxextNumbaCallCudaInitialize \
    JaxextNumbaCallCuda JaxextDop853Cuda JaxextTransitCudaF32 JaxextTransitCudaF64 \
    JaxextTransitGradCudaF32 JaxextTransitGradCudaF64 JaxextTransitLinCudaF32 \
    JaxextTransitLinCudaF64 JaxextTransitVjpCudaF32 JaxextTransitVjpCudaF64; do
  grep -q " T $sym\$" <<<"$exported" || { echo "FAIL: $handlers does not export $sym"; exit 1; }
done
# The CUDA driver is opened at run time (numba_cuda.cc), never a link-time dependency: the same
# build imports on machines without a driver.
for lib in "$module" "$handlers"; do
  needed=$(readelf -d "$lib" | grep NEEDED || true)
  if grep -q "libcuda\.so" <<<"$needed"; then
    echo "FAIL: $lib links libcuda:"; echo "$needed"; exit 1
  fi
done
echo "PASS"
