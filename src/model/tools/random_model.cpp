// make_random_model: the tensor list and metadata of make_gguf.py, weights from a per-row
// splitmix64 stream turned into approximate normals.
//
// Why not std::normal_distribution: it is sequential (one engine for the whole model) and costs
// ~20 ns per value; a 7B model has 6.7e9 values. A sum of four 16-bit uniforms from one 64-bit draw
// (Irwin-Hall, n = 4) has exactly the right mean and variance, a bell shape and tails cut at
// +-3.46 sigma, which is irrelevant for random benchmark weights, and costs ~1 ns.
#include "model/tools/random_model.h"

#include <chrono>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/tools/row_convert.h"

namespace ga::tools {
namespace {

constexpr ModelPreset kPresets[] = {
    // name, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx (make_gguf.py's PRESETS)
    {"llama2-7b", 4096, 32, 32, 32, 11008, 4096},
    {"llama3-8b", 4096, 32, 32, 8, 14336, 8192},
    {"llama3-1b", 2048, 16, 32, 8, 8192, 8192},
    {"tiny", 256, 4, 8, 4, 768, 1024},
    // head_dim 64 (as llama3-1b) at test size: the tuned attention kernels' smallest head
    {"tiny-hd64", 256, 2, 4, 2, 512, 1024},
};

constexpr uint32_t kAlignment = 32;
constexpr uint32_t kQuantizationVersion = 2;
constexpr float kRmsEps = 1e-5f;
constexpr float kRopeFreqBase = 10000.0f;
constexpr float kNormWeightStd = 0.1f;

uint64_t splitmix64_mix(uint64_t z) {
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

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order
  float mean = 0.0f;
  float std = 1.0f;
};

std::vector<TensorSpec> llama_tensors(const ModelPreset& p, int64_t n_vocab) {
  const uint64_t dim = static_cast<uint64_t>(p.n_embd), ffn = static_cast<uint64_t>(p.n_ff);
  const uint64_t kv_dim = dim / static_cast<uint64_t>(p.n_head) * static_cast<uint64_t>(p.n_head_kv);
  const uint64_t vocab = static_cast<uint64_t>(n_vocab);
  auto matrix = [](std::string name, uint64_t cols, uint64_t rows) {
    return TensorSpec{std::move(name), {cols, rows}, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols))};
  };
  auto norm = [&](std::string name) { return TensorSpec{std::move(name), {dim}, 1.0f, kNormWeightStd}; };
  std::vector<TensorSpec> t;
  t.push_back(TensorSpec{"token_embd.weight", {dim, vocab}, 0.0f, 1.0f});  // a lookup: fan_in 1
  for (int64_t i = 0; i < p.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    t.push_back(norm(b + "attn_norm.weight"));
    t.push_back(matrix(b + "attn_q.weight", dim, dim));
    t.push_back(matrix(b + "attn_k.weight", dim, kv_dim));
    t.push_back(matrix(b + "attn_v.weight", dim, kv_dim));
    t.push_back(matrix(b + "attn_output.weight", dim, dim));
    t.push_back(norm(b + "ffn_norm.weight"));
    t.push_back(matrix(b + "ffn_gate.weight", dim, ffn));
    t.push_back(matrix(b + "ffn_up.weight", dim, ffn));
    t.push_back(matrix(b + "ffn_down.weight", ffn, dim));
  }
  t.push_back(norm("output_norm.weight"));
  t.push_back(matrix("output.weight", dim, vocab));
  return t;
}

}  // namespace

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

  const gguf::File vocab = gguf::File::open(options.vocab_path);
  const auto tokens = vocab.get_string_array("tokenizer.ggml.tokens");
  GA_CHECK(tokens.has_value() && !tokens->empty(), InvalidFormat, "'", options.vocab_path,
           "' has no tokenizer.ggml.tokens: not a vocabulary GGUF");
  const int64_t n_vocab = static_cast<int64_t>(tokens->size());
  const ModelPreset& p = *preset;

  gguf::Writer writer;
  writer.set("general.architecture", gguf::Value::string("llama"));
  writer.set("general.name", gguf::Value::string(std::string("random-") + p.name));
  writer.set("general.alignment", gguf::Value::u32(kAlignment));
  writer.set("general.file_type", gguf::Value::u32(ftype->id));
  auto u32 = [](int64_t v) { return gguf::Value::u32(static_cast<uint32_t>(v)); };
  writer.set("llama.context_length", u32(p.n_ctx));
  writer.set("llama.embedding_length", u32(p.n_embd));
  writer.set("llama.block_count", u32(p.n_layer));
  writer.set("llama.feed_forward_length", u32(p.n_ff));
  writer.set("llama.rope.dimension_count", u32(p.n_embd / p.n_head));
  writer.set("llama.attention.head_count", u32(p.n_head));
  writer.set("llama.attention.head_count_kv", u32(p.n_head_kv));
  writer.set("llama.attention.layer_norm_rms_epsilon", gguf::Value::f32(kRmsEps));
  writer.set("llama.rope.freq_base", gguf::Value::f32(kRopeFreqBase));
  writer.set("llama.vocab_size", u32(n_vocab));
  writer.copy_metadata(vocab, "tokenizer.");
  writer.set("general.quantization_version", gguf::Value::u32(kQuantizationVersion));

  MixContext ctx;
  ctx.n_layer = p.n_layer;
  ctx.n_gqa = p.n_head / p.n_head_kv;
  ctx.n_attn_v = p.n_layer;
  ctx.has_output = true;

  ThreadPool pool(options.n_threads);
  MakeModelSummary summary;
  summary.ftype = *ftype;
  summary.n_vocab = n_vocab;
  const std::vector<TensorSpec> specs = llama_tensors(p, n_vocab);
  for (size_t index = 0; index < specs.size(); ++index) {
    const TensorSpec& spec = specs[index];
    const bool matrix = should_quantize(spec.name, spec.ne.size());
    const DType type = matrix ? choose_tensor_type(*ftype, ctx, spec.name, spec.ne[0], false) : DType::F32;
    const int64_t cols = static_cast<int64_t>(spec.ne[0]);
    const int64_t rows = spec.ne.size() > 1 ? static_cast<int64_t>(spec.ne[1]) : 1;
    const uint64_t seed = options.seed;
    const float mean = spec.mean, std_dev = spec.std;
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
