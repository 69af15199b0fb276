#!/usr/bin/env python3
"""Prints every metadata key (type, value) and every tensor (type, shape) of GGUF files as markdown.

    python3 tools/reference/dump_gguf.py --gguf-py /tmp/llamacpp-ref/src/gguf-py tests/data/arch/*/model.gguf

Uses llama.cpp's gguf-py (the reader, not our code) from the extracted peer tarball; needs numpy.
Arrays longer than 16 entries (the tokenizer's tokens, scores and token types) are shown as their
length, first entries and the sha256 of their JSON text; everything else is shown in full. Shapes are
ggml's ne order (ne[0] = the contiguous dimension), the reverse of the numpy/PyTorch order.
Per-block tensors with the same type and shape in every block are listed once, as blk.{0-N}.name.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path


def fmt_scalar(v, vtype: str) -> str:
    if vtype in ("FLOAT32", "FLOAT64"):
        return f"{v:.9g}"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-py", type=Path, required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("files", type=Path, nargs="+")
    args = ap.parse_args()
    sys.path.insert(0, str(args.gguf_py))
    import gguf

    for path in args.files:
        r = gguf.GGUFReader(str(path))
        print(f"#### `{path.parent.name}/{path.name}` ({path.stat().st_size:,} bytes)\n")
        print("| key | type | value |\n|---|---|---|")
        for f in r.fields.values():
            if f.name.startswith("GGUF."):
                continue
            t = f.types[0].name
            val = f.contents()
            if t == "ARRAY":
                sub = f.types[-1].name
                t = f"ARRAY[{sub}]"
                if len(val) > 16:
                    head = ", ".join(fmt_scalar(v, sub) for v in val[:4])
                    digest = hashlib.sha256(json.dumps(val, ensure_ascii=False).encode()).hexdigest()[:16]
                    shown = f"{len(val)} entries: {head}, ... (sha256 of the JSON list {digest}...)"
                else:
                    shown = "[" + ", ".join(fmt_scalar(v, sub) for v in val) + "]"
            else:
                shown = fmt_scalar(val, t)
            print(f"| `{f.name}` | {t} | {shown.replace('|', '&#124;')} |")
        # blk.N.x tensors of the same type and shape in every block are listed once as blk.{a-b}.x
        groups: dict[tuple, list[int]] = {}
        for t in r.tensors:
            m = re.fullmatch(r"blk\.(\d+)\.(.+)", t.name)
            key = (m.group(2) if m else t.name, bool(m), t.tensor_type.name, tuple(int(v) for v in t.shape))
            groups.setdefault(key, []).append(int(m.group(1)) if m else -1)
        print(f"\n{len(r.tensors)} tensors:\n")
        print("| tensor | type | ne (ggml order) |\n|---|---|---|")
        for (name, in_blk, ttype, shape), blocks in groups.items():
            if in_blk:
                lo, hi = min(blocks), max(blocks)
                contiguous = sorted(blocks) == list(range(lo, hi + 1))
                idx = (f"{lo}" if lo == hi else f"{{{lo}-{hi}}}") if contiguous else "{" + ",".join(map(str, blocks)) + "}"
                name = f"blk.{idx}.{name}"
            print(f"| `{name}` | {ttype} | {list(shape)} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
