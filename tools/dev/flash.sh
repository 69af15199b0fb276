#!/usr/bin/env bash
# Device run for the Hopper flash forward: build (Release, sm_90a), ptxas report, SASS check, the parity
# tests, then the PyTorch comparison (bench/attention_torch/compare.py). Logs go to $OUT; summary last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=/tmp/b-flash; rm -rf $B  # the machine may be warm with another build in /tmp/b
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_attention ga_attention_c >> "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
grep -A2 "flash_fwd_sm90_kernel" "$OUT/build.log" | grep -E "Compiling|spill|Used" | head -40 > "$OUT/ptxas.txt"
LIB=$B/bench/attention_torch/libga_attention_c.so
(cuobjdump --dump-sass $LIB 2>/dev/null | grep -oE "HGMMA\.[A-Za-z0-9.]+|UTMALDG[A-Za-z0-9.]*|HMMA\.[0-9A-Z.]+" | sort | uniq -c) \
  > "$OUT/sass.txt" 2>&1
timeout 170 $B/bin/test_cuda_flash_attention > "$OUT/test.log" 2>&1
test_rc=$?
export PYTHONUNBUFFERED=1
[ $test_rc -ne 124 ] && timeout 150 python3 bench/attention_torch/compare.py --lib $LIB --json "$OUT/compare.json" --mma ${COMPARE_ARGS:-} \
  > "$OUT/compare.log" 2>&1
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas (spills)"; sort "$OUT/ptxas.txt" | uniq -c | grep -v Compiling
echo "=== sass"; cat "$OUT/sass.txt"
echo "=== test (rc $test_rc)"; grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|FAILED|flash forward|refused|Failure|error" "$OUT/test.log" | head -30
echo "=== compare"; tail -50 "$OUT/compare.log"
