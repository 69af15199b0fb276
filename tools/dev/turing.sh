#!/usr/bin/env bash
# Device run of engineer "turing" (issue 4: the sm_75 flash forward run on the H200; paged decode at batch 16; the
# attention_detail.cuh de-duplication). One call, every step bounded (the whole call <= LIMIT s), summary table last.
# STEPS picks what runs (default: all, in this order):
#   build   Release sm_90a build of the targets the later steps need, ptxas report of the sm75 kernels (+ an sm_75
#           compile of flash_fwd_sm75.cu: SASS op counts, proof that it assembles from sm_75 instructions only)
#   flash   test_cuda_flash_attention on variant 18 only (GA_FLASH_TEST_VARIANT=18: the full fp16 grid, 4097, the
#           Sm75* tests; bf16 cases SKIP variant 18 with its reason), FP8 tests filtered out
#   san     compute-sanitizer memcheck + racecheck, variant 18, on the small shapes
#   cmp     compare.py --schedules 18 --dtype fp16 (ours vs PyTorch SDPA FA2 and cuDNN, same process)
#   bench   ga_bench_attention (paged decode b1..b64 with the copy ceiling of the same run, split sweep)
#   paged   test_cuda_paged_attention + test_cuda_attention (+ memcheck on the paged small shapes)
#   varlen  test_cuda_flash_varlen (variant 18 must refuse varlen/paged like variant 11)
#   all     test_cuda_flash_attention, every compiled variant (time left)
# Usage (device, repo copy root): GA_SHARED=... STEPS="build flash san cmp" bash tools/dev/turing.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STEPS=${STEPS:-build flash san cmp bench paged varlen all}
LIMIT=${LIMIT:-225}
source "$(dirname "$0")/device_steps.sh"
B=/tmp/b-turing

TARGETS=""
has flash || has san || has all && TARGETS+=" test_cuda_flash_attention"
has cmp && TARGETS+=" ga_attention_c"
has paged && TARGETS+=" test_cuda_paged_attention test_cuda_attention"
has bench && TARGETS+=" ga_bench_attention"
has varlen && TARGETS+=" test_cuda_flash_varlen"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
# ptxas -v for the sm75 kernels only (a flag on every file would bloat the log): compile that object by hand after.
ninja -C $B -j16 $TARGETS >>"$OUT/build.log" 2>&1 || { grep -m10 -A6 "error" "$OUT/build.log"; exit 1; }
row build "ok at $(( $(date +%s) - T0 )) s:$TARGETS"
(
  cd $B || exit 1
  obj=src/CMakeFiles/ga_cuda.dir/backends/cuda/kernels/flash/flash_fwd_sm75.cu.o
  cmd=$(ninja -t commands $obj | tail -1)
  echo "== sm_90a"; eval "${cmd/ -c / -Xptxas -v -c } -o /tmp/sm75_90a.o" 2>&1 | grep -E "Compiling|spill|Used"
  c75=${cmd/--generate-code=arch=compute_90a,code=\[compute_90a,sm_90a\]/--generate-code=arch=compute_75,code=sm_75}
  echo "== sm_75"; eval "${c75/ -c / -Xptxas -v -c } -o /tmp/sm75_75.o" 2>&1 | grep -E "Compiling|spill|Used|rror"
  echo "== sm_75 SASS op counts per kernel (HMMA.1688 = m16n8k8; LDGSTS = cp.async, must be 0)"
  cuobjdump --dump-sass /tmp/sm75_75.o 2>/dev/null | awk '
    /Function : / { name = $3; sub(/.*kernelI/, "", name); fn[name] = 1 }
    /HMMA\.1688/ { h8[name]++ } /HMMA\.16816/ { h16[name]++ } /LDSM/ { ld[name]++ } /LDGSTS/ { gs[name]++ }
    /LDG\./ { lg[name]++ } /(STL|LDL)[ .]/ { lm[name]++ }
    END { for (n in fn) printf "%-28s hmma1688 %4d hmma16816 %3d ldsm %4d ldgsts %2d ldg %3d stl/ldl %3d\n",
          n, h8[n], h16[n], ld[n], gs[n], lg[n], lm[n] }'
) > "$OUT/ptxas_sm75.txt" 2>&1
export PYTHONUNBUFFERED=1
export GA_FLASH_TEST_VARIANT=18  # the flash and san steps: variant 18 (kFlashSm75Variant) only
if has flash; then
  run_step flash 110 flash18.log $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*'
fi
if has san; then
  run_step memcheck 30 memcheck18.log $SAN --tool memcheck --error-exitcode 9 \
    $B/bin/test_cuda_flash_attention --gtest_filter='*Sm75Small*:*Sm75Refuses*:CudaFlashAttention.SmallShapesForSanitizer'
  run_step racecheck 40 racecheck18.log $SAN --tool racecheck --racecheck-report all \
    --error-exitcode 9 $B/bin/test_cuda_flash_attention \
    --gtest_filter='*Sm75SmallShapesForSanitizer:CudaFlashAttention.SmallShapesForSanitizer'
fi
unset GA_FLASH_TEST_VARIANT
if has cmp; then
  run_step compare 60 compare18.log python3 bench/attention_torch/compare.py \
    --lib $B/bench/attention_torch/libga_attention_c.so --schedules 18 --dtype fp16 --iters 10 \
    --seqlens ${CMP_SEQLENS:-1024,4096,16384} --json "$OUT/compare18.json"
fi
if has bench; then run_step bench 80 bench.log $B/bin/ga_bench_attention; fi
if has paged; then
  run_step paged 60 paged.log $B/bin/test_cuda_paged_attention
  run_step attn 40 attn.log $B/bin/test_cuda_attention
  run_step memcheck_p 30 memcheck_paged.log $SAN --tool memcheck --error-exitcode 9 \
    $B/bin/test_cuda_paged_attention --gtest_filter='*Small*:*Unsupported*:*DecodeStage*'
fi
if has varlen; then run_step varlen 40 varlen.log $B/bin/test_cuda_flash_varlen; fi
if has all; then run_step flash_all 200 flash_all.log $B/bin/test_cuda_flash_attention --gtest_filter='-*Fp8*'; fi

echo "== gpu"; cat "$OUT/gpu.txt"
echo "== ptxas / SASS (sm75 kernels)"; cat "$OUT/ptxas_sm75.txt" | head -40
for f in flash18 flash_all varlen paged attn; do
  [ -f "$OUT/$f.log" ] && grep -hE "cases, .* values compared|Failure|FAILED|sm75 refused|SKIPPED.*sched18" "$OUT/$f.log" | head -14
done
[ -f "$OUT/compare18.log" ] && { echo "== compare (variant 18 = sm75, fp16)"; tail -22 "$OUT/compare18.log"; }
[ -f "$OUT/bench.log" ] && { echo "== bench"; grep -E "copy|paged|b16|b32|b64|b1 " "$OUT/bench.log" | head -40; }
echo; echo "== summary (at $(( $(date +%s) - T0 )) s)"; printf '%s' "$S"
