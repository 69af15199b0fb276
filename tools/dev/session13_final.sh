#!/usr/bin/env bash
# Session 13, last device call: the lean build (what CI compiles; 57 / 58 are benchmark-only) and every flash forward
# test on it (16-bit and FP8 defaults after the kernel's V^T staging changes), then the varlen / paged tests.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s13f
source tools/dev/flash_build.sh
flash_build $B "" test_cuda_flash_attention test_cuda_flash_varlen || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
timeout 200 $B/bin/test_cuda_flash_attention > $OUT/test.log 2>&1
echo "flash attention tests rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "^flash |PASSED|FAILED" $OUT/test.log | head -30
timeout 60 $B/bin/test_cuda_flash_varlen > $OUT/varlen.log 2>&1
echo "varlen tests rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "cases|PASSED|FAILED" $OUT/varlen.log | head -10
