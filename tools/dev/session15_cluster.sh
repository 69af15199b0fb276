#!/usr/bin/env bash
# Session 15: FP8 forward in 2-CTA clusters sharing K / V^T tiles by TMA multicast (kSchedClusterPair; variants 61 = 29
# at hd 128, 62 = 39 at hd 256; dense non-causal, causal runs the base) against the defaults: the FP8 parity tests with
# every case's errors, memcheck / racecheck on small shapes, the power probe (TFLOP/s, W, MHz held busy) and compare.py
# --fp8 paired per round. Results: docs/results/2026-11-28-h200-session15.md. The variants are not in the tree (measured,
# not kept): git apply docs/results/patches/2026-11-28-session15-fp8-cluster-pairs.patch first.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s15c
source tools/dev/flash_build.sh
flash_build $B "-DGA_FLASH_FP8_CLUSTER=1" test_cuda_flash_attention ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1 GA_SHARED=$PWD/.fwdshared
V=${VARIANTS:-61,62}
fp8_parity $B $V ${TEST_TIMEOUT:-200}
fp8_sanitize $B $V '*Fp8SmallShapes*'
echo "tests done at $(( $(date +%s) - T0 )) s"
python3 tools/dev/fp8_power_probe.py --lib $LIB --variants=-1,61 --head-dim 128 --seq 8192 --seconds 3
python3 tools/dev/fp8_power_probe.py --lib $LIB --variants=-1,62 --head-dim 256 --seq 8192 --seconds 3
echo "probes done at $(( $(date +%s) - T0 )) s"
timeout ${BENCH_TIMEOUT:-200} python3 bench/attention_torch/compare.py --lib $LIB --fp8 --rounds ${ROUNDS:-5} --masks full \
  --seqlens ${SEQLENS:-1024,4096,8192,16384} --fp8-variants=-1,$V --json $OUT/fp8.json > $OUT/fp8.md 2>&1
echo "fp8 compare rc=$? at $(( $(date +%s) - T0 )) s"
sed -n '/^| hd/,$p' $OUT/fp8.md | head -12
python3 tools/dev/paired_ratios.py "$OUT/fp8.json"
