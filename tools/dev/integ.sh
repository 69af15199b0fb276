#!/usr/bin/env bash
# Device run of the merged tree: builds everything for sm_90a, runs every CUDA test binary, memcheck on a
# short generation and on the batched forward, then (stage bench) the decode/prefill table and bench-serve.
# Usage on the device machine, from the repository copy: GA_SHARED=... OUT=... tools/dev/integ.sh STAGE [STAGE...],
# the stages run in the order given, each one of
#   tests  every CUDA test binary + memcheck (and racecheck on the flash kernels' small shapes);
#   attn   the attention kernels vs PyTorch SDPA (same process);
#   bwd    the backward's test and its Hopper schedules BWD_SCHEDULES (default 19, session 8's default, beside 26) vs
#          cuDNN/FA2 (BWD_SEQLENS);
#   fwd4k  the hd128 non-causal forward at 4k tokens, FWD4K_ROUNDS (default 31) interleaved rounds vs cuDNN/FA2;
#   build  only the build (every target the other stages use: one ninja call, so the heavy kernels compile together);
#   bench  decode/prefill table + bench-serve;  serve  HTTP serving (tools/dev/serve_http.sh, carried .httplib);
#   final  bench + attn + serve (more than one 600 s call holds once the attention comparison runs interleaved rounds:
#          run tests, attn and bench+serve as separate calls on a warm machine instead).
# A warm machine keeps the build folder: later calls rebuild nothing.
set -uo pipefail
stages=("${@:-tests}")
B=/tmp/b-integ
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$1"); echo "== $1"; }
finish() {
  echo; echo "######## summary"; printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
  # At most 8 files come back from the device: the summary and one archive of every log.
  tar czf /tmp/integ-logs.tgz -C "$OUT" --exclude=summary.txt . &&
    find "$OUT" -mindepth 1 ! -name summary.txt -delete && mv /tmp/integ-logs.tgz "$OUT/logs.tgz"
  exit "${1:-0}"
}

note "gpu: $(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
t0=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > "$OUT/build.log" 2>&1
# gpu-accel, every CUDA test and the attention benchmarks (not `all`: the device's newer nlohmann-json rejects one CPU
# test's comparison)
targets="gpu-accel $(ninja -C $B -t targets all | sed -n 's/^\(test_cuda_[a-z0-9_]*\):.*/\1/p' | sort -u)"
[[ " ${stages[*]} " == *" ttft "* ]] && targets="gpu-accel test_cuda_scheduler"
[[ " ${stages[*]} " =~ " "(attn|bwd|fwd4k|build|final)" " ]] && targets+=" ga_attention_c ga_bench_attention"
ninja -C $B -j16 $targets >> "$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc in $(( $(date +%s) - t0 )) s"
[[ $rc -eq 0 ]] || { grep -E "error|FAILED" -A4 "$OUT/build.log" | head -60; finish 1; }
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1

run_ttft() {  # time to first token at 1 client, repeated, and the step profile
  $B/bin/test_cuda_scheduler --gtest_brief=1 > "$OUT/test_cuda_scheduler.log" 2>&1
  note "test_cuda_scheduler rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_cuda_scheduler.log" | head -2 | tr '\n' ' ')"
  M=/tmp/models/llama3-1b-f16.gguf; mkdir -p /tmp/models
  [[ -f $M ]] || $B/bin/gpu-accel make-model --preset llama3-1b --type f16 --out $M \
    --vocab $GA_SHARED/vocab/ggml-vocab-llama-spm.gguf --threads 16 >> "$OUT/make.log" 2>&1
  for args in "--clients 1,1,1,1,1,16,64" "--clients 1,1,1,1,1 --host-sampling --no-reference"; do
    echo "\$ bench-serve $args" >> "$OUT/bench_serve.md"
    timeout 120 $B/bin/gpu-accel bench-serve -m $M --device cuda --prompt-tokens 128 --max-tokens 128 $args \
      >> "$OUT/bench_serve.md" 2>> "$OUT/bench.err"
    note "bench-serve $args rc=$?"
  done
  cat "$OUT/bench_serve.md"
}

