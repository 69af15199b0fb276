#!/usr/bin/env bash
# Device run of the GPU sampling work (engineers "sampler", "sample2"): build, CPU + CUDA tests,
# benchmark, memcheck/racecheck on small tests, ncu kernel times of the first test cases.
# Usage on the device machine: cd .dev-sample && bash tools/dev/sample.sh   (logs under $OUT)
set -u
OUT=${OUT:-/tmp/out}
B=/tmp/b-sample
mkdir -p "$OUT"
start=$(date +%s)
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DGA_SHARED_DIR="${GA_SHARED:-$PWD/../shared}" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
if ! ninja -C $B -j16 test_sampler_candidates test_cuda_sampling ga_bench_sampling > "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
timeout 60 $B/bin/test_sampler_candidates > "$OUT/cpu_test.log" 2>&1; cpu_rc=$?
timeout 90 $B/bin/test_cuda_sampling > "$OUT/cuda_test.log" 2>&1; cuda_rc=$?
echo "tests: $(( $(date +%s) - start )) s"
timeout 70 $B/bin/ga_bench_sampling > "$OUT/bench.log" 2>&1; bench_rc=$?
echo "bench: $(( $(date +%s) - start )) s"
budget=${SAMPLE_BUDGET:-225}
left=$(( budget - ($(date +%s) - start) ))
memcheck_rc=skipped
racecheck_rc=skipped
ncu_rc=skipped
if command -v compute-sanitizer > /dev/null; then
  if [ "$left" -gt 30 ]; then
    timeout 25 compute-sanitizer --tool memcheck $B/bin/test_cuda_sampling \
      --gtest_filter='*NanRow*:*Rejects*' > "$OUT/memcheck.log" 2>&1; memcheck_rc=$?
  fi
  left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -gt 30 ]; then
    timeout 25 compute-sanitizer --tool racecheck $B/bin/test_cuda_sampling \
      --gtest_filter='*NanRow*' > "$OUT/racecheck.log" 2>&1; racecheck_rc=$?
  fi
fi
left=$(( budget - ($(date +%s) - start) ))
if [ "$left" -gt 20 ] && command -v ncu > /dev/null; then
  # First 5 cases of CandidatesMatchCpuReference (vocab 733 x3/x2, 32000 x1 k1, x7 k40, x64 k256): 2 kernels each.
  timeout $(( left - 8 )) ncu --clock-control none -k 'regex:chunk_max|select_sum' --launch-count 10 \
    --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active \
    $B/bin/test_cuda_sampling --gtest_filter='*CandidatesMatch*' > "$OUT/ncu.log" 2>&1; ncu_rc=$?
fi
echo "==== cuda test (rc $cuda_rc)"; grep -E "^\[ sampling|FAILED|Failure|error|SKIPPED|PASSED|Expected|Which is|actual" "$OUT/cuda_test.log" | head -40
echo "==== cpu test (rc $cpu_rc)"; grep -E "^\[ sampler|FAILED|PASSED" "$OUT/cpu_test.log" | head -10
echo "==== memcheck (rc $memcheck_rc)"; tail -2 "$OUT/memcheck.log" 2>/dev/null
echo "==== racecheck (rc $racecheck_rc)"; tail -2 "$OUT/racecheck.log" 2>/dev/null
echo "==== ncu (rc $ncu_rc)"; grep -E "chunk_max|select_sum|gpu__time|launch__grid|ERR|rror" "$OUT/ncu.log" 2>/dev/null | head -44
echo "==== bench (rc $bench_rc)"; tail -18 "$OUT/bench.log"
