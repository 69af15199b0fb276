#!/usr/bin/env bash
# Session 11 comparisons (docs/results/2026-11-28-h200-session11.md), one mode per call:
#   MODE=fp8 (default): benchmark build GA_FLASH_FP8_WIDE; the FP8 hd 128 default 29 against 43 (29 with the PV wait
#     pinned below the softmax) and 48 (three consumer warpgroups, 192 x 128 tiles). (Runs 2-4 also timed the
#     since-retired 44-47, 49, 50.)
#   MODE=bf16: build GA_FLASH_FWD_PIN; bf16 at hd 128 / 256, the defaults against 4, 51 (4 + pin), 13, 52 (13 + pin).
# Each: compare.py in the same run (ROUNDS interleaved rounds, 4k-16k), the SASS of the kernels concerned to $OUT
# (sass.txt.gz: where the WARPGROUP.DEPBAR of PV lands relative to the softmax's MUFU.EX2), the candidates' parity tests.
set -uo pipefail
T0=$(date +%s)
MODE=${MODE:-fp8}
source tools/dev/flash_build.sh
if [ "$MODE" = fp8 ]; then
  B=/tmp/b-fp8w FLAGS="-DGA_FLASH_FP8_WIDE=1" SASS_RE='ElemKindE2E|Li128ELi385ELb1' VARIANTS=43,48 FILTER='*Fp8*'
  CMP="--fp8 --head-dims 128 --fp8-variants=-1,43,48"
else
  B=/tmp/b-pin FLAGS="-DGA_FLASH_FWD_PIN=1" SASS_RE='ElemKindE1ELi(128|256)ELi(1|2049|385)ELb1' VARIANTS=51,52
  FILTER='-*Fp8*' CMP="--head-dims ${HDS:-128,256} --schedules=-1,4,51,13,52"
fi
flash_build $B "$FLAGS" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
cuobjdump --dump-sass $LIB 2>/dev/null |
  awk -v re="$SASS_RE" '/Function : / { keep = ($3 ~ /flash_fwd_sm90_kernel/ && $3 ~ re) } keep' | gzip > $OUT/sass.txt.gz
export PYTHONUNBUFFERED=1
timeout ${CMP_TIMEOUT:-230} python3 bench/attention_torch/compare.py --lib $LIB $CMP --seqlens 4096,8192,16384 \
  --rounds ${ROUNDS:-5} > $OUT/compare.md 2>&1
echo "compare rc=$? at $(( $(date +%s) - T0 )) s"
GA_SHARED=$PWD/.fwdshared GA_FLASH_TEST_VARIANT=$VARIANTS timeout ${TEST_TIMEOUT:-150} \
  $B/bin/test_cuda_flash_attention --gtest_filter="$FILTER" > $OUT/test.log 2>&1
echo "tests rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "flash forward|PASSED|FAILED" $OUT/test.log | head -12
grep -E "^\|" $OUT/compare.md | tail -16
