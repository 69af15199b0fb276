#!/usr/bin/env bash
# Device run for issue 4's hd 128 non-causal bf16 forward: the forward epilogue study (session 7, engineer fwd7;
# replaces session 6b's flash_fwd6b.sh). Every ratio paired against BASE (default 21), the SASS of the bf16 hd 128
# kernels named in SASS_KERNELS (kSched values; cuobjdump, SASS=1) summarized to tell code differences apart:
#   1. CLAIM: compare.py on the claim rows (hd 128 full 4k/8k/16k) with CLAIM_ROUNDS (15) interleaved rounds of
#      SCHEDS, plus the paired ratio of every variant to BASE (per round, median over rounds of t(BASE) / t(sX)),
#   2. TESTS: test_cuda_flash_attention for the variants in TEST_VARIANTS (each word alone: GA_FLASH_TEST_VARIANT,
#      which takes a comma list such as 21,24; "all" = every compiled one), FP8_TESTS=1 the FP8 tests,
#      test_cuda_flash_varlen (every compiled variant), test_cuda_attention (ENGINE=1),
#   3. SANITIZE=1: memcheck + racecheck on the small shapes for SAN_VARIANT (memcheck also on SplitTailMergesPieces),
#   4. SASS, then TABLE=1 in the time left: the compare.py table (TABLE_ARGS, default hd 64/128/256, 2k-16k, full +
#      causal, 7 rounds) for TABLE_SCHEDS, with the paired ratios to BASE.
# Every step is skipped once TOTAL seconds would be passed. Logs in $OUT (<= 8 files); a short table last.
# Session 7's runs used the tree before 22, 23 and 25 were retired, built with BUILD_FLAGS=-DGA_FLASH_FWD_TMA_STORE=1
# (then variant 24 was kSched 897 and 22/23 kSched 385; now 24 is kSched 385 and in every build):
#   run 1: TOTAL=288 SANITIZE=1 CLAIM_TIMEOUT=110 SCHEDS=21,25,22,23,24 TEST_VARIANTS=22,24,25 SASS_KERNELS="129 1153 385 897"
#   run 2: TOTAL=290 SANITIZE=1 FP8_TESTS=1 CLAIM_TIMEOUT=60 CLAIM_ROUNDS=25 TABLE=1 TABLE_SCHEDS=-1,21,24
#          TABLE_ARGS="--head-dims 128 --seqlens 2048,4096,8192,16384" SASS_KERNELS="129 897"
set -uo pipefail
OUT=${OUT:-/tmp/out}
L=/tmp/fwd7logs; rm -rf $L; mkdir -p $L "$OUT"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${TOTAL:-230} - $(el) )); }
B=/tmp/b-fwd7; rm -rf $B
source "$(dirname "$0")/flash_fwd_tests.sh"
build_flash_fwd "${BUILD_FLAGS-}"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1
SCHEDS=${SCHEDS:--1,21,24}
# Per round, median over rounds of t(BASE) / t(sX) for every timed column of a compare.py JSON.
paired() {
  python3 - "$1" ${BASE:-21} <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"] if isinstance(d, dict) and "rows" in d else d
base_key = f"flash{sys.argv[2]}_rounds_ms"
print(f"paired vs s{sys.argv[2]} (median over rounds of t(base) / t(sX) in the same round; > 1: sX faster)")
for r in rows:
    if not isinstance(r, dict) or base_key not in r:
        continue
    base = r[base_key]
    cells = []
    for k in sorted(r):
        if k.endswith("_rounds_ms") and k != base_key:
            ts = r[k]
            cells.append(f"{k[:-10]} {statistics.median([b / t for b, t in zip(base, ts)]):.4f}")
    print(r.get("hd", r.get("head_dim")), r.get("seq", r.get("seqlen")), r.get("mask", r.get("causal")), " | ".join(cells))
PY
}
claim_rc=-; table_rc=-
if [ "${CLAIM:-1}" = 1 ]; then
  timeout ${CLAIM_TIMEOUT:-60} python3 bench/attention_torch/compare.py --lib $LIB --json $L/compare_claim.json \
    --head-dims 128 --seqlens 4096,8192,16384 --masks full --rounds ${CLAIM_ROUNDS:-15} --schedules=$SCHEDS \
    > $L/compare_claim.log 2>&1
  claim_rc=$?
  echo "claim compare done at $(el) s"
  paired $L/compare_claim.json > $L/paired.txt 2>&1