run_tests() {
  for t in $B/bin/test_cuda_*; do
    n=$(basename $t)
    [[ -f "$OUT/$n.log" ]] && continue  # run by an earlier stage of this call (bwd)
    timeout 240 $t --gtest_brief=1 > /tmp/$n.log 2>&1
    rc=$?
    { echo "######## $n rc=$rc"; cat /tmp/$n.log; } >> "$OUT/tests.log"
    note "$n rc=$rc: $(grep -cE '^\[  FAILED' /tmp/$n.log) failed; $(grep -E '^\[  PASSED|SKIPPED' /tmp/$n.log | head -1)"
  done
  compute-sanitizer --tool memcheck $B/bin/gpu-accel run -m $GA_SHARED/models/tinyllamas/stories260K.gguf \
    -p "Once upon a time" -n 24 --temp 0.8 --seed 7 --device cuda > "$OUT/memcheck.log" 2>&1
  note "memcheck run rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")"
  compute-sanitizer --tool memcheck $B/bin/test_cuda_batch_forward --gtest_filter='*Stories*' > "$OUT/memcheck_batch.log" 2>&1
  note "memcheck batch forward rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_batch.log")"
  sanitize_small fp8 test_cuda_flash_attention '*Fp8SmallShapes*'  # every FP8 variant of the build and the defaults
  sanitize_small backward test_cuda_flash_backward '*SmallShapes*'  # every schedule of the build, 22-24 included
}

# memcheck and racecheck on a flash test's small shapes: sanitize_small NAME BINARY GTEST_FILTER
sanitize_small() {
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool $B/bin/$2 --gtest_filter="$3" > "$OUT/${tool}_flash_$1.log" 2>&1
    note "$tool flash $1 small rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/${tool}_flash_$1.log")"
  done
}

run_bwd() {  # the backward's parity test, then its Hopper schedules against cuDNN / FA2 (same process)
  timeout 240 $B/bin/test_cuda_flash_backward --gtest_brief=1 > "$OUT/test_cuda_flash_backward.log" 2>&1
  note "test_cuda_flash_backward rc=$?: $(grep -cE '^\[  FAILED' "$OUT/test_cuda_flash_backward.log") failed; $(grep -E '^\[  PASSED' "$OUT/test_cuda_flash_backward.log")"
  grep -E "cases|worst" "$OUT/test_cuda_flash_backward.log" | head -12
  timeout 300 python3 bench/attention_torch/compare_bwd.py --lib $LIB --head-dims 128 \
    --seqlens ${BWD_SEQLENS:-512,1024,2048,4096,8192,16384} --hopper-schedules ${BWD_SCHEDULES:-19} \
    --rounds ${BWD_ROUNDS:-7} ${BWD_PROFILE:+--profile} > "$OUT/flash_bwd_schedules.md" 2>&1
  note "compare_bwd.py schedules rc=$?"
  tail -40 "$OUT/flash_bwd_schedules.md"
}

run_fwd4k() {  # the hd128 non-causal forward's 4k claim, many interleaved rounds
  timeout 200 python3 bench/attention_torch/compare.py --lib $LIB --head-dims 128 --seqlens 4096 --masks full \
    --rounds ${FWD4K_ROUNDS:-31} --schedules=-1 > "$OUT/flash_fwd4k.md" 2>&1
  note "compare.py fwd 4k rc=$?"
  tail -24 "$OUT/flash_fwd4k.md"
}

