#!/usr/bin/env bash
# Device run of GEMV session 6 (docs/results/2026-11-22-h200-gemv-session2.md, "Session 6"): x rounded to int8
# once per step for every int8 GEMV that can read it (RMSNorm out_int8 for q/k/v, gate/up and the classifier;
# GGUF Q4_0 / Q4_K int8 kernel reading GemvParams::x_int8), and q+k fused where only v's type differs (Q4_K_M).
# ONE call: build in /tmp/b-kq; parity tests (test_cuda_gemv, test_cuda_ops, test_cuda_forward incl. the
# Int8 modes on the Q8_0 / Q4_0 / Q4_K fixtures, test_cuda_batch_forward incl. a random Q4_K_M mix,
# test_cuda_forward_shapes); ga_bench_gemv for Q4_K / Q6_K / Q8_0 / Q4_0 (x int8 given vs in-kernel); then
# `gpu-accel bench -p 0 -n 128 -r 3` on 7B Q4_K_M / Q8_0 / Q4_0 / F16 (the copy ceiling is measured by each
# process). The session-6 run also benched GA_INT8_X=0/2 and GA_FUSE_QK=1, benchmark-only switches since removed
# (the env lines below no longer change anything: they rerun the default as a spread check).
# Usage (device, from .dev-<name>, GA_SHARED set):   tools/dev/gemv_kquant.sh
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
B=/tmp/b-kq
bin=$B/bin
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$out/build.log" 2>&1
ninja -C $B -j16 test_cuda_gemv test_cuda_ops test_cuda_forward test_cuda_forward_shapes test_cuda_batch_forward \
  ga_bench_gemv gpu-accel >> "$out/build.log" 2>&1 || { grep -E "error|FAILED" -A4 "$out/build.log" | head -60; exit 1; }
echo "built after $(el) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader

# models on the CPU while the GPU runs the tests
( for t in Q4_K_M Q8_0 Q4_0 F16; do
    timeout 100 "$bin/gpu-accel" make-model --preset llama2-7b --type $t --out /tmp/llama-$t.gguf \
      --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$out/make_model.log" 2>&1
    echo "model $t rc $? after $(el) s" >> "$out/make_model.log"
  done
  touch /tmp/models-done ) &

: > "$out/tests.log"
for t in test_cuda_gemv test_cuda_ops test_cuda_forward test_cuda_batch_forward test_cuda_forward_shapes; do
  timeout 100 "$bin/$t" >> "$out/tests.log" 2>&1
  echo "$t rc $? after $(el) s" | tee -a "$out/tests.log"
done
timeout 60 "$bin/ga_bench_gemv" --type Q4_K --type Q6_K --type Q8_0 --type Q4_0 > "$out/bench_gemv.log" 2>&1
echo "gemv bench rc $? after $(el) s"
while [[ ! -f /tmp/models-done && $(el) -lt 230 ]]; do sleep 1; done
echo "models ready after $(el) s"
: > "$out/bench_models.md"
bench() {  # label, env..., models...
  local label=$1; shift
  echo "## $label" >> "$out/bench_models.md"
  env "$@" >> "$out/bench_models.md" 2>> "$out/bench_models.err"
}
m() { for t in "$@"; do [[ -f /tmp/llama-$t.gguf ]] && echo "-m /tmp/llama-$t.gguf"; done; }
B7="-p 0 -n 128 -r 3 --device cuda"
# the new default first (mode 3 + q+k fusion), then the controls, while time remains
bench "default (mode 3, q+k fused)" timeout 70 "$bin/gpu-accel" bench $(m Q4_K_M Q8_0 Q4_0 F16) $B7
echo "default bench done after $(el) s"
[[ $(el) -lt 250 ]] && bench "default again" timeout 45 "$bin/gpu-accel" bench $(m Q4_K_M Q8_0 Q4_0) $B7
[[ $(el) -lt 265 ]] && bench "default, Q4_K_M again" timeout 20 "$bin/gpu-accel" bench $(m Q4_K_M) $B7
echo "model bench done after $(el) s"

echo "=== summary ($(el) s)"
grep -h "rc " "$out/make_model.log"
grep -h -E "rc [0-9]+ after|^\[  FAILED|cases,|int8 activations mode|worst rel L2" "$out/tests.log" | head -40
grep -E "device-to-device|ffn down|attn o |qkv|output" "$out/bench_gemv.log" | grep -E "copy|Q4_K|Q6_K|x int8|Q8_0 split rows \||Q4_0 \|" | head -40
grep -E "^## |tg128|copy|GEMM" "$out/bench_models.md"
tail -3 "$out/bench_models.err"
