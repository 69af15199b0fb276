#!/usr/bin/env bash
# Device run for the Hopper flash forward: build (Release, sm_90a), ptxas report, SASS check (wgmma/TMA
# present, no local-memory traffic, highest register the consumer code touches), compute-sanitizer
# memcheck + racecheck on the small shapes, the PyTorch comparison of every kernel variant
# (bench/attention_torch/compare.py), then the full parity tests. Logs go to $OUT; summary last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
T0=$(date +%s)
B=/tmp/b-flash; rm -rf $B  # the machine may be warm with another build in /tmp/b
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_FLASH_ALL_VARIANTS=ON -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$OUT/build.log" 2>&1
ninja -C $B -j16 test_cuda_flash_attention ga_attention_c >> "$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
echo "build done at $(( $(date +%s) - T0 )) s"
grep -A2 "flash_fwd_sm90_kernel" "$OUT/build.log" | grep -E "spill|Used|C75" > "$OUT/ptxas.txt"
LIB=$B/bench/attention_torch/libga_attention_c.so
# Per kernel: HGMMA / UTMALDG counts, local-memory instructions, highest register index named.
cuobjdump --dump-sass $LIB 2>/dev/null | awk '
  /Function : / { name = ($3 ~ /flash_fwd_sm90_kernel/) ? $3 : ""; if (name != "") fn[name] = 1 }
  name != "" && /HGMMA/ { hg[name]++ }
  name != "" && /UTMALDG/ { tm[name]++ }
  name != "" && /(STL|LDL)[ .]/ { lm[name]++ }
  name != "" { while (match($0, /R[0-9]+/)) { r = substr($0, RSTART + 1, RLENGTH - 1) + 0; if (r > mx[name]) mx[name] = r;
               $0 = substr($0, RSTART + RLENGTH) } }
  END { for (n in fn) printf "%-90s hgmma %4d utmaldg %3d stl/ldl %3d maxreg R%d\n", n, hg[n], tm[n], lm[n], mx[n] }' \
  | sort > "$OUT/sass.txt"
export PYTHONUNBUFFERED=1
SAN=compute-sanitizer; command -v $SAN >/dev/null || SAN=/usr/local/cuda/bin/compute-sanitizer
timeout 45 $SAN --tool memcheck --error-exitcode 9 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*SmallShapesForSanitizer*:*Unsupported*' > "$OUT/memcheck.log" 2>&1
mem_rc=$?
timeout 60 $SAN --tool racecheck --racecheck-report all --error-exitcode 9 $B/bin/test_cuda_flash_attention \
  --gtest_filter='*SmallShapesForSanitizer*' > "$OUT/racecheck.log" 2>&1
race_rc=$?
echo "sanitizers done at $(( $(date +%s) - T0 )) s"
timeout 100 python3 bench/attention_torch/compare.py --lib $LIB --json "$OUT/compare.json" ${COMPARE_ARGS:-} \
  > "$OUT/compare.log" 2>&1
echo "compare done at $(( $(date +%s) - T0 )) s"
LEFT=$(( 285 - ($(date +%s) - T0) ))
timeout $LEFT $B/bin/test_cuda_flash_attention > "$OUT/test.log" 2>&1
test_rc=$?
echo "=== gpu"; cat "$OUT/gpu.txt"
echo "=== ptxas"; sort "$OUT/ptxas.txt" | uniq -c
echo "=== sass (bf16 hd128 and a summary)"; grep "ElemKindE0ELi128" "$OUT/sass.txt" | sed 's/_ZN2ga4cuda12flash_detail21flash_fwd_sm90_kernelILNS0_4tile8ElemKindE//'
awk '{ s += $7 } END { print "kernels", NR, "total stl/ldl", s }' "$OUT/sass.txt"
echo "=== memcheck rc $mem_rc"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | head -5
echo "=== racecheck rc $race_rc"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|hazard" "$OUT/racecheck.log" | head -5
echo "=== test (rc $test_rc)"; grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED)|FAILED|flash forward|Failure|error" "$OUT/test.log" | head -20
echo "=== compare"; tail -28 "$OUT/compare.log"
