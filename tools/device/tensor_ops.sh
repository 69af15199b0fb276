#!/usr/bin/env bash
# The tensor-ops library's CUDA paths on the GPU machine: builds the parity test and the benchmark for sm_90a, runs
# test_cuda_tensor_ops (every elementwise, reduction and fused-row op against the CPU reference), compute-sanitizer
# memcheck and racecheck on its special-values test (the row kernels' shared-memory merges), then
# ga_bench_tensor_ops (64 and 256 MiB tensors against the copy ceiling of the same process) and prints its table.
#
# Usage (GPU machine, from a copy of the repository): OUT=... bash tools/device/tensor_ops.sh [BENCH ARGS...]
#   e.g. `--sizes-mib 64,256 --width 4096` (the defaults). SANITIZE=0 skips the compute-sanitizer steps.
set -uo pipefail
source "$(dirname "$0")/common.sh"
# shellcheck disable=SC2034  # read by finish (common.sh)
KEEP_FILES="tensor_ops.md"
note "gpu: $(gpu_state)"
device_build test_cuda_tensor_ops ga_bench_tensor_ops || finish 1
rc=0
run_step "test_cuda_tensor_ops" 240 tests.log "$B/bin/test_cuda_tensor_ops" --gtest_brief=1 || rc=1
grep -hE "^tensor_ops .*cases|SKIPPED" "$OUT/tests.log" | head -12
if [[ ${SANITIZE:-1} == 1 ]]; then
  for tool in memcheck racecheck; do
    run_step "$tool tensor ops special values" 120 sanitizer.log "$SAN" --tool $tool --error-exitcode 9 \
      "$B/bin/test_cuda_tensor_ops" --gtest_filter='*SpecialValues*:*HostPointers*' || rc=1
  done
fi
run_step "ga_bench_tensor_ops" 240 tensor_ops.md "$B/bin/ga_bench_tensor_ops" "$@" || rc=1
grep -E "^\||ceiling" "$OUT/tensor_ops.md"
finish $rc
