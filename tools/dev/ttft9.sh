#!/usr/bin/env bash
# Device run of session 8 (issue 5, a lone request's TTFT; docs/results/2026-11-22-h200-serving.md "Session 8"):
# builds the CUDA tests that cover the changed paths (the argmax kernel, GPU sampling parity incl. the greedy argmax
# path, the batch forward, the Scheduler on the GPU, the Session's GPU sampling), runs them, then
# tools/dev/serve_http.sh (QUICK) with server variants that switch the new paths off one at a time in the same build:
#   default   lone row sampled on the GPU behind the queued prefill (greedy: argmax kernel)
#   hostrow   GA_MIN_DEVICE_SAMPLED_ROWS=2: the lone row copied to the host and sampled there (before session 8)
#   select    GA_GPU_ARGMAX=0: the lone row on the GPU through the candidate selection instead of the argmax
#   *trace    the same with GA_SCHEDULER_TRACE=1 (submit -> first token split; costs ~0.01 ms of the way out)
# The hostrow and select switches were retired in session 9 (this script is the record of session 8's run; on a
# later tree those variants run the default path).
# Usage (device machine, worktree copy, .httplib and .fwdshared beside it):
#   cd .dev-ttft9 && export GA_SHARED=$PWD/../.fwdshared && OUT=$OUT bash tools/dev/ttft9.sh
set -uo pipefail
T0=$(date +%s)
BT=/tmp/bt
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tests_summary=()
note() { tests_summary+=("$1"); echo "== $1"; }

cmake -S . -B $BT -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON > /tmp/build-tests.log 2>&1
TESTS="test_cuda_ops test_cuda_sampling test_cuda_batch_forward test_cuda_scheduler test_cuda_forward_sampling"
ninja -C $BT -j16 $TESTS >> /tmp/build-tests.log 2>&1
rc=$?
note "tests build rc=$rc in $(( $(date +%s) - T0 )) s"
if [[ $rc -ne 0 ]]; then grep -E "error|FAILED" -A4 /tmp/build-tests.log | head -60; cp /tmp/build-tests.log "$OUT/"; exit 1; fi
: > /tmp/tests.log
for t in $TESTS; do
  filter=()
  [[ $t == test_cuda_ops ]] && filter=(--gtest_filter='*Argmax*:*Invalid*')
  echo "######## $t" >> /tmp/tests.log
  timeout 90 $BT/bin/$t "${filter[@]}" > /tmp/$t.log 2>&1
  rc=$?
  cat /tmp/$t.log >> /tmp/tests.log
  note "$t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' /tmp/$t.log | head -3 | tr '\n' ' ')"
  grep -E "Failure|FAILED  \]" -A3 /tmp/$t.log | head -16
done
cp /tmp/tests.log "$OUT/tests.log"
note "tests done at $(( $(date +%s) - T0 )) s"

QUICK=1 CLIENTS=1,64 TTFT_REPEATS=${TTFT_REPEATS:-15} BUDGET=${BUDGET:-$(( 250 - ($(date +%s) - T0) ))} \
  VARIANTS=${VARIANTS:-"default=;hostrow=GA_MIN_DEVICE_SAMPLED_ROWS=2;select=GA_GPU_ARGMAX=0;trace=GA_SCHEDULER_TRACE=1;hostrowtrace=GA_SCHEDULER_TRACE=1 GA_MIN_DEVICE_SAMPLED_ROWS=2;selecttrace=GA_SCHEDULER_TRACE=1 GA_GPU_ARGMAX=0"} \
  OUT=$OUT bash tools/dev/serve_http.sh cuda
rc=$?
echo "================ TESTS"
printf '%s\n' "${tests_summary[@]}"
exit $rc
