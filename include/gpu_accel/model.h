// Loading models: a GGUF file or a Hugging Face folder (config.json + *.safetensors + tokenizer.json)
// becomes one LoadedModel: hyperparameters, named weight views and the vocabulary.
//
// Weights are named with GGUF's names (token_embd.weight, blk.N.attn_q.weight, ...) whatever the
// source, so the architectures never see file formats. Views point into memory-mapped files that
// the LoadedModel keeps alive; nothing is copied unless a conversion is needed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu_accel/dtype.h"
#include "gpu_accel/tokenizer.h"

namespace ga {

enum class RopeMode {
  Normal,  // rotate adjacent pairs (x[2i], x[2i+1]); llama.cpp's mode for GGUF "llama"
  NeoX,    // rotate halves (x[i], x[i + n_rot/2]); Hugging Face's rotate_half, GGUF "qwen2", "qwen3", ...
};

enum class RopeScalingType { None, Linear, Llama3, Yarn, LongRope };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  float factor = 1.0f;            // Linear, Llama3, YaRN
  float low_freq_factor = 1.0f;   // Llama3
  float high_freq_factor = 4.0f;  // Llama3
  int64_t original_context = 8192;  // Llama3, YaRN, LongRoPE: original_max_position_embeddings
  float yarn_beta_fast = 32.0f;   // YaRN: the ramp between extrapolated and interpolated frequencies
  float yarn_beta_slow = 1.0f;
  // YaRN / LongRoPE: the factor q and k are multiplied by (HF's attention_factor); 0: the scheme's default
  // (YaRN 0.1 ln(factor) + 1; LongRoPE sqrt(1 + ln(max_positions / original) / ln(original))).
  float attn_factor = 0.0f;
  // LongRoPE: the per-pair divisors come as tensors rope_factors_short.weight / rope_factors_long.weight
  // ([n_rot/2]); the long ones serve contexts longer than original_context (llama.cpp's rule).
};

enum class FfnActivation { Silu, GeluTanh };

// The decoder-only transformer's knobs beyond the Llama baseline: what differs between the families that
// share model/arch/decoder.cpp (Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3, Mixtral, Qwen-MoE). Each family's
// reader sets them from GGUF keys or config.json; the forward reads only these, never a family's name.
struct TransformerParams {
  bool qk_norm = false;          // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  float attn_scale = 0.0f;       // the scores' scale; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;     // scores -> cap * tanh(scores / cap) (Gemma 2); 0: none
  float final_softcap = 0.0f;    // the same on the logits (Gemma 2); 0: none
  // Sliding-window attention: a windowed layer's query sees its own position and the sliding_window - 1
  // before it (Hugging Face's convention). swa_layers[il] != 0 marks the windowed layers; empty: none.
  int64_t sliding_window = 0;
  std::vector<uint8_t> swa_layers;
  float rope_freq_base_swa = 0.0f;       // the windowed layers' RoPE base (Gemma 3); 0: rope_freq_base
  bool rope_scaling_swa = true;          // whether rope_scaling applies to the windowed layers too
  bool post_norms = false;               // RMSNorm after attention and after the FFN (Gemma 2/3)
  float embed_scale = 1.0f;              // the embeddings are multiplied by this (Gemma: sqrt(n_embd))
  FfnActivation ffn_act = FfnActivation::Silu;
  bool fused_qkv = false;                // one attn_qkv.weight (Phi-3) instead of attn_q/k/v
  bool fused_gate_up = false;            // ffn_up.weight holds [gate | up] (Phi-3)
  // Mixture of experts (n_expert > 0): every layer's FFN is ffn_gate_inp (the router) over the
  // ffn_{gate,up,down}_exps stacks; top n_expert_used by softmax, renormalized when expert_norm_topk;
  // n_ff_shexp > 0 adds a shared expert (ffn_*_shexp) gated by sigmoid(ffn_gate_inp_shexp . x).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool expert_norm_topk = true;
  int64_t n_ff_shexp = 0;
};

