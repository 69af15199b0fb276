#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and builds gpu-accel into build/bin/.
#   - installs the build dependencies with apt-get when they are missing (needs root or sudo)
#   - fetches the tokenizer test data with npm (tools/fetch_test_data.sh)
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
if ((${#need_apt[@]})); then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  echo "setup: installing ${need_apt[*]}" >&2
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

bash tools/fetch_test_data.sh

build="${GA_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${GA_CMAKE_ARGS:-}
ninja -C "$build" -j"${GA_JOBS:-2}"
