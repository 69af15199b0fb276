#!/usr/bin/env bash
# Session 11 16-bit run: the PV wait pinned below the softmax in the bf16 forward (51 = 4 + pin, 52 = 13 + pin)
# against 4, 13 and the defaults, same run (compare.py bf16, hd 128 / 256, 4k-16k); SASS order check; parity tests of
# 51 / 52. Build: -DGA_FLASH_FWD_PIN=1 (only these candidates).
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-pin
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FWD_PIN=1" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
cuobjdump --dump-sass $LIB 2>/dev/null | awk '/Function : / { keep = ($3 ~ /flash_fwd_sm90_kernel/ && $3 ~ /ElemKindE1ELi(128|256)ELi(1|2049|385)ELb1/) }
  keep' | gzip > $OUT/sass16.txt.gz
export PYTHONUNBUFFERED=1
timeout ${CMP_TIMEOUT:-230} python3 bench/attention_torch/compare.py --lib $LIB --head-dims ${HDS:-128,256} \
  --seqlens 4096,8192,16384 --rounds ${ROUNDS:-5} --schedules=-1,4,51,13,52 > $OUT/bf16.md 2>&1
echo "compare rc=$? at $(( $(date +%s) - T0 )) s"
GA_SHARED=$PWD/.fwdshared GA_FLASH_TEST_VARIANT=51,52 timeout ${TEST_TIMEOUT:-100} $B/bin/test_cuda_flash_attention \
  --gtest_filter='-*Fp8*' > $OUT/test16.log 2>&1
echo "tests rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "flash forward|PASSED|FAILED" $OUT/test16.log | head -12
grep -E "^\|" $OUT/bf16.md | tail -16
