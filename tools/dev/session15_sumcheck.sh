#!/usr/bin/env bash
# Session 15: the FP8 softmax against the running max with the e4m3 sum check (kSchedFp8SumCheck; variants 61 / 62 =
# 29 + the check, late / early PV wait, at hd 128; 63 / 64 = 39 + the check at hd 256; benchmark builds
# GA_FLASH_FP8_SUMCHECK) against the defaults, same run: SASS instruction counts per kernel, the FP8 parity tests with
# every case's errors printed (GA_FLASH_TEST_PRINT_ERRORS), memcheck / racecheck on the small shapes, then compare.py
# --fp8 and the paired per-round ratios. Results: docs/results/2026-11-28-h200-session15.md. The variants are not in the
# tree (measured, not kept): git apply docs/results/patches/2026-11-28-session15-fp8-sum-check.patch first.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s15
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_SUMCHECK=1" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1 GA_SHARED=$PWD/.fwdshared
V=${VARIANTS:-61,62,63,64}
sass_op_counts $LIB 1025,33793,99329
fp8_parity $B -1,$V ${TEST_TIMEOUT:-200}
fp8_sanitize $B $V '*Fp8SmallShapes*:*Fp8ScoresThatJump*'
echo "tests done at $(( $(date +%s) - T0 )) s"
timeout ${BENCH_TIMEOUT:-240} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --rounds ${ROUNDS:-7} \
  --seqlens ${SEQLENS:-4096,8192,16384} --fp8-variants=-1,$V --json $OUT/fp8.json > $OUT/fp8.md 2>&1
echo "fp8 compare rc=$? at $(( $(date +%s) - T0 )) s"
cat $OUT/fp8.md | tail -20
python3 tools/dev/paired_ratios.py "$OUT/fp8.json"
