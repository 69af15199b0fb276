#!/usr/bin/env bash
# Device run of the GEMV session 2 (docs/results/2026-11-22-h200-gemv-session2.md): build, parity tests,
# ga_bench_gemv, then `gpu-accel bench` on random 7B models. Usage (device machine, from .dev-gemv):
#   tools/dev/gemv_session2.sh "TYPES" [--sweep]     e.g. "Q8_0 Q4_0 Q4_K_M F16 1B_F16"  (model types; "" = none)
# Logs go to $OUT; a short summary is printed last.
set -u
types=${1:-}
sweep=${2:-}
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$out/build.log" 2>&1
ninja -C /tmp/b -j16 test_cuda_gemv test_cuda_forward test_cuda_forward_shapes ga_bench_gemv gpu-accel \
  >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build done after $(( $(date +%s) - t0 )) s"
timeout 120 /tmp/b/bin/test_cuda_gemv > "$out/test_gemv.log" 2>&1; echo "test_cuda_gemv rc $?"
timeout 150 /tmp/b/bin/test_cuda_forward > "$out/test_forward.log" 2>&1; echo "test_cuda_forward rc $?"
timeout 60 /tmp/b/bin/test_cuda_forward_shapes > "$out/test_forward_shapes.log" 2>&1; echo "test_cuda_forward_shapes rc $?"
echo "tests done after $(( $(date +%s) - t0 )) s"
timeout 120 /tmp/b/bin/ga_bench_gemv $sweep > "$out/bench_gemv.log" 2>&1; echo "ga_bench_gemv rc $?"
echo "gemv bench done after $(( $(date +%s) - t0 )) s"
models=()
for t in $types; do
  f=/tmp/llama-$t.gguf
  preset=llama2-7b; [[ $t == 1B_F16 ]] && { preset=llama3-1b; t=F16; }
  timeout 90 /tmp/b/bin/gpu-accel make-model --preset $preset --type $t --out $f \
    --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$out/make_model.log" 2>&1 && models+=(-m $f)
done
echo "models made after $(( $(date +%s) - t0 )) s"
if [[ ${#models[@]} -gt 0 ]]; then
  timeout 230 /tmp/b/bin/gpu-accel bench "${models[@]}" -p 512 -n 128 -r 3 --device cuda > "$out/bench_models.md" \
    2> "$out/bench_models.err"; echo "gpu-accel bench rc $?"
fi
echo "=== summary ($(( $(date +%s) - t0 )) s)"
grep -h -E "^\[  (PASSED|FAILED) |^\[  FAILED|cases,|worst rel L2|SKIPPED" "$out"/test_*.log | head -60
grep -E "copy \(read|split rows|Q8_0|Q6_K|Q4_0|Q2_K|Q3_K" "$out/bench_gemv.log" | grep -v "Q4_0 staged" | head -90
[[ -f "$out/bench_models.md" ]] && cat "$out/bench_models.md"
tail -3 "$out/bench_models.err" 2>/dev/null
