#!/usr/bin/env bash
# Session 12: the causal tile order (FlashParams::causal_section_heads; decode_tile's sections, FA3's L2-aware
# longest-first order) against the order before it (one head at a time; compare.py's 1000 + v = v in that order,
# 999 = the default), same run: bf16 hd 64 / 128 / 256 and FP8 hd 128 / 256, causal, 4k-16k, ROUNDS interleaved rounds.
# bf16 times SCHEDS (run 1: -1,999; run 2, after the 16-bit static persistent kernels went back to one head at a
# time: the one-tile-per-CTA kernels 1 and 12 in both orders against the persistent 4 and 13).
# Then the parity tests of the lean build (every causal shape runs the new order; CausalSectionsCoverEveryTileOnce and
# the FP8 small shapes set explicit sections) and compute-sanitizer memcheck on the new shapes. Each step has its own
# timeout.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s12
source tools/dev/flash_build.sh
flash_build $B "" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1 GA_SHARED=$PWD/.fwdshared
timeout 40 $B/bin/test_cuda_flash_attention --gtest_filter='*CausalSections*' > $OUT/test_sections.log 2>&1
rc=$?; echo "sections test rc=$rc at $(( $(date +%s) - T0 )) s"; [ $rc = 0 ] || { tail -20 $OUT/test_sections.log; exit 1; }
timeout 150 python3 bench/attention_torch/compare.py --lib $LIB --masks causal --head-dims 64,128,256 \
  --seqlens 4096,8192,16384 --rounds ${ROUNDS:-7} --schedules=${SCHEDS:--1,999} > $OUT/bf16.md 2>&1
echo "bf16 compare rc=$? at $(( $(date +%s) - T0 )) s"
timeout 100 python3 bench/attention_torch/compare.py --lib $LIB --fp8 --masks causal \
  --seqlens 4096,8192,16384 --rounds ${ROUNDS:-7} --fp8-variants=-1,999 > $OUT/fp8.md 2>&1
echo "fp8 compare rc=$? at $(( $(date +%s) - T0 )) s"
timeout ${TEST_TIMEOUT:-150} $B/bin/test_cuda_flash_attention > $OUT/test.log 2>&1
echo "all flash tests rc=$? at $(( $(date +%s) - T0 )) s"
[ -n "${MEMCHECK-1}" ] && timeout 90 compute-sanitizer --tool memcheck $B/bin/test_cuda_flash_attention \
  --gtest_filter='*CausalSections*:*Fp8SmallShapes*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "ERROR SUMMARY" $OUT/memcheck.log | head -3
grep -E "^flash forward|PASSED|FAILED" $OUT/test.log | head -20
grep -E "^\| (64|128|256) " $OUT/bf16.md
grep -E "^\| (128|256) " $OUT/fp8.md | cut -d'|' -f1-9
