#!/usr/bin/env bash
# Device run for the flash backward (kernels/flash/flash_bwd_sm80.cuh): build (Release, sm_90a), ptxas report of
# the backward kernels, the backward parity tests, compute-sanitizer memcheck on the small backward shapes, the
# PyTorch comparison of the backward (bench/attention_torch/compare_bwd.py: cuDNN and FA2 backward, same run),
# then the forward parity tests (they must keep passing). Logs go to $OUT; summary last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
B=/tmp/b-flash3; rm -rf $B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_backward test_cuda_flash_attention ga_attention_c >> "$OUT/build.log" 2>&1 \
  || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A3 "Compiling entry function.*flash_bwd_main" "$OUT/build.log" | grep -E "spill|Used" | sort | uniq -c \
  > "$OUT/ptxas.txt"
export PYTHONUNBUFFERED=1
timeout 100 $B/bin/test_cuda_flash_backward > "$OUT/test_bwd.log" 2>&1
bwd_rc=$?
echo "backward tests done at $(( $(date +%s) - T0 )) s"
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
timeout 60 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_backward \
  --gtest_filter='*SmallShapesForSanitizer*:*Unsupported*' > "$OUT/memcheck.log" 2>&1
mem_rc=$?
echo "memcheck done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 240 - ($(date +%s) - T0) ))
(cd bench/attention_torch && timeout $LEFT python3 compare_bwd.py --lib $B/bench/attention_torch/libga_attention_c.so \
  --json "$OUT/compare_bwd.json" ${COMPARE_ARGS:-}) > "$OUT/compare_bwd.log" 2>&1
cmp_rc=$?
echo "compare done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 285 - ($(date +%s) - T0) ))
timeout $LEFT $B/bin/test_cuda_flash_attention > "$OUT/test_fwd.log" 2>&1
fwd_rc=$?
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas flash_bwd_main"; cat "$OUT/ptxas.txt"
echo "=== backward tests rc $bwd_rc"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED|flash backward|Failure|relative|refused" "$OUT/test_bwd.log" | head -24
echo "=== memcheck rc $mem_rc"; grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$OUT/memcheck.log" | head -6
echo "=== forward tests rc $fwd_rc"; grep -E "^\[  (PASSED|FAILED)|flash forward" "$OUT/test_fwd.log" | head -8
echo "=== compare_bwd rc $cmp_rc"; tail -44 "$OUT/compare_bwd.log"
