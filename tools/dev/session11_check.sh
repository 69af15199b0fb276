#!/usr/bin/env bash
# Session 11 final check of the kept benchmark variants (build with GA_FLASH_FP8_WIDE=1 and GA_FLASH_FWD_PIN=1): parity
# tests of FP8 43 / 48 and 16-bit 51 / 52, compute-sanitizer memcheck + racecheck on the FP8 small shapes of 43 / 48.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s11
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_WIDE=1 -DGA_FLASH_FWD_PIN=1" test_cuda_flash_attention || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
export GA_SHARED=$PWD/.fwdshared
GA_FLASH_TEST_VARIANT=43,48 timeout 150 $B/bin/test_cuda_flash_attention --gtest_filter='*Fp8*' > $OUT/t_fp8.log 2>&1
echo "fp8 43/48 rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "flash forward|PASSED|FAILED" $OUT/t_fp8.log | head -8
GA_FLASH_TEST_VARIANT=51,52 timeout 100 $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*' > $OUT/t_16.log 2>&1
echo "16-bit 51/52 rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "flash forward|PASSED|FAILED" $OUT/t_16.log | head -8
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
GA_FLASH_TEST_VARIANT=43,48 timeout 60 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8SmallShapesForSanitizer*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" $OUT/memcheck.log | head -2
GA_FLASH_TEST_VARIANT=43,48 timeout 60 $SAN --tool racecheck --racecheck-report all --error-exitcode 9 \
  $B/bin/test_cuda_flash_attention --gtest_filter='*Fp8SmallShapesForSanitizer*' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $OUT/racecheck.log | head -2
echo "total $(( $(date +%s) - T0 )) s"
