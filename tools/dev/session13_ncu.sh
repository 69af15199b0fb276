#!/usr/bin/env bash
# Session 13: why the in-kernel V^T variants (57, 58; benchmark builds, GA_FLASH_FP8_WIDE) are slower than the pre-pass
# defaults (39, 29): Nsight Compute source counters and warp states on one hd 128 8k full launch of 29 and of 58 (as
# tools/dev/fp8_ncu_source.sh). (Its first run also timed a temporary diagnostic build with the transpose call removed,
# -DGA_FLASH_VT_DIAG_SKIP, no longer in the source: docs/results/2026-11-28-h200-session13.md, run 4.)
set -uo pipefail
T0=$(date +%s)
source tools/dev/flash_build.sh
ncu_build "-DGA_FLASH_FP8_WIDE=1" || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
export PYTHONUNBUFFERED=1
for v in -1 58; do
  ncu_fp8_hd128 $v --section SourceCounters --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section SpeedOfLight --section MemoryWorkloadAnalysis --import-source yes
  echo "ncu $v rc $? at $(( $(date +%s) - T0 )) s"
  $NCU -i /tmp/r_$v.ncu-rep --page source --csv --print-source sass > $OUT/src_$v.csv 2>$OUT/src_$v.err
done
for v in -1 58; do
  echo "=== $v"
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Eligible Warps|Shared Memory|Bank" \
    $OUT/ncu_details_$v.txt | head -14
done
gzip -f $OUT/src_*.csv
