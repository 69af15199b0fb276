#!/usr/bin/env bash
# Device run for the flash forward's varlen / paged-KV forms and the engine's prefill attention on it.
# Usage (repository copy on the device): GA_SHARED=... OUT=... tools/dev/flash_varlen.sh tests|bench|perf|all
#   tests: build (Release, sm_90a), the varlen/paged parity tests, the dense flash tests, the attention and
#          engine tests on the Hopper prefill (default) and on the mma.sync prefill (GA_ATTN_PREFILL=mma),
#          memcheck on the small varlen shapes, the prefill-attention microbenchmark + PyTorch SDPA.
#   bench: gpu-accel bench -p 512|2048 -n 0 on random 7B F16 and 1B F16 models, mma.sync then Hopper prefill.
#   perf:  the prefill-attention microbenchmark and PyTorch SDPA in the same run; racecheck on the varlen shapes.
# Logs go to $OUT; the summary is printed last.
set -uo pipefail
stage=${1:-tests}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
B=/tmp/b-varlen
summary=()
note() { summary+=("$1"); echo "== $1"; }
finish() { echo; echo "######## summary ($(( $(date +%s) - T0 )) s)"; printf '%s\n' "${summary[@]}"; exit 0; }
left() { echo $(( ${BUDGET:-285} - ($(date +%s) - T0) )); }

note "gpu: $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1)"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$OUT/build.log" 2>&1
if [[ $stage == perf ]]; then  # the microbenchmark and PyTorch SDPA in one run, racecheck on the varlen shapes
  targets="ga_bench_prefill_attention test_cuda_flash_varlen"
elif [[ $stage == bench ]]; then
  targets="gpu-accel ga_bench_prefill_attention"
else
  targets="test_cuda_flash_varlen test_cuda_flash_attention test_cuda_attention test_cuda_forward_shapes \
    test_cuda_forward test_cuda_batch_forward test_cuda_scheduler ga_bench_prefill_attention"
  [[ $stage == all ]] && targets="$targets gpu-accel"
fi
ninja -C $B -j16 $targets >> "$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc at $(( $(date +%s) - T0 )) s"
[[ $rc -eq 0 ]] || { grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; finish; }

if [[ $stage == perf ]]; then
  timeout 60 $B/bin/ga_bench_prefill_attention > "$OUT/bench_prefill.md" 2>&1
  note "bench_prefill rc=$?"
  timeout 40 python3 bench/attention_torch/prefill_sdpa.py > "$OUT/sdpa.md" 2>&1
  note "sdpa rc=$?"
  SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
  timeout 90 $SAN --tool racecheck --racecheck-report all --error-exitcode 9 $B/bin/test_cuda_flash_varlen \
    --gtest_filter='*SmallShapesForSanitizer*' > "$OUT/racecheck.log" 2>&1
  note "racecheck varlen small rc=$?: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | head -2 | tr '\n' ' ')"
  echo "=== prefill attention"; grep -E "^\||GQA" "$OUT/bench_prefill.md"
  echo "=== sdpa"; tail -6 "$OUT/sdpa.md"
  finish
fi

if [[ $stage != bench ]]; then
  run_test() {  # name, filter, env
    local n=$1 f=${2:-*} e=${3:-}
    local log="$OUT/tests.log"
    local t=$(left); (( t > 10 )) || { note "$n $e: no time left"; return; }
    env $e timeout $(( t < 90 ? t : 90 )) $B/bin/$n --gtest_brief=1 --gtest_filter="$f" > /tmp/t.log 2>&1
    local rc=$?
    { echo "######## $n $e rc=$rc"; cat /tmp/t.log; } >> "$log"
    note "$n ${e:-hopper} rc=$rc: $(grep -cE '^\[  FAILED' /tmp/t.log) failed; $(grep -E '^\[  PASSED|SKIPPED|flash.*(FAIL|fail)' /tmp/t.log | head -2 | tr '\n' ' ')"
  }
  run_test test_cuda_flash_varlen
  grep -E "refused|mismatch|FAIL|fail" /tmp/t.log | head -8
  run_test test_cuda_attention
  run_test test_cuda_forward_shapes
  run_test test_cuda_batch_forward
  run_test test_cuda_scheduler
  run_test test_cuda_forward
  run_test test_cuda_forward_shapes '*' GA_ATTN_PREFILL=mma
  run_test test_cuda_batch_forward '*' GA_ATTN_PREFILL=mma
  timeout 60 $B/bin/ga_bench_prefill_attention > "$OUT/bench_prefill.md" 2>&1
  note "bench_prefill rc=$?"
  timeout 40 python3 bench/attention_torch/prefill_sdpa.py > "$OUT/sdpa.md" 2>&1
  note "sdpa rc=$?"
  run_test test_cuda_flash_attention '-*Fp8*:*4097*'
  SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
  t=$(left)
  if (( t > 30 )); then
    timeout $(( t - 5 )) $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_varlen \
      --gtest_filter='*SmallShapesForSanitizer*' > "$OUT/memcheck.log" 2>&1
    note "memcheck varlen small rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | head -1)"
  fi
  echo "=== prefill attention"; grep -E "^\||GQA|H200|H100" "$OUT/bench_prefill.md"
  echo "=== sdpa"; cat "$OUT/sdpa.md" | tail -8
fi

if [[ $stage == bench || $stage == all ]]; then
  timeout 60 $B/bin/ga_bench_prefill_attention > "$OUT/bench_prefill.md" 2>&1
  note "bench_prefill rc=$?"
  mkdir -p /tmp/models
  for preset in "llama2-7b f16" "llama3-1b f16"; do
    set -- $preset
    M=/tmp/models/$1-$2.gguf
    $B/bin/gpu-accel make-model --preset $1 --type $2 --out $M --vocab $GA_SHARED/vocab/ggml-vocab-llama-spm.gguf \
      --threads 16 >> "$OUT/make.log" 2>&1
    note "make-model $1 rc=$? at $(( $(date +%s) - T0 )) s"
    for p in 512 2048; do  # -p takes one count: one invocation per prompt length, mma.sync then Hopper
      for mode in mma hopper; do
        t=$(left); (( t > 15 )) || { note "bench $1 p$p $mode: no time left"; continue; }
        e=""; [[ $mode == mma ]] && e="GA_ATTN_PREFILL=mma"
        env $e timeout $t $B/bin/gpu-accel bench -m $M -p $p -n 0 -r 3 --device cuda > /tmp/bench.md 2> /tmp/bench.err
        note "bench $1 p$p $mode rc=$?: $(grep -o 'prefill attention: [^,]*' /tmp/bench.err | head -1) $(grep -E "pp$p" /tmp/bench.md | head -1)"
        cat /tmp/bench.err >> "$OUT/bench.err"
        { echo "### $1 $2 p$p prefill=$mode"; cat /tmp/bench.md; } >> "$OUT/bench_models.md"
      done
    done
    rm -f $M
  done
  echo "=== prefill attention"; grep -E "^\||GQA" "$OUT/bench_prefill.md"
  echo "=== gpu-accel bench"; grep -E "^###|pp|ceiling|copy|GEMM" "$OUT/bench_models.md"
fi
finish
