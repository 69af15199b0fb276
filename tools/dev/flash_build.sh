#!/usr/bin/env bash
# Sourced by the session 11-15 device scripts (the helpers below). flash_build DIR "CUDA FLAGS" TARGET... configures a Release sm_90a build of
# the attention library in DIR (tests on, server off) and builds TARGETs; the log goes to $OUT/build.log and its tail
# to stdout on failure (return 1).
flash_build() {
  local dir=$1 flags=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGA_CUDA=ON -DGA_CUDA_ARCHS=90a -DGA_BUILD_SERVER=OFF \
    -DGA_BUILD_TESTS=ON -DCMAKE_CUDA_FLAGS="$flags" > "$OUT/build.log" 2>&1 &&
    ninja -C "$dir" -j16 "$@" >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; return 1; }
}

# ncu_build "CUDA FLAGS": the library ncu_fp8_hd128 profiles, built in /tmp/b-ncu with those flags, and NCU set to the
# Nsight Compute binary (the session 13 / 14 ncu scripts call it first).
ncu_build() {
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  flash_build /tmp/b-ncu "$1" ga_attention_c
}

# ncu_fp8_hd128 VARIANT SECTION_ARGS...: Nsight Compute on one FP8 hd 128 8k non-causal launch of VARIANT (-1: the
# default) through compare.py and the library ncu_build made; the report goes to /tmp/r_VARIANT and its details page
# to $OUT/ncu_details_VARIANT.txt.
ncu_fp8_hd128() {
  local v=$1
  shift
  timeout 150 "$NCU" --clock-control none -k regex:flash_fwd_sm90_kernel --launch-skip 2 -c 1 "$@" -f -o /tmp/r_$v \
    python3 bench/attention_torch/compare.py --lib /tmp/b-ncu/bench/attention_torch/libga_attention_c.so --fp8 \
    --head-dims 128 --seqlens 8192 --masks full --iters 1 --rounds 1 --min-timing-ms 1 --condition-ms 1 \
    --fp8-variants=$v > "$OUT/ncu_run_$v.log" 2>&1
  local rc=$?
  "$NCU" -i /tmp/r_$v.ncu-rep --page details > "$OUT/ncu_details_$v.txt" 2>&1
  return $rc
}

# sass_op_counts LIB SCHEDS: per FP8 persistent kernel of the library whose schedule number is in SCHEDS (a
# comma-separated list, e.g. "1025,33793"), how many SASS instructions of each op that matters to the softmax
# (cuobjdump on the device; sessions 14 / 15).
sass_op_counts() {
  cuobjdump -sass "$1" > /tmp/sass.txt 2>/dev/null
  python3 - "$2" <<'PY'
import re, sys
scheds = set(sys.argv[1].split(","))
cur, counts = None, {}
for line in open("/tmp/sass.txt", errors="replace"):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = m.group(1); counts[cur] = {}
        continue
    if cur:
        for op in ("MUFU.EX2", "PRMT", "F2FP", "FMNMX", "HADD2", "FFMA", "FADD", "FMUL", "HGMMA", "STL", "LDL"):
            if op in line: counts[cur][op] = counts[cur].get(op, 0) + 1
for name, c in counts.items():
    m = re.search(r"ElemKindE2ELi(\d+)ELi(\d+)ELb(\d)ELi(\d)ELi(\d+)", name)
    if m and m.group(2) in scheds and m.group(3) == "1":
        print("sass", f"hd{m.group(1)} sched {m.group(2)} stages {m.group(4)} bn {m.group(5)}:",
              " ".join(f"{k} {v}" for k, v in sorted(c.items())))
PY
}

# fp8_parity BUILD_DIR VARIANTS [TIMEOUT_S]: the FP8 parity tests of the default and VARIANTS with every case's errors
# printed (GA_FLASH_TEST_PRINT_ERRORS) into $OUT/test_fp8.log; prints the summaries, each kernel's worst O / LSE
# error and the first failures. Failures do not stop the caller (the numbers say how far off).
fp8_parity() {
  GA_FLASH_TEST_PRINT_ERRORS=1 GA_FLASH_TEST_VARIANT=$2 timeout "${3:-200}" "$1/bin/test_cuda_flash_attention" \
    --gtest_filter='*Fp8*' > "$OUT/test_fp8.log" 2>&1
  echo "fp8 tests rc=$?"
  grep -E "cases,|FAILED" "$OUT/test_fp8.log" | head -10
  python3 - "$OUT/test_fp8.log" <<'PY'
import re, sys, collections
worst = collections.defaultdict(lambda: [0.0, 0.0, 0])
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"errors (.*) (default|sched\d+): O rel L2 ([0-9.]+), LSE max abs ([0-9.]+)", line)
    if m:
        w = worst[m.group(2)]
        w[0] = max(w[0], float(m.group(3))); w[1] = max(w[1], float(m.group(4))); w[2] += 1
for k, w in sorted(worst.items()):
    print(f"errors {k}: {w[2]} cases, worst O rel L2 {w[0]:.4f}, worst LSE abs {w[1]:.5f}")
PY
  grep -E "Failure|fail" "$OUT/test_fp8.log" | grep -v "^\[\|^errors\|cases," | head -6 | cut -c1-240
}

# fp8_sanitize BUILD_DIR VARIANTS FILTER: compute-sanitizer memcheck and racecheck over the FP8 tests FILTER names
# (small shapes), for VARIANTS; logs in $OUT/memcheck.log and $OUT/racecheck.log.
fp8_sanitize() {
  local tool
  for tool in memcheck racecheck; do
    GA_FLASH_TEST_VARIANT=$2 timeout 150 compute-sanitizer --tool $tool "$1/bin/test_cuda_flash_attention" \
      --gtest_filter="$3" > "$OUT/$tool.log" 2>&1
    echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | head -2)"
  done
}
