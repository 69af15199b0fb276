#!/usr/bin/env bash
# The persistent decode kernel on the GPU machine, in one call: its parity tests, then for each model of
# $PERSISTENT_MODELS (PRESET:TYPE specs, default "llama3-1b:F16 llama2-7b:Q4_0") the per-op step's and the kernel's
# tg128 one after the other (same process kind, each with its own copy ceiling), and a trace of the kernel's last
# step of a 48-token run (held time, CTA wait and GB/s per instruction class; the JSON timelines come back in
# logs.tgz). A summary table last.
# Usage (GPU machine, from a copy of the repository): GA_SHARED=... OUT=... bash tools/device/persistent.sh [GTEST_FILTER]
#   SKIP_TESTS=1 benchmarks only; PERSISTENT_VARIANTS="VAR=VALUE ...;VAR=VALUE ..." adds a column per variant: the
#   kernel with that environment (GA_PERSISTENT_X=float: the GEMVs without the int8 dot; GA_PERSISTENT_COPIES=cp.async;
#   GA_PERSISTENT_PROBE=stream: the weight stream alone).
set -uo pipefail
source "$(dirname "$0")/common.sh"
# shellcheck disable=SC2034  # read by finish (common.sh)
KEEP_FILES="persistent.md"
note "gpu: $(gpu_state)"
device_build gpu-accel test_cuda_persistent_decode || finish 1
GA=$B/bin/gpu-accel
if [[ -z ${SKIP_TESTS:-} ]]; then
  run_step "test_cuda_persistent_decode" 240 tests.log "$B/bin/test_cuda_persistent_decode" --gtest_filter="${1:-*}"
fi
rows=()
for spec in ${PERSISTENT_MODELS:-llama3-1b:F16 llama2-7b:Q4_0}; do
  m=$(bench_model "${spec%%:*}" "${spec##*:}") || continue
  line="| $spec"
  IFS=';' read -r -a variants <<< "${PERSISTENT_VARIANTS:-}"
  for kernel in per-op persistent "${variants[@]}"; do
    extra=()
    # shellcheck disable=SC2206  # VAR=VALUE words
    [[ $kernel == *=* ]] && { extra=($kernel); kernel=persistent; }
    run_step "$spec $kernel ${extra[*]}" 150 persistent.md env GA_DECODE_KERNEL="$kernel" "${extra[@]}" \
      "$GA" bench -m "$m" -p 16 -n 128 -r 3 --device cuda
    # the tg128 row of the last bench in persistent.md: tok/s and % of copy (columns 10 and 12 of bench's table)
    tg=$(grep -F "tg128" "$OUT/persistent.md" | tail -1 | awk -F'|' '{gsub(/ /, "", $10); gsub(/ /, "", $12); print $10 " | " $12}')
    line+=" | $tg"
  done
  trace=$OUT/trace-${spec//:/-}.json
  run_step "$spec trace" 90 trace.log env GA_DECODE_KERNEL=persistent GA_PERSISTENT_TRACE="$trace" \
    "$GA" run -m "$m" -p "Once upon a time" -n 48 --temp 0 --ignore-eos --device cuda
  rows+=("$line |")
done
{
  header="| model | per-op tok/s | per-op % copy | persistent tok/s | persistent % copy |" rule="|---|---:|---:|---:|---:|"
  for v in "${variants[@]}"; do header+=" $v tok/s | % copy |" rule+="---:|---:|"; done
  echo "$header"
  echo "$rule"
  printf '%s\n' "${rows[@]}"
  echo
  echo "trace summaries:"
  grep -hiE "persistent|GB/s|held|wait" "$OUT/trace.log" | grep -v "^########" | tail -40
} | tee -a "$OUT/persistent.md"
finish
