#!/usr/bin/env bash
# Device run of engineer "dec7" (issue 4: paged decode attention at batch 16, session 7 of
# docs/results/2026-11-22-h200-paged-attention.md). One call, every step bounded (the whole call <= LIMIT s),
# summary table last. STEPS picks what runs (default: all, in this order):
#   build   Release sm_90a build of the targets the later steps need (+ ptxas report of attention_decode.cu)
#   bench   ga_bench_attention: paged decode b1..b64 default vs workspace merge, per-CTA timelines (raw records
#           in $OUT/traces.tgz), merge x split sweep, contiguous decode/prefill rows, same-run copy ceiling
#   paged   test_cuda_paged_attention + test_cuda_attention
#   san     compute-sanitizer memcheck (paged small shapes, stage and merge cases) + racecheck (merge small shapes)
#   engine  test_cuda_batch_forward, test_cuda_scheduler, test_cuda_forward (the engine's decode through it)
# Usage (device, repo copy root): GA_SHARED=... STEPS="build bench paged san engine" bash tools/dev/dec7.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STEPS=${STEPS:-build bench paged san engine}
LIMIT=${LIMIT:-280}
source "$(dirname "$0")/device_steps.sh"
B=/tmp/b-dec7

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader \
  > /tmp/gpu.txt 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
T1="ga_bench_attention test_cuda_paged_attention test_cuda_attention"
T2="test_cuda_batch_forward test_cuda_scheduler test_cuda_forward"
ninja -C $B -j16 $T1 >>"$OUT/build.log" 2>&1 || { grep -m10 -A6 "error" "$OUT/build.log"; exit 1; }
row build "ok at $(( $(date +%s) - T0 )) s"
# the engine tests build while the benchmark runs (CPUs vs GPU)
if has engine; then
  (ninja -C $B -j12 $T2 >/tmp/build2.log 2>&1; echo "rc=$?" >>/tmp/build2.log) &
  BUILD2=$!
fi
(
  cd $B || exit 1
  obj=src/CMakeFiles/ga_cuda.dir/backends/cuda/kernels/attention_decode.cu.o
  cmd=$(ninja -t commands $obj | tail -1)
  eval "${cmd/ -c / -Xptxas -v -c } -o /tmp/dec7_decode.o" 2>&1 | grep -E "Compiling|spill|Used" | paste - - - |
    sed -e 's/.*kernelILi\([0-9]*\)ELb\([01]\)ELi\([23]\).*sm_90a./hd\1 paged\2 stages\3/' -e 's/ptxas info    ://g'
) > /tmp/ptxas.txt 2>&1 &
PTXAS=$!

if has bench; then
  mkdir -p /tmp/traces
  GA_BENCH_TRACE_DIR=/tmp/traces run_step bench 100 bench.log $B/bin/ga_bench_attention
  tar czf "$OUT/traces.tgz" -C /tmp traces 2>/dev/null
fi
if has paged; then
  run_step paged 90 paged.log $B/bin/test_cuda_paged_attention
  run_step attn 40 attn.log $B/bin/test_cuda_attention
fi
if has san; then
  run_step memcheck 45 san.log $SAN --tool memcheck --error-exitcode 9 \
    $B/bin/test_cuda_paged_attention --gtest_filter='*Small*:*Unsupported*:*DecodeStage*'
  run_step racecheck 40 san.log $SAN --tool racecheck --racecheck-report all --error-exitcode 9 \
    $B/bin/test_cuda_paged_attention --gtest_filter='*Small*'
fi
if has engine; then
  wait $BUILD2; row build2 "$(tail -1 /tmp/build2.log) at $(( $(date +%s) - T0 )) s"
  cat /tmp/build2.log >> "$OUT/build.log"; grep -m5 -A5 "error" /tmp/build2.log
  run_step batch 40 engine.log $B/bin/test_cuda_batch_forward
  run_step sched 40 engine.log $B/bin/test_cuda_scheduler
  run_step forward 50 engine.log $B/bin/test_cuda_forward
fi
wait $PTXAS
cat /tmp/gpu.txt /tmp/ptxas.txt > "$OUT/info.txt"   # (at most 8 files come back)

echo "== gpu, ptxas (attention_decode.cu)"; cut -c1-200 "$OUT/info.txt"
for f in paged attn engine; do
  [ -f "$OUT/$f.log" ] && grep -hE "cases, .* values compared|Failure|FAILED|refused here" "$OUT/$f.log" | head -12
done
[ -f "$OUT/san.log" ] && grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Error" "$OUT/san.log" | head -8
if [ -f "$OUT/bench.log" ]; then
  echo "== bench"
  grep -E "^Attention, head_dim" "$OUT/bench.log"
  grep -E "paged decode|paged mixed|Llama-3-8B \(32/8\) decode" "$OUT/bench.log" | grep "^|" | head -24
  sed -n '/^| batch | stages | merge/,$p' "$OUT/bench.log" | cut -c1-400
fi
echo; echo "== summary (at $(( $(date +%s) - T0 )) s)"; printf '%s' "$S"
