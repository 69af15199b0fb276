#!/usr/bin/env bash
# Device run for issue 4's hd 128 non-causal bf16 forward (session 6, engineer fwd5; it also serves session 4b's runs,
# whose script flash_fwd4b.sh had these defaults and no paired-vs-s4 report: BUILD_FLAGS=-DGA_FLASH_FWD_QREG=1
# SCHEDS=-1,1,4,12,13,19,20 TEST_VARIANTS="19 20" SAN_VARIANT=20): one Release sm_90a build (BUILD_FLAGS, default
# -DGA_FLASH_FWD_SPLIT=1: variant 21 besides the lean build's 1, 4, 12, 13), ptxas spills, then
#   1. CLAIM: compare.py on the claim rows (hd 128 full 4k/8k/16k) with CLAIM_ROUNDS (15) interleaved rounds, plus
#      the paired ratio of every variant to variant 4 (per round, median over rounds) from its JSON,
#   2. TABLE=1: the full compare.py table (hd 64/128/256, 2k-16k, full + causal, 7 rounds),
#   3. TESTS: test_cuda_flash_attention for the variants in TEST_VARIANTS (each alone: GA_FLASH_TEST_VARIANT; "all"
#      = every compiled one), test_cuda_flash_varlen (every compiled variant), test_cuda_attention (ENGINE=1),
#   4. SANITIZE=1: memcheck + racecheck on the small shapes for SAN_VARIANT (memcheck also on SplitTailMergesPieces).
# Every step is skipped once TOTAL seconds would be passed. Logs in $OUT (<= 8 files); a short table last.
set -uo pipefail
OUT=${OUT:-/tmp/out}
L=/tmp/fwd6logs; rm -rf $L; mkdir -p $L "$OUT"
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${TOTAL:-230} - $(el) )); }
B=/tmp/b-fwd6; rm -rf $B
source "$(dirname "$0")/flash_fwd_tests.sh"
build_flash_fwd "${BUILD_FLAGS--DGA_FLASH_FWD_SPLIT=1}"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1
SCHEDS=${SCHEDS:--1,4,21}
claim_rc=-; table_rc=-
if [ "${CLAIM:-1}" = 1 ]; then
  timeout ${CLAIM_TIMEOUT:-60} python3 bench/attention_torch/compare.py --lib $LIB --json $L/compare_claim.json \
    --head-dims 128 --seqlens 4096,8192,16384 --masks full --rounds ${CLAIM_ROUNDS:-15} --schedules=$SCHEDS \
    > $L/compare_claim.log 2>&1
  claim_rc=$?
  echo "claim compare done at $(el) s"
  python3 - $L/compare_claim.json > $L/paired_vs4.txt 2>&1 <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"] if isinstance(d, dict) and "rows" in d else d
print("paired vs s4 (median over rounds of t(s4) / t(sX) in the same round; > 1: sX faster)")
for r in rows:
    if not isinstance(r, dict) or "flash4_rounds_ms" not in r:
        continue
    base = r["flash4_rounds_ms"]
    cells = []
    for k in sorted(r):
        if k.endswith("_rounds_ms") and k != "flash4_rounds_ms":
            ts = r[k]
            cells.append(f"{k[:-10]} {statistics.median([b / t for b, t in zip(base, ts)]):.4f}")
    print(r.get("hd", r.get("head_dim")), r.get("seq", r.get("seqlen")), r.get("mask", r.get("causal")), " | ".join(cells))
PY
fi
if [ "${TABLE:-0}" = 1 ]; then
  timeout ${TABLE_TIMEOUT:-100} python3 bench/attention_torch/compare.py --lib $LIB --json $L/compare_table.json \
    --seqlens 2048,4096,8192,16384 --schedules=${TABLE_SCHEDS:-$SCHEDS} > $L/compare_table.log 2>&1
  table_rc=$?
  echo "table compare done at $(el) s"
fi
run_flash_fwd_tests 21 90
cp $L/compare_claim.log $L/compare_table.log $L/compare_claim.json $L/compare_table.json "$OUT/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C $L . 2>/dev/null
echo "=== gpu"; cat $L/gpu.txt
echo "=== ptxas (flash_fwd_sm90 kernels)"; cat $L/ptxas.txt
summ() { grep -E "^\[  (PASSED|FAILED)|^\[  SKIPPED|FAILED  \]|Failure" "$1" | head -${2:-4} | tr '\n' ' '; echo; }
echo "=== flash tests:$flash_rcs"
for f in $L/test_flash_*.log; do [ -f "$f" ] && { echo "$(basename $f): $(summ $f 6)"; grep -E "cases|failures" $f | head -5; }; done
echo "=== varlen rc $varlen_rc: $(summ $L/test_varlen.log 2>/dev/null)"
echo "=== engine attention rc $attn_rc: $( [ -f $L/test_attention.log ] && summ $L/test_attention.log)"
echo "=== sanitizers (variant ${SAN_VARIANT:-21}): memcheck rc $mem_rc $(grep -h 'ERROR SUMMARY' $L/memcheck.log 2>/dev/null | head -1);" \
  "racecheck rc $race_rc $(grep -h 'RACECHECK SUMMARY' $L/racecheck.log 2>/dev/null | head -1)"
echo "=== compare table rc $table_rc"; grep -E "^\||configurations|medians|MISMATCH|paired" $L/compare_table.log 2>/dev/null | tail -64
echo "=== compare claim rc $claim_rc"; grep -E "^\||configurations|medians|MISMATCH|paired" $L/compare_claim.log 2>/dev/null | tail -16
cat $L/paired_vs4.txt 2>/dev/null
echo "total $(el) s"
