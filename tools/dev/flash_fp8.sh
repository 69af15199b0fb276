#!/usr/bin/env bash
# Device run for the FP8 (e4m3) Hopper flash forward, one call: build (Release, sm_90a), ptxas report of the FP8
# kernels (ElemKind 2), SASS check (QGMMA + UTMALDG present, no local-memory traffic), compare.py --fp8 (every
# compiled FP8 variant and the V^T pre-pass alone vs cuDNN bf16 on the dequantized inputs, same run), the FP8
# parity tests, the bf16 regression check (compare.py bf16 hd128 4k-16k: ours vs cuDNN, same run), optionally
# compute-sanitizer memcheck + racecheck on the small FP8 shapes (SANITIZE=1), then the 16-bit flash forward tests
# (the kernels share the generalized code) with the time left. Logs go to $OUT; summary last.
#   FP8_ALL=1: also compile the FP8 candidate variants that lost (GA_FLASH_FP8_ALL_VARIANTS), to compare them.
#   WIDE=1: compile session 8's FP8 hd 128 candidates 28-31 (GA_FLASH_FP8_WIDE); SASS of the hd 128 persistent
#   kernels goes to sass_fp8_hd128.txt. COMPARE2_ARGS: a second compare.py --fp8 call; SKIP_BF16=1: no bf16 check.
#   FP8_TEST_FILTER: gtest filter of the FP8 tests; SAN_VARIANTS: GA_FLASH_TEST_VARIANT for the sanitizer runs.
#   NCU=1: Nsight Compute on one hd 128 8k FP8 launch (pipe utilization, stall reasons; --clock-control none).
# Logs: written to /tmp/fp8logs; $OUT gets the compare/ncu/test outputs and logs.tgz (at most 8 files come back).
set -uo pipefail
FINAL_OUT=${OUT:-/tmp/out}
mkdir -p "$FINAL_OUT"
OUT=/tmp/fp8logs; rm -rf $OUT; mkdir -p $OUT
T0=$(date +%s)
B=/tmp/b-fp8; rm -rf $B
EXTRA_FLAGS=""
[ "${FP8_ALL:-0}" = 1 ] && EXTRA_FLAGS="-DGA_FLASH_FP8_ALL_VARIANTS=1"
[ "${WIDE:-0}" = 1 ] && EXTRA_FLAGS="$EXTRA_FLAGS -DGA_FLASH_FP8_WIDE=1"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v $EXTRA_FLAGS" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_attention ga_attention_c >> "$OUT/build.log" 2>&1 ||
  { tail -50 "$OUT/build.log"; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A2 "flash_fwd_sm90_kernel" "$OUT/build.log" | grep -E "spill|Used" > "$OUT/ptxas.txt"
LIB=$B/bench/attention_torch/libga_attention_c.so
cuobjdump --dump-sass $LIB 2>/dev/null | awk '
  /Function : / { name = ($3 ~ /flash_fwd_sm90_kernel/) ? $3 : ""; if (name != "") fn[name] = 1 }
  name != "" && /QGMMA/ { qg[name]++ }
  name != "" && /HGMMA/ { hg[name]++ }
  name != "" && /UTMALDG/ { tm[name]++ }
  name != "" && /MUFU.EX2/ { ex[name]++ }
  name != "" && /(STL|LDL)[ .]/ { lm[name]++ }
  name != "" && /MUFU/ { mu[name]++ }
  name != "" && /F2FP/ { f2[name]++ }
  name != "" && /FMNMX/ { mn[name]++ }
  name != "" && /HADD2|FADD/ { ad[name]++ }
  name != "" && /\/\*[0-9a-f]+\*\// { ins[name]++ }
  END { for (n in fn) printf "%-90s qgmma %4d hgmma %4d utmaldg %3d ex2 %4d stl/ldl %3d mufu %4d f2fp %4d fmnmx %4d " \
        "fadd/hadd2 %4d instr %5d\n", n, qg[n], hg[n], tm[n], ex[n], lm[n], mu[n], f2[n], mn[n], ad[n], ins[n] }' \
  | sort > "$OUT/sass.txt"
# SASS of the FP8 head dim 128 persistent overlap kernels (4 and session 8's 28-31) for reading after the run.
cuobjdump --dump-sass $LIB 2>/dev/null | awk '/Function : / { keep = ($3 ~ /ElemKindE2ELi128EL.*Lb1ELi2E/) }
  keep' > "$OUT/sass_fp8_hd128.txt"
export PYTHONUNBUFFERED=1
timeout ${CMP_TIMEOUT:-100} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --json "$OUT/compare_fp8.json" \
  ${COMPARE_ARGS:-} > "$OUT/compare_fp8.log" 2>&1
cmp_rc=$?
echo "compare --fp8 done at $(( $(date +%s) - T0 )) s"
timeout ${FP8_TEST_TIMEOUT:-100} $B/bin/test_cuda_flash_attention --gtest_filter="${FP8_TEST_FILTER:-*Fp8*}" \
  > "$OUT/test_fp8.log" 2>&1
fp8_rc=$?
echo "fp8 tests done at $(( $(date +%s) - T0 )) s"
bf16_rc=-
if [ -n "${COMPARE2_ARGS:-}" ]; then  # a second FP8 comparison (e.g. head dim 256 default only)
  timeout ${CMP2_TIMEOUT:-60} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --json "$OUT/compare_fp8_2.json" \
    $COMPARE2_ARGS > "$OUT/compare_fp8_2.log" 2>&1
  echo "compare --fp8 (2) done (rc $?) at $(( $(date +%s) - T0 )) s"
fi
if [ "${SKIP_BF16:-0}" != 1 ]; then
  timeout 45 python3 bench/attention_torch/compare.py --lib $LIB --head-dims 128 --seqlens 4096,8192,16384 \
    --schedules 1,4 > "$OUT/compare_bf16.log" 2>&1
  bf16_rc=$?
fi
echo "compare bf16 done at $(( $(date +%s) - T0 )) s"
mem_rc=-; race_rc=-
if [ "${SANITIZE:-0}" = 1 ]; then
  SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
  export GA_FLASH_TEST_VARIANT=${SAN_VARIANTS:-}  # (the default variant always runs)
  timeout ${SAN_TIMEOUT:-40} $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_attention \
    --gtest_filter='*Fp8SmallShapesForSanitizer*:*Fp8Unsupported*' > "$OUT/memcheck.log" 2>&1
  mem_rc=$?
  timeout ${SAN_TIMEOUT:-40} $SAN --tool racecheck --racecheck-report all --error-exitcode 9 $B/bin/test_cuda_flash_attention \
    --gtest_filter='*Fp8SmallShapesForSanitizer*' > "$OUT/racecheck.log" 2>&1
  race_rc=$?
  unset GA_FLASH_TEST_VARIANT
  echo "sanitizers done at $(( $(date +%s) - T0 )) s"
fi
if [ "${NCU:-0}" = 1 ]; then
  # launch 3 of the regex = the default variant's first timed warm-up call (1 correctness call precedes it)
  timeout 50 ncu --clock-control none -k regex:flash_fwd_sm90_kernel --launch-skip 2 -c 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section MemoryWorkloadAnalysis python3 bench/attention_torch/compare.py --lib $LIB --fp8 --head-dims 128 \
    --seqlens 8192 --iters 1 > "$OUT/ncu.txt" 2>&1
  echo "ncu done (rc $?) at $(( $(date +%s) - T0 )) s"
  timeout 35 ncu --clock-control none -k regex:flash_fwd_sm90_kernel --launch-skip 2 -c 1 --metrics \
sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed \
    python3 bench/attention_torch/compare.py --lib $LIB --fp8 --head-dims 128 --seqlens 8192 --iters 1 \
    > "$OUT/ncu_metrics.txt" 2>&1
  echo "ncu metrics done (rc $?) at $(( $(date +%s) - T0 )) s"
fi
LEFT=$(( ${BUDGET_S:-285} - ($(date +%s) - T0) ))
[ $LEFT -lt 5 ] && LEFT=5
timeout $LEFT $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*' > "$OUT/test.log" 2>&1
test_rc=$?
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas (all flash kernels)"; sort "$OUT/ptxas.txt" | uniq -c
echo "=== sass (FP8 kernels: ElemKind 2)"
grep "ElemKindE2" "$OUT/sass.txt" | sed 's/_ZN2ga4cuda12flash_detail21flash_fwd_sm90_kernelILNS0_4tile8ElemKindE//'
echo "=== fp8 tests (rc $fp8_rc)"
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|FAILED|flash forward|Failure|refused" "$OUT/test_fp8.log" | head -16
if [ "${SANITIZE:-0}" = 1 ]; then
  echo "=== memcheck rc $mem_rc"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
  echo "=== racecheck rc $race_rc"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | head -5
fi
echo "=== 16-bit flash tests (rc $test_rc, ${LEFT} s)"
grep -E "^\[  (PASSED|FAILED|  OK)|FAILED|Failure" "$OUT/test.log" | head -10
echo "=== compare bf16 hd128 (rc $bf16_rc)"; grep -E "^\| 128" "$OUT/compare_bf16.log" | head -8
if [ "${NCU:-0}" = 1 ]; then
  echo "=== ncu (hd128 8k full, default variant)"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|Stall|L1/TEX Hit|Shared Memory|Pipe|Warp Cycles Per Issued" \
    "$OUT/ncu.txt" | head -24
  grep -E "sm__|l1tex__|ERROR" "$OUT/ncu_metrics.txt" | head -8
fi
[ -f "$OUT/compare_fp8_2.log" ] && { echo "=== compare --fp8 (2)"; grep -E "^\| [0-9]" "$OUT/compare_fp8_2.log"; }
echo "=== compare --fp8 (rc $cmp_rc)"; tail -28 "$OUT/compare_fp8.log"
for f in compare_fp8.json compare_fp8.log test_fp8.log ncu.txt ncu_metrics.txt sass_fp8_hd128.txt; do
  [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"
done
tar czf "$FINAL_OUT/logs.tgz" -C "$OUT" . 2>/dev/null
