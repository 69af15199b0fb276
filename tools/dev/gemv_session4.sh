#!/usr/bin/env bash
# Device run of GEMV session 4 (docs/results/2026-11-22-h200-gemv-session2.md, "Session 4"): the Q8_0 split-row
# kernels' variants compared per matrix (ga_bench_gemv --type Q8_0) and in `gpu-accel bench` (7B Q8_0 tg128 per
# variant, Q4_0 / F16 once), the split-row parity test under every variant, then the full test_cuda_gemv /
# test_cuda_forward under the fastest variant. GA_Q8_SPLIT_VARIANT was a benchmark-only switch of that run (bit 1
# no PDL + __ldg x, bit 2 prefetch the next group, bit 4 at most 4 CTAs per SM), removed since: with today's code
# every "variant" runs the one kept path (3). Usage (device, from .dev-gemv3, GA_SHARED set):
#   tools/dev/gemv_session4.sh
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
B=/tmp/b-gemv3
bin=$B/bin
variants="0 1 2 3 4"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$out/build.log" 2>&1
ninja -C $B -j16 test_cuda_gemv test_cuda_forward ga_bench_gemv gpu-accel >> "$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" -A4 "$out/build.log" | head -60; exit 1; }
echo "built after $(el) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader

# models on the CPU while the GPU runs the split-row parity tests
( for t in Q8_0 Q4_0 F16; do
    timeout 60 "$bin/gpu-accel" make-model --preset llama2-7b --type $t --out /tmp/llama-$t.gguf \
      --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$out/make_model.log" 2>&1
  done; touch /tmp/models-done ) &
for v in $variants; do
  GA_Q8_SPLIT_VARIANT=$v timeout 60 "$bin/test_cuda_gemv" --gtest_filter='CudaGemv.SplitRows*' \
    > "$out/test_split_v$v.log" 2>&1
  echo "split-row parity variant $v rc $? ($(grep -h -E 'cases,|worst' "$out/test_split_v$v.log" | head -1))"
done
for v in $variants; do
  echo "## variant $v" >> "$out/bench_gemv.log"
  GA_Q8_SPLIT_VARIANT=$v timeout 40 "$bin/ga_bench_gemv" --type Q8_0 >> "$out/bench_gemv.log" 2>&1
done
echo "gemv bench done after $(el) s"
while [[ ! -f /tmp/models-done && $(el) -lt 200 ]]; do sleep 1; done
echo "models ready after $(el) s"
for v in $variants; do
  echo "## variant $v" >> "$out/bench_models.md"
  GA_Q8_SPLIT_VARIANT=$v timeout 40 "$bin/gpu-accel" bench -m /tmp/llama-Q8_0.gguf -p 0 -n 128 -r 3 --device cuda \
    >> "$out/bench_models.md" 2>> "$out/bench_models.err"
done
timeout 50 "$bin/gpu-accel" bench -m /tmp/llama-Q4_0.gguf -m /tmp/llama-F16.gguf -p 0 -n 128 -r 3 --device cuda \
  >> "$out/bench_models.md" 2>> "$out/bench_models.err"
echo "model bench done after $(el) s"
# the fastest variant by Q8_0 tg128 (a row of the bench table follows each "## variant" line)
best=$(awk '/^## variant/{v=$3} /tg128/ && /Q8_0/{split($0,f,"|"); r=f[9]+0; if (r>best){best=r; bv=v}} END{print bv}' \
  "$out/bench_models.md")
best=${best:-0}
echo "fastest Q8_0 variant: $best"
GA_Q8_SPLIT_VARIANT=$best timeout 90 "$bin/test_cuda_gemv" > "$out/test_gemv.log" 2>&1
echo "test_cuda_gemv (variant $best) rc $?"
GA_Q8_SPLIT_VARIANT=$best timeout $(( 270 - $(el) )) "$bin/test_cuda_forward" > "$out/test_forward.log" 2>&1
echo "test_cuda_forward (variant $best) rc $?"
echo "=== summary ($(el) s)"
grep -h -E "^\[  (PASSED|FAILED) |^\[  FAILED|cases,|worst rel L2|SKIPPED" "$out"/test_gemv.log "$out"/test_forward.log | head -30
grep -E "^## variant|device-to-device|split rows" "$out/bench_gemv.log" | head -60
grep -E "^## variant|tg128" "$out/bench_models.md"
tail -3 "$out/bench_models.err"
