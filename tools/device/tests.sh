#!/usr/bin/env bash
# Every CUDA test on the GPU machine: builds gpu-accel and every test_cuda_* binary for sm_90a, runs each binary,
# then compute-sanitizer memcheck on a CUDA generation (stories260K), on the batched forward and on the small MoE
# tests, and memcheck + racecheck on the flash kernels' small shapes (every FP8 variant and backward schedule of
# the build). CI has no GPU:
# there these tests report SKIPPED, so this is where they run.
#
# Usage (GPU machine, from a copy of the repository): GA_SHARED=... OUT=... bash tools/device/tests.sh [REGEX]
#   REGEX: only the test binaries whose names match it (default: every one), e.g. 'flash|attention'.
#   SANITIZE=0 skips the compute-sanitizer steps. About 330 s on a fresh machine (most of it the build).
set -uo pipefail
source "$(dirname "$0")/common.sh"
filter=${1:-.}
note "gpu: $(gpu_state)"
device_build gpu-accel || finish 1  # configures the build folder, so that its test targets can be listed
tests=$(ninja -C "$B" -t targets all | sed -n 's/^\(test_cuda_[a-z0-9_]*\):.*/\1/p' | sort -u | grep -E "$filter")
# shellcheck disable=SC2086
device_build $tests || finish 1

# The flash kernels' full parity grids take minutes (test_cuda_flash_attention ran past 240 s without a failure): they
# run last, with what is left of the call (up to 480 s each), so that they never starve the engine tests.
for name in $(grep -v '^test_cuda_flash' <<< "$tests") $(grep '^test_cuda_flash' <<< "$tests"); do
  limit=240
  [[ $name == test_cuda_flash* ]] && limit=480
  run_step "$name" $limit "$name.log" "$B/bin/$name" --gtest_brief=1
done

if [[ ${SANITIZE:-1} == 1 ]]; then
  run_step "memcheck gpu-accel run" 120 memcheck.log $SAN --tool memcheck --error-exitcode 9 "$B/bin/gpu-accel" run \
    -m models/stories260K.gguf -p "Once upon a time" -n 24 --temp 0.8 --seed 7 --device cuda
  [[ -x $B/bin/test_cuda_batch_forward ]] && run_step "memcheck batched forward" 200 memcheck.log $SAN --tool memcheck --error-exitcode 9 \
    "$B/bin/test_cuda_batch_forward" --gtest_filter='*Stories*'
  [[ -x $B/bin/test_cuda_moe ]] && run_step "memcheck MoE small tests" 120 memcheck.log $SAN --tool memcheck \
    --error-exitcode 9 "$B/bin/test_cuda_moe" \
    --gtest_filter='CudaMoePlan.*:CudaMoeGroupedGemm.*:CudaMoeFfn.DecodeStep*:CudaMoeOps.*'
  for tool in memcheck racecheck; do
    [[ -x $B/bin/test_cuda_flash_attention && -x $B/bin/test_cuda_flash_backward ]] || break
    run_step "$tool flash FP8 small shapes" 240 "$tool-flash.log" $SAN --tool $tool --error-exitcode 9 \
      "$B/bin/test_cuda_flash_attention" --gtest_filter='*Fp8SmallShapes*'
    run_step "$tool flash backward small shapes" 240 "$tool-flash.log" $SAN --tool $tool --error-exitcode 9 \
      "$B/bin/test_cuda_flash_backward" --gtest_filter='*SmallShapes*'
  done
fi
finish 0
