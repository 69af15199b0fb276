#!/usr/bin/env bash
# Runs every test: the CTest suites of build/ (built by tools/setup.sh), the Python package's pytest suite
# (python/tests, on the package in build/python) when the build has it, then a bounded libFuzzer run of the
# GGUF parser (GA_FUZZ_SECONDS, default 60; 0 skips it) when clang is available.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${GA_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure -j"${GA_JOBS:-2}"
# The Python package: built when CMake found pybind11 and Python 3's headers (GA_BUILD_PYTHON). It is skipped with
# the reason otherwise, except under GA_REQUIRE_TEST_DATA=1 (CI), where a missing package is a failure.
python_skip() {
  echo "python: $1; the Python package's tests were not run" >&2
  [[ "${GA_REQUIRE_TEST_DATA:-}" != 1 ]] || exit 1
}
case "$build" in /*) build_abs="$build" ;; *) build_abs="$root/$build" ;; esac
py_exe="$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null | head -n1 || true)"
py_exe="${py_exe:-python3}"  # a build configured before the package existed
if ! compgen -G "$build/python/gpu_accel/_C*.so" >/dev/null; then
  python_skip "$build/python/gpu_accel/_C*.so was not built (pybind11-dev and python3-dev missing?)"
elif ! "$py_exe" -c "import numpy, pytest" 2>/dev/null; then
  python_skip "$py_exe lacks numpy or pytest (python3-numpy, python3-pytest)"
else
  GA_BUILD_DIR="$build_abs" PYTHONPATH="$build_abs/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$py_exe" -m pytest -q -p no:cacheprovider "$root/python/tests"
fi
seconds="${GA_FUZZ_SECONDS:-60}"
if [[ "$seconds" != 0 ]]; then
  if command -v clang++ >/dev/null; then
    bash fuzz/run_fuzz.sh "$seconds"
  else
    echo "fuzz: clang++ not found; the GGUF fuzz target was not run" >&2
    [[ "${CI:-}" != true ]] || exit 1
  fi
fi
