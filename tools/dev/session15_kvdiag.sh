#!/usr/bin/env bash
# Session 15 diagnostic: how much do the FP8 hd 128 kernel's L2 -> SM copies of K / V^T cost? Variants 61 / 62 (built
# with -DGA_FLASH_FP8_DIAG=1, wrong results by design) skip every other / every K and V copy past the first ring.
# tools/dev/fp8_power_probe.py holds each kernel busy and reads NVML's power and clock (TFLOP/s per GHz), and compare.py
# --fp8 pairs them with the default per round. Results: docs/results/2026-11-28-h200-session15.md. The variants are
# not in the tree: git apply docs/results/patches/2026-11-28-session15-fp8-kv-diag.patch first.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s15d
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_DIAG=1" ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1
python3 tools/dev/fp8_power_probe.py --lib $LIB --variants=-1,61,62 --head-dim 128 --seq 8192
python3 tools/dev/fp8_power_probe.py --lib $LIB --variants=-1,61,62 --head-dim 128 --seq 4096 --causal --seconds 3
python3 tools/dev/fp8_power_probe.py --lib $LIB --variants=-1 --head-dim 256 --seq 8192 --seconds 3
echo "probes done at $(( $(date +%s) - T0 )) s"
timeout 200 python3 bench/attention_torch/compare.py --lib $LIB --fp8 --head-dims 128 --rounds 5 \
  --seqlens 4096,16384 --fp8-variants=-1,61,62 --json $OUT/fp8.json > $OUT/fp8.md 2>&1
echo "compare rc=$? at $(( $(date +%s) - T0 )) s"
python3 tools/dev/paired_ratios.py "$OUT/fp8.json"
