// RoPE frequency tables: every scaling scheme the architectures use, turned into the per-pair
// frequencies and the q/k factor the backends apply (step::RopeTable).
//
// theta_i = base^(-2i / n_rot) for pair i, then:
//   Linear (position interpolation): theta_i / factor;
//   Llama 3 (transformers' _compute_llama3_parameters): a smooth blend between theta_i and theta_i / factor by
//     wavelength, expressed as per-pair divisors (GGUF stores them as rope_freqs.weight);
//   YaRN (arXiv 2309.00071; transformers' _compute_yarn_parameters and llama.cpp's rope_yarn): the interpolated
//     frequency theta_i / factor below the correction range, the original one above it, a linear ramp in
//     between; q and k are scaled by 0.1 ln(factor) + 1 unless attn_factor says otherwise;
//   LongRoPE (Phi-3.5 / Phi-4 mini): theta_i / f_i with the short factors, or the long ones when the context
//     exceeds original_context (llama.cpp's rule: the context decides once, not the current length); q and k
//     scaled by attn_factor, else sqrt(1 + ln(max_positions / original) / ln(original)).
// Frequencies are double: pos * theta reaches thousands of radians at long contexts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/step_ops.h"
#include "gpu_accel/model.h"

namespace ga::arch {

// Per-pair frequency divisors for Llama-3.1-style scaling ([n_rot/2]). Loaders that know only the config
// (not a rope_freqs.weight tensor) can store these as rope_freqs.weight.
std::vector<float> llama3_rope_freq_factors(const ModelConfig& config);

// The table of the model's full-attention layers (swa = false) or of its windowed ones, for a context of
// n_ctx positions. freq_factors: the model's rope_freqs.weight, or the LongRoPE factors chosen by
// rope_long_factors(); empty when there are none.
step::RopeTable rope_table(const ModelConfig& config, bool swa, std::span<const float> freq_factors, int64_t n_ctx);

// Whether a LongRoPE model uses its long factors at a context of n_ctx positions.
bool rope_long_factors(const ModelConfig& config, int64_t n_ctx);

}  // namespace ga::arch
