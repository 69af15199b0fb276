#!/usr/bin/env python3
"""Paired per-round speed ratios from `bench/attention_torch/compare.py --fp8 --json`: for every variant timed beside
the default, the median over rounds of t(default) / t(variant) in the same round (> 1: the variant is faster), with
the range. Usage: paired_ratios.py FP8_JSON (the session device scripts call it after compare.py)."""
import json
import statistics
import sys

rows = json.load(open(sys.argv[1]))["rows"]
print("| hd | seq | mask | variant | TFLOP/s | default | paired t_default / t_variant |")
for r in rows:
    for k in r:
        if k.startswith("fp8_v") and k.endswith("_rounds_ms"):
            v = k[:-len("_rounds_ms")]
            pr = [a / b for a, b in zip(r["fp8_default_rounds_ms"], r[k])]
            print(f"| {r['head_dim']} | {r['seqlen']} | {'causal' if r['causal'] else 'full'} | {v} | {r[v]:.0f} | "
                  f"{r['fp8_default']:.0f} | {statistics.median(pr):.3f} ({min(pr):.3f}-{max(pr):.3f}) |")
