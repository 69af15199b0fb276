#!/usr/bin/env bash
# The attention figures of docs/performance.md on the GPU machine: our kernels against PyTorch's SDPA backends
# (cuDNN and FlashAttention-2) timed in the same process on the same tensors (bench/attention_torch: FA3's method,
# interleaved balanced rounds after conditioning matmuls, medians), and the engine's decode attention against the
# same run's copy ceiling. Stages, run in the order given (default: forward fp8 backward decode):
#   forward    bf16 forward, head dims 64/128/256, 2k-16k tokens, full and causal (compare.py)
#   fp8        FP8 e4m3 forward, head dims 128/256, 4k-16k (compare.py --fp8; cuDNN bf16 on the dequantized inputs)
#   backward   bf16 backward at head dim 128, 512-16k (compare_bwd.py; PROFILE=1 adds every kernel's GPU time)
#   sm80       the mma.sync forward that sm_80/86/89 GPUs run, timed on the H200 against FA2 (compare.py --sm80)
#   decode     paged multi-sequence decode (ga_bench_attention: batches 1-64, GQA 32/8, head dim 128, 4k positions)
#   prefill    the engine's prefill attention on varlen / paged KV (ga_bench_prefill_attention)
# Environment: ROUNDS (interleaved rounds; default 7), SEQLENS (forward / fp8 / backward lengths), COMPARE_ARGS (more
#   compare.py / compare_bwd.py arguments, e.g. "--schedules=-1,4,55" or "--fp8-variants=-1,29"), ALL_VARIANTS=1
#   (build every Hopper forward variant, GA_FLASH_ALL_VARIANTS, to time candidates beside the defaults).
# The parity tests of these kernels are tools/device/tests.sh's.
# Usage (GPU machine, from a copy of the repository; PyTorch 2.x with CUDA there): OUT=... bash tools/device/attention.sh [STAGE...]
set -uo pipefail
source "$(dirname "$0")/common.sh"
stages=("${@:-forward fp8 backward decode}")
read -ra stages <<< "${stages[*]}"
ROUNDS=${ROUNDS:-7}
# shellcheck disable=SC2034  # read by finish (common.sh)
KEEP_FILES="forward.md fp8.md backward.md sm80.md decode.md prefill.md"
[[ ${ALL_VARIANTS:-0} == 1 ]] && CMAKE_ARGS="${CMAKE_ARGS:-} -DGA_FLASH_ALL_VARIANTS=ON"
note "gpu: $(gpu_state)"
note "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1 | tail -1)"
targets="ga_attention_c"
[[ " ${stages[*]} " == *" decode "* ]] && targets+=" ga_bench_attention"
[[ " ${stages[*]} " == *" prefill "* ]] && targets+=" ga_bench_prefill_attention"
# shellcheck disable=SC2086
device_build $targets || finish 1
LIB=$B/bench/attention_torch/libga_attention_c.so
# shellcheck disable=SC2206
extra=(${COMPARE_ARGS:-})

for stage in "${stages[@]}"; do
  case $stage in
    forward)
      run_step "compare.py bf16" 300 forward.md python3 bench/attention_torch/compare.py --lib "$LIB" \
        --seqlens "${SEQLENS:-2048,4096,8192,16384}" --rounds "$ROUNDS" "${extra[@]}" ;;
    fp8)
      run_step "compare.py --fp8" 200 fp8.md python3 bench/attention_torch/compare.py --lib "$LIB" --fp8 \
        --seqlens "${SEQLENS:-4096,8192,16384}" --rounds "$ROUNDS" "${extra[@]}" ;;
    backward)
      run_step "compare_bwd.py" 300 backward.md python3 bench/attention_torch/compare_bwd.py --lib "$LIB" \
        --head-dims 128 --seqlens "${SEQLENS:-512,1024,2048,4096,8192,16384}" --rounds "$ROUNDS" \
        ${PROFILE:+--profile} "${extra[@]}" ;;
    sm80)
      run_step "compare.py --sm80" 120 sm80.md python3 bench/attention_torch/compare.py --lib "$LIB" --sm80 \
        --head-dims 128 --seqlens 4096,16384 --rounds "$ROUNDS" ;;
    decode) run_step "ga_bench_attention" 120 decode.md "$B/bin/ga_bench_attention" ;;
    prefill) run_step "ga_bench_prefill_attention" 120 prefill.md "$B/bin/ga_bench_prefill_attention" ;;
    *) note "unknown stage $stage"; finish 2 ;;
  esac
done
for f in forward fp8 backward sm80; do [[ -f $OUT/$f.md ]] && grep -E "^\|" "$OUT/$f.md" | tail -30; done
[[ -f $OUT/decode.md ]] && grep -E "copy|paged decode b" "$OUT/decode.md" | head -8
finish 0
