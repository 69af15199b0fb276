#!/usr/bin/env bash
# The prefill graphs (src/backends/cuda/llama/cuda_llama_prefill_graph.cpp) in one device run: builds the engine's
# CUDA tests and benchmarks, runs the tests that drive the forward (the new prefill-graph test and the forward /
# batch-forward / scheduler / sampling parity tests, which now replay prefill graphs wherever a prompt step fits
# one), then measures on a random-weight llama3-1b F16:
#   1. ga_bench_prefill_graph: both faces (contiguous = `run`'s Session, paged = the Scheduler's lone request),
#      graphs on/off, wall time back to back and after 20 ms idle, and the GPU time between events;
#   2. `gpu-accel run --time-prompt-again 9` (the issue's literal reference) with --prefill-graphs 512 / 0;
#   3. `gpu-accel bench-serve --clients 1,1,1,1,1` (Session references + lone requests through the Scheduler) with
#      GA_PREFILL_GRAPHS unset / 0.
# Usage (device): cd .dev-ttft5 && export GA_SHARED=$PWD/../.fwdshared && OUT=$OUT bash tools/dev/prefill_graph.sh
# Environment: TOKENS (default "128 512"), BUDGET (seconds after which the benchmarks are skipped; default 240),
# SKIP_TESTS=1.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=${B:-/tmp/b}
TOKENS=${TOKENS:-128 512}
BUDGET=${BUDGET:-240}
mkdir -p "$OUT"
t_start=$(date +%s)
summary=()
note() { summary+=("$1"); echo "== $1"; }
over_budget() { (( $(date +%s) - t_start > BUDGET )); }
finish() {
  echo "================ SUMMARY"
  printf '%s\n' "${summary[@]}"
  for f in bench.md run.md bench-serve.md; do [[ -f "$OUT/$f" ]] && { echo "---- $f"; cat "$OUT/$f"; }; done
  exit "${1:-0}"
}

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader 2>&1)"
tests=(test_cuda_forward_prefill_graphs test_cuda_forward test_cuda_forward_shapes test_cuda_forward_sampling
       test_cuda_batch_forward test_cuda_scheduler)
t0=$(date +%s)
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$OUT/build.log" 2>&1 &&
  ninja -C "$B" -j16 gpu-accel ga_bench_prefill_graph "${tests[@]}" >> "$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc in $(( $(date +%s) - t0 )) s"
if [[ $rc -ne 0 ]]; then grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; finish 1; fi

if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  : > "$OUT/tests.log"
  for t in "${tests[@]}"; do
    t0=$(date +%s)
    timeout 150 "$B/bin/$t" >> "$OUT/tests.log" 2>&1
    rc=$?
    passed=$(grep -c "^\[       OK \]" "$OUT/tests.log")
    last=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/tests.log" | tail -2 | tr '\n' ' ')
    note "$t rc=$rc in $(( $(date +%s) - t0 )) s; $last (OK so far: $passed)"
    grep -E "^\[  FAILED  \]" "$OUT/tests.log" | sort -u | head -5
  done
  grep -E "prefill graphs captured|contiguous:|^paged:" "$OUT/tests.log" | head -8
  grep -E "Failure|Expected|Which is|rel L2 .* row" "$OUT/tests.log" | head -20
fi

M=/tmp/llama3-1b-f16.gguf
GA="$B/bin/gpu-accel"
"$GA" make-model --preset llama3-1b --type F16 --out $M --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" \
  > "$OUT/make-model.log" 2>&1
note "make-model llama3-1b F16 rc=$?"

if ! over_budget; then
  echo "\$ ga_bench_prefill_graph -m llama3-1b-f16 --tokens 20,${TOKENS// /,}" > "$OUT/bench.md"
  timeout 90 "$B/bin/ga_bench_prefill_graph" -m $M --tokens "20,${TOKENS// /,}" >> "$OUT/bench.md" 2>&1
  note "ga_bench_prefill_graph rc=$?"
fi

# `gpu-accel run`'s own prompt time with the graphs on / off: p - 1 times " the" + BOS = p tokens (serve_http.sh).
: > "$OUT/run.md"
for p in $TOKENS; do
  text=$(python3 -c "import sys; print(' '.join(['the'] * max(1, int(sys.argv[1]) - 1)))" "$p")
  for g in 512 0; do
    if over_budget; then note "run at $p, --prefill-graphs $g skipped: BUDGET"; continue; fi
    out=$(timeout 60 "$GA" run -m $M --device cuda -p "$text" -n 1 --temp 0 --prefill-graphs $g \
      --time-prompt-again 9 2>&1)
    echo "### run, ~$p tokens, --prefill-graphs $g" >> "$OUT/run.md"
    grep -E "start-up|device:|prompt|again" <<< "$out" >> "$OUT/run.md"
  done
done

: > "$OUT/bench-serve.md"
for p in $TOKENS; do
  for g in default 0; do
    if over_budget; then note "bench-serve at $p, GA_PREFILL_GRAPHS=$g skipped: BUDGET"; continue; fi
    echo "### bench-serve --clients 1,1,1,1,1 --prompt-tokens $p, GA_PREFILL_GRAPHS=$g" >> "$OUT/bench-serve.md"
    if [[ $g == default ]]; then
      timeout 60 "$GA" bench-serve -m $M --device cuda --clients 1,1,1,1,1 --prompt-tokens $p --max-tokens 8 \
        > /tmp/bs.txt 2>&1
    else
      GA_PREFILL_GRAPHS=$g timeout 60 "$GA" bench-serve -m $M --device cuda --clients 1,1,1,1,1 --prompt-tokens $p \
        --max-tokens 8 > /tmp/bs.txt 2>&1
    fi
    grep -E "reference|idle|^\| 1 |TTFT 1 client" /tmp/bs.txt >> "$OUT/bench-serve.md"
  done
done
note "total $(( $(date +%s) - t_start )) s"
finish 0
