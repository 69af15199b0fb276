#!/usr/bin/env bash
# Device run of the engine side of issue 5 (continuous batching on the GPU): builds gpu-accel and the
# CUDA parity tests, runs them, then measures bench-serve on a random-weight llama3-1b F16 model.
# Usage (on the device machine, from the worktree copy): GA_SHARED=... OUT=... tools/dev/serve_engine.sh [tests|bench|all]
set -uo pipefail
what=${1:-all}
B=/tmp/b
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
note "openssl/ssl.h: $(ls /usr/include/openssl/ssl.h 2>/dev/null || echo missing); brotli: $(ls /usr/lib/x86_64-linux-gnu/libbrotli* 2>/dev/null | head -1 || echo missing); httplib: $(ls /usr/include/httplib.h 2>/dev/null || echo missing)"

t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$OUT/build.log" 2>&1
ninja -C $B -j16 gpu-accel test_cuda_batch_forward test_cuda_scheduler test_cuda_forward test_scheduler \
  >> "$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc in $(( $(date +%s) - t0 )) s"
if [[ $rc -ne 0 ]]; then grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; printf '%s\n' "${summary[@]}"; exit 1; fi

if [[ $what == tests || $what == all ]]; then
  for t in test_cuda_batch_forward test_cuda_scheduler test_cuda_forward test_scheduler; do
    echo "######## $t" >> "$OUT/tests.log"
    timeout 120 $B/bin/$t > /tmp/$t.log 2>&1
    rc=$?
    cat /tmp/$t.log >> "$OUT/tests.log"
    note "$t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' /tmp/$t.log | head -3 | tr '\n' ' ')"
    grep -E "worst rel L2|Failure|FAILED  \]" /tmp/$t.log | head -12
  done
fi

if [[ $what == bench || $what == all ]]; then
  M=/tmp/llama3-1b-f16.gguf
  $B/bin/gpu-accel make-model --preset llama3-1b --type F16 --out $M \
    --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" >> "$OUT/bench.err" 2>&1
  note "make-model rc=$?"
  echo '```' >> "$OUT/bench.md"
  bs() {  # bench-serve with the given arguments, the command line recorded
    echo "\$ gpu-accel bench-serve -m llama3-1b-f16.gguf --device cuda $*" >> "$OUT/bench.md"
    timeout 100 $B/bin/gpu-accel bench-serve -m $M --device cuda "$@" >> "$OUT/bench.md" 2>> "$OUT/bench.err"
    note "bench-serve $* rc=$?"
  }
  case ${BENCH:-full} in
    full)
      bs --clients 1,16,64 --prompt-tokens 128 --max-tokens 128 --profile-steps
      bs --clients 1,64 --prompt-tokens 128 --max-tokens 128 --max-batch-tokens 2048 --no-reference
      ;;
    final)
      bs --clients 1,16,64 --prompt-tokens 128 --max-tokens 128 --profile-steps
      bs --clients 1,64 --prompt-tokens 128 --max-tokens 128 --no-reference --no-cuda-graphs
      bs --clients 1 --prompt-tokens 512 --max-tokens 32
      echo "\$ gpu-accel bench -m llama3-1b-f16.gguf -p 128 -n 128 -r 3 --device cuda" >> "$OUT/bench.md"
      timeout 60 $B/bin/gpu-accel bench -m $M -p 128 -n 128 -r 3 --device cuda >> "$OUT/bench.md" 2>> "$OUT/bench.err"
      note "bench rc=$?"
      ;;
  esac
  echo '```' >> "$OUT/bench.md"
fi
echo "================ SUMMARY"
printf '%s\n' "${summary[@]}"
[[ -f "$OUT/bench.md" ]] && cat "$OUT/bench.md"
exit 0
