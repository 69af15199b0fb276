#!/usr/bin/env bash
# Session 11 FP8 comparison (benchmark build, GA_FLASH_FP8_WIDE): the hd 128 default 29 against 43 (29 with the PV wait
# pinned below the softmax) and 48 (three consumer warpgroups, 192 x 128 tiles), same run, ROUNDS interleaved rounds;
# SASS of the FP8 persistent kernels and the 16-bit hd 128 default to $OUT (sass_flash.txt.gz: where the
# WARPGROUP.DEPBAR of PV lands relative to the MUFU.EX2 of the softmax); the candidates' parity tests.
# (Runs 2-4 of docs/results/2026-11-28-h200-session11.md also timed the since-retired 44-47, 49, 50.)
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-fp8w
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_WIDE=1" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
cuobjdump --dump-sass $LIB > /tmp/all.sass 2>/dev/null
awk '/Function : / { keep = ($3 ~ /flash_fwd_sm90_kernel/ && ($3 ~ /ElemKindE2E/ || $3 ~ /Li128ELi385ELb1/)) }
  keep' /tmp/all.sass | gzip > $OUT/sass_flash.txt.gz
export PYTHONUNBUFFERED=1
timeout ${CMP_TIMEOUT:-220} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --head-dims 128 \
  --seqlens 4096,8192,16384 --rounds ${ROUNDS:-5} --fp8-variants=-1,43,48 > $OUT/fp8_hd128.md 2>&1
echo "compare hd128 rc=$? at $(( $(date +%s) - T0 )) s"
GA_SHARED=$PWD/.fwdshared GA_FLASH_TEST_VARIANT=43,48 timeout ${TEST_TIMEOUT:-150} $B/bin/test_cuda_flash_attention \
  --gtest_filter='*Fp8*' > $OUT/test_fp8.log 2>&1
echo "fp8 tests rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "flash forward|PASSED|FAILED" $OUT/test_fp8.log | head -12
tail -10 $OUT/fp8_hd128.md
