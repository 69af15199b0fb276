#!/usr/bin/env bash
# Device run of the GPU-sampling wiring (issues 3 and 5): builds gpu-accel and the CUDA tests, runs the
# Session/Scheduler sampling tests and the forward/sampling parity tests, then measures bench-serve
# (random llama3-1b F16, clients 1,16,64) and `gpu-accel run` with GPU sampling vs the host path, and
# `gpu-accel bench` for the same-run ceilings. Everything is bounded to fit one 300 s device call.
# Usage (device machine, worktree copy): GA_SHARED=... OUT=... tools/dev/wire.sh
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-wire
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }
left() { echo $(( 288 - ($(date +%s) - T0) )); }

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$OUT/build.log" 2>&1
TESTS="test_cuda_forward_sampling test_cuda_scheduler test_cuda_sampling test_cuda_batch_forward test_cuda_forward"
ninja -C $B -j16 gpu-accel $TESTS >> "$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc in $(( $(date +%s) - T0 )) s"
if [[ $rc -ne 0 ]]; then grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; printf '%s\n' "${summary[@]}"; exit 1; fi

M=/tmp/llama3-1b-f16.gguf
( $B/bin/gpu-accel make-model --preset llama3-1b --type F16 --out $M \
    --vocab "$GA_SHARED/vocab/ggml-vocab-llama-spm.gguf" > "$OUT/make-model.log" 2>&1; echo $? > /tmp/mm.rc ) &
MM=$!

for t in $TESTS; do
  budget=$(( $(left) - 120 ))
  if (( budget < 10 )); then note "$t skipped (time)"; continue; fi
  (( budget > 90 )) && budget=90
  echo "######## $t" >> "$OUT/tests.log"
  timeout $budget $B/bin/$t > /tmp/$t.log 2>&1
  rc=$?
  cat /tmp/$t.log >> "$OUT/tests.log"
  note "$t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' /tmp/$t.log | head -3 | tr '\n' ' ')"
  grep -E "Failure|FAILED  \]" -A3 /tmp/$t.log | head -16
done

wait $MM
note "make-model rc=$(cat /tmp/mm.rc)"
echo '```' >> "$OUT/bench.md"
bs() {  # bench-serve with the given arguments, the command line recorded
  local b=$(( $(left) - 30 )); (( b > 70 )) && b=70
  if (( b < 15 )); then note "bench-serve $* skipped (time)"; return; fi
  echo "\$ gpu-accel bench-serve -m llama3-1b-f16.gguf --device cuda $*" >> "$OUT/bench.md"
  timeout $b $B/bin/gpu-accel bench-serve -m $M --device cuda "$@" >> "$OUT/bench.md" 2>> "$OUT/bench.err"
  note "bench-serve $* rc=$?"
}
run1() {  # gpu-accel run; the timing line recorded, the text kept for comparison
  local tag=$1; shift
  if (( $(left) < 12 )); then note "run $tag skipped (time)"; return; fi
  echo "\$ gpu-accel run -m llama3-1b-f16.gguf --device cuda -p 'Once upon a time' --ignore-eos $*" >> "$OUT/bench.md"
  timeout 25 $B/bin/gpu-accel run -m $M --device cuda -p "Once upon a time" --ignore-eos "$@" \
    > /tmp/run-$tag.txt 2> /tmp/run-$tag.err
  note "run $tag rc=$? $(grep -E '^generated' /tmp/run-$tag.err)"
  grep -E "^(prompt|generated)" /tmp/run-$tag.err >> "$OUT/bench.md"
}
bs --clients 1,16,64 --prompt-tokens 128 --max-tokens 128
bs --clients 1,16,64 --prompt-tokens 128 --max-tokens 128 --no-reference --host-sampling
run1 greedy-gpu -n 256 --temp 0
run1 greedy-host -n 256 --temp 0 --host-sampling
run1 greedy-gpu2 -n 256 --temp 0
run1 sample-gpu -n 256 --seed 7
run1 sample-host -n 256 --seed 7 --host-sampling
cmp -s /tmp/run-greedy-gpu.txt /tmp/run-greedy-host.txt && note "run greedy text: GPU == host" || note "run greedy text DIFFERS"
cmp -s /tmp/run-sample-gpu.txt /tmp/run-sample-host.txt && note "run seeded text: GPU == host" || note "run seeded text DIFFERS"
if (( $(left) > 30 )); then
  echo "\$ gpu-accel bench -m llama3-1b-f16.gguf -p 128 -n 128 -r 3 --device cuda" >> "$OUT/bench.md"
  timeout $(( $(left) - 3 )) $B/bin/gpu-accel bench -m $M -p 128 -n 128 -r 3 --device cuda >> "$OUT/bench.md" 2>> "$OUT/bench.err"
  note "bench rc=$?"
fi
echo '```' >> "$OUT/bench.md"
echo "================ SUMMARY ($(( $(date +%s) - T0 )) s)"
printf '%s\n' "${summary[@]}"
cat "$OUT/bench.md"
exit 0
