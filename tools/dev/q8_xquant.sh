#!/usr/bin/env bash
# Device run of GEMV session 5 (docs/results/2026-11-22-h200-gemv-session2.md, "Session 5"): x of the Q8_0
# split-row int8 GEMV rounded once per step (SwiGLU's out_int8 for ffn_down, the quantize_x_int8 pre-pass for
# attn_o) instead of in every CTA. ONE call: build; parity tests (test_cuda_gemv, test_cuda_ops,
# test_cuda_forward incl. Int8ActivationModesAgreeBitForBit, test_cuda_forward_shapes, test_cuda_batch_forward);
# ga_bench_gemv --type Q8_0 (per matrix: today's split kernel vs x pre-quantized, with and without the pre-pass);
# `gpu-accel bench` 7B Q8_0 tg128 under GA_INT8_X=0 (old path: per-CTA rounding, ffn_down float), 1 (SwiGLU
# rounds ffn_down's x; the default) and 2 (and a pre-pass for attn_o), then 7B Q4_0 / F16 and 1B F16 (unchanged
# paths, default mode). GA_INT8_X was a benchmark-only switch for that one run; it is gone, the loop runs the default.
# Usage (device, from .dev-<name>, GA_SHARED set):   tools/dev/q8_xquant.sh
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
B=/tmp/b-q8x
bin=$B/bin
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$out/build.log" 2>&1
ninja -C $B -j16 test_cuda_gemv test_cuda_ops test_cuda_forward test_cuda_forward_shapes test_cuda_batch_forward \
  ga_bench_gemv gpu-accel >> "$out/build.log" 2>&1 || { grep -E "error|FAILED" -A4 "$out/build.log" | head -60; exit 1; }
echo "built after $(el) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader

# models on the CPU while the GPU runs the tests
( for t in Q8_0 Q4_0 F16; do
    timeout 90 "$bin/gpu-accel" make-model --preset llama2-7b --type $t --out /tmp/llama-$t.gguf \
      --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$out/make_model.log" 2>&1
  done
  timeout 60 "$bin/gpu-accel" make-model --preset llama3-1b --type F16 --out /tmp/llama1b-F16.gguf \
    --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$out/make_model.log" 2>&1
  touch /tmp/models-done ) &

: > "$out/tests.log"
for t in test_cuda_gemv test_cuda_ops test_cuda_forward test_cuda_forward_shapes test_cuda_batch_forward; do
  timeout 120 "$bin/$t" >> "$out/tests.log" 2>&1
  echo "$t rc $? after $(el) s" | tee -a "$out/tests.log"
done
timeout 60 "$bin/ga_bench_gemv" --type Q8_0 > "$out/bench_gemv.log" 2>&1
echo "gemv bench rc $? after $(el) s"
while [[ ! -f /tmp/models-done && $(el) -lt 330 ]]; do sleep 1; done
echo "models ready after $(el) s"
: > "$out/bench_models.md"
for m in default; do  # the session-5 run compared modes 0/1/2 via GA_INT8_X, since removed (mode 2 is the default)
  echo "## mode $m" >> "$out/bench_models.md"
  timeout 45 "$bin/gpu-accel" bench -m /tmp/llama-Q8_0.gguf -p 0 -n 128 -r 3 --device cuda \
    >> "$out/bench_models.md" 2>> "$out/bench_models.err"
done
echo "## default mode, other types" >> "$out/bench_models.md"
timeout 90 "$bin/gpu-accel" bench -m /tmp/llama-Q4_0.gguf -m /tmp/llama-F16.gguf -m /tmp/llama1b-F16.gguf -p 0 \
  -n 128 -r 3 --device cuda >> "$out/bench_models.md" 2>> "$out/bench_models.err"
echo "model bench done after $(el) s"

echo "=== summary ($(el) s)"
grep -h -E "rc [0-9]+ after|^\[  (PASSED|FAILED) |^\[  FAILED|cases,|int8 activations mode|SKIPPED" "$out/tests.log" |
  head -40
grep -E "device-to-device|copy|ffn down|attn o" "$out/bench_gemv.log" | head -30
grep -E "^## |tg128|copy|GEMM" "$out/bench_models.md"
tail -3 "$out/bench_models.err"
