#!/usr/bin/env bash
# Device run for the FP8 (e4m3) Hopper flash forward, one call: build (Release, sm_90a, the lean default
# variants), ptxas report of the FP8 kernels (ElemKind 2), SASS check (QGMMA + UTMALDG present, no
# local-memory traffic), the FP8 parity tests, compute-sanitizer memcheck (+ racecheck) on the small FP8
# shapes, compare.py --fp8 (ours vs cuDNN bf16 on the dequantized inputs, same run), then every flash
# forward test (the 16-bit kernels share the generalized code). Logs go to $OUT; summary last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
B=/tmp/b-fp8; rm -rf $B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_attention ga_attention_c >> "$OUT/build.log" 2>&1 ||
  { tail -50 "$OUT/build.log"; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A2 "flash_fwd_sm90_kernel" "$OUT/build.log" | grep -E "spill|Used" > "$OUT/ptxas.txt"
LIB=$B/bench/attention_torch/libga_attention_c.so
cuobjdump --dump-sass $LIB 2>/dev/null | awk '
  /Function : / { name = ($3 ~ /flash_fwd_sm90_kernel/) ? $3 : ""; if (name != "") fn[name] = 1 }
  name != "" && /QGMMA/ { qg[name]++ }
  name != "" && /HGMMA/ { hg[name]++ }
  name != "" && /UTMALDG/ { tm[name]++ }
  name != "" && /(STL|LDL)[ .]/ { lm[name]++ }
  END { for (n in fn) printf "%-90s qgmma %4d hgmma %4d utmaldg %3d stl/ldl %3d\n", n, qg[n], hg[n], tm[n], lm[n] }' \
  | sort > "$OUT/sass.txt"
export PYTHONUNBUFFERED=1
timeout 60 $B/bin/test_cuda_flash_attention --gtest_filter='*Fp8*' > "$OUT/test_fp8.log" 2>&1
fp8_rc=$?
echo "fp8 tests done at $(( $(date +%s) - T0 )) s"
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
timeout 40 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8SmallShapesForSanitizer*:*Fp8Unsupported*' > "$OUT/memcheck.log" 2>&1
mem_rc=$?
timeout 40 $SAN --tool racecheck --racecheck-report all --error-exitcode 9 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8SmallShapesForSanitizer*' > "$OUT/racecheck.log" 2>&1
race_rc=$?
echo "sanitizers done at $(( $(date +%s) - T0 )) s"
timeout 80 python3 bench/attention_torch/compare.py --lib $LIB --fp8 --json "$OUT/compare_fp8.json" \
  ${COMPARE_ARGS:-} > "$OUT/compare_fp8.log" 2>&1
cmp_rc=$?
echo "compare done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 285 - ($(date +%s) - T0) ))
timeout $LEFT $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*' > "$OUT/test.log" 2>&1
test_rc=$?
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas (all flash kernels)"; sort "$OUT/ptxas.txt" | uniq -c
echo "=== sass (FP8 kernels: ElemKind 2)"
grep "ElemKindE2" "$OUT/sass.txt" | sed 's/_ZN2ga4cuda12flash_detail21flash_fwd_sm90_kernelILNS0_4tile8ElemKindE//'
echo "=== fp8 tests (rc $fp8_rc)"
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|FAILED|flash forward|Failure|refused" "$OUT/test_fp8.log" | head -24
echo "=== memcheck rc $mem_rc"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
echo "=== racecheck rc $race_rc"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -5
echo "=== 16-bit flash tests (rc $test_rc)"
grep -E "^\[  (PASSED|FAILED|  OK)|FAILED|Failure" "$OUT/test.log" | head -12
echo "=== compare --fp8 (rc $cmp_rc)"; tail -30 "$OUT/compare_fp8.log"
