#!/usr/bin/env bash
# The whole-model figures of docs/performance.md on the GPU machine, against the ceilings measured in the same
# process: `gpu-accel bench` (device copy and cuBLAS GEMM ceilings first, then pp512 / tg128) on random-weight models
# of the ANCHORS shapes, and the micro-benchmarks behind them. Stages, run in the order given (default: models):
#   models         gpu-accel bench -p 512 -n 128 -r 3 on 7B Q4_0 / Q4_K_M / Q8_0 / F16 and 1B F16
#   families       the same on each dense family's real shape (Llama-3-8B, Qwen3-8B, Gemma-2-9B, Gemma-3-4B,
#                  Phi-3-mini Q4_K_M) and Llama-3.2-1B F16
#   moe-models     the same on Qwen3-30B-A3B and Mixtral-8x7B Q4_K_M (43 GiB of models: the dense ones of this
#                  machine are removed first), each with both MoE prefill paths (GA_MOE_PREFILL)
#   fp8            FP8 weights against BF16 (issue 24's decode figure): Llama-3-8B made as a BF16 Hugging Face folder
#                  (make-model --format hf, 16 GB), quantized to FP8 with 128 x 128 block scales (8 GB), gpu-accel
#                  bench -p 2048 -n 128 on both; the GGUF models of this machine are removed first and both folders
#                  at the end
#   fp8-1b         Llama-3.2-1B F16 (GGUF) under --precision native, bf16 and fp8 (the loader converts): the quick
#                  FP8-vs-16-bit check, pp512 / tg128
#   chosen         the same on the PRESET:TYPE specs of $BENCH_MODELS (e.g. "llama3-8b:Q4_K_M rwkv6-1.6b:F16")
#   persistent     the models of the stages before it again, with the persistent decode kernel
#                  (GA_DECODE_KERNEL=persistent): its tg128 beside the per-op step's of the same call
#   peer           llama.cpp's llama-bench on the models of the stages before it in this call (none: the `models`
#                  set); the peer of ../shared/peers, built into /tmp/llama.cpp-build by its build_llamacpp.sh when
#                  missing (~6 min on 16 cores, so on a fresh machine build it in a call of its own first)
#   first-prefill  `gpu-accel run --time-prompt-again 5`, one process per prompt length (1 .. 2000 tokens, 1B F16):
#                  the first prefill of a length against the same prefill repeated (the warm-up's job)
#   gemv           ga_bench_gemv: every weight type's GEMV on Llama-7B-shaped matrices against the same run's copy
#   sampling       ga_bench_sampling: the GPU sampler's kernels against copying the logits to the host
#   moe            ga_bench_moe: the MoE kernels (routing, the grouped expert GEMV, the decode FFN and the prefill)
#   tensor-ops     ga_bench_tensor_ops: the tensor-ops library's elementwise, reduction and fused-row ops on 64 and
#                  256 MiB tensors against the same process's copy ceiling (tools/device/tensor_ops.sh adds the parity test)
# Usage (GPU machine, from a copy of the repository): GA_SHARED=... OUT=... bash tools/device/bench.sh [STAGE...]
set -uo pipefail
source "$(dirname "$0")/common.sh"
stages=("${@:-models}")
# shellcheck disable=SC2034  # read by finish (common.sh)
KEEP_FILES="bench.md peer.md first-prefill.md tensor_ops.md"
note "gpu: $(gpu_state)"
targets="gpu-accel"
[[ " ${stages[*]} " == *" gemv "* ]] && targets+=" ga_bench_gemv"
[[ " ${stages[*]} " == *" sampling "* ]] && targets+=" ga_bench_sampling"
[[ " ${stages[*]} " == *" moe "* ]] && targets+=" ga_bench_moe"
[[ " ${stages[*]} " == *" tensor-ops "* ]] && targets+=" ga_bench_tensor_ops"
# shellcheck disable=SC2086
device_build $targets || finish 1
GA=$B/bin/gpu-accel

models=()  # every model the stages of this call benchmarked (the peer's list)
# make_models SPEC...: the random-weight models of PRESET:TYPE specs, added to models; their paths in made
make_models() {
  local spec f
  made=()
  for spec in "$@"; do
    f=$(bench_model "${spec%%:*}" "${spec##*:}") || finish 1
    made+=("$f")
    [[ " ${models[*]} " == *" $f "* ]] || models+=("$f")
  done
}
bench_ours() {  # NAME SECS: gpu-accel bench on the models in made
  local args=() m
  for m in "${made[@]}"; do args+=(-m "$m"); done
  run_step "$1" "$2" bench.md "$GA" bench "${args[@]}" -p 512 -n 128 -r 3 --device cuda
}

