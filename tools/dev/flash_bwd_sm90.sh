#!/usr/bin/env bash
# Device run for the Hopper flash backward (kernels/flash/flash_bwd_sm90.cuh): build (Release, sm_90a) of the backward
# tests and the PyTorch harness library, ptxas report of the Hopper kernel, test_cuda_flash_backward (every case on
# both kernels: mma.sync and Hopper), compute-sanitizer memcheck and racecheck on the small shapes,
# bench/attention_torch/compare_bwd.py at head dim 128 (ours Hopper, ours mma.sync, cuDNN, FA2: same run).
# Logs go to $OUT; the summary comes last. COMPARE_ARGS overrides the comparison's options.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
B=/tmp/b-bwd; rm -rf $B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_backward ga_attention_c >> "$OUT/build.log" 2>&1 \
  || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A3 "Compiling entry function.*flash_bwd_sm9011main_kernel" "$OUT/build.log" | grep -E "spill|Used" \
  | sort | uniq -c > "$OUT/ptxas.txt"
export PYTHONUNBUFFERED=1
timeout 110 $B/bin/test_cuda_flash_backward > "$OUT/test_bwd.log" 2>&1
bwd_rc=$?
echo "backward tests done at $(( $(date +%s) - T0 )) s"
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
FILTER='*SmallShapesForSanitizer*:*Unsupported*'
timeout 45 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_backward --gtest_filter="$FILTER" \
  > "$OUT/memcheck.log" 2>&1
mem_rc=$?
echo "memcheck done at $(( $(date +%s) - T0 )) s"
timeout 45 $SAN --tool racecheck --error-exitcode 9 $B/bin/test_cuda_flash_backward \
  --gtest_filter='*SmallShapesForSanitizer*' > "$OUT/racecheck.log" 2>&1
race_rc=$?
echo "racecheck done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 290 - ($(date +%s) - T0) ))
(cd bench/attention_torch && timeout $LEFT python3 compare_bwd.py --lib $B/bench/attention_torch/libga_attention_c.so \
  --json "$OUT/compare_bwd.json" ${COMPARE_ARGS:---head-dims 128}) > "$OUT/compare_bwd.log" 2>&1
cmp_rc=$?
echo "compare done at $(( $(date +%s) - T0 )) s"
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas Hopper backward main_kernel"; cat "$OUT/ptxas.txt"
echo "=== backward tests rc $bwd_rc"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED|flash backward|Failure|relative|refused|SKIPPED" "$OUT/test_bwd.log" \
  | head -30
echo "=== memcheck rc $mem_rc"; grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$OUT/memcheck.log" | head -6
echo "=== racecheck rc $race_rc"
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|hazard" "$OUT/racecheck.log" | head -6
echo "=== compare_bwd rc $cmp_rc"; tail -22 "$OUT/compare_bwd.log"
