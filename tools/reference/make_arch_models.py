#!/usr/bin/env python3
"""Tiny random-weight reference models for the architecture-generic loaders (tests/data/arch).

Runs where torch + transformers + sentencepiece are installed (the GPU machine; the forward passes
run on its CPU in float32, see --device). For each model below it

  1. builds the Hugging Face config and the *ForCausalLM, sets every parameter to fresh random values
     from a fixed numpy generator (seeded by the model seed and the parameter name),
  2. saves it with save_pretrained (float32 safetensors) next to one SentencePiece tokenizer.model
     trained here on the text embedded below,
  3. reloads the folder with from_pretrained (attn_implementation="eager") and writes the float32
     logits of all positions of one fixed 32-token sequence (logits-hf.f32) and reference.json,
  4. converts the folder with llama.cpp's own convert_hf_to_gguf.py (--outtype f32 -> model.gguf).

    python3 make_arch_models.py --out OUT --logs LOGS --llamacpp /tmp/llama.cpp [--only qwen3,gemma2]

The layout of OUT is the layout of tests/data/arch (one folder per model). Nothing here needs a
network. See tests/data/arch/README.md for what each file holds.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import copy
import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import zlib
from pathlib import Path

import numpy as np

SEED = 20261201           # model weights: numpy default_rng([SEED, model index, crc32(parameter name)])
TOKEN_SEED = 7            # the token sequence: numpy default_rng(TOKEN_SEED)
N_TOKENS = 32
N_LONG_EXTRA = 48         # phi3-longrope: 32 + 48 = 80 > original_max_position_embeddings (64)
SP_VOCAB = 384
NORM_STD = 0.1            # RMSNorm weights: 1 + N(0, 0.1^2) (Gemma: N(0, 0.1^2), used as 1 + w)
BIAS_STD = 0.1
ROUTER_GAIN = 3.0         # router weights N(0, (3 / sqrt(fan_in))^2): router logits with std ~3

# SentencePiece training text (written for this file).
TRAIN_TEXT = """\
The harbour was quiet in the early morning, and the fishing boats rocked slowly on the grey water.
A small girl walked along the stone wall with her grandfather, counting the gulls that sat on the posts.
He told her that the sea had been calmer when he was young, although she suspected he said that every year.
They stopped at the bakery on the corner, where the windows were already warm and the bread smelled of salt.
The baker asked whether the boats would go out today, and the old man looked at the clouds for a long time.
Weather is a language that some people read better than others, he said, and I have forgotten half of it.
The girl laughed and bought two rolls, one for each of them, and they ate them on the bench by the lighthouse.
In the afternoon the wind turned to the west and the first drops of rain began to fall on the tin roofs.
Engineers like to measure things twice, because the first number is usually wrong in an interesting way.
A machine that computes the same answer every time is easier to trust than one that is merely fast.
When the tests pass on one computer and fail on another, the difference is almost always in the details:
the order of a sum, the rounding of a small value, or a setting that nobody remembered to write down.
Good reference data is boring on purpose. It is small, it is fixed, and it explains how it was made.
The library opened at nine, and the reading room filled with students who carried too many books.
Someone had left a map of the old railway on the long table, with pencil marks along the river valley.
The line once ran from the coast to the mountains, stopping at villages that now have only a bus twice a week.
People still walk the path where the rails used to be, past the orchards, the mill and the empty station.
In spring the apple trees flower all at once, and for a few days the whole valley looks white and pink.
The miller's house has a garden with beans, onions, potatoes and a row of sunflowers taller than the fence.
Every summer there is a fair with music, bread, cheese, honey and a race for children around the pond.
Numbers such as 3, 14, 159 and 2653 appear in the notes, together with dates like 1907 and 1958.
Seven black cats crossed the square, one after another, while the clock on the town hall struck twelve.
The river is wide and slow near the bridge, but upstream it runs fast over rocks and under fallen trees.
Travellers often ask for directions to the castle, which stands on the hill above the last houses.
From the top of the tower you can see the sea to the north and the snow on the mountains to the south.
The stairs are narrow and steep, and the guide reminds everyone to hold the rope and to mind their heads.
At night the streets are empty except for a cat, a late bicycle and the light in the window of the inn.
"""


# ----------------------------------------------------------------------------------------------
# model specifications
# ----------------------------------------------------------------------------------------------

def _longrope_factors() -> tuple[list[float], list[float]]:
    g = np.random.default_rng([SEED, 999])
    short = np.sort(1.0 + 0.5 * g.random(8))     # head_dim 16 -> 8 values in [1, 1.5]
    long = np.sort(1.0 + 7.0 * g.random(8))      # 8 values in [1, 8]
    return [round(float(v), 4) for v in short], [round(float(v), 4) for v in long]


SHORT_FACTOR, LONG_FACTOR = _longrope_factors()

_QWEN3 = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=96,
              num_hidden_layers=3, rms_norm_eps=1e-6)
_PHI3 = dict(num_attention_heads=4, num_key_value_heads=4, intermediate_size=96, num_hidden_layers=3,
             rms_norm_eps=1e-5, sliding_window=None, max_position_embeddings=256,
             original_max_position_embeddings=256, tie_word_embeddings=False)

# name -> spec. "kw": config kwargs (plus vocab/hidden/bos/eos/pad/max_position_embeddings defaults);
# "rope": transformers 5 rope_parameters; "legacy": the transformers 4 spelling, tried if the first fails.
MODELS: dict[str, dict] = {
    "qwen3": dict(
        config="Qwen3Config", cls="Qwen3ForCausalLM", family="llama",
        kw=dict(_QWEN3, tie_word_embeddings=True),
        rope={"rope_type": "default", "rope_theta": 1e6},
        legacy=dict(rope_theta=1e6)),
    "qwen3-yarn": dict(
        config="Qwen3Config", cls="Qwen3ForCausalLM", family="llama",
        kw=dict(_QWEN3, tie_word_embeddings=False, max_position_embeddings=256),
        rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 1e6},
        legacy=dict(rope_theta=1e6, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 64})),
    "gemma2": dict(
        config="Gemma2Config", cls="Gemma2ForCausalLM", family="gemma",
        kw=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                num_hidden_layers=4, sliding_window=8, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                query_pre_attn_scalar=16, hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh",
                rms_norm_eps=1e-6, tie_word_embeddings=True,
                layer_types=["sliding_attention", "full_attention"] * 2),
        rope={"rope_type": "default", "rope_theta": 10000.0},
        legacy=dict(rope_theta=10000.0)),
    "gemma3": dict(
        config="Gemma3TextConfig", cls="Gemma3ForCausalLM", family="gemma",
        kw=dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16, intermediate_size=128,
                num_hidden_layers=7, sliding_window=8, query_pre_attn_scalar=16,
                hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, tie_word_embeddings=True,
                final_logit_softcapping=None, attn_logit_softcapping=None,
                layer_types=["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]),
        rope={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
              "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}},
        legacy=dict(rope_theta=1e6, rope_local_base_freq=10000.0, sliding_window_pattern=6,
                    rope_scaling={"rope_type": "linear", "factor": 8.0})),
    "phi3": dict(
        config="Phi3Config", cls="Phi3ForCausalLM", family="llama",
        kw=dict(_PHI3),
        rope={"rope_type": "default", "rope_theta": 10000.0},
        legacy=dict(rope_theta=10000.0)),
    "phi3-gqa": dict(
        config="Phi3Config", cls="Phi3ForCausalLM", family="llama",
        kw=dict(_PHI3, num_key_value_heads=2),
        rope={"rope_type": "default", "rope_theta": 10000.0},
        legacy=dict(rope_theta=10000.0)),
    "phi3-longrope": dict(
        config="Phi3Config", cls="Phi3ForCausalLM", family="llama",
        kw=dict(_PHI3, max_position_embeddings=1024, original_max_position_embeddings=64),
        rope={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT_FACTOR,
              "long_factor": LONG_FACTOR, "original_max_position_embeddings": 64},
        legacy=dict(rope_theta=10000.0, rope_scaling={"type": "longrope", "short_factor": SHORT_FACTOR,
                                                      "long_factor": LONG_FACTOR})),
    "mixtral": dict(
        config="MixtralConfig", cls="MixtralForCausalLM", family="llama", n_experts=4, top_k=2,
        kw=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                num_experts_per_tok=2, intermediate_size=96, num_hidden_layers=2, rms_norm_eps=1e-5,
                sliding_window=None, tie_word_embeddings=False, router_jitter_noise=0.0),
        rope={"rope_type": "default", "rope_theta": 1e6},
        legacy=dict(rope_theta=1e6)),
    "qwen2moe": dict(
        config="Qwen2MoeConfig", cls="Qwen2MoeForCausalLM", family="llama", n_experts=8, top_k=2,
        sp_vocab_wrapper=True,
        kw=dict(num_attention_heads=4, num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
                norm_topk_prob=False, moe_intermediate_size=32, shared_expert_intermediate_size=96,
                decoder_sparse_step=1, mlp_only_layers=[], intermediate_size=96, num_hidden_layers=2,
                rms_norm_eps=1e-6, tie_word_embeddings=False, use_sliding_window=False),
        rope={"rope_type": "default", "rope_theta": 1e6},
        legacy=dict(rope_theta=1e6)),
    "qwen3moe": dict(
        config="Qwen3MoeConfig", cls="Qwen3MoeForCausalLM", family="llama", n_experts=8, top_k=4,
        sp_vocab_wrapper=True,
        kw=dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=4,
                norm_topk_prob=True, moe_intermediate_size=32, decoder_sparse_step=1, mlp_only_layers=[],
                intermediate_size=96, num_hidden_layers=2, rms_norm_eps=1e-6, tie_word_embeddings=False,
                use_sliding_window=False),
        rope={"rope_type": "default", "rope_theta": 1e6},
        legacy=dict(rope_theta=1e6)),
}
SHARDED = "qwen3-sharded"   # the qwen3 weights saved again in 2-3 shards (HF side only)
MODEL_INDEX = {name: i for i, name in enumerate(MODELS)}


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

def log(*a):
    print(*a, flush=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def jsonable(x):
    """Config dicts can hold tuples, numpy or torch scalars; make them plain JSON."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    return repr(x)


