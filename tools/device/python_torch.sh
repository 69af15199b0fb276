#!/usr/bin/env bash
# The Python package's torch front on the GPU machine: builds gpu_accel with our flash kernels for sm_90a, runs the
# torch pytest suite (python/tests/test_torch_attention.py, plus the CPU flash_attn_func suite with torch present)
# and the call-overhead timing (bench/python/attention_call_overhead.py), and prints a short summary.
#
# Build: two CMake folders side by side, so that only what the package needs is compiled (about 1-2 min on 16
# cores, not the whole CUDA backend): $B-pycuda builds gpu_accel._flash (the flash kernels, ga_flash, and their
# binding; CUDA runtime only), $B-pycpu builds gpu_accel._C without CUDA (the engine's CPU layers the package links).
# The two modules are put together in one package folder, $B-pypkg/gpu_accel, used through PYTHONPATH (no pip
# install: nothing to download there, and it would configure a third build). build_info() of that package says
# cuda False: its _C is the CPU one; the torch front uses _flash alone.
# Needs: python3 with torch (CUDA) and pybind11 (pip), Python's headers, nvcc, ninja, cmake.
#
# Usage (GPU machine, from a copy of the repository): OUT=... bash tools/device/python_torch.sh [PYTEST_ARGS...]
#   e.g. `bash tools/device/python_torch.sh -k "varlen or kvcache"` to run a part of the suite.
set -uo pipefail
source "$(dirname "$0")/common.sh"
# shellcheck disable=SC2034  # read by finish (common.sh)
KEEP_FILES="pytest-failures.txt overhead.md"
PY=${PYTHON:-$(command -v python3)}
note "gpu: $(gpu_state)"
note "torch: $("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
pybind_dir=$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())' 2>&1) || {
  note "pybind11 is missing for $PY: $pybind_dir"
  finish 1
}
"$PY" -c "import pytest, numpy" 2>/dev/null || note "warning: $PY lacks pytest or numpy; the suite cannot run"
py_include=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[[ -f $py_include/Python.h ]] || note "warning: no Python.h in $py_include (python3-dev); the configure will fail"

configure_and_build() {  # DIR TARGET CMAKE_ARGS...
  local dir=$1 target=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_BUILD_TESTS=OFF -DGA_BUILD_SERVER=OFF \
    -DGA_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$pybind_dir" "$@" &&
    ninja -C "$dir" -j"$JOBS" "$target"
}

t0=$(date +%s)
configure_and_build "$B-pycpu" _C -DGA_CUDA=OFF > "$OUT/build-cpu.log" 2>&1 &
cpu_pid=$!
configure_and_build "$B-pycuda" _flash -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a > "$OUT/build-cuda.log" 2>&1
cuda_rc=$?
wait $cpu_pid
cpu_rc=$?
note "build: _C (CPU) rc=$cpu_rc, _flash (sm_90a) rc=$cuda_rc in $(($(date +%s) - t0)) s"
if ((cpu_rc != 0 || cuda_rc != 0)); then
  for log in build-cpu build-cuda; do
    grep -E "error|FAILED|Could NOT|CMake Error" -A3 "$OUT/$log.log" | head -30
  done
  finish 1
fi

PKG=$B-pypkg
rm -rf "$PKG" && mkdir -p "$PKG" && cp -r "$B-pycpu/python/gpu_accel" "$PKG/" &&
  cp "$B"-pycuda/python/gpu_accel/_flash*.so "$PKG/gpu_accel/" || {
  note "could not assemble the package in $PKG"
  finish 1
}
export PYTHONPATH=$PKG${PYTHONPATH:+:$PYTHONPATH}

# GA_REQUIRE_TORCH_CUDA=1: a missing torch, GPU or _flash fails the suite instead of skipping it.
export GA_REQUIRE_TORCH_CUDA=1
run_step "pytest torch front" 330 pytest.log "$PY" -m pytest -q -p no:cacheprovider -rfEs \
  python/tests/test_torch_attention.py python/tests/test_flash_attn.py "$@"
pytest_rc=$?
note "pytest: $(grep -E '[0-9]+ (passed|failed|errors?)' "$OUT/pytest.log" | tail -1 | tr -d '=')"
grep -E "^(FAILED|ERROR) " "$OUT/pytest.log" | cut -c1-400 | head -60 > "$OUT/pytest-failures.txt"
[[ -s $OUT/pytest-failures.txt ]] && head -20 "$OUT/pytest-failures.txt"

run_step "call overhead" 90 overhead.md "$PY" bench/python/attention_call_overhead.py
overhead_rc=$?
grep -E "^\|" "$OUT/overhead.md" | tail -8
mapfile -t verdicts < <(grep -E "^(PASS|FAIL)" "$OUT/overhead.md")
for line in "${verdicts[@]}"; do note "$line"; done
finish $((pytest_rc != 0 || overhead_rc != 0))
