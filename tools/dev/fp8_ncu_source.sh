#!/usr/bin/env bash
# Session 11: where the FP8 hd 128 default (29) waits. Lean Release build (sm_90a), then Nsight Compute on one hd 128
# 8k non-causal launch of the default kernel with the source counters (per-SASS-instruction warp stall samples) and
# the warp state / scheduler / instruction statistics; the source page goes out as CSV (SASS), to read off which
# instructions the consumer warps stall at. Optional: VARIANTS="-1,32" (benchmark build WIDE=1) to profile more.
# Out: $OUT/ncu_details.txt, $OUT/src_<variant>.csv, build log tail on failure.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-ncu; rm -rf $B
EXTRA=""
[ "${WIDE:-0}" = 1 ] && EXTRA="-DGA_FLASH_FP8_WIDE=1"
source tools/dev/flash_build.sh
flash_build $B "$EXTRA" ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in ${VARIANTS:--1}; do
  # launch 3 of the regex = the variant's first timed call (one correctness call precedes it)
  timeout 120 $NCU --clock-control none -k regex:flash_fwd_sm90_kernel --launch-skip 2 -c 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --section SpeedOfLight --import-source yes -f -o /tmp/r_$v \
    python3 bench/attention_torch/compare.py --lib $LIB --fp8 --head-dims 128 --seqlens 8192 --masks full \
    --iters 1 --rounds 1 --min-timing-ms 1 --condition-ms 1 --fp8-variants=$v > $OUT/ncu_run_$v.log 2>&1
  echo "ncu $v rc $? at $(( $(date +%s) - T0 )) s"
  $NCU -i /tmp/r_$v.ncu-rep --page details > $OUT/ncu_details_$v.txt 2>&1
  $NCU -i /tmp/r_$v.ncu-rep --page source --csv --print-source sass > $OUT/src_$v.csv 2>$OUT/src_$v.err
  echo "source page rc $? ($(wc -l < $OUT/src_$v.csv) lines)"
done
for v in ${VARIANTS:--1}; do
  echo "=== $v"
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Active Warps Per|Eligible Warps|SM Frequency" \
    $OUT/ncu_details_$v.txt | head -12
  head -c 600 $OUT/src_$v.csv; echo; head -3 $OUT/src_$v.err
done
