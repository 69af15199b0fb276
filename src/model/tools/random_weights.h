// The random weights of make-model, shared by its GGUF and Hugging Face writers so that both draw the same
// values for the same (seed, tensor index, row): a per-row splitmix64 stream turned into approximate normals
// (the distributions are described in random_model.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "model/arch/architecture.h"

namespace ga::tools {

inline constexpr float kNormWeightStd = 0.1f;
inline constexpr float kRouterStd = 3.0f;  // router logits of std ~3: the top-k changes from token to token
inline constexpr float kRwkvLoraUpStd = 0.01f;

inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One row's stream: splitmix64 (a counter through a bijective mixer), keyed so that no two
// (seed, tensor, row) triples share a starting state in practice.
class RowRng {
 public:
  RowRng(uint64_t seed, uint64_t tensor, uint64_t row)
      : state_(splitmix64_mix(seed ^ splitmix64_mix((tensor << 40) ^ row ^ 0x6a09e667f3bcc909ULL))) {}
  uint64_t next() {
    state_ += kGolden;
    return splitmix64_mix(state_);
  }
  // Approximately N(0, 1): the sum of the four 16-bit lanes of one draw, centred and scaled.
  float normal() {
    const uint64_t r = next();
    const uint32_t sum = static_cast<uint32_t>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
    return (static_cast<float>(sum) - kMean) * kInvStd;
  }

 private:
  static constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  static constexpr float kMean = 4 * 32767.5f;  // 4 lanes uniform on 0..65535
  // 1 / sqrt(4 * (65536^2 - 1) / 12), the standard deviation of the sum
  static constexpr float kInvStd = 2.6428998e-05f;
  uint64_t state_;
};

// How a tensor's values are drawn, from its name and shape (see the header).
struct Distribution {
  float mean = 0.0f;
  float std = 1.0f;
};

inline Distribution distribution(const arch::TensorSpec& t) {
  const std::string& n = t.name;
  const float fan_in = static_cast<float>(t.ne[0]);
  if (n == "token_embd.weight") return {0.0f, 1.0f};  // a lookup: fan_in 1
  if (n.ends_with("norm.weight") || n.ends_with("time_mix_ln.weight")) return {1.0f, kNormWeightStd};
  if (n.ends_with(".bias")) return {0.0f, kNormWeightStd};
  if (n.starts_with("rope_factors")) return {1.0f, 0.0f};
  if (n.ends_with("ffn_gate_inp.weight")) return {0.0f, kRouterStd / std::sqrt(fan_in)};
  // RWKV's LoRA up-projections stay small, as BlinkDL initializes them (uniform +-0.01 or zeros): at N(0, 1/fan_in)
  // v6's data-dependent mixes and decays reach +-2, and a 24-layer random model then amplifies float rounding
  // about 3x per layer (llama.cpp and this engine: 6e-7 apart after 2 layers, 8e-2 after 24).
  if (n.ends_with("time_mix_w2.weight") || n.ends_with("time_mix_decay_w2.weight")) return {0.0f, kRwkvLoraUpStd};
  return {0.0f, 1.0f / std::sqrt(fan_in)};
}

}  // namespace ga::tools
