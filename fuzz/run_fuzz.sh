#!/usr/bin/env bash
# Builds the GGUF fuzz target with clang + ASan/UBSan + libFuzzer and runs it for a bounded time.
#
# usage: fuzz/run_fuzz.sh [SECONDS=60]
# env:   GA_FUZZ_BUILD_DIR (default build-fuzz), GA_FUZZ_JOBS (default 2), GA_SHARED_DIR (default ../shared)
#
# Exits non-zero when the fuzzer finds a crash, a sanitizer report, a leak, a timeout or an input that
# needs more than 2 GB; the input is saved as build-fuzz/fuzz/artifacts/<kind>-<sha1>. Replay one with
#   build-fuzz/bin/fuzz_gguf build-fuzz/fuzz/artifacts/crash-...
# The corpus grows in build-fuzz/fuzz/corpus-gguf across runs (seeds are regenerated each run).
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GA_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${GA_FUZZ_JOBS:-2}
shared=${GA_SHARED_DIR:-$root/../shared}

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGA_BUILD_FUZZ=ON -DGA_BUILD_TESTS=OFF -DGA_CUDA=OFF -DGA_SANITIZE=address,undefined
fi
ninja -C "$build" -j"$jobs" fuzz_gguf gguf_make_seeds

seeds="$build/fuzz/seeds-gguf"
corpus="$build/fuzz/corpus-gguf"
artifacts="$build/fuzz/artifacts"
rm -rf "$seeds"
mkdir -p "$corpus" "$artifacts"
"$root/fuzz/make_corpus.sh" "$build" "$seeds" "$shared"

# halt_on_error: a UBSan report is a finding, not a warning.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
"$build/bin/fuzz_gguf" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=65536 \
  -timeout=10 -print_final_stats=1 -dict="$root/fuzz/gguf.dict" -artifact_prefix="$artifacts/" \
  "$corpus" "$seeds"
echo "run_fuzz: no findings in ${seconds}s"