def write_f32(path: Path, arr: np.ndarray) -> None:
    np.ascontiguousarray(arr, dtype="<f4").tofile(path)


def rel_l2_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return np.linalg.norm(a - b, axis=-1) / np.linalg.norm(b, axis=-1)


def train_tokenizer(work: Path) -> Path:
    """Trains the SentencePiece BPE model from TRAIN_TEXT (one sentence per line). The text goes in through
    sentence_iterator and the model comes out through model_writer, so no file path ends up in the
    model's trainer_spec and the bytes depend on the text and the options alone."""
    import io
    import sentencepiece as spm
    work.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAIN_TEXT.splitlines()), model_writer=buf, model_type="bpe", vocab_size=SP_VOCAB,
        byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=1.0,
        normalization_rule_name="identity", split_digits=True, num_threads=1, minloglevel=2)
    model = work / "tokenizer.model"
    model.write_bytes(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert sp.vocab_size() == SP_VOCAB, sp.vocab_size()
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    return model


def token_ids(vocab: int) -> tuple[list[int], list[int]]:
    g = np.random.default_rng(TOKEN_SEED)
    ids = g.integers(3, vocab, size=N_TOKENS)
    extra = g.integers(3, vocab, size=N_LONG_EXTRA)
    return [int(v) for v in ids], [int(v) for v in extra]


# ----------------------------------------------------------------------------------------------
# HF side
# ----------------------------------------------------------------------------------------------

def build_config(name: str, spec: dict, vocab: int):
    import transformers
    cfg_cls = getattr(transformers, spec["config"])
    kw = dict(vocab_size=vocab, hidden_size=64, bos_token_id=1, eos_token_id=2, pad_token_id=None,
              max_position_embeddings=256)
    kw.update(copy.deepcopy(spec["kw"]))
    notes = []

    def construct(extra: dict):
        while True:   # drop (and note) keyword arguments this config class does not know
            try:
                return cfg_cls(**kw, **copy.deepcopy(extra))
            except TypeError as e:
                bad = re.search(r"unexpected keyword argument '(\w+)'", str(e))
                if not bad or bad.group(1) not in kw:
                    raise
                notes.append(f"{spec['config']} does not take {bad.group(1)}={kw.pop(bad.group(1))!r}; dropped")

    try:
        cfg = construct(dict(rope_parameters=spec["rope"]))
        spelling = "rope_parameters"
    except Exception as e:  # transformers 4 spelling
        notes.append(f"rope_parameters refused ({e!r}); legacy rope kwargs used")
        cfg = construct(spec["legacy"])
        spelling = "legacy"
    # every requested field must have taken effect
    for k, v in kw.items():
        if not hasattr(cfg, k):
            notes.append(f"config has no attribute {k!r} (asked {v!r})")
        elif jsonable(getattr(cfg, k)) != jsonable(v):
            notes.append(f"config.{k} = {getattr(cfg, k)!r}, asked {v!r}")
    rp = jsonable(getattr(cfg, "rope_parameters", None))

    def contains(have, want, path="rope_parameters"):
        if isinstance(want, dict):
            if not isinstance(have, dict):
                notes.append(f"{path} = {have!r}, asked {want!r}")
                return
            for k2, v2 in want.items():
                contains(have.get(k2), v2, f"{path}.{k2}")
        elif have != want and not (isinstance(want, float) and isinstance(have, (int, float)) and
                                   math.isclose(have, want, rel_tol=1e-9)):
            notes.append(f"{path} = {have!r}, asked {want!r}")

    if spelling == "rope_parameters":
        contains(rp, jsonable(spec["rope"]))
    # llama.cpp's Phi-3 converter needs original_max_position_embeddings at the top level or in
    # rope_parameters (it reads rope_parameters["original_max_position_embeddings"])
    if spec["config"] == "Phi3Config":
        have_top = getattr(cfg, "original_max_position_embeddings", None)
        if have_top is None:
            cfg.original_max_position_embeddings = spec["kw"]["original_max_position_embeddings"]
            notes.append("set config.original_max_position_embeddings by attribute")
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:
        notes.append(f"cannot set _attn_implementation: {e!r}")
    return cfg, spelling, notes


def classify(name: str, shape: tuple, family: str, hidden: int, n_experts: int | None):
    """-> (kind, mean, std) of the fresh random values for one parameter."""
    if "embed_tokens" in name:
        return "embedding", 0.0, 1.0
    if len(shape) == 1 and name.endswith(".bias"):
        return "bias", 0.0, BIAS_STD
    if len(shape) == 1 and "norm" in name:
        if family == "gemma":
            return "norm (used as 1 + w)", 0.0, NORM_STD
        return "norm", 1.0, NORM_STD
    if (len(shape) == 2 and n_experts and shape[0] == n_experts and
            (name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight"))):
        return "router", 0.0, ROUTER_GAIN / math.sqrt(shape[1])
    if len(shape) == 2:
        return "matrix", 0.0, 1.0 / math.sqrt(shape[1])
    if len(shape) == 3:   # fused experts [E, out, in] or [E, in, out]
        if "down" in name:
            fan_in = [d for d in shape[1:] if d != hidden][0]
        else:
            assert hidden in shape[1:], (name, shape)
            fan_in = hidden
        return "experts (3-D)", 0.0, 1.0 / math.sqrt(fan_in)
    raise ValueError(f"no initialisation rule for {name} {shape}")


def randomize(model, name: str, spec: dict) -> list[dict]:
    import torch
    hidden = model.config.hidden_size
    table = []
    with torch.no_grad():
        for pname, p in model.named_parameters():
            kind, mean, std = classify(pname, tuple(p.shape), spec["family"], hidden, spec.get("n_experts"))
            g = np.random.default_rng([SEED, MODEL_INDEX[name], zlib.crc32(pname.encode())])
            val = mean + std * g.standard_normal(tuple(p.shape))
            p.copy_(torch.from_numpy(val.astype(np.float32)))
            table.append(dict(name=pname, shape=list(p.shape), init=kind, mean=mean, std=std))
    return table


class AttentionProbe:
    """Hooks on every attention module that has q_proj/k_proj/v_proj/o_proj (all but Phi-3). From the
    module's own inputs (hidden_states, the rotary cos/sin, the attention mask it is given) it recomputes
    q.k * scaling and records per layer the largest |score| over the unmasked positions BEFORE any
    softcap, the share of those scores above the softcap, and the number of unmasked keys of every query
    (shows the sliding window). It also recomputes the module's output (softcap, mask, softmax, V, o_proj)
    and records the largest difference to what transformers returned, which checks the probe itself."""

    def __init__(self, model):
        self.model = model
        self.records: list[dict] = []
        self.handles = []
        self.pending: dict[int, object] = {}

    def __enter__(self):
        for name, mod in self.model.named_modules():
            if all(hasattr(mod, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")):
                self.handles.append(mod.register_forward_pre_hook(
                    lambda m, a, k, name=name: self._pre(m, a, k, name), with_kwargs=True))
                self.handles.append(mod.register_forward_hook(self._post))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()

    def _pre(self, module, args, kwargs, name):
        import torch
        try:
            hs = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            cos, sin = kwargs["position_embeddings"] if "position_embeddings" in kwargs else args[1]
            mask = kwargs.get("attention_mask", args[2] if len(args) > 2 else None)
            b, t, _ = hs.shape
            hd = module.head_dim

            def heads(x):
                return x.view(b, t, -1, hd).transpose(1, 2)

            q, k, v = heads(module.q_proj(hs)), heads(module.k_proj(hs)), heads(module.v_proj(hs))
            if hasattr(module, "q_norm"):
                q, k = module.q_norm(q), module.k_norm(k)
            c, sn = cos.unsqueeze(1), sin.unsqueeze(1)

            def rot(x):
                return torch.cat((-x[..., hd // 2:], x[..., : hd // 2]), dim=-1)

            q, k = q * c + rot(q) * sn, k * c + rot(k) * sn
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            s = torch.matmul(q, k.transpose(2, 3)) * module.scaling
            if mask is None:
                allowed = torch.ones(t, t, dtype=torch.bool, device=s.device).tril().expand_as(s)
            else:
                m = mask[:, :, :, :t]
                allowed = (m if m.dtype == torch.bool else m == 0).expand_as(s)
            cap = getattr(module, "attn_logit_softcapping", None)
            z = torch.tanh(s / cap) * cap if cap else s
            p = torch.softmax(z.masked_fill(~allowed, float("-inf")), dim=-1)
            out = module.o_proj(torch.matmul(p, v).transpose(1, 2).reshape(b, t, -1))
            rec = dict(module=name, layer=getattr(module, "layer_idx", None), scaling=float(module.scaling),
                       softcap=None if not cap else float(cap),
                       max_abs_scaled_score_before_softcap=float(s[allowed].abs().max()),
                       n_keys_per_query=[int(x) for x in allowed[0, 0].sum(-1).tolist()],
                       mask_given=None if mask is None else str(mask.dtype))
            if cap:
                rec["fraction_of_scores_above_cap"] = float((s[allowed].abs() > cap).float().mean())
            self.records.append(rec)
            self.pending[id(module)] = (rec, out)
        except Exception as e:  # the probe must never change the result
            self.records.append(dict(module=name, error=repr(e)))

    def _post(self, module, args, output):
        rec, out = self.pending.pop(id(module), (None, None))
        if rec is not None:
            got = output[0] if isinstance(output, tuple) else output
            rec["recomputed_output_max_abs_diff"] = float((got - out).abs().max())


def router_hooks(model, n_experts: int, top_k: int, store: list):
    import torch
    handles = []
    for mname, mod in model.named_modules():
        w = getattr(mod, "weight", None)
        if not (mname.endswith(".gate") and isinstance(w, torch.Tensor) and w.ndim == 2 and
                w.shape[0] == n_experts):
            continue

        def pre(module, args, kwargs, mname=mname):
            try:
                record(module, (list(args) + list(kwargs.values()))[0], mname)
            except Exception as e:  # the probe must never change the result
                store.append(dict(module=mname, error=repr(e)))

        def record(module, x, mname):
            x = x.reshape(-1, module.weight.shape[1]).double()
            logits = x @ module.weight.double().T
            srt, idx = torch.sort(logits, dim=-1, descending=True)
            gap = srt[:, top_k - 1] - srt[:, top_k]
            sets = {tuple(sorted(r)) for r in idx[:, :top_k].tolist()}
            use = torch.bincount(idx[:, :top_k].reshape(-1), minlength=n_experts)
            store.append(dict(module=mname, router_logit_std=float(logits.std()),
                              min_gap_topk_vs_next=float(gap.min()), n_distinct_expert_sets=len(sets),
                              tokens_per_expert=[int(v) for v in use.tolist()]))
        try:
            handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
        except TypeError:  # torch < 2.0
            handles.append(mod.register_forward_pre_hook(lambda module, args, pre=pre: pre(module, args, {})))
    return handles


def rope_buffers(model) -> dict:
    out = {}
    for n, b in model.named_buffers():
        if "inv_freq" in n and "original" not in n:
            out[n] = [float(v) for v in b.detach().double().cpu().reshape(-1).tolist()]
    for n, m in model.named_modules():
        if hasattr(m, "attention_scaling"):
            a = m.attention_scaling
            out[f"{n}.attention_scaling"] = jsonable(a) if not hasattr(a, "tolist") else a.tolist()
    return out


def safetensors_index(folder: Path) -> dict:
    """tensor name -> [file, dtype, shape], read from the safetensors headers."""
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            hdr = json.loads(fh.read(n))
        for k, v in sorted(hdr.items()):
            if k != "__metadata__":
                out[k] = [f.name, v["dtype"], v["shape"]]
    return out


def from_pretrained(cls, folder: Path, dtype):
    try:
        return cls.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    except TypeError:
        return cls.from_pretrained(folder, torch_dtype=dtype, attn_implementation="eager")


def save(model, folder: Path, **kw):
    try:
        model.save_pretrained(folder, safe_serialization=True, **kw)
    except TypeError:
        model.save_pretrained(folder, **kw)


def forward_logits(model, ids: list[int], device: str) -> np.ndarray:
    import torch
    x = torch.tensor([ids], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=x, use_cache=False)
    return out.logits[0].detach().double().cpu().numpy()


def make_model(name: str, spec: dict, root: Path, tok_model: Path, ids: list[int], extra: list[int],
               device: str, versions: dict) -> dict:
    import torch
    import transformers

    vocab = SP_VOCAB
    cfg, spelling, notes = build_config(name, spec, vocab)
    cls = getattr(transformers, spec["cls"])
    torch.manual_seed(SEED)
    model = cls(cfg).float()
    init = randomize(model, name, spec)
    tied = bool(spec["kw"].get("tie_word_embeddings"))
    out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
    if tied and out_emb.weight.data_ptr() != in_emb.weight.data_ptr():
        notes.append("tie_word_embeddings=True but lm_head is a separate tensor")
    model.eval()

    folders = [(name, {})]
    if name == "qwen3":
        total = sum(p.numel() * 4 for p in model.parameters())
        folders.append((SHARDED, dict(max_shard_size=total // 2 + 1)))
    result = {}
    for folder_name, save_kw in folders:
        d = root / folder_name
        if d.exists():
            shutil.rmtree(d)
        save(model, d, **save_kw)
        shutil.copy(tok_model, d / "tokenizer.model")
        files = sorted(p.name for p in d.iterdir())
        log(f"[{folder_name}] saved: {files}")

        loaded = from_pretrained(cls, d, torch.float32).to(device).eval()
        sd_a, sd_b = model.state_dict(), loaded.state_dict()
        roundtrip = all(torch.equal(sd_a[k].cpu(), sd_b[k].cpu()) for k in sd_a) and set(sd_a) == set(sd_b)

        router_records, lm_head_max = [], []
        hooks = []
        if spec.get("n_experts"):
            hooks += router_hooks(loaded, spec["n_experts"], spec["top_k"], router_records)
        hooks.append(loaded.get_output_embeddings().register_forward_hook(
            lambda m, a, o: lm_head_max.append(float(o.abs().max()))))
        with AttentionProbe(loaded) as probe:
            logits = forward_logits(loaded, ids, device)
        attn_records = probe.records
        for h in hooks:
            h.remove()
        rope_after_32 = rope_buffers(loaded)

        ref = dict(
            model=folder_name, hf_class=spec["cls"], hf_config_class=spec["config"],
            rope_config_spelling=spelling, config_notes=notes,
            config=json.loads((d / "config.json").read_text()),
            files={p.name: dict(bytes=p.stat().st_size, sha256=sha256(p)) for p in sorted(d.iterdir())},
            token_ids=ids, n_tokens=len(ids), n_vocab=int(logits.shape[1]),
            logits_file="logits-hf.f32", logits_shape=[len(ids), int(logits.shape[1])],
            logits_layout="raw little-endian float32, row-major [n_tokens][n_vocab], row i = logits at position i",
            dtype="float32", device=device,
            attn_implementation=getattr(loaded.config, "_attn_implementation", None),
            seeds=dict(weights=f"numpy default_rng([{SEED}, {MODEL_INDEX[name]}, crc32(parameter name)])",
                       tokens=f"numpy default_rng({TOKEN_SEED}).integers(3, {vocab}, size={N_TOKENS})",
                       torch_manual_seed=SEED),
            init=init, versions=versions, save_load_roundtrip_bit_identical=bool(roundtrip),
            max_abs_logit=float(np.abs(logits).max()), std_logits=float(logits.std()),
            argmax=[int(v) for v in logits.argmax(-1)],
            top1_minus_top2=[float(v) for v in np.diff(np.sort(logits, -1)[:, -2:], axis=-1)[:, 0]],
            max_abs_logit_before_final_softcap=max(lm_head_max) if lm_head_max else None,
            attention_probe=attn_records or None, router=router_records or None,
            rope_buffers_after_forward=rope_after_32,
        )
        ref["safetensors_tensors"] = safetensors_index(d)
        # the same model in float64, for the size of the float32 rounding in transformers itself (its
        # RMSNorm and rotary code still compute in float32, so this is a rough lower bound)
        try:
            re64 = copy.deepcopy(loaded).double()
            ref["hf_f32_vs_f64_rel_l2_max"] = float(rel_l2_rows(logits.astype(np.float32),
                                                                forward_logits(re64, ids, device)).max())
        except Exception as e:
            re64 = None
            ref["hf_f32_vs_f64_rel_l2_max"] = None
            notes.append(f"float64 forward failed: {e!r}")
        if folder_name == SHARDED:   # same weights as qwen3: its logits are ../qwen3/logits-hf.f32 (checked below)
            ref["logits_file"] = "../qwen3/logits-hf.f32"
        else:
            write_f32(d / "logits-hf.f32", logits.astype(np.float32))

        if name == "phi3-longrope":
            ids_long = ids + extra
            long_logits = forward_logits(loaded, ids_long, device)[:N_TOKENS]
            ref["long"] = dict(
                logits_file="logits-hf-long.f32",
                token_ids_forwarded=ids_long,
                note=("rows 0..31 of one forward over the 80 ids token_ids + extra (80 > original_max_position_"
                      "embeddings 64, so transformers uses long_factor for every position); causal attention "
                      "makes these rows the 32-token sequence computed with the long factors"),
                rope_buffers_after_forward=rope_buffers(loaded),
                hf_f32_vs_f64_rel_l2_max=None if re64 is None else float(rel_l2_rows(
                    long_logits.astype(np.float32), forward_logits(re64, ids_long, device)[:N_TOKENS]).max()),
                max_abs_logit=float(np.abs(long_logits).max()))
            write_f32(d / "logits-hf-long.f32", long_logits.astype(np.float32))
            ref["longrope"] = dict(short_factor=SHORT_FACTOR, long_factor=LONG_FACTOR,
                                   factors_used_for_logits_hf="short (32 <= original_max_position_embeddings 64)",
                                   factors_used_for_logits_hf_long="long (80 > 64)",
                                   attention_factor_expected=math.sqrt(1 + math.log(1024 / 64) / math.log(64)))
        (d / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
        log(f"[{folder_name}] {spec['cls']} config ({spelling}): {json.dumps(ref['config'], sort_keys=True)}")
        if notes:
            log(f"[{folder_name}] CONFIG NOTES: {notes}")
        log(f"[{folder_name}] logits {logits.shape} max|.| {ref['max_abs_logit']:.4g} std {ref['std_logits']:.4g} "
            f"f32-vs-f64 {ref['hf_f32_vs_f64_rel_l2_max']} roundtrip {roundtrip} "
            f"attn {attn_records[:1] if attn_records else None} router {router_records[:1] if router_records else None}")
        result[folder_name] = logits
    if SHARDED in result:
        same = np.array_equal(result[SHARDED], result["qwen3"])
        sref = json.loads((root / SHARDED / "reference.json").read_text())
        sref["same_logits_as_qwen3_bit_identical"] = bool(same)
        (root / SHARDED / "reference.json").write_text(json.dumps(sref, indent=1) + "\n")
        log(f"[{SHARDED}] logits bit-identical to qwen3: {same}")
    return result


# ----------------------------------------------------------------------------------------------
# llama.cpp converter
# ----------------------------------------------------------------------------------------------

def gguf_name(model: str) -> str:
    """general.name of the GGUF. llama.cpp's vocab loader (llama-vocab.cpp) treats a general.name that
    contains "phi3" or "phi-3" as Phi-3 and then looks up <|endoftext|>, which this tiny tokenizer lacks
    (the load fails with unordered_map::at), so the Phi-3 models are named arch-ref-phi*."""
    return "arch-ref-" + model.replace("phi3", "phi")


def convert(folder: Path, llamacpp: Path, logs: Path, wrapper: bool, outfile: Path | None = None,
            tag: str = "") -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(llamacpp / "gguf-py")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    outfile = outfile or folder / "model.gguf"
    if wrapper:
        cmd = [sys.executable, str(Path(__file__).resolve().parent / "convert_sp_vocab.py"), str(llamacpp)]
    else:
        cmd = [sys.executable, str(llamacpp / "convert_hf_to_gguf.py")]
    cmd += [str(folder), "--outtype", "f32", "--outfile", str(outfile), "--model-name", gguf_name(folder.name)]
    p = subprocess.run(cmd, cwd=llamacpp, env=env, capture_output=True, text=True)
    logf = logs / f"convert-{folder.name}{tag}.log"
    logf.write_text(" ".join(cmd) + "\n\n" + p.stdout + p.stderr)
    tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
    return dict(command=" ".join(["python3"] + [c.replace(str(llamacpp) + "/", "") for c in cmd[1:]]),
                rc=p.returncode, wrapper=wrapper, log=logf.name, tail=tail)


def gguf_tensors(path: Path, llamacpp: Path) -> dict:
    sys.path.insert(0, str(llamacpp / "gguf-py"))
    import gguf
    r = gguf.GGUFReader(str(path))
    return {t.name: (int(t.tensor_type), [int(v) for v in t.shape], hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest())
            for t in r.tensors}


def convert_all(names: list[str], root: Path, llamacpp: Path, logs: Path) -> None:
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        for name in names:
            spec = MODELS.get(name, MODELS["qwen3"])
            d = root / name
            if name == SHARDED:
                jobs[name] = ex.submit(convert, d, llamacpp, logs, False, Path(tempfile.gettempdir()) /
                                       "qwen3-sharded.gguf")
            else:
                jobs[name] = ex.submit(convert, d, llamacpp, logs, bool(spec.get("sp_vocab_wrapper")))
            if spec.get("sp_vocab_wrapper"):   # show what the unmodified converter does
                jobs[name + ":plain"] = ex.submit(convert, d, llamacpp, logs, False,
                                                  Path(tempfile.gettempdir()) / f"{name}-plain.gguf", "-plain")
    for key, fut in jobs.items():
        name = key.split(":")[0]
        res = fut.result()
        log(f"[{key}] convert rc={res['rc']}: {res['tail']}")
        refp = root / name / "reference.json"
        ref = json.loads(refp.read_text())
        ref.setdefault("conversion", {})["plain_converter" if key.endswith(":plain") else "used"] = res
        if name == SHARDED and res["rc"] == 0:
            a = gguf_tensors(Path(tempfile.gettempdir()) / "qwen3-sharded.gguf", llamacpp)
            b = gguf_tensors(root / "qwen3" / "model.gguf", llamacpp) if (root / "qwen3" / "model.gguf").exists() else {}
            ref["conversion"]["gguf_tensors_identical_to_qwen3"] = a == b
            log(f"[{SHARDED}] GGUF tensors identical to qwen3's: {a == b} (the sharded GGUF is not kept)")
        if name != SHARDED and (root / name / "model.gguf").exists():
            ref["conversion"]["model_gguf"] = dict(bytes=(root / name / "model.gguf").stat().st_size,
                                                   sha256=sha256(root / name / "model.gguf"))
        refp.write_text(json.dumps(ref, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output root (one folder per model)")
    ap.add_argument("--logs", type=Path, required=True, help="folder for the converter logs")
    ap.add_argument("--llamacpp", type=Path, help="extracted llama.cpp source (convert_hf_to_gguf.py); "
                    "without it no GGUF is made")
    ap.add_argument("--only", help="comma-separated model names (default: all)")
    ap.add_argument("--device", default="cpu", help="torch device for the forward passes (default cpu)")
    ap.add_argument("--list", action="store_true", help="print the model names and exit")
    args = ap.parse_args()

    if args.list:
        print("\n".join(list(MODELS) + [SHARDED]))
        return 0
    names = list(MODELS) if not args.only else args.only.split(",")
    for n in names:
        if n not in MODELS:
            ap.error(f"unknown model {n!r}; known: {', '.join(MODELS)}")

    import torch
    import transformers
    import sentencepiece
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(1)
    device = args.device
    versions = dict(torch=torch.__version__, transformers=transformers.__version__,
                    sentencepiece=sentencepiece.__version__, numpy=np.__version__,
                    python=platform.python_version(), torch_threads=torch.get_num_threads(),
                    device_name=(torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor()),
                    tf32=dict(matmul=torch.backends.cuda.matmul.allow_tf32, cudnn=torch.backends.cudnn.allow_tf32))
    log(f"versions: {versions}")

    args.out.mkdir(parents=True, exist_ok=True)
    args.logs.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(Path(tempfile.mkdtemp(prefix="sp-")))
    log(f"tokenizer.model sha256 {sha256(tok)} ({tok.stat().st_size} bytes)")
    ids, extra = token_ids(SP_VOCAB)
    log(f"token ids: {ids}")

    failed = []
    for name in names:
        try:
            make_model(name, MODELS[name], args.out, tok, ids, extra, device, versions)
        except Exception:
            failed.append(name)
            log(f"[{name}] FAILED\n{traceback.format_exc()}")
    done = [n for n in names + ([SHARDED] if "qwen3" in names else []) if (args.out / n / "reference.json").exists()]
    if args.llamacpp:
        convert_all(done, args.out, args.llamacpp, args.logs)
    log(f"done: {done}; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
