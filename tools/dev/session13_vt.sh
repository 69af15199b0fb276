#!/usr/bin/env bash
# Session 13: FP8 V^T made in the kernel (kSchedFp8VtInKernel; variants 57 = 39 at hd 256, 58 = 29 at hd 128, in
# benchmark builds: GA_FLASH_FP8_WIDE) against
# the defaults with the V^T pre-pass, same run. The FP8 parity tests on the new variants (and the defaults),
# compute-sanitizer memcheck and racecheck on the FP8 small shapes of 57 / 58, then compare.py --fp8 over the FA3
# grid (ROUNDS interleaved rounds) and the paired per-round ratios default / variant. Each step has its own timeout.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s13
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_WIDE=1" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1 GA_SHARED=$PWD/.fwdshared
GA_FLASH_TEST_VARIANT=${VARIANTS:-57,58} timeout 30 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8SmallShapes*' > $OUT/test_small.log 2>&1
rc=$?; echo "fp8 small shapes rc=$rc at $(( $(date +%s) - T0 )) s"
[ $rc = 0 ] || { tail -30 $OUT/test_small.log; exit 1; }
GA_FLASH_TEST_VARIANT=${VARIANTS:-57,58} timeout ${TEST_TIMEOUT:-150} $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8*' > $OUT/test_fp8.log 2>&1
rc=$?; echo "fp8 tests rc=$rc at $(( $(date +%s) - T0 )) s"
grep -E "^flash forward|PASSED|FAILED|Failure|fail" $OUT/test_fp8.log | head -20
[ $rc = 0 ] || { tail -30 $OUT/test_fp8.log; exit 1; }
for tool in memcheck racecheck; do
  GA_FLASH_TEST_VARIANT=${VARIANTS:-57,58} timeout 120 compute-sanitizer --tool $tool $B/bin/test_cuda_flash_attention \
    --gtest_filter='*Fp8SmallShapes*' > $OUT/$tool.log 2>&1
  echo "$tool rc=$? at $(( $(date +%s) - T0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | head -2)"
done
timeout ${BENCH_TIMEOUT:-200} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --rounds ${ROUNDS:-7} \
  --seqlens ${SEQLENS:-512,1024,2048,4096,8192,16384} --fp8-variants=-1,${VARIANTS:-57,58} --json $OUT/fp8.json \
  > $OUT/fp8.md 2>&1
echo "fp8 compare rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "^\| (128|256) " $OUT/fp8.md | cut -d'|' -f1-10
python3 tools/dev/paired_ratios.py "$OUT/fp8.json"