for stage in "${stages[@]}"; do
  case $stage in
    models)
      make_models llama2-7b:Q4_0 llama2-7b:Q4_K_M llama2-7b:Q8_0 llama2-7b:F16 llama3-1b:F16
      bench_ours "gpu-accel bench" 330
      ;;
    families)
      make_models llama3-8b:Q4_K_M qwen3-8b:Q4_K_M gemma2-9b:Q4_K_M gemma3-4b:Q4_K_M phi3-mini:Q4_K_M llama3-1b:F16
      bench_ours "gpu-accel bench families" 330
      ;;
    fp8)
      rm -f /tmp/models/*.gguf  # 64 GB of disk: the 16 + 8 GB folders need the room
      mkdir -p /tmp/models
      bf16=/tmp/models/llama3-8b-bf16-hf fp8=/tmp/models/llama3-8b-fp8-hf
      if run_step "make-model llama3-8b BF16 (hf)" 300 make-model.log \
          "$GA" make-model --preset llama3-8b --type BF16 --format hf --out "$bf16" --threads "$JOBS" &&
        run_step "quantize llama3-8b fp8 (block)" 300 make-model.log "$GA" quantize "$bf16" "$fp8" fp8 --scales block &&
        [[ -f $fp8/config.json ]]; then
        # pp2048 as issue 24 states its prefill target
        run_step "gpu-accel bench fp8 vs bf16" 330 bench.md "$GA" bench -m "$bf16" -m "$fp8" -p 2048 -n 128 -r 2 \
          --device cuda
      fi
      rm -rf "$bf16" "$fp8"
      ;;
    fp8-1b)
      make_models llama3-1b:F16
      for prec in native bf16 fp8; do
        run_step "gpu-accel bench 1B --precision $prec" 150 bench.md "$GA" bench -m "${made[0]}" -p 512 -n 128 -r 3 \
          --device cuda --precision "$prec"
      done
      ;;
    chosen)
      # shellcheck disable=SC2086
      make_models ${BENCH_MODELS:?BENCH_MODELS lists PRESET:TYPE specs}
      bench_ours "gpu-accel bench chosen" 330
      ;;
    persistent)
      ((${#models[@]})) || make_models llama3-1b:F16
      made=("${models[@]}")
      export GA_DECODE_KERNEL=persistent
      bench_ours "gpu-accel bench, persistent decode kernel" 330
      unset GA_DECODE_KERNEL
      ;;
    moe-models)
      for f in /tmp/models/*.gguf; do [[ $f == *qwen3-30b-a3b* || $f == *mixtral* ]] || rm -f "$f"; done
      make_models qwen3-30b-a3b:Q4_K_M mixtral-8x7b:Q4_K_M
      for path in grouped per-expert; do
        export GA_MOE_PREFILL=$path
        bench_ours "gpu-accel bench MoE, prefill $path" 240
      done
      unset GA_MOE_PREFILL
      ;;
    peer)
      ((${#models[@]})) || make_models llama2-7b:Q4_0 llama2-7b:Q4_K_M llama2-7b:Q8_0 llama2-7b:F16 llama3-1b:F16
      llama=/tmp/llama.cpp-build/bin/llama-bench
      # a build started earlier in the call (detached, beside ours) is waited for rather than started again
      while [[ ! -x $llama ]] && pgrep -f build_llamacpp.sh > /dev/null && (($(left) > 60)); do sleep 5; done
      if [[ ! -x $llama ]]; then
        run_step "build llama.cpp" 480 peer-build.log bash "$GA_SHARED/peers/build_llamacpp.sh" \
          "$GA_SHARED"/peers/llama.cpp-*.tar.xz /tmp/llama.cpp /tmp/llama.cpp-build
      fi
      [[ -x $llama ]] || { note "llama-bench missing: run the peer stage again on the warm machine"; continue; }
      for m in "${models[@]}"; do
        run_step "llama-bench $(basename "$m")" 150 peer.md "$llama" -m "$m" -p 512 -n 128 -r 3 -fa 1 -ngl 99
      done
      ;;
    first-prefill)
      m=$(bench_model llama3-1b F16) || finish 1
      echo "| prompt tokens | start-up: session ms | warm-up ms | first prompt ms | again (median of 5) ms | first / again |" \
        > "$OUT/first-prefill.md"
      echo "|---:|---:|---:|---:|---:|---:|" >> "$OUT/first-prefill.md"
      for len in 1 7 9 13 50 99 129 200 257 300 407 512 1000 2000; do
        ((len > 1)) && text=$(python3 -c "import sys; print(' '.join(['the'] * (int(sys.argv[1]) - 1)))" "$len") || text=""
        log=$OUT/first-prefill-$len.log
        timeout 60 "$GA" run -m "$m" --device cuda -p "$text" -n 4 --temp 0 --ignore-eos -c 4096 --time-prompt-again 5 \
          > /dev/null 2> "$log"
        python3 - "$log" >> "$OUT/first-prefill.md" << 'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
patterns = [r"prompt: (\d+) tokens", r"start-up: session ([0-9.]+) ms", r"warm-up ([0-9.]+) ms",
            r"prompt: \d+ tokens in ([0-9.]+) ms", r"prompt again: .* in ([0-9.]+) ms", r"first / again = ([0-9.]+)"]
cells = [m.group(1) if (m := re.search(p, text)) else "-" for p in patterns]
print("| " + " | ".join(cells) + " |")
PY
      done
      note "first prefill per length: $(tail -n +3 "$OUT/first-prefill.md" | awk -F'|' '{printf "%s:%s ", $2, $7}')"
      ;;
    gemv) run_step "ga_bench_gemv" 200 gemv.md "$B/bin/ga_bench_gemv" ;;
    sampling) run_step "ga_bench_sampling" 120 sampling.md "$B/bin/ga_bench_sampling" ;;
    moe) run_step "ga_bench_moe" 120 moe.md "$B/bin/ga_bench_moe" ;;
    tensor-ops) run_step "ga_bench_tensor_ops" 240 tensor_ops.md "$B/bin/ga_bench_tensor_ops" ;;
    *) note "unknown stage $stage"; finish 2 ;;
  esac
done
for f in bench.md peer.md first-prefill.md tensor_ops.md; do [[ -f $OUT/$f ]] && grep -E "^\||ceiling|copy" "$OUT/$f"; done
finish 0
