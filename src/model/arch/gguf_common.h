// What every decoder family reads the same way from GGUF metadata (llama.cpp's key names and defaults:
// head_count_kv = head_count, key_length = n_embd / n_head, rope.dimension_count = head_dim,
// rope.freq_base = 10000, the rope.scaling.* keys).
#pragma once

#include "gpu_accel/model.h"
#include "model/arch/architecture.h"

namespace ga::arch {

// `ff_required`: feed_forward_length must be present (MoE files may leave the dense length out).
void read_gguf_common(const GgufKeys& hp, ModelConfig& c, bool ff_required = true);

// The MoE keys: expert_count, expert_used_count, expert_feed_forward_length (else the dense length).
void read_gguf_experts(const GgufKeys& hp, ModelConfig& c);

// The keys read_gguf_common / read_gguf_experts read, from a config (prefix `<arch>.`).
void write_gguf_common(const ModelConfig& c, gguf::Writer& w);
void write_gguf_experts(const ModelConfig& c, gguf::Writer& w);

// swa_layers from llama.cpp's pattern rule: with period n, layer il is windowed iff il % n < n - 1
// (n = 0: every layer); attention.sliding_window_pattern overrides `default_period` when present.
void set_swa_period(const GgufKeys& hp, ModelConfig& c, int64_t default_period);

}  // namespace ga::arch
