// make_random_hf_model: the GGUF writer's tensor list renamed to transformers' names, each tensor's rows drawn by
// the GGUF writer's streams (random_weights.h) and written one tensor at a time (safetensors::write_sharded).
#include "model/tools/random_hf_model.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/arch/architecture.h"
#include "model/tools/random_weights.h"
#include "model/tools/row_convert.h"

namespace ga::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr int64_t kLlama2Vocab = 32000;
constexpr int64_t kLlama3Vocab = 128256;
constexpr int64_t kQwen3Vocab = 151936;

// GGUF name -> transformers name: the inverse of the families' HfNameScheme tables (hf_common.cpp, qwen.cpp),
// checked against the family's own hf_tensor_name so the two cannot drift apart.
struct Rename {
  std::string_view gguf;
  std::string_view hf;
};
constexpr Rename kTop[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
constexpr Rename kLayer[] = {
    {"attn_norm.weight", "input_layernorm.weight"},    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},      {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string hf_name(const std::string& gguf) {
  for (const Rename& r : kTop) {
    if (gguf == r.gguf) return std::string(r.hf);
  }
  if (gguf.starts_with("blk.")) {
    const size_t dot = gguf.find('.', 4);
    const std::string_view suffix = std::string_view(gguf).substr(dot + 1);
    for (const Rename& r : kLayer) {
      if (suffix == r.gguf) return "model.layers." + gguf.substr(4, dot - 4) + "." + std::string(r.hf);
    }
  }
  GA_THROW(Unsupported, "make-model --format hf: no Hugging Face name for tensor ", gguf);
}

struct HfFamily {
  const char* architecture;  // config.json "architectures"
  const char* model_type;
  bool permute_qk;  // GGUF stores q/k rows in interleaved RoPE order (Llama); HF in rotate_half order
};

std::optional<HfFamily> hf_family(const ModelPreset& p) {
  const std::string_view arch = p.arch;
  if (arch == "llama" && p.n_expert == 0) return HfFamily{"LlamaForCausalLM", "llama", true};
  if (arch == "qwen3") return HfFamily{"Qwen3ForCausalLM", "qwen3", false};
  return std::nullopt;
}

const char* torch_dtype(DType type) {
  switch (type) {
    case DType::F32:
      return "float32";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    default:
      GA_THROW(InvalidArgument,
               "make-model --format hf: type must be F32, F16 or BF16 (quantize the folder "
               "to FP8 afterwards with `gpu-accel quantize IN OUT fp8`)");
  }
}

// The shortest decimal of a float as a double (1e-05, not 9.999999747378752e-06), which reads back as the same float.
double json_float(float v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof(text), v).ptr;
  return std::strtod(std::string(text, end).c_str(), nullptr);
}

ordered_json config_json(const ModelConfig& c, const HfFamily& family, DType type) {
  ordered_json j;
  j["architectures"] = {family.architecture};
  j["model_type"] = family.model_type;
  j["hidden_size"] = c.n_embd;
  j["intermediate_size"] = c.n_ff;
  j["num_hidden_layers"] = c.n_layer;
  j["num_attention_heads"] = c.n_head;
  j["num_key_value_heads"] = c.n_head_kv;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.n_ctx_train;
  j["rms_norm_eps"] = json_float(c.rms_eps);
  j["rope_theta"] = json_float(c.rope_freq_base);
  j["rope_scaling"] = nullptr;  // the presets of these families use plain RoPE, as their GGUF twins do
  j["attention_bias"] = false;
  if (std::string_view(family.model_type) == "llama") j["mlp_bias"] = false;
  if (std::string_view(family.model_type) == "qwen3") {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  j["vocab_size"] = c.n_vocab;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["torch_dtype"] = torch_dtype(type);
  return j;
}

// The GGUF row whose values HF row `row` of a q or k projection holds. llama.cpp's converter permutes
// reshape(n_head, 2, head_dim / 2, n_embd).swapaxes(1, 2): GGUF row (h, i, j) = HF row (h, j, i), i < head_dim / 2.
int64_t gguf_row_of_hf_row(int64_t row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t head = row / head_dim, k = row % head_dim;
  return head * head_dim + 2 * (k % half) + k / half;
}

}  // namespace

int64_t hf_default_vocab(const ModelPreset& p) {
  const std::string_view name = p.name;
  if (name.starts_with("llama3")) return kLlama3Vocab;
  if (name.starts_with("qwen3")) return kQwen3Vocab;
  return kLlama2Vocab;
}

MakeHfModelSummary make_random_hf_model(const std::string& out_dir, const MakeModelOptions& options,
                                        uint64_t max_shard_bytes) {
  const auto start = std::chrono::steady_clock::now();
  const ModelPreset* preset = find_preset(options.preset);
  GA_CHECK(preset != nullptr, InvalidArgument, "unknown preset '", options.preset, "' (one of ", preset_names(), ")");
  const std::optional<HfFamily> family = hf_family(*preset);
  GA_CHECK(family.has_value(), Unsupported, "make-model --format hf: preset ", preset->name, " (", preset->arch,
           ") is not supported; Hugging Face output covers the dense Llama and Qwen3 presets (use the GGUF output)");
  const std::optional<FileType> ftype = file_type_from_name(options.type);
  GA_CHECK(ftype.has_value(), InvalidArgument, "unknown type '", options.type, "' (one of F32, F16, BF16)");
  const DType type = ftype->base;
  torch_dtype(type);  // refuses a quantized type before anything is written

  int64_t n_vocab = preset->n_vocab > 0 ? preset->n_vocab : hf_default_vocab(*preset);
  if (!options.vocab_path.empty()) {
    const gguf::File vocab = gguf::File::open(options.vocab_path);
    const auto tokens = vocab.get_string_array("tokenizer.ggml.tokens");
    GA_CHECK(tokens.has_value() && !tokens->empty(), InvalidFormat, "'", options.vocab_path,
             "' has no tokenizer.ggml.tokens: not a vocabulary GGUF");
    n_vocab = static_cast<int64_t>(tokens->size());
  }
  const ModelConfig config = preset_config(*preset, n_vocab);
  const arch::ArchInfo& arch_info = arch::arch_of(config);

  // The GGUF writer's list and order: the tensor index keys the row streams (random_model.cpp).
  std::vector<arch::TensorSpec> specs =
      arch_info.gguf_tensor_specs ? arch_info.gguf_tensor_specs(config) : arch_info.tensor_specs(config);
  std::erase_if(specs, [](const arch::TensorSpec& t) { return !t.required; });

  auto pool = std::make_shared<ThreadPool>(options.n_threads);
  MakeHfModelSummary summary;
  summary.n_vocab = n_vocab;
  std::vector<safetensors::DeferredTensor> tensors;
  for (size_t index = 0; index < specs.size(); ++index) {
    const arch::TensorSpec& spec = specs[index];
    safetensors::DeferredTensor t;
    t.name = hf_name(spec.name);
    const std::optional<arch::HfTensorName> back = arch_info.hf_tensor_name(t.name);
    GA_CHECK(back.has_value() && back->gguf == spec.name, Internal, "make-model --format hf: ", t.name,
             " does not map back to ", spec.name);
    t.dtype = safetensors::ga_to_dtype(type);
    t.shape.assign(spec.ne.rbegin(), spec.ne.rend());  // torch order
    const int64_t cols = static_cast<int64_t>(spec.ne[0]);
    int64_t rows = 1;
    for (size_t d = 1; d < spec.ne.size(); ++d) rows *= static_cast<int64_t>(spec.ne[d]);
    t.nbytes = row_bytes(type, spec.ne[0]) * static_cast<uint64_t>(rows);
    const bool permuted =
        family->permute_qk && (spec.name.ends_with("attn_q.weight") || spec.name.ends_with("attn_k.weight"));
    const int64_t head_dim = config.head_dim;
    const Distribution dist = distribution(spec);
    const uint64_t seed = options.seed;
    t.fill = [=](uint8_t* dst) {
      generate_rows(type, dst, rows, cols, pool.get(), [&](int64_t row, float* out) {
        const int64_t source = permuted ? gguf_row_of_hf_row(row, head_dim) : row;
        RowRng rng(seed, index, static_cast<uint64_t>(source));
        for (int64_t i = 0; i < cols; ++i) out[i] = dist.mean + dist.std * rng.normal();
      });
    };
    summary.n_params += static_cast<uint64_t>(rows * cols);
    summary.data_bytes += t.nbytes;
    tensors.push_back(std::move(t));
  }
  summary.n_tensors = static_cast<int>(tensors.size());

  const std::vector<std::string> files = safetensors::write_sharded(out_dir, tensors, max_shard_bytes);
  summary.n_files = static_cast<int>(files.size()) - (files.size() > 1 ? 1 : 0);  // the index is not a shard
  const fs::path config_path = fs::path(out_dir) / "config.json";
  std::ofstream out(config_path, std::ios::binary | std::ios::trunc);
  out << config_json(config, *family, type).dump(2) << "\n";
  GA_CHECK(out.good(), Io, "cannot write '", config_path.string(), "'");
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace ga::tools
