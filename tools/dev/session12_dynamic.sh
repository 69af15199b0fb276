#!/usr/bin/env bash
# Session 12, last run: the 16-bit dynamic-tile candidates 55 (= 4) and 56 (= 13, wide key tile), which take causal
# tiles longest-first across sections (decode_tile) from a counter, against the static persistent 4 / 13, the
# one-tile-per-CTA 1 / 12 and the default, bf16 causal, same run (ROUNDS interleaved rounds); then their parity tests
# (dense, varlen / paged: those run 4 / 13) and memcheck on the small shapes. Each step has its own timeout.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-dyn
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FWD_DYNAMIC=1" test_cuda_flash_attention test_cuda_flash_varlen ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
export PYTHONUNBUFFERED=1 GA_SHARED=$PWD/.fwdshared GA_FLASH_TEST_VARIANT=55,56
timeout 40 $B/bin/test_cuda_flash_attention --gtest_filter='*SmallShapesForSanitizer*:*CausalSections*' \
  > $OUT/test_small.log 2>&1
rc=$?; echo "small shapes rc=$rc at $(( $(date +%s) - T0 )) s"; [ $rc = 0 ] || { tail -20 $OUT/test_small.log; exit 1; }
timeout 200 python3 bench/attention_torch/compare.py --lib $B/bench/attention_torch/libga_attention_c.so --masks causal \
  --head-dims 64,128,256 --seqlens ${SEQLENS:-2048,4096,8192,16384} --rounds ${ROUNDS:-5} \
  --schedules=-1,4,55,13,56,1,12 > $OUT/bf16.md 2>&1
echo "compare rc=$? at $(( $(date +%s) - T0 )) s"
timeout 150 $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*:*Sm75*' > $OUT/test.log 2>&1
echo "flash tests rc=$? at $(( $(date +%s) - T0 )) s"
timeout 60 $B/bin/test_cuda_flash_varlen > $OUT/varlen.log 2>&1
echo "varlen tests rc=$? at $(( $(date +%s) - T0 )) s"
timeout 60 compute-sanitizer --tool memcheck $B/bin/test_cuda_flash_attention \
  --gtest_filter='*SmallShapesForSanitizer*:*CausalSections*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "ERROR SUMMARY" $OUT/memcheck.log | head -2
grep -hE "^flash|PASSED|FAILED" $OUT/test_small.log $OUT/test.log $OUT/varlen.log | head -24
grep -E "^\| (64|128|256) " $OUT/bf16.md
