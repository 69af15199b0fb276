#!/usr/bin/env bash
# Device run of engineer "attn2" (paged decode at batch 16): one build with the decode stage variants
# (GA_ATTN_DECODE_VARIANTS=ON: AttentionParams::decode_stages = 3 exists next to the default), the
# benchmark (stages x split counts, both timing methods), the attention tests, memcheck on small
# shapes; every step bounded so the whole call ends inside 240 s; summary last.
# Usage (device machine, repo copy root): GA_SHARED=... tools/dev/attn2_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $((225 - ($(date +%s) - T0))); }
B=/tmp/b-attn2; rm -rf $B
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DGA_ATTN_DECODE_VARIANTS=ON >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
ninja -C $B -j16 ga_bench_attention test_cuda_paged_attention >>"$OUT/build.log" 2>&1 || {
  grep -m10 -A5 "error" "$OUT/build.log"; exit 1; }
echo "build 1 done at $(( $(date +%s) - T0 )) s"
# the other two tests build while the benchmark runs (the build uses CPUs, the benchmark the GPU)
(ninja -C $B -j12 test_cuda_attention test_cuda_batch_forward >"$OUT/build2.log" 2>&1; echo "rc=$?" >>"$OUT/build2.log") &
BUILD2=$!
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
S=""
run_test() {  # seconds log args...
  local t=$1 log=$2; shift 2
  local l; l=$(left); [ "$l" -lt "$t" ] && t=$l
  if [ "$t" -lt 10 ]; then S+="$log: NOT RUN (time)"$'\n'; return; fi
  timeout "$t" "$@" >"$OUT/$log" 2>&1; local rc=$?
  S+="$(printf '%-16s rc=%s  %s' "$log" "$rc" "$(grep -E '^\[  (PASSED|FAILED)|FAILED TEST|SKIPPED' "$OUT/$log" | tr '\n' ' ' | cut -c1-160)")"$'\n'
}
run_test 90 bench.log $B/bin/ga_bench_attention
echo "bench done at $(( $(date +%s) - T0 )) s"
run_test 60 paged.log $B/bin/test_cuda_paged_attention
wait $BUILD2; tail -1 "$OUT/build2.log"; grep -m5 -A5 "error" "$OUT/build2.log"
echo "build 2 done at $(( $(date +%s) - T0 )) s"
run_test 40 attn.log $B/bin/test_cuda_attention
run_test 40 batch.log $B/bin/test_cuda_batch_forward
run_test 40 memcheck.log compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/bin/test_cuda_paged_attention --gtest_filter='*Small*:*Unsupported*:*DecodeStage*'
grep -hE "ERROR SUMMARY" "$OUT/memcheck.log"
grep -hE "failures|Failure|rejected|not in this build" "$OUT/paged.log" "$OUT/attn.log" "$OUT/batch.log" | head -20
echo "== bench =="
sed -n '/^Attention, head_dim/,$p' "$OUT/bench.log"
echo; echo "== summary (at $(( $(date +%s) - T0 )) s) =="; printf '%s' "$S"
