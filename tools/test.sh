#!/usr/bin/env bash
# Runs every test: the CTest suites of build/ (built by tools/setup.sh), then a bounded libFuzzer
# run of the GGUF parser (GA_FUZZ_SECONDS, default 60; 0 skips it) when clang is available.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${GA_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure -j"${GA_JOBS:-2}"
seconds="${GA_FUZZ_SECONDS:-60}"
if [[ "$seconds" != 0 ]]; then
  if command -v clang++ >/dev/null; then
    bash fuzz/run_fuzz.sh "$seconds"
  else
    echo "fuzz: clang++ not found; the GGUF fuzz target was not run" >&2
    [[ "${CI:-}" != true ]] || exit 1
  fi
fi