fi
run_flash_fwd_tests 24 100
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [ "${SASS:-1}" = 1 ] && [ -x "$CUOBJ" ]; then
  # bf16 hd 128 persistent kernels: kSched 129 = 21, 385 = 24. Addresses and encodings stripped so a diff shows code
  # differences only.
  for k in ${SASS_KERNELS:-129 385}; do
    fn="_ZN2ga4cuda12flash_detail21flash_fwd_sm90_kernelILNS0_4tile8ElemKindE0ELi128ELi${k}ELb1ELi2ELi0EEEvNS1_7FwdArgsE"
    "$CUOBJ" -sass -fun "$fn" $LIB 2>&1 | sed -E 's#/\*[0-9a-f]{4,}\*/##; s#/\* 0x[0-9a-f]+ \*/##; s/[[:space:]]+$//' |
      grep -E '^[[:space:]]+[A-Z@{]' > $L/sass_$k.txt
  done
fi
if [ "${TABLE:-0}" = 1 ]; then
  T=$(( $(left) - 8 )); [ $T -gt ${TABLE_TIMEOUT:-100} ] && T=${TABLE_TIMEOUT:-100}
  [ $T -gt 20 ] && timeout $T python3 bench/attention_torch/compare.py --lib $LIB --json $L/compare_table.json \
    ${TABLE_ARGS:---seqlens 2048,4096,8192,16384} --schedules=${TABLE_SCHEDS:-$SCHEDS} > $L/compare_table.log 2>&1
  table_rc=$?
  paired $L/compare_table.json > $L/paired_table.txt 2>&1
  echo "table compare done at $(el) s"
fi
cp $L/compare_claim.log $L/compare_table.log $L/compare_claim.json $L/compare_table.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C $L . 2>/dev/null
echo "=== gpu"; cat $L/gpu.txt
echo "=== ptxas (flash_fwd_sm90 kernels)"; cat $L/ptxas.txt
summ() { grep -E "^\[  (PASSED|FAILED)|^\[  SKIPPED|FAILED  \]|Failure" "$1" | head -${2:-4} | tr '\n' ' '; echo; }
echo "=== flash tests:$flash_rcs"
for f in $L/test_flash_*.log; do [ -f "$f" ] && { echo "$(basename $f): $(summ $f 6)"; grep -E "cases|failures" $f | head -5; }; done
echo "=== varlen rc $varlen_rc: $(summ $L/test_varlen.log 2>/dev/null)"
echo "=== engine attention rc $attn_rc: $( [ -f $L/test_attention.log ] && summ $L/test_attention.log)"
echo "=== sanitizers (variant ${SAN_VARIANT:-24}): memcheck rc $mem_rc $(grep -h 'ERROR SUMMARY' $L/memcheck.log 2>/dev/null | head -1);" \
  "racecheck rc $race_rc $(grep -h 'RACECHECK SUMMARY' $L/racecheck.log 2>/dev/null | head -1)"
for f in $L/sass_*.txt; do  # (in the whole kernel: R2UR = uniform values made in per-thread registers)
  [ -f "$f" ] && echo "=== SASS $(basename $f .txt): $(wc -l < $f) lines, R2UR $(grep -c R2UR $f)," \
    "WARPSYNC $(grep -c WARPSYNC $f), uniform ULOP3/UIADD3 $(grep -cE 'ULOP3|UIADD3' $f)"
done
echo "=== compare table rc $table_rc"; grep -E "^\||configurations|medians|MISMATCH|paired" $L/compare_table.log 2>/dev/null | tail -64
echo "=== compare claim rc $claim_rc"; grep -E "^\||configurations|medians|MISMATCH|paired" $L/compare_claim.log 2>/dev/null | tail -16
cat $L/paired_table.txt $L/paired.txt 2>/dev/null
echo "total $(el) s"
