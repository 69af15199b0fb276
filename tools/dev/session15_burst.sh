#!/usr/bin/env bash
# Session 15: the FP8 defaults timed two ways in one run: the harness's sustained method (conditioning matmuls, >= 40 ms
# per timing, the GPU at its power limit) and short timings in the style of the FlashAttention-3 paper's benchmark (30
# back-to-back launches, no conditioning), to set our figures beside FA3's published H100 FP8 numbers like for like.
# Results: docs/results/2026-11-28-h200-session15.md.
set -uo pipefail
T0=$(date +%s)
B=/tmp/b-s15b
source tools/dev/flash_build.sh
flash_build $B "" ga_attention_c || exit 1
echo "build done at $(( $(date +%s) - T0 )) s"
LIB=$B/bench/attention_torch/libga_attention_c.so
export PYTHONUNBUFFERED=1
SEQ=${SEQLENS:-512,1024,2048,4096,8192,16384}
timeout 250 python3 bench/attention_torch/compare.py --lib $LIB --fp8 --rounds ${ROUNDS:-5} --seqlens $SEQ \
  --fp8-variants=-1 --json $OUT/sustained.json > $OUT/sustained.md 2>&1
echo "sustained rc=$? at $(( $(date +%s) - T0 )) s"
timeout 200 python3 bench/attention_torch/compare.py --lib $LIB --fp8 --rounds ${ROUNDS:-5} --seqlens $SEQ \
  --fp8-variants=-1 --iters 30 --min-timing-ms 1 --condition-ms 0 --json $OUT/short.json > $OUT/short.md 2>&1
echo "short rc=$? at $(( $(date +%s) - T0 )) s"
python3 - "$OUT/sustained.json" "$OUT/short.json" <<'PY'
import json, sys
a = {(r["head_dim"], r["seqlen"], r["causal"]): r for r in json.load(open(sys.argv[1]))["rows"]}
b = {(r["head_dim"], r["seqlen"], r["causal"]): r for r in json.load(open(sys.argv[2]))["rows"]}
print("| hd | seq | mask | sustained ours / cuDNN bf16 (MHz) | short ours / cuDNN bf16 (MHz) |")
print("|---|---:|---|---:|---:|")
for k in sorted(a):
    x, y = a[k], b.get(k)
    s2 = f"{y['fp8_default']:.0f} / {y['cudnn']:.0f} ({y.get('mhz', 0):.0f})" if y else "-"
    print(f"| {k[0]} | {k[1]} | {'causal' if k[2] else 'full'} | {x['fp8_default']:.0f} / {x['cudnn']:.0f} "
          f"({x.get('mhz', 0):.0f}) | {s2} |")
PY
