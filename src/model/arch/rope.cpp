// RoPE frequency tables (see rope.h).
#include "model/arch/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "gpu_accel/error.h"

namespace ga::arch {

std::vector<float> llama3_rope_freq_factors(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  GA_CHECK(rs.high_freq_factor > rs.low_freq_factor && rs.original_context > 0, InvalidFormat,
           "llama3 rope scaling needs high_freq_factor > low_freq_factor and original_max_position_embeddings > 0");
  const double low_freq_wavelen = static_cast<double>(rs.original_context) / rs.low_freq_factor;
  const double high_freq_wavelen = static_cast<double>(rs.original_context) / rs.high_freq_factor;
  const int64_t half = c.n_rot / 2;
  std::vector<float> factors(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(c.rope_freq_base), -2.0 * static_cast<double>(i) /
                                                                            static_cast<double>(c.n_rot));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double divisor = 1.0;  // high frequencies (short wavelengths) are kept
    if (wavelen > low_freq_wavelen) {
      divisor = rs.factor;  // low frequencies are scaled down by the full factor
    } else if (wavelen >= high_freq_wavelen) {
      // In between, blend the scaled and unscaled frequency; the factor is their ratio.
      const double smooth = (static_cast<double>(rs.original_context) / wavelen - rs.low_freq_factor) /
                            (rs.high_freq_factor - rs.low_freq_factor);
      const double new_freq = (1.0 - smooth) * freq / rs.factor + smooth * freq;
      divisor = freq / new_freq;
    }
    factors[static_cast<size_t>(i)] = static_cast<float>(divisor);
  }
  return factors;
}

bool rope_long_factors(const ModelConfig& c, int64_t n_ctx) {
  return c.rope_scaling.type == RopeScalingType::LongRope && n_ctx > c.rope_scaling.original_context;
}

namespace {

// YaRN's correction dimension: the pair index whose wavelength completes `rotations` turns over the
// original context (the paper's and transformers' find_correction_dim, on dims, not pairs).
double yarn_correction_dim(double rotations, double dims, double base, double original) {
  return dims * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

step::RopeTable rope_table(const ModelConfig& c, bool swa, std::span<const float> freq_factors, int64_t n_ctx) {
  const TransformerParams& tp = c.transformer;
  step::RopeTable t;
  t.n_rot = c.n_rot;
  t.neox = c.rope_mode == RopeMode::NeoX;
  const double base = swa && tp.rope_freq_base_swa > 0 ? tp.rope_freq_base_swa : c.rope_freq_base;
  const RopeScaling none;
  const RopeScaling& rs = swa && !tp.rope_scaling_swa ? none : c.rope_scaling;
  const int64_t half = c.n_rot / 2;
  GA_CHECK(freq_factors.empty() || static_cast<int64_t>(freq_factors.size()) == half, InvalidFormat,
           "RoPE frequency factors: ", freq_factors.size(), " values for ", half, " pairs");
  t.inv_freq.resize(static_cast<size_t>(half));
  const double dims = static_cast<double>(c.n_rot);
  double yarn_low = 0, yarn_high = 0;
  if (rs.type == RopeScalingType::Yarn) {
    const double original = static_cast<double>(rs.original_context);
    yarn_low = std::max(0.0, std::floor(yarn_correction_dim(rs.yarn_beta_fast, dims, base, original)));
    yarn_high = std::min(dims - 1, std::ceil(yarn_correction_dim(rs.yarn_beta_slow, dims, base, original)));
    if (yarn_high == yarn_low) yarn_high += 0.001;  // as transformers: no division by zero
  }
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(base, -2.0 * static_cast<double>(i) / dims);
    switch (rs.type) {
      case RopeScalingType::None: break;
      case RopeScalingType::Linear: f /= rs.factor; break;
      case RopeScalingType::Llama3: break;    // through freq_factors (rope_freqs.weight or computed)
      case RopeScalingType::LongRope: break;  // through freq_factors (the short or long ones)
      case RopeScalingType::Yarn: {
        const double ramp = std::clamp((static_cast<double>(i) - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // 1: keep the original frequency
        f = f / rs.factor * (1.0 - extrapolation) + f * extrapolation;
        break;
      }
    }
    if (!freq_factors.empty() && !(swa && !tp.rope_scaling_swa)) f /= freq_factors[static_cast<size_t>(i)];
    t.inv_freq[static_cast<size_t>(i)] = f;
  }
  if (rs.type == RopeScalingType::Yarn) {
    t.mscale = rs.attn_factor > 0 ? rs.attn_factor
                                  : (rs.factor > 1 ? static_cast<float>(0.1 * std::log(rs.factor) + 1.0) : 1.0f);
  } else if (rs.type == RopeScalingType::LongRope) {
    if (rs.attn_factor > 0) {
      t.mscale = rs.attn_factor;
    } else {
      const double scale = static_cast<double>(c.n_ctx_train) / static_cast<double>(rs.original_context);
      t.mscale = scale > 1 ? static_cast<float>(std::sqrt(1.0 + std::log(scale) /
                                                                     std::log(static_cast<double>(rs.original_context))))
                           : 1.0f;
    }
  }
  (void)n_ctx;  // the LongRoPE choice is made by the caller (rope_long_factors), which picks freq_factors
  return t;
}

}  // namespace ga::arch
