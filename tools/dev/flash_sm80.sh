#!/usr/bin/env bash
# Device run for the mma.sync flash forward (kernels/flash/flash_fwd_sm80.cuh, variant 11 = kFlashSm80Variant), one
# call: build (Release, sm_90a, lean default variants) of test_cuda_flash_attention + ga_attention_c with a ptxas
# report, SASS check of the sm80 kernels (HMMA / LDSM counts, local-memory traffic), the parity tests on variant 11
# only (GA_FLASH_TEST_VARIANT=11), compute-sanitizer memcheck + racecheck on the small shapes (variant 11),
# compare.py --sm80 (ours vs PyTorch SDPA FLASH_ATTENTION (FA2) and cuDNN, same run), then the whole flash test
# binary (every variant) with the time left. Logs go to $OUT; summary last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
B=/tmp/b-sm80; rm -rf $B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_attention ga_attention_c >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A2 "flash_fwd_sm80_kernel" "$OUT/build.log" | grep -E "spill|Used" > "$OUT/ptxas.txt"
LIB=$B/bench/attention_torch/libga_attention_c.so
cuobjdump --dump-sass $LIB 2>/dev/null | awk '
  /Function : / { name = ($3 ~ /flash_fwd_sm80_kernel/) ? $3 : ""; if (name != "") fn[name] = 1 }
  name != "" && /HMMA/ { hm[name]++ }
  name != "" && /LDSM/ { ld[name]++ }
  name != "" && /(STL|LDL)[ .]/ { lm[name]++ }
  END { for (n in fn) printf "%-70s hmma %4d ldsm %4d stl/ldl %3d\n", n, hm[n], ld[n], lm[n] }' | sort > "$OUT/sass.txt"
export PYTHONUNBUFFERED=1
GA_FLASH_TEST_VARIANT=11 timeout 100 $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*' > "$OUT/test_sm80.log" 2>&1
t80_rc=$?
echo "sm80 tests done at $(( $(date +%s) - T0 )) s"
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
GA_FLASH_TEST_VARIANT=11 timeout 30 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*SmallShapesForSanitizer*:*UnsupportedParams*' > "$OUT/memcheck.log" 2>&1
mem_rc=$?
GA_FLASH_TEST_VARIANT=11 timeout 40 $SAN --tool racecheck --racecheck-report all --error-exitcode 9 \
  $B/bin/test_cuda_flash_attention --gtest_filter='CudaFlashAttention.SmallShapesForSanitizer' \
  > "$OUT/racecheck.log" 2>&1
race_rc=$?
echo "sanitizers done at $(( $(date +%s) - T0 )) s"
timeout 90 python3 bench/attention_torch/compare.py --lib $LIB --sm80 --json "$OUT/compare_sm80.json" \
  ${COMPARE_ARGS:-} > "$OUT/compare_sm80.log" 2>&1
cmp_rc=$?
echo "compare done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 280 - ($(date +%s) - T0) ))
if [ $LEFT -gt 20 ]; then
  timeout $LEFT $B/bin/test_cuda_flash_attention > "$OUT/test_all.log" 2>&1
  all_rc=$?
else
  all_rc=skipped
fi
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas (sm80 kernels)"; sort "$OUT/ptxas.txt" | uniq -c
echo "=== sass"; sed 's/_ZN2ga4cuda10flash_sm8021flash_fwd_sm80_kernel//' "$OUT/sass.txt"
echo "=== sm80 tests (rc $t80_rc)"
grep -E "^\[  (PASSED|FAILED|  OK)|FAILED|flash forward|Failure|refused" "$OUT/test_sm80.log" | head -24
echo "=== memcheck rc $mem_rc"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
echo "=== racecheck rc $race_rc"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|hazard" "$OUT/racecheck.log" | head -5
echo "=== all flash tests, every variant (rc $all_rc)"
grep -E "^\[  (PASSED|FAILED|  OK)|FAILED|Failure" "$OUT/test_all.log" 2>/dev/null | head -12
echo "=== compare --sm80 (rc $cmp_rc)"; tail -42 "$OUT/compare_sm80.log"
