// The Llama-family tensor contract and its checks (see llama.h).
//
// Checking happens once, at load time, for every format: the forward pass then trusts shapes and
// types and never re-validates per token. Messages name the tensor and both shapes, because the
// usual cause is a converter or quantizer bug that only the tensor name makes findable.
#include <cmath>
#include <numbers>

#include "model/arch/llama.h"
#include "gpu_accel/error.h"

namespace ga::arch {
namespace {

std::string shape_str(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

void check_config(const ModelConfig& c) {
  GA_CHECK(c.n_vocab > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.head_dim > 0 &&
               c.n_ff > 0,
           InvalidFormat, "model '", c.name, "': non-positive hyperparameter (n_vocab ", c.n_vocab, ", n_embd ",
           c.n_embd, ", n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_head_kv ", c.n_head_kv, ", head_dim ",
           c.head_dim, ", n_ff ", c.n_ff, ")");
  GA_CHECK(c.n_head % c.n_head_kv == 0, InvalidFormat, "n_head ", c.n_head, " is not a multiple of n_head_kv ",
           c.n_head_kv);
  GA_CHECK(c.n_rot > 0 && c.n_rot % 2 == 0 && c.n_rot <= c.head_dim, InvalidFormat, "rope dimension count ", c.n_rot,
           " must be even and in (0, head_dim = ", c.head_dim, "]");
  GA_CHECK(std::isfinite(c.rms_eps) && c.rms_eps > 0, InvalidFormat, "rms epsilon ", c.rms_eps, " is not positive");
  GA_CHECK(std::isfinite(c.rope_freq_base) && c.rope_freq_base > 0, InvalidFormat, "rope freq base ",
           c.rope_freq_base, " is not positive");
  GA_CHECK(std::isfinite(c.rope_scaling.factor) && c.rope_scaling.factor > 0, InvalidFormat,
           "rope scaling factor ", c.rope_scaling.factor, " is not positive");
}

}  // namespace

bool is_llama_family(std::string_view arch) { return arch == "llama" || arch == "qwen2"; }

std::vector<TensorSpec> llama_tensor_specs(const ModelConfig& c) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const uint64_t q_dim = u(c.n_head * c.head_dim);
  const uint64_t kv_dim = u(c.n_head_kv * c.head_dim);
  std::vector<TensorSpec> specs;
  specs.push_back({"token_embd.weight", {u(c.n_embd), u(c.n_vocab)}, true});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    specs.push_back({p + "attn_norm.weight", {u(c.n_embd)}, true});
    specs.push_back({p + "attn_q.weight", {u(c.n_embd), q_dim}, true});
    specs.push_back({p + "attn_k.weight", {u(c.n_embd), kv_dim}, true});
    specs.push_back({p + "attn_v.weight", {u(c.n_embd), kv_dim}, true});
    if (c.qkv_bias) {
      specs.push_back({p + "attn_q.bias", {q_dim}, true});
      specs.push_back({p + "attn_k.bias", {kv_dim}, true});
      specs.push_back({p + "attn_v.bias", {kv_dim}, true});
    }
    specs.push_back({p + "attn_output.weight", {q_dim, u(c.n_embd)}, true});
    specs.push_back({p + "ffn_norm.weight", {u(c.n_embd)}, true});
    specs.push_back({p + "ffn_gate.weight", {u(c.n_embd), u(c.n_ff)}, true});
    specs.push_back({p + "ffn_up.weight", {u(c.n_embd), u(c.n_ff)}, true});
    specs.push_back({p + "ffn_down.weight", {u(c.n_ff), u(c.n_embd)}, true});
  }
  specs.push_back({"output_norm.weight", {u(c.n_embd)}, true});
  specs.push_back({"output.weight", {u(c.n_embd), u(c.n_vocab)}, !c.tied_embeddings});
  specs.push_back({"rope_freqs.weight", {u(c.n_rot / 2)}, false});
  return specs;
}

void check_llama_model(const LoadedModel& model, const std::function<void(uint64_t, uint64_t)>& progress) {
  const ModelConfig& c = model.config;
  GA_CHECK(is_llama_family(c.arch), Unsupported, "unsupported architecture '", c.arch,
           "' (supported: llama, qwen2)");
  check_config(c);
  const std::vector<TensorSpec> specs = llama_tensor_specs(c);
  uint64_t total = 0;
  for (const TensorSpec& s : specs) {
    if (const WeightView* w = model.find_weight(s.name)) total += w->nbytes;
  }
  uint64_t done = 0;
  for (const TensorSpec& s : specs) {
    const WeightView* w = model.find_weight(s.name);
    if (w == nullptr) {
      GA_CHECK(!s.required, InvalidFormat, "model is missing tensor ", s.name, " (expected shape ", shape_str(s.ne),
               ")");
      continue;
    }
    GA_CHECK(w->ne == s.ne, InvalidFormat, "tensor ", s.name, " has shape ", shape_str(w->ne), ", expected ",
             shape_str(s.ne));
    const DTypeTraits& t = traits(w->type);
    GA_CHECK(t.supported, Unsupported, "tensor ", s.name, " has type ", t.name, ", which gpu_accel does not support");
    GA_CHECK(s.ne[0] % t.block_size == 0, InvalidFormat, "tensor ", s.name, " has rows of ", s.ne[0],
             " elements, not a multiple of the ", t.name, " block size ", t.block_size);
    uint64_t n_rows = 1;
    for (size_t i = 1; i < s.ne.size(); ++i) n_rows *= s.ne[i];
    GA_CHECK(w->data != nullptr && w->nbytes == row_bytes(w->type, s.ne[0]) * n_rows, InvalidFormat, "tensor ",
             s.name, " holds ", w->nbytes, " bytes, expected ", row_bytes(w->type, s.ne[0]) * n_rows);
    done += w->nbytes;
    if (progress) progress(done, total);
  }
}

std::vector<float> rope_freq_factors_for_forward(const LoadedModel& model) {
  if (model.find_weight("rope_freqs.weight") != nullptr || model.config.rope_scaling.type != RopeScalingType::Llama3) {
    return {};
  }
  return llama3_rope_freq_factors(model.config);
}

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

}  // namespace ga::arch
