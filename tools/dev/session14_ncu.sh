#!/usr/bin/env bash
# Session 14: the FP8 hd 128 default (29) against 59 (its P bytes made without exp2: no MUFU in the loop) under Nsight
# Compute, one hd 128 8k full launch each: pipe utilization (tensor, FMA, ALU, XU), issue activity and warp stalls.
# If the exp2 unit were the limit, 59 would show tensor time freed; it ran at 0.96-1.02x of 29 (same session).
# The variants are not in the tree (measured, not kept): apply docs/results/patches/2026-11-28-session14-fp8-int-exp.patch
# first (git apply), as the session did; results in docs/results/2026-11-28-h200-session14.md.
set -uo pipefail
T0=$(date +%s)
source tools/dev/flash_build.sh
ncu_build "-DGA_FLASH_FP8_WIDE=1" || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
export PYTHONUNBUFFERED=1
for v in -1 59; do
  ncu_fp8_hd128 $v --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section WarpStateStats --section InstructionStats
  echo "ncu $v rc $? at $(( $(date +%s) - T0 )) s"
  $NCU -i /tmp/r_$v.ncu-rep --page raw --csv > $OUT/ncu_raw_$v.csv 2>&1
done
for v in -1 59; do
  echo "=== $v"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Issued Ipc|Warp Cycles Per Issued|No Eligible|Active Warps Per|Eligible Warps" \
    $OUT/ncu_details_$v.txt | head -14
  python3 - "$OUT/ncu_raw_$v.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((r for r in rows if "ID" in r or "Kernel Name" in r), None)
if hdr is None: sys.exit()
data = rows[rows.index(hdr) + 2] if len(rows) > rows.index(hdr) + 2 else None
if data is None: sys.exit()
for k, v in zip(hdr, data):
    if ("pipe" in k and "pct_of_peak_sustained_active" in k and ("tensor" in k or "fma" in k or "alu" in k or "xu" in k)) \
       or ("warp_issue_stalled" in k and "per_warp_active.pct" in k):
        try:
            if float(v.replace(",", "")) >= 2.0: print(f"  {k} {v}")
        except ValueError:
            pass
PY
done
