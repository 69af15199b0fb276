#!/usr/bin/env bash
# Device run for the Hopper flash backward's schedules (kernels/flash/flash_bwd_sm90.cuh): one build (Release,
# sm_90a, GA_FLASH_BWD_VARIANTS=1: the benchmark schedules of the Hopper backward, not the forward's variants), ptxas
# report per schedule, test_cuda_flash_backward (every case on mma.sync, the default Hopper schedule and each other
# compiled schedule), optionally compute-sanitizer memcheck + racecheck on the small shapes (SAN=1), and
# bench/attention_torch/compare_bwd.py at head dim 128 with --hopper-schedules (cuDNN and FA2 timed in the same
# process). Each phase gets what is left of BUDGET seconds. Logs in $OUT, the summary last.
# Defaults = session 8's run 3 (the default 19 of flash_bwd_sm90_pingpong.cuh against schedule 1 and 19's variants
# 20, 21; every length 512-16k, 9 rounds; spill instructions of schedules 1, 19, 21 counted in the SASS). Session 8
# run 1: --hopper-schedules 16,17,18 --rounds 7; run 2: 19,16,18 (schedule 1 was the default then). Session 6:
# COMPARE_ARGS="--no-sm80 --seqlens 512,1024,2048,4096,8192,16384 --rounds 9 --hopper-schedules 1,12,8,10,9". Earlier
# sessions' runs, whose schedules 0, 2, 3, 4, 6, 7 now build only with -DGA_FLASH_BWD_OLD_SCHEDULES=1:
#   session 5: EXTRA_CUDA_FLAGS=-DGA_FLASH_BWD_OLD_SCHEDULES=1 BUDGET=232 COMPARE_ARGS="--no-sm80 --seqlens
#              512,1024,4096,16384 --rounds 11 --hopper-schedules 1,7,6,8,9"
#   session 4: EXTRA_CUDA_FLAGS=-DGA_FLASH_BWD_OLD_SCHEDULES=1 BUDGET=232 COMPARE_ARGS="--no-sm80 --hopper-schedules
#              0,1,2,9" (every length of compare_bwd.py's default list)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $(( ${BUDGET:-290} - ($(date +%s) - T0) )); }
B=/tmp/b-bwd; rm -rf $B
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v -DGA_FLASH_BWD_VARIANTS=${VARIANTS:-1} ${EXTRA_CUDA_FLAGS:-}" \
  > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_backward ga_attention_c >> "$OUT/build.log" 2>&1 \
  || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A3 "Compiling entry function.*flash_bwd_sm9011main_kernel" "$OUT/build.log" | grep -E "entry|spill|Used" \
  | sed -E 's/.*main_kernelILNS0_4tile8ElemKindE([0-9])ELi128ELi([0-9]+)E.*/kind \1 sched \2/' | paste - - - \
  | sort | uniq -c > "$OUT/ptxas.txt"
grep -c "Potential Performance Loss.*flash_bwd_sm90" "$OUT/build.log" >> "$OUT/ptxas.txt"
# Local-memory traffic per schedule in the SASS (spills: where they sit decides whether they cost anything).
CUOBJ=cuobjdump; command -v $CUOBJ >/dev/null || CUOBJ=/usr/local/cuda/bin/cuobjdump
for sc in ${SASS_SCHEDULES:-1 19 21}; do
  fn="_ZN2ga4cuda14flash_bwd_sm9011main_kernelILNS0_4tile8ElemKindE0ELi128ELi${sc}EEEvNS1_4ArgsE"  # bf16
  timeout 60 $CUOBJ -sass -fun "$fn" $B/bin/test_cuda_flash_backward > "$OUT/sass_s$sc.txt" 2>&1
  sass="$OUT/sass_s$sc.txt"
  echo "sched $sc SASS: $(grep -c 'LDL' "$sass") LDL, $(grep -c 'STL' "$sass") STL, $(grep -c 'HGMMA' "$sass")" \
    "HGMMA, $(wc -l < "$sass") lines" >> "$OUT/ptxas.txt"
done
(cd "$OUT" && ls sass_s*.txt >/dev/null 2>&1 && tar -czf sass.tgz sass_s*.txt && rm -f sass_s*.txt)
export PYTHONUNBUFFERED=1
timeout $(( $(left) - 100 )) $B/bin/test_cuda_flash_backward > "$OUT/test_bwd.log" 2>&1
bwd_rc=$?
echo "backward tests done at $(( $(date +%s) - T0 )) s"
mem_rc=skipped; race_rc=skipped
if [ "${SAN:-0}" = 1 ]; then
  SAN_BIN=compute-sanitizer; command -v $SAN_BIN >/dev/null || SAN_BIN=/usr/local/cuda/bin/compute-sanitizer
  timeout 30 $SAN_BIN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_backward \
    --gtest_filter='*SmallShapesForSanitizer*:*Unsupported*' > "$OUT/memcheck.log" 2>&1
  mem_rc=$?
  echo "memcheck done at $(( $(date +%s) - T0 )) s"
  timeout 50 $SAN_BIN --tool racecheck --error-exitcode 9 $B/bin/test_cuda_flash_backward \
    --gtest_filter='*SmallShapesForSanitizer*' > "$OUT/racecheck.log" 2>&1
  race_rc=$?
  echo "racecheck done at $(( $(date +%s) - T0 )) s"
fi
(cd bench/attention_torch && timeout $(( $(left) - 4 )) python3 compare_bwd.py \
  --lib $B/bench/attention_torch/libga_attention_c.so --json "$OUT/compare_bwd.json" --head-dims 128 \
  ${COMPARE_ARGS:---no-sm80 --seqlens 512,1024,2048,4096,8192,16384 --rounds 9 \
  --hopper-schedules 1,20,21}) > "$OUT/compare_bwd.log" 2>&1
cmp_rc=$?
echo "compare done at $(( $(date +%s) - T0 )) s"
echo "=== gpu"; cat "$OUT/gpu.txt"; rm -f "$OUT/gpu.txt"  # at most 8 files come back
echo "=== ptxas Hopper backward main_kernel (count, kind, schedule, spills, registers; then serialization warnings)"
cat "$OUT/ptxas.txt"
echo "=== backward tests rc $bwd_rc"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED|worst relative|Failure|refused" "$OUT/test_bwd.log" | head -20
echo "=== memcheck rc $mem_rc"; [ -f "$OUT/memcheck.log" ] && grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -4
echo "=== racecheck rc $race_rc"
[ -f "$OUT/racecheck.log" ] && grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -4
echo "=== compare_bwd rc $cmp_rc"; grep -E "MISMATCH|unavailable|Error|error" "$OUT/compare_bwd.log" | head -5
tail -30 "$OUT/compare_bwd.log"
