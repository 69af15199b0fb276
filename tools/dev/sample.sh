#!/usr/bin/env bash
# Device run of the GPU sampling work (engineer "sampler"): build, CPU + CUDA tests, benchmark, memcheck.
# Usage on the device machine: cd .dev-sample && bash tools/dev/sample.sh   (logs under $OUT)
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DGA_SHARED_DIR="${GA_SHARED:-$PWD/../shared}" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
if ! ninja -C /tmp/b -j16 test_sampler_candidates test_cuda_sampling ga_bench_sampling > "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
timeout 60 /tmp/b/bin/test_sampler_candidates > "$OUT/cpu_test.log" 2>&1; cpu_rc=$?
timeout 90 /tmp/b/bin/test_cuda_sampling > "$OUT/cuda_test.log" 2>&1; cuda_rc=$?
echo "tests: $(( $(date +%s) - start )) s"
timeout 70 /tmp/b/bin/ga_bench_sampling > "$OUT/bench.log" 2>&1; bench_rc=$?
left=$(( 225 - ($(date +%s) - start) ))
memcheck_rc=skipped
if [ "$left" -gt 25 ] && command -v compute-sanitizer > /dev/null; then
  timeout $(( left - 5 )) compute-sanitizer --tool memcheck /tmp/b/bin/test_cuda_sampling \
    --gtest_filter='*NanRow*:*Rejects*' > "$OUT/memcheck.log" 2>&1; memcheck_rc=$?
fi
echo "==== cuda test (rc $cuda_rc)"; grep -E "^\[ sampling|FAILED|Failure|error|SKIPPED|PASSED|Expected|Which is|actual" "$OUT/cuda_test.log" | head -40
echo "==== cpu test (rc $cpu_rc)"; grep -E "^\[ sampler|FAILED|PASSED" "$OUT/cpu_test.log" | head -10
echo "==== memcheck (rc $memcheck_rc)"; tail -3 "$OUT/memcheck.log" 2>/dev/null
echo "==== bench (rc $bench_rc)"; tail -18 "$OUT/bench.log"
