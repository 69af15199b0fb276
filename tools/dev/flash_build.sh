#!/usr/bin/env bash
# Sourced by the session 11 device scripts: flash_build DIR "CUDA FLAGS" TARGET... configures a Release sm_90a build of
# the attention library in DIR (tests on, server off) and builds TARGETs; the log goes to $OUT/build.log and its tail
# to stdout on failure (return 1).
flash_build() {
  local dir=$1 flags=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
    -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="$flags" > "$OUT/build.log" 2>&1 &&
    ninja -C "$dir" -j16 "$@" >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; return 1; }
}
