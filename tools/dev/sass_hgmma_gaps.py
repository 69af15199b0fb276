#!/usr/bin/env python3
"""Summarizes how wgmma issue is packed in a kernel's SASS (cuobjdump -sass text on stdin, one kernel).

Session 8 (issue 4, docs/results/2026-11-22-h200-flash.md): the forward's S GEMM rebuilt its Q descriptors in
per-thread registers and moved them to uniform registers (R2UR) before every HGMMA. For each group of HGMMAs (each
within 16 instructions of the previous one) this prints the group's HGMMA count, the instructions between its first
and last HGMMA, and how many of those are R2UR / uniform ops (U*). A tightly packed S issue is 8 HGMMAs with few
instructions between them.
"""
import re
import sys

ops = []
for line in sys.stdin:
    m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
    if m:
        ops.append(m.group(2).split(".")[0])
idx = [i for i, o in enumerate(ops) if o == "HGMMA"]
groups, cur = [], []
for i in idx:
    if cur and i - cur[-1] > 16:
        groups.append(cur)
        cur = []
    cur.append(i)
if cur:
    groups.append(cur)
cells = []
for g in groups:
    span = ops[g[0] + 1:g[-1]]
    between = [o for o in span if o != "HGMMA"]
    r2ur = sum(o == "R2UR" for o in between)
    uni = sum(o.startswith("U") for o in between)
    cells.append(f"{len(g)}h/{len(between)}i/{r2ur}r2ur/{uni}u")
print(f"{len(ops)} instrs, {len(idx)} HGMMA, R2UR {ops.count('R2UR')}; groups (HGMMAs/instrs between/R2UR/uniform): "
      + " ".join(cells))