run_bench() {  # ---- random-weight models of the ANCHORS shapes ----
mkdir -p /tmp/models
models=()
for spec in llama2-7b:q4_0 llama2-7b:q4_k_m llama2-7b:q8_0 llama2-7b:f16 llama3-1b:f16; do
  preset=${spec%%:*}; type=${spec##*:}; f=/tmp/models/$preset-$type.gguf
  if [[ ! -f $f ]]; then
    $B/bin/gpu-accel make-model --preset $preset --type $type --out $f \
      --vocab $GA_SHARED/vocab/ggml-vocab-llama-spm.gguf --threads 16 >> "$OUT/make.log" 2>&1 || { note "make-model $spec failed"; finish 1; }
  fi
  models+=(-m $f)
done
timeout 330 $B/bin/gpu-accel bench "${models[@]}" -p 512 -n 128 -r 3 --device cuda > "$OUT/bench.md" 2> "$OUT/bench.err"
note "bench rc=$?"
timeout 150 $B/bin/gpu-accel bench-serve -m /tmp/models/llama3-1b-f16.gguf --device cuda --clients 1,16,64 \
  --prompt-tokens 128 --max-tokens 128 > "$OUT/bench_serve.md" 2>> "$OUT/bench.err"
note "bench-serve rc=$?"
cat "$OUT/bench.md" "$OUT/bench_serve.md"
}

run_attn() {  # ---- the attention kernels against PyTorch SDPA (same run) ----
timeout 200 python3 bench/attention_torch/compare.py --lib $LIB --seqlens 2048,4096,8192,16384 \
  > "$OUT/flash_bf16.md" 2>&1
note "compare.py bf16 rc=$?"
timeout 90 python3 bench/attention_torch/compare.py --lib $LIB --sm80 --head-dims 128 --seqlens 4096,16384 \
  > "$OUT/flash_sm80.md" 2>&1
note "compare.py --sm80 rc=$?"
timeout 90 python3 bench/attention_torch/compare.py --lib $LIB --fp8 --seqlens 4096,16384 > "$OUT/flash_fp8.md" 2>&1
note "compare.py --fp8 rc=$?"
if [[ -f bench/attention_torch/compare_bwd.py ]]; then
  timeout 120 python3 bench/attention_torch/compare_bwd.py --lib $LIB --head-dims 128 --seqlens 4096,16384 \
    > "$OUT/flash_bwd.md" 2>&1
  note "compare_bwd.py rc=$?"
fi
# Decode attention (paged, GQA 32/8, hd 128, 4k positions) against the same run's device copy.
timeout 100 $B/bin/ga_bench_attention > "$OUT/decode.md" 2>&1
note "ga_bench_attention rc=$?"
grep -E "^Attention, head_dim|copy" "$OUT/decode.md" | head -4
grep -E "paged decode" "$OUT/decode.md" | grep "^|" | head -12
for f in flash_bf16 flash_sm80 flash_fp8 flash_bwd; do [[ -f "$OUT/$f.md" ]] && tail -32 "$OUT/$f.md"; done
}

run_serve() {  # ---- serving over HTTP ----
$B/bin/test_cuda_scheduler --gtest_brief=1 > "$OUT/test_cuda_scheduler.log" 2>&1
note "test_cuda_scheduler rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_cuda_scheduler.log" | head -2 | tr '\n' ' ')"
httplib=$PWD/.httplib
[[ -d $httplib ]] || httplib=$PWD/../.httplib
if [[ -d $httplib ]]; then
  B=$B OUT=$OUT/http GA_HTTPLIB=$httplib bash tools/dev/serve_http.sh cuda > "$OUT/serve_http.log" 2>&1
  note "serve_http.sh rc=$?"
  cat "$OUT/http/table.md"
fi
}

for stage in "${stages[@]}"; do
  case $stage in
    build) ;;
    ttft) run_ttft ;;
    tests) run_tests ;;
    all) run_tests; run_bench ;;
    bwd) run_bwd ;;
    fwd4k) run_fwd4k ;;
    bench) run_bench ;;
    attn) run_attn ;;
    serve) run_serve ;;
    bench+serve) run_bench; run_serve ;;
    final) run_bench; run_attn; run_serve ;;
    *) note "unknown stage $stage"; finish 2 ;;
  esac
done
finish 0