// RWKV's hyperparameters beyond ModelConfig's (llama.cpp's GGUF keys `rwkv6.*` / `rwkv7.*`). The LoRA widths are
// what a GGUF writer needs (make-model); a loaded model's forward takes them from the tensors' shapes.
struct RwkvParams {
  float layer_norm_eps = 1e-5f;  // ln0, ln1, ln2, ln_out
  // The time mix's group norm (ln_x). 0: the version's own, as rwkv.cpp and llama.cpp fix it (v5: 1e-5; v6, v7:
  // 64e-5); fla's RWKV-7 folders: head_dim * norm_eps.
  float group_norm_eps = 0.0f;
  // rescale_every_n_layers: llama.cpp's converter divided the time-mix output and channel-mix value matrices of
  // layer il by 2^(il / n) (against fp16 overflow), and the forward halves the residual stream after every n-th
  // layer to match. 0: no rescaling (rwkv.cpp files).
  int64_t rescale_every = 0;
  int64_t time_mix_extra_dim = 0, time_decay_extra_dim = 0;                   // v6's token-shift and decay LoRAs
  int64_t lora_decay = 0, lora_iclr = 0, lora_value_mix = 0, lora_gate = 0;  // v7's four LoRAs
};

// The part of a tensor-parallel group a model holds (model/arch/tensor_parallel.h): its attention heads and
// feed-forward columns are rank's share of world; the forward sums the partial outputs of the attention and
// FFN output projections over the group. world 1: the whole model.
struct TensorParallelShard {
  int world = 1;
  int rank = 0;
  // The classifier is split by vocabulary rows (rank r computes logits [r V/W, (r+1) V/W) and the group gathers
  // them); false: every rank holds the whole classifier (tied embeddings, or a vocabulary W does not divide).
  bool vocab_parallel = false;
};

struct ModelConfig {
  std::string arch;  // "llama", "qwen3", "gemma2", ... (GGUF general.architecture)
  std::string name;  // general.name or the folder name
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // n_embd / n_head unless the file says otherwise
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  int64_t n_rot = 0;  // rotary dimensions per head (== head_dim for Llama-family)
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  RopeMode rope_mode = RopeMode::Normal;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;  // output.weight absent: the classifier is token_embd.weight
  bool qkv_bias = false;         // Qwen2: attn_{q,k,v}.bias present
  TransformerParams transformer;
  RwkvParams rwkv;
  TensorParallelShard shard;
};

// A weight tensor in its stored type. ne in ggml order: ne[0] is the row length (in_features),
// ne[1] the number of rows (out_features); y = W x uses the rows.
struct WeightView {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> ne;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t rows() const { return ne.size() > 1 ? static_cast<int64_t>(ne[1]) : 1; }
  int64_t cols() const { return ne.empty() ? 0 : static_cast<int64_t>(ne[0]); }
};

// One metadata entry for `inspect` (key and rendered value).
struct MetadataEntry {
  std::string key;
  std::string value;
};

// The weights' precision after load (gpu_accel/precision.h: apply_precision): the mode that was applied, and the
// one-line account logged at load ("fp8 (auto: sm_90 has FP8 tensor cores); 112 matrices F8_B128, ...").
struct ModelPrecision {
  std::string mode = "native";  // what the weights are: "native", "bf16" or "fp8" (fp8 that converted nothing: native)
  std::string detail;           // empty until apply_precision ran
};

struct LoadedModel {
  ModelConfig config;
  std::string format;  // "gguf" or "safetensors"
  std::string path;
  std::map<std::string, WeightView, std::less<>> weights;
  Vocab vocab;
  std::vector<MetadataEntry> metadata;
  ModelPrecision precision;
  std::vector<std::shared_ptr<const void>> storage;  // mappings and converted buffers the views use

  const WeightView& weight(std::string_view name) const;  // throws InvalidFormat naming the tensor
  const WeightView* find_weight(std::string_view name) const;
  uint64_t weight_bytes() const;
};

struct LoadOptions {
  // Called with (bytes done, bytes total) while weights are read or checked; may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
};

// Loads a .gguf file or a Hugging Face model folder. Checks that the architecture is supported,
// that every tensor the architecture needs exists with the right shape and a supported type, and
// throws a ga::Error naming the problem otherwise.
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

// The pieces, for tests and tools.
LoadedModel load_gguf_model(const std::string& path, const LoadOptions& options = {});
LoadedModel load_hf_model(const std::string& dir, const LoadOptions& options = {});
// An rwkv.cpp model file (RWKV v4, v5.1, v5.2, v6, v7; FP32, FP16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
LoadedModel load_rwkv_model(const std::string& path, const LoadOptions& options = {});
bool is_rwkv_cpp_file(const std::string& path);  // the file starts with the rwkv.cpp magic "ggmf"

}  // namespace ga
