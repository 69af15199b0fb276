#!/usr/bin/env bash
# Device run of the paged-attention work (engineer "attn", worktree serve): build the attention
# tests + benchmark, run them (memcheck on small shapes), benchmark; summary last.
# Usage (device machine, repo copy root): tools/dev/attn_run.sh [bench-only]
# If ga_cuda does not build because of another engineer's unfinished files, the HEAD copies saved in
# tools/dev/attn_head/ (made before the run: git show HEAD:<file> of the others' modified files)
# replace them and the build is retried. With tools/dev/attn_base/ (HEAD's attention files, HEAD's
# bench_attention.cu and head_cuda_files.txt = git ls-tree -r --name-only HEAD src/backends/cuda),
# the benchmark is also built from the baseline and run in the same call (A/B on one machine).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=/tmp/b-attn; rm -rf $B
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
  -DGA_BUILD_TESTS=ON >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
T="test_cuda_attention test_cuda_paged_attention test_cuda_qkv_rope_store ga_bench_attention"
if ! ninja -C $B -j16 $T >>"$OUT/build.log" 2>&1; then
  echo "BUILD FAILED; retrying with HEAD copies of other files"; grep -m5 -B2 -A5 "error" "$OUT/build.log"
  if [ -d tools/dev/attn_head ]; then cp -r tools/dev/attn_head/. . ; fi
  ninja -C $B -j16 $T >>"$OUT/build.log" 2>&1 || { grep -m10 -A5 "error" "$OUT/build.log"; exit 1; }
  echo "BUILD OK with HEAD copies"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
S=""
run_test() {  # name log args...
  local log=$2; shift 2
  timeout 120 "$@" >"$OUT/$log" 2>&1; local rc=$?
  S+="$(printf '%-48s rc=%s  %s' "$log" "$rc" "$(grep -E '^\[  (PASSED|FAILED)|FAILED TEST' "$OUT/$log" | tr '\n' ' ' | cut -c1-150)")"$'\n'
}
if [ "${1:-}" != "bench-only" ]; then
  run_test x paged.log $B/bin/test_cuda_paged_attention
  run_test x qkv.log $B/bin/test_cuda_qkv_rope_store
  run_test x attn.log $B/bin/test_cuda_attention
  run_test x memcheck.log compute-sanitizer --tool memcheck --error-exitcode 9 \
    $B/bin/test_cuda_paged_attention --gtest_filter='*Small*:*Unsupported*'
  grep -E "ERROR SUMMARY" "$OUT/memcheck.log"
  grep -hE "failures|Failure|error|rejected" "$OUT/paged.log" "$OUT/qkv.log" "$OUT/attn.log" | head -30
fi
timeout 150 $B/bin/ga_bench_attention >"$OUT/bench.log" 2>&1; echo "bench rc=$?"
# A/B: the same benchmark built from HEAD's attention (and HEAD's other CUDA files), same machine, same run
if [ -d tools/dev/attn_base ]; then
H=/tmp/src-head; HB=/tmp/b-attn-head; rm -rf $H $HB; mkdir -p $H
tar --exclude=./tools/dev/attn_head --exclude=./tools/dev/attn_base -cf - . | tar -xf - -C $H
cp -r tools/dev/attn_head/. $H/; cp -r tools/dev/attn_base/. $H/
(cd $H && find src/backends/cuda -type f | while read -r f; do grep -qxF "$f" head_cuda_files.txt || rm -f "$f"; done)
if cmake -S $H -B $HB -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
     -DGA_BUILD_TESTS=OFF >"$OUT/build_head.log" 2>&1 && ninja -C $HB -j16 ga_bench_attention >>"$OUT/build_head.log" 2>&1; then
  timeout 60 $HB/bin/ga_bench_attention >"$OUT/base_bench.log" 2>&1; echo "HEAD bench rc=$?"
  echo "== HEAD (before this change), same run =="; sed -n '/^| case/,$p' "$OUT/base_bench.log"
else
  echo "HEAD build failed"; grep -m5 -A3 error "$OUT/build_head.log"
fi
fi
echo "== this change =="
sed -n '/^Attention, head_dim/,$p' "$OUT/bench.log"
echo; echo "== summary =="; printf '%s' "$S"
