#!/usr/bin/env bash
# Device run for issue 4's bf16 forward targets (session 4): one build (Release, sm_90a) with the forward's
# candidate variants 12-17 (wide key tiles, lazy O rescale: -DGA_FLASH_FWD_CANDIDATES=1), ptxas report, then
#   1. compare.py bf16 (hd 64/128/256, ours vs cuDNN and FA2 interleaved over rounds, medians),
#   2. compare.py --fp8 (hd 128/256 4k-16k: the FP8 forward shares the kernel source; speed must hold),
#   3. tests: test_cuda_flash_attention (every compiled variant incl. FP8), test_cuda_flash_varlen,
#      test_cuda_attention (the engine's prefill runs this kernel),
#   4. SANITIZE=1: compute-sanitizer memcheck + racecheck on the small shapes (flash + varlen).
# Logs in $OUT (at most 8 files come back: logs.tgz holds the rest); a short table last.
#   BF16_ARGS / FP8_ARGS: extra compare.py arguments; BF16_SCHEDS: variants timed (-1 = flash_forward's default);
#   LEGACY=1: also hd 128 with --legacy-timing (sessions 1-3's method); EXTRA_CUDA_FLAGS="" for the lean build;
#   TEST_TIMEOUT: seconds for the flash test binary.
set -uo pipefail
OUT=${OUT:-/tmp/out}
L=/tmp/fwd4logs; rm -rf $L; mkdir -p $L "$OUT"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
B=/tmp/b-fwd4; rm -rf $B
source "$(dirname "$0")/flash_fwd_tests.sh"
build_flash_fwd "${EXTRA_CUDA_FLAGS--DGA_FLASH_FWD_CANDIDATES=1}"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1
timeout ${BF16_TIMEOUT:-110} python3 bench/attention_torch/compare.py --lib $LIB --json $L/compare_bf16.json \
  --seqlens 2048,4096,8192,16384 --schedules=${BF16_SCHEDS:-1,4,12,13,14,15,16,17} ${BF16_ARGS:-} \
  > $L/compare_bf16.log 2>&1
bf16_rc=$?
echo "compare bf16 done at $(el) s"
legacy_rc=-
if [ "${LEGACY:-0}" = 1 ]; then  # the sessions 1-3 timing (one timing each, torch first) on hd 128, same run
  timeout 40 python3 bench/attention_torch/compare.py --lib $LIB --legacy-timing --head-dims 128 \
    --seqlens 4096,8192,16384 --schedules 1,4 > $L/compare_legacy.log 2>&1
  legacy_rc=$?
fi
timeout ${FP8_TIMEOUT:-45} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --seqlens 4096,8192,16384 \
  --json $L/compare_fp8.json ${FP8_ARGS:-} > $L/compare_fp8.log 2>&1
fp8_rc=$?
echo "compare fp8 done at $(el) s"
mem_rc=-; race_rc=-; vmem_rc=-
if [ "${SANITIZE:-0}" = 1 ]; then
  SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
  timeout 50 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_attention \
    --gtest_filter='*SmallShapesForSanitizer*:*Unsupported*' > $L/memcheck.log 2>&1
  mem_rc=$?
  timeout 30 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_varlen \
    --gtest_filter='*SmallShapesForSanitizer*' > $L/memcheck_varlen.log 2>&1
  vmem_rc=$?
  timeout 70 $SAN --tool racecheck --racecheck-report all --error-exitcode 9 $B/bin/test_cuda_flash_attention \
    --gtest_filter='CudaFlashAttention.SmallShapesForSanitizer' > $L/racecheck.log 2>&1
  race_rc=$?
  echo "sanitizers done at $(el) s"
fi
timeout 40 $B/bin/test_cuda_flash_varlen > $L/test_varlen.log 2>&1
varlen_rc=$?
timeout 30 $B/bin/test_cuda_attention > $L/test_attention.log 2>&1
attn_rc=$?
LEFT=$(( ${TOTAL:-290} - $(el) )); [ $LEFT -gt ${TEST_TIMEOUT:-200} ] && LEFT=${TEST_TIMEOUT:-200}
timeout $LEFT $B/bin/test_cuda_flash_attention > $L/test_flash.log 2>&1
flash_rc=$?
echo "tests done at $(el) s"
cp $L/compare_bf16.log $L/compare_fp8.log $L/compare_legacy.log "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C $L . 2>/dev/null
echo "=== gpu"; cat $L/gpu.txt
echo "=== ptxas (flash_fwd_sm90 kernels)"; cat $L/ptxas.txt
summ() { grep -E "^\[  (PASSED|FAILED)|^\[  SKIPPED|FAILED  \]|Failure" "$1" | head -${2:-4} | tr '\n' ' '; echo; }
echo "=== tests: flash rc $flash_rc: $(summ $L/test_flash.log 8)"
grep -E "cases|failures|worst" $L/test_flash.log | head -8
echo "=== varlen rc $varlen_rc: $(summ $L/test_varlen.log)"
echo "=== engine attention rc $attn_rc: $(summ $L/test_attention.log)"
echo "=== sanitizers: memcheck rc $mem_rc $(grep -h 'ERROR SUMMARY' $L/memcheck.log 2>/dev/null | head -1);" \
  "varlen memcheck rc $vmem_rc $(grep -h 'ERROR SUMMARY' $L/memcheck_varlen.log 2>/dev/null | head -1);" \
  "racecheck rc $race_rc $(grep -h 'RACECHECK SUMMARY' $L/racecheck.log 2>/dev/null | head -1)"
echo "=== compare legacy rc $legacy_rc"; grep -E "^\| 128" $L/compare_legacy.log 2>/dev/null
echo "=== compare fp8 rc $fp8_rc"; grep -E "^\||configurations|medians" $L/compare_fp8.log | tail -16
echo "=== compare bf16 rc $bf16_rc"; grep -E "^\||configurations|medians|MISMATCH" $L/compare_bf16.log | tail -30
