#!/usr/bin/env bash
# Device run of GEMV session 3 (docs/results/2026-11-22-h200-gemv-session2.md, "Session 3"): parity tests,
# ga_bench_gemv, then `gpu-accel bench` on random 7B / 1B models. Usage (device machine, from .dev-gemv):
#   tools/dev/gemv_session3.sh "TYPES" [tests|notests]     e.g. "Q8_0 Q4_0 Q4_K_M F16 1B_F16"
# Binaries: prebuilt/gemvbin.tar.xz when it is there and runs (built on the dev machine with the same CUDA 13.0,
# sm_90a, Release), else a build in /tmp/b-gemv (not /tmp/b: a warm machine may hold someone else's build).
# Logs go to $OUT; a short summary is printed last.
set -u
types=${1:-}
tests=${2:-tests}
out=${OUT:-/tmp/out}
mkdir -p "$out"
t0=$(date +%s)
bin=/tmp/b-gemv/bin
if [[ -f prebuilt/gemvbin.tar.xz ]]; then
  mkdir -p /tmp/b-gemv
  python3 -c "import tarfile; tarfile.open('prebuilt/gemvbin.tar.xz').extractall('/tmp/b-gemv')" && bin=/tmp/b-gemv/gemvbin
  "$bin/test_cuda_ops" > "$out/test_ops.log" 2>&1 || { echo "prebuilt binaries do not run: building"; bin=/tmp/b-gemv/bin; }
fi
if [[ $bin == /tmp/b-gemv/bin ]]; then
  cmake -S . -B /tmp/b-gemv -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
    -DGA_BUILD_TESTS=ON > "$out/build.log" 2>&1
  ninja -C /tmp/b-gemv -j16 test_cuda_gemv test_cuda_forward test_cuda_forward_shapes test_cuda_ops test_cuda_attention \
    ga_bench_gemv gpu-accel >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  "$bin/test_cuda_ops" > "$out/test_ops.log" 2>&1
fi
echo "binaries ready after $(( $(date +%s) - t0 )) s ($bin)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
if [[ $tests == tests ]]; then
  timeout 120 "$bin/test_cuda_gemv" > "$out/test_gemv.log" 2>&1; echo "test_cuda_gemv rc $?"
  timeout 150 "$bin/test_cuda_forward" > "$out/test_forward.log" 2>&1; echo "test_cuda_forward rc $?"
  timeout 60 "$bin/test_cuda_forward_shapes" > "$out/test_forward_shapes.log" 2>&1; echo "test_cuda_forward_shapes rc $?"
  [[ -x $bin/test_cuda_attention ]] && { timeout 60 "$bin/test_cuda_attention" > "$out/test_attention.log" 2>&1;
    echo "test_cuda_attention rc $?"; }
  echo "tests done after $(( $(date +%s) - t0 )) s"
fi
models=()
for t in $types; do
  f=/tmp/llama-$t.gguf
  preset=llama2-7b; [[ $t == 1B_F16 ]] && { preset=llama3-1b; t=F16; }
  timeout 90 "$bin/gpu-accel" make-model --preset $preset --type $t --out $f \
    --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$out/make_model.log" 2>&1 && models+=(-m $f)
  echo "model $t $preset made after $(( $(date +%s) - t0 )) s"
done
if [[ ${#models[@]} -gt 0 ]]; then
  timeout 200 "$bin/gpu-accel" bench "${models[@]}" -p 512 -n 128 -r 3 --device cuda > "$out/bench_models.md" \
    2> "$out/bench_models.err"; echo "gpu-accel bench rc $?"
fi
left=$(( ${GEMV_BUDGET_S:-285} - ($(date +%s) - t0) ))
if [[ $left -gt 20 ]]; then
  timeout $left "$bin/ga_bench_gemv" > "$out/bench_gemv.log" 2>&1; echo "ga_bench_gemv rc $?"
fi
echo "=== summary ($(( $(date +%s) - t0 )) s)"
grep -h -E "^\[  (PASSED|FAILED) |^\[  FAILED|cases,|worst rel L2|SKIPPED" "$out"/test_*.log | head -60
grep -E "copy \(read|split rows|Q8_0|Q6_K|Q4_0|Q4_K|F16" "$out/bench_gemv.log" 2>/dev/null | grep -v "staged" | head -60
[[ -f "$out/bench_models.md" ]] && cat "$out/bench_models.md"
tail -3 "$out/bench_models.err" 2>/dev/null
