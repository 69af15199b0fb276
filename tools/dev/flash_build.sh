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

# ncu_fp8_hd128 VARIANT SECTION_ARGS...: Nsight Compute on one FP8 hd 128 8k non-causal launch of VARIANT (-1: the
# default) through compare.py and the library flash_build made in /tmp/b-ncu; the report goes to /tmp/r_VARIANT and
# its details page to $OUT/ncu_details_VARIANT.txt (the session 13 / 14 ncu scripts).
ncu_fp8_hd128() {
  local v=$1
  shift
  local ncu lib=/tmp/b-ncu/bench/attention_torch/libga_attention_c.so
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 150 "$ncu" --clock-control none -k regex:flash_fwd_sm90_kernel --launch-skip 2 -c 1 "$@" -f -o /tmp/r_$v \
    python3 bench/attention_torch/compare.py --lib $lib --fp8 --head-dims 128 --seqlens 8192 --masks full \
    --iters 1 --rounds 1 --min-timing-ms 1 --condition-ms 1 --fp8-variants=$v > "$OUT/ncu_run_$v.log" 2>&1
  local rc=$?
  "$ncu" -i /tmp/r_$v.ncu-rep --page details > "$OUT/ncu_details_$v.txt" 2>&1
  return $rc
}
