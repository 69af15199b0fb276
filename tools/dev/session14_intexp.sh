#!/usr/bin/env bash
# Session 14: FP8 P bytes without exp2 (kSchedFp8IntExp; variants 59 = 29 at hd 128, 60 = 39 at hd 256, benchmark
# builds GA_FLASH_FP8_WIDE) against the defaults, same run: the SASS's MUFU count per kernel, the FP8 parity tests with
# every case's errors printed (GA_FLASH_TEST_PRINT_ERRORS), memcheck / racecheck on the small shapes, then compare.py
# --fp8 and the paired per-round ratios. Failures of the tests do not stop the benchmark (the numbers say how far off).
# The variants are not in the tree (measured, not kept): apply docs/results/patches/2026-11-28-session14-fp8-int-exp.patch
# first (git apply), as the session did; results in docs/results/2026-11-28-h200-session14.md.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s14
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_WIDE=1" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1 GA_SHARED=$PWD/.fwdshared
V=${VARIANTS:-59,60}
sass_op_counts $LIB 1025,33793
fp8_parity $B $V ${TEST_TIMEOUT:-150}
fp8_sanitize $B $V '*Fp8SmallShapes*'
echo "tests done at $(( $(date +%s) - T0 )) s"
timeout ${BENCH_TIMEOUT:-200} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --rounds ${ROUNDS:-7} \
  --seqlens ${SEQLENS:-1024,4096,8192,16384} --fp8-variants=-1,$V --json $OUT/fp8.json > $OUT/fp8.md 2>&1
echo "fp8 compare rc=$? at $(( $(date +%s) - T0 )) s"
python3 tools/dev/paired_ratios.py "$OUT/fp8.json"
