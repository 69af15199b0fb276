// make_random_model: the tensor list and metadata of make_gguf.py, weights from a per-row
// splitmix64 stream turned into approximate normals.
//
// Why not std::normal_distribution: it is sequential (one engine for the whole model) and costs
// ~20 ns per value; a 7B model has 6.7e9 values. A sum of four 16-bit uniforms from one 64-bit draw
// (Irwin-Hall, n = 4) has exactly the right mean and variance, a bell shape and tails cut at
// +-3.46 sigma, which is irrelevant for random benchmark weights, and costs ~1 ns.
#include "model/tools/random_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/arch/architecture.h"
#include "model/tools/random_weights.h"
#include "model/tools/row_convert.h"
#include "model/tools/rwkv_to_gguf.h"

namespace ga::tools {
namespace {

constexpr int64_t kRwkvContext = 1048576;  // what the converter writes: "RWKV isn't context limited"
constexpr int64_t kWorldVocab = 65536;     // rwkv_vocab_v20230424, padded

// name, arch, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx, [head_dim, experts, used, ff_exp, ff_shexp, window,
// n_vocab]
// (the real models' shapes; make_gguf.py's for the Llama ones). The tiny-* ones are test sizes with head dim 64
// (or Phi-3's 96), the smallest the tuned attention kernels take.
constexpr ModelPreset kPresets[] = {
    {"llama2-7b", "llama", 4096, 32, 32, 32, 11008, 4096},
    {"llama3-8b", "llama", 4096, 32, 32, 8, 14336, 8192},
    {"llama3-1b", "llama", 2048, 16, 32, 8, 8192, 8192},
    {"qwen3-8b", "qwen3", 4096, 36, 32, 8, 12288, 40960, 128},
    {"gemma2-9b", "gemma2", 3584, 42, 16, 8, 14336, 8192, 256, 0, 0, 0, 0, 4096},
    {"gemma3-4b", "gemma3", 2560, 34, 8, 4, 10240, 131072, 256, 0, 0, 0, 0, 1024},
    {"phi3-mini", "phi3", 3072, 32, 32, 32, 8192, 4096, 96, 0, 0, 0, 0, 2047},
    {"mixtral-8x7b", "llama", 4096, 32, 32, 8, 14336, 32768, 128, 8, 2, 14336},
    {"qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 6144, 40960, 128, 128, 8, 768},
    {"tiny", "llama", 256, 4, 8, 4, 768, 1024},
    {"tiny-hd64", "llama", 256, 2, 4, 2, 512, 1024},
    // every matrix width a multiple of 512: F8_B128 matrices take the GPU's split rows (its FP8 GEMV and GEMM)
    {"tiny-wide", "llama", 512, 2, 8, 4, 1536, 1024},
    {"tiny-qwen3", "qwen3", 256, 2, 4, 2, 512, 1024, 64},
    {"tiny-gemma2", "gemma2", 256, 4, 4, 2, 512, 1024, 64, 0, 0, 0, 0, 24},
    {"tiny-gemma3", "gemma3", 256, 7, 4, 1, 512, 1024, 64, 0, 0, 0, 0, 24},
    {"tiny-phi3", "phi3", 384, 2, 4, 4, 512, 1024, 96, 0, 0, 0, 0, 40},
    {"tiny-mixtral", "llama", 256, 2, 4, 2, 512, 1024, 64, 4, 2, 512},
    {"tiny-qwen2moe", "qwen2moe", 256, 2, 4, 2, 512, 1024, 64, 8, 2, 128, 256},
    {"tiny-qwen3moe", "qwen3moe", 256, 2, 4, 2, 512, 1024, 64, 16, 4, 128},
    // RWKV (head size 64; n_ff as the HF configs give it or the converter derives it: v6 3.5 C, v7 4 C; the
    // LoRA widths follow the converter's rules in preset_config): Finch 1.6B / 3B / 7B, Goose 1.5B / 2.9B / 7.2B.
    {"rwkv6-1.6b", "rwkv6", 2048, 24, 32, 32, 7168, kRwkvContext, 64, 0, 0, 0, 0, 0, kWorldVocab},
    {"rwkv6-3b", "rwkv6", 2560, 32, 40, 40, 8960, kRwkvContext, 64, 0, 0, 0, 0, 0, kWorldVocab},
    {"rwkv6-7b", "rwkv6", 4096, 32, 64, 64, 14336, kRwkvContext, 64, 0, 0, 0, 0, 0, kWorldVocab},
    {"rwkv7-1.5b", "rwkv7", 2048, 24, 32, 32, 8192, kRwkvContext, 64, 0, 0, 0, 0, 0, kWorldVocab},
    {"rwkv7-2.9b", "rwkv7", 2560, 32, 40, 40, 10240, kRwkvContext, 64, 0, 0, 0, 0, 0, kWorldVocab},
    {"rwkv7-7.2b", "rwkv7", 4096, 32, 64, 64, 16384, kRwkvContext, 64, 0, 0, 0, 0, 0, kWorldVocab},
    {"tiny-rwkv6", "rwkv6", 256, 2, 4, 4, 896, kRwkvContext, 64, 0, 0, 0, 0, 0, 1024},
    {"tiny-rwkv7", "rwkv7", 256, 2, 4, 4, 1024, kRwkvContext, 64, 0, 0, 0, 0, 0, 1024},
};

constexpr uint32_t kAlignment = 32;
constexpr uint32_t kQuantizationVersion = 2;
constexpr float kRmsEps = 1e-5f;
constexpr float kRopeFreqBase = 10000.0f;
constexpr int64_t kRwkv6Rescale = 6;  // the Finch HF configs' rescale_every, which the converter writes

}  // namespace

ModelConfig preset_config(const ModelPreset& p, int64_t n_vocab) {
  ModelConfig c;
  c.arch = p.arch;
  c.name = std::string("random-") + p.name;
  c.n_vocab = n_vocab;
  c.n_embd = p.n_embd;
  c.n_layer = p.n_layer;
  c.n_head = p.n_head;
  c.n_head_kv = p.n_head_kv;
  c.head_dim = p.head_dim > 0 ? p.head_dim : p.n_embd / p.n_head;
  c.n_rot = c.head_dim;
  c.n_ff = p.n_ff;
  c.n_ctx_train = p.n_ctx;
  c.rms_eps = kRmsEps;
  c.rope_freq_base = kRopeFreqBase;
  TransformerParams& tp = c.transformer;
  tp.n_expert = p.n_expert;
  tp.n_expert_used = p.n_expert_used;
  tp.n_ff_exp = p.n_ff_exp;
  tp.n_ff_shexp = p.n_ff_shexp;
  tp.sliding_window = p.sliding_window;
  const std::string_view arch = p.arch;
  if (arch == "qwen3" || arch == "qwen3moe") {
    tp.qk_norm = true;
    c.rope_freq_base = 1e6f;
  } else if (arch == "qwen2moe") {
    c.qkv_bias = true;
  } else if (arch == "gemma2") {
    c.tied_embeddings = true;
    tp.attn_softcap = 50.0f;
    tp.final_softcap = 30.0f;
    tp.post_norms = true;
  } else if (arch == "gemma3") {
    c.tied_embeddings = true;
    tp.qk_norm = true;
    tp.post_norms = true;
    c.rope_freq_base = 1e6f;
    tp.rope_freq_base_swa = 10000.0f;
    c.rope_scaling.type = RopeScalingType::Linear;
    c.rope_scaling.factor = 8.0f;
  } else if (arch == "phi3") {
    tp.fused_qkv = true;
    tp.fused_gate_up = true;
  } else if (arch == "llama" && p.n_expert > 0) {
    c.rope_freq_base = 1e6f;
  } else if (arch == "rwkv6") {
    // the converter's rule when the HF config leaves them out (it always does for Finch)
    c.rwkv.time_mix_extra_dim = p.n_embd == 4096 ? 64 : 32;
    c.rwkv.time_decay_extra_dim = p.n_embd == 4096 ? 128 : 64;
    c.rwkv.rescale_every = kRwkv6Rescale;
  } else if (arch == "rwkv7") {
    // the converter's calc_lora_rank (BlinkDL's rule; it gives the published Goose configs' widths)
    const auto rank = [&](double exponent, double multiplier) {
      const double r = std::nearbyint(std::pow(static_cast<double>(p.n_embd), exponent) * multiplier / 32.0);
      return std::max<int64_t>(1, static_cast<int64_t>(r)) * 32;
    };
    c.rwkv.lora_decay = rank(0.5, 1.8);
    c.rwkv.lora_iclr = rank(0.5, 1.8);
    c.rwkv.lora_value_mix = rank(0.5, 1.3);
    c.rwkv.lora_gate = rank(0.8, 0.6);
  }
  return c;
}

const ModelPreset* find_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

std::string preset_names() {
  std::string out;
  for (const auto& p : kPresets) out += std::string(out.empty() ? "" : ", ") + p.name;
  return out;
}

MakeModelSummary make_random_model(const std::string& output_path, const MakeModelOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const ModelPreset* preset = find_preset(options.preset);
  GA_CHECK(preset != nullptr, InvalidArgument, "unknown preset '", options.preset, "' (one of ", preset_names(), ")");
  const std::optional<FileType> ftype = file_type_from_name(options.type);
  GA_CHECK(ftype.has_value(), InvalidArgument, "unknown type '", options.type, "' (one of ", file_type_names(), ")");

  const ModelPreset& p = *preset;
  const bool rwkv = std::string_view(p.arch).starts_with("rwkv");
  // The tokenizer: a vocab GGUF's keys, or (RWKV) the World vocabulary laid out as the converter does.
  std::optional<gguf::File> vocab_gguf;
  std::optional<Vocab> world;
  int64_t n_vocab = p.n_vocab;
  if (!options.vocab_path.empty() && !options.vocab_path.ends_with(".txt")) {
    vocab_gguf = gguf::File::open(options.vocab_path);
    const auto tokens = vocab_gguf->get_string_array("tokenizer.ggml.tokens");
    GA_CHECK(tokens.has_value() && !tokens->empty(), InvalidFormat, "'", options.vocab_path,
             "' has no tokenizer.ggml.tokens: not a vocabulary GGUF");
    GA_CHECK(n_vocab == 0 || static_cast<int64_t>(tokens->size()) <= n_vocab, InvalidArgument, "'", options.vocab_path,
             "' has ", tokens->size(), " tokens, more than preset ", p.name, "'s ", n_vocab);
    if (n_vocab == 0) n_vocab = static_cast<int64_t>(tokens->size());
  } else {
    GA_CHECK(rwkv, InvalidArgument, "preset ", p.name, " needs a vocab-only GGUF (--vocab)");
    const std::optional<Vocab> file =
        options.vocab_path.empty() ? std::nullopt : std::optional<Vocab>(Vocab::from_rwkv_world(options.vocab_path));
    world = rwkv_world_gguf_vocab(file ? &*file : nullptr, n_vocab);
  }

  const ModelConfig config = preset_config(p, n_vocab);
  const arch::ArchInfo& family = arch::arch_of(config);
  GA_CHECK(static_cast<bool>(family.write_gguf), Internal, "architecture ", config.arch, " has no GGUF writer");
  gguf::Writer writer;
  writer.set("general.architecture", gguf::Value::string(config.arch));
  writer.set("general.name", gguf::Value::string(config.name));
  writer.set("general.alignment", gguf::Value::u32(kAlignment));
  writer.set("general.file_type", gguf::Value::u32(ftype->id));
  family.write_gguf(config, writer);
  if (vocab_gguf) {
    writer.copy_metadata(*vocab_gguf, "tokenizer.");
  } else {
    write_rwkv_tokenizer(*world, writer);
  }
  writer.set("general.quantization_version", gguf::Value::u32(kQuantizationVersion));

  MixContext ctx;
  ctx.n_layer = p.n_layer;
  ctx.n_gqa = p.n_head / p.n_head_kv;
  ctx.n_attn_v = p.n_layer;
  ctx.has_output = !config.tied_embeddings;

  ThreadPool pool(options.n_threads);
  MakeModelSummary summary;
  summary.ftype = *ftype;
  summary.n_vocab = n_vocab;
  // the file's own layout where it differs from what the forward binds (RWKV: llama.cpp's names)
  std::vector<arch::TensorSpec> specs = family.gguf_tensor_specs ? family.gguf_tensor_specs(config) : family.tensor_specs(config);
  std::erase_if(specs, [](const arch::TensorSpec& t) { return !t.required; });
  // The type of a 2-D tensor llama-quantize leaves alone (RWKV's LoRAs): what the converter gave it, F32 for its
  // list, else the conversion's float type (F16 below a quantized type).
  const DType float_type = traits(ftype->base).quantized ? DType::F16 : ftype->base;
  for (size_t index = 0; index < specs.size(); ++index) {
    const arch::TensorSpec& spec = specs[index];
    const bool matrix = should_quantize(spec.name, spec.ne.size());
    DType type = matrix ? choose_tensor_type(*ftype, ctx, spec.name, spec.ne[0], false) : DType::F32;
    if (!matrix && rwkv && spec.ne.size() >= 2 && !converter_keeps_f32(spec.name)) type = float_type;
    const int64_t cols = static_cast<int64_t>(spec.ne[0]);
    int64_t rows = 1;  // a 3-D expert stack is quantized and drawn as rows too
    for (size_t d = 1; d < spec.ne.size(); ++d) rows *= static_cast<int64_t>(spec.ne[d]);
    const uint64_t seed = options.seed;
    const Distribution dist = distribution(spec);
    const float mean = dist.mean, std_dev = dist.std;
    writer.add_tensor_deferred(spec.name, type, spec.ne, [=, &pool](uint8_t* dst) {
      generate_rows(type, dst, rows, cols, &pool, [&](int64_t row, float* out) {
        RowRng rng(seed, index, static_cast<uint64_t>(row));
        for (int64_t i = 0; i < cols; ++i) out[i] = mean + std_dev * rng.normal();
      });
    });
    summary.n_params += static_cast<uint64_t>(rows * cols);
    summary.data_bytes += row_bytes(type, spec.ne[0]) * static_cast<uint64_t>(rows);
    ++summary.n_tensors;
  }
  writer.write(output_path);
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace ga::tools
