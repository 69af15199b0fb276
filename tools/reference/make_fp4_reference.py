#!/usr/bin/env python3
"""Writes tests/data/fp4/: MXFP4 and NVFP4 blocks with gguf-py's own dequantization of them.

The blocks and the float32 values both come from gguf-py (llama.cpp's Python package, an
implementation independent of ours), so tests/cpu/test_fp4.cpp can check our dequantizer bit for bit.

  mxfp4.blocks / nvfp4.blocks   raw ggml blocks (17 / 36 bytes each)
  mxfp4.f32 / nvfp4.f32         gguf-py's dequantization, little-endian float32

Contents: a fixed float32 array (blocks of very different magnitudes, zeros and exact levels)
quantized by gguf-py, then blocks of random bytes so that every scale code appears (MXFP4
exponents 0..254; for NVFP4 all 256 UE4M3 bytes, the sign bit and 0x7F included).
gguf-py has no NVFP4 quantizer, so the NVFP4 array is quantized here with gguf-py's
fp32_to_ue4m3 for the scales and nearest E2M1 levels; the dequantized reference is gguf-py's.

Usage: make_fp4_reference.py GGUF_PY_DIR [OUT_DIR]   (needs numpy)
"""
import os
import sys

import numpy as np


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "fp4")
    from gguf import quants  # noqa: E402

    rng = np.random.default_rng(20260401)

    # 16 blocks of 64 floats: magnitudes from 2^-20 to 2^20, one all-zero block, one of exact levels.
    x = rng.standard_normal((16, 64)).astype(np.float32)
    x *= (2.0 ** np.linspace(-20, 20, 16)).astype(np.float32).reshape(16, 1)
    x[3] = 0.0
    x[5] = np.tile(np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6, 0], np.float32), 4)
    x = x.reshape(-1)

    # ---- MXFP4 ----
    mx = quants.MXFP4
    q = mx.quantize_blocks(x.reshape(-1, 32)).astype(np.uint8)
    rand = rng.integers(0, 256, size=(24, 17), dtype=np.uint8)
    rand[:, 0] = np.concatenate([[0, 1, 2, 126, 127, 128, 253, 254], rng.integers(0, 255, 16)]).astype(np.uint8)
    mx_blocks = np.concatenate([q, rand])
    mx_deq = mx.dequantize_blocks(mx_blocks).astype(np.float32).reshape(-1)

    # ---- NVFP4 ----
    nv = quants.NVFP4
    levels = np.array(nv.kvalues, np.float32) / 2  # E2M1 values
    sub = x.reshape(-1, 16)
    amax = np.abs(sub).max(axis=1)
    d = nv.fp32_to_ue4m3((amax / 6).astype(np.float32))
    scale = nv.ue4m3_to_fp32(d).astype(np.float32) * 2  # undo the 0.5 of the kvalues convention
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(scale.reshape(-1, 1) > 0, sub / scale.reshape(-1, 1), 0)
    idx = np.abs(t.reshape(-1, 16, 1) - levels.reshape(1, 1, 16)).argmin(axis=-1).astype(np.uint8)
    idx = idx.reshape(-1, 4, 2, 8)  # block, sub-block, low/high half, byte
    qs = (idx[:, :, 0] | (idx[:, :, 1] << 4)).reshape(-1, 32)
    nv_q = np.concatenate([d.reshape(-1, 4).astype(np.uint8), qs], axis=1)
    rand = rng.integers(0, 256, size=(64, 36), dtype=np.uint8)
    rand[:, :4] = rng.permutation(256).astype(np.uint8).reshape(64, 4)  # every scale byte once
    nv_blocks = np.concatenate([nv_q, rand])
    nv_deq = nv.dequantize_blocks(nv_blocks).astype(np.float32).reshape(-1)

    os.makedirs(out, exist_ok=True)
    for name, blocks, deq in (("mxfp4", mx_blocks, mx_deq), ("nvfp4", nv_blocks, nv_deq)):
        blocks.astype(np.uint8).tofile(os.path.join(out, name + ".blocks"))
        deq.astype("<f4").tofile(os.path.join(out, name + ".f32"))
        print(name, blocks.shape, "->", deq.size, "floats")


if __name__ == "__main__":
    main()
