// load_hf_model on small hand-made folders: renaming, shapes, dtypes, tied classifiers, biases,
// Llama-3 rope factors, alignment copies, the vocabulary, and every refusal naming the HF tensor.
//
// Logit-level agreement with GGUF and with llama.cpp is test_hf_vs_gguf's job; agreement with
// transformers is tools/hf_parity's. Here each folder has one property under test, and the rope
// factors are checked against transformers' own algorithm (_compute_llama3_parameters, written
// out below in its inv_freq form), not against the loader's formula.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"
#include "model/formats/safetensors.h"

namespace ga {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kEmbd = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4, kFf = 16, kVocab = 10;

struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;  // torch order
};

// A one-layer model folder; tests edit `config` and `tensors` before write().
class TinyFolder {
 public:
  explicit TinyFolder(bool qwen2 = false) {
    static int counter = 0;
    dir_ = fs::temp_directory_path() / ("ga_hf_loader_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config = {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
              {"hidden_size", kEmbd},
              {"intermediate_size", kFf},
              {"num_hidden_layers", 1},
              {"num_attention_heads", kHeads},
              {"num_key_value_heads", kKvHeads},
              {"vocab_size", kVocab},
              {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6},
              {"tie_word_embeddings", qwen2}};
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const std::string p = "model.layers.0.";
    tensors = {{"model.embed_tokens.weight", "F32", {u(kVocab), u(kEmbd)}},
               {p + "input_layernorm.weight", "F32", {u(kEmbd)}},
               {p + "self_attn.q_proj.weight", "F32", {u(kHeads * kHeadDim), u(kEmbd)}},
               {p + "self_attn.k_proj.weight", "F32", {u(kKvHeads * kHeadDim), u(kEmbd)}},
               {p + "self_attn.v_proj.weight", "F32", {u(kKvHeads * kHeadDim), u(kEmbd)}},
               {p + "self_attn.o_proj.weight", "F32", {u(kEmbd), u(kHeads * kHeadDim)}},
               {p + "post_attention_layernorm.weight", "F32", {u(kEmbd)}},
               {p + "mlp.gate_proj.weight", "F32", {u(kFf), u(kEmbd)}},
               {p + "mlp.up_proj.weight", "F32", {u(kFf), u(kEmbd)}},
               {p + "mlp.down_proj.weight", "F32", {u(kEmbd), u(kFf)}},
               {"model.norm.weight", "F32", {u(kEmbd)}}};
    if (qwen2) {
      tensors.push_back({p + "self_attn.q_proj.bias", "F32", {u(kHeads * kHeadDim)}});
      tensors.push_back({p + "self_attn.k_proj.bias", "F32", {u(kKvHeads * kHeadDim)}});
      tensors.push_back({p + "self_attn.v_proj.bias", "F32", {u(kKvHeads * kHeadDim)}});
    } else {
      tensors.push_back({"lm_head.weight", "F32", {u(kVocab), u(kEmbd)}});
    }
  }
  ~TinyFolder() { fs::remove_all(dir_); }

  // Deterministic values, distinct per tensor, so a mix-up of two tensors shows.
  std::vector<uint8_t> bytes_of(const Tensor& t, size_t index) const {
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    std::vector<uint8_t> out;
    for (uint64_t i = 0; i < n; ++i) {
      const float v = 0.5f * std::sin(static_cast<float>(index * 131 + i) * 0.37f);
      if (t.dtype == "F32") {
        const uint32_t b = bits_from_f32(v);
        for (int k = 0; k < 4; ++k) out.push_back(static_cast<uint8_t>(b >> (8 * k)));
      } else if (t.dtype == "F16" || t.dtype == "BF16") {
        const uint16_t h = t.dtype == "F16" ? f32_to_fp16(v) : f32_to_bf16(v);
        out.push_back(static_cast<uint8_t>(h));
        out.push_back(static_cast<uint8_t>(h >> 8));
      } else {
        out.resize(out.size() + *safetensors::dtype_size(t.dtype), 0);
      }
    }
    return out;
  }

  void write() {
    std::ofstream(dir_ / "config.json") << config.dump(2);
    safetensors::Writer w;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const std::vector<uint8_t> b = bytes_of(tensors[i], i);
      w.add_tensor(tensors[i].name, tensors[i].dtype, tensors[i].shape, b.data(), b.size());
      written_[tensors[i].name] = b;
    }
    w.write((dir_ / "model.safetensors").string());
  }

  LoadedModel load() {
    write();
    return load_hf_model(dir_.string());
  }

  Tensor& tensor(const std::string& name) {
    for (auto& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }
  void remove(const std::string& name) { std::erase_if(tensors, [&](const Tensor& t) { return t.name == name; }); }
  const std::vector<uint8_t>& written(const std::string& name) const { return written_.at(name); }
  const fs::path& dir() const { return dir_; }

  json config;
  std::vector<Tensor> tensors;

 private:
  fs::path dir_;
  std::map<std::string, std::vector<uint8_t>> written_;
};

// Expects loading to throw `kind` with every needle in the message.
void expect_load_error(TinyFolder& f, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    f.load();
    FAIL() << "no error; expected one mentioning " << needles.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const auto& n : needles) EXPECT_NE(e.message().find(n), std::string::npos) << e.message();
  }
}

std::vector<float> last_logits(const LoadedModel& model, const std::vector<int32_t>& ids) {
  ThreadPool pool(1);
  arch::SequenceParams params;
  params.n_ctx = 16;
  arch::SequenceForward forward(model, params, &pool);
  std::vector<float> logits(static_cast<size_t>(forward.n_vocab()));
  forward.eval(ids, 0, false, logits.data());
  return logits;
}

TEST(HfLoader, RenamesAndReversesShapesOverTheSameBytes) {
  TinyFolder f;
  const LoadedModel m = f.load();
  EXPECT_EQ(m.format, "safetensors");
  EXPECT_EQ(m.config.arch, "llama");
  EXPECT_EQ(m.config.name, f.dir().filename().string());
  const std::map<std::string, std::string> names = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
      {"blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
      {"blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight"},
      {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
      {"blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight"},
      {"blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight"},
      {"blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight"},
      {"blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"},
      {"blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  EXPECT_EQ(m.weights.size(), names.size());
  for (const auto& [gguf, hf] : names) {
    const WeightView* w = m.find_weight(gguf);
    ASSERT_NE(w, nullptr) << gguf;
    const Tensor& t = f.tensor(hf);
    EXPECT_EQ(w->ne, std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend())) << gguf;
    EXPECT_EQ(w->type, DType::F32);
    ASSERT_EQ(w->nbytes, f.written(hf).size());
    EXPECT_EQ(std::memcmp(w->data, f.written(hf).data(), w->nbytes), 0) << gguf;
  }
  EXPECT_EQ(m.weight("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{kFf, kEmbd})) << "[in, out]";
  std::map<std::string, std::string> md;
  for (const auto& e : m.metadata) md[e.key] = e.value;
  EXPECT_EQ(md["general.architecture"], "llama");
  EXPECT_EQ(md["hf.architecture"], "LlamaForCausalLM");
  EXPECT_EQ(md["config.hidden_size"], "8");
  EXPECT_EQ(md["safetensors.tensors"], "12");
  EXPECT_TRUE(m.vocab.tokens.empty());
  EXPECT_EQ(load_model(f.dir().string()).format, "safetensors") << "load_model sends folders here";
}

TEST(HfLoader, Qwen2TiedWithBiases) {
  TinyFolder f(/*qwen2=*/true);
  const LoadedModel m = f.load();
  EXPECT_EQ(m.config.arch, "qwen2");
  EXPECT_TRUE(m.config.qkv_bias);
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.find_weight("output.weight"), nullptr);
  ASSERT_NE(m.find_weight("blk.0.attn_k.bias"), nullptr);
  EXPECT_EQ(m.weight("blk.0.attn_k.bias").ne, (std::vector<uint64_t>{kKvHeads * kHeadDim}));
  EXPECT_EQ(std::memcmp(m.weight("blk.0.attn_q.bias").data, f.written("model.layers.0.self_attn.q_proj.bias").data(),
                        kHeads * kHeadDim * 4),
            0);
  const std::vector<float> logits = last_logits(m, {1, 2, 3});
  ASSERT_EQ(logits.size(), static_cast<size_t>(kVocab));
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
}

TEST(HfLoader, LmHeadIgnoredWhenTied) {
  TinyFolder f;
  f.config["tie_word_embeddings"] = true;
  const LoadedModel m = f.load();
  EXPECT_EQ(m.find_weight("output.weight"), nullptr) << "transformers ties and ignores a stored lm_head";
}

TEST(HfLoader, HalfPrecisionTypesAndAlignmentCopies) {
  TinyFolder f;
  f.tensor("model.layers.0.mlp.up_proj.weight").dtype = "BF16";
  f.tensor("model.layers.0.mlp.gate_proj.weight").dtype = "F16";
  // One F16 element up front shifts every later tensor by 2 bytes: F32 data is then misaligned.
  f.tensors.insert(f.tensors.begin(), Tensor{"extra.odd", "F16", {1}});
  const LoadedModel m = f.load();
  EXPECT_EQ(m.weight("blk.0.ffn_up.weight").type, DType::BF16);
  EXPECT_EQ(m.weight("blk.0.ffn_gate.weight").type, DType::F16);
  for (const auto& [name, w] : m.weights) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data) % traits(w.type).type_size, 0u) << name;
  }
  const WeightView& emb = m.weight("token_embd.weight");
  EXPECT_EQ(std::memcmp(emb.data, f.written("model.embed_tokens.weight").data(), emb.nbytes), 0);
  EXPECT_EQ(m.find_weight("extra.odd"), nullptr);
}

// transformers' _compute_llama3_parameters: scale inv_freq, then blend in the medium band.
std::vector<double> transformers_llama3_inv_freq(double base, int64_t dim, double factor, double low, double high,
                                                 double old_ctx) {
  std::vector<double> out;
  for (int64_t i = 0; i < dim; i += 2) {
    const double inv_freq = 1.0 / std::pow(base, static_cast<double>(i) / static_cast<double>(dim));
    const double wavelen = 2 * std::numbers::pi / inv_freq;
    double scaled = wavelen > old_ctx / low ? inv_freq / factor : inv_freq;
    const bool medium = !(wavelen < old_ctx / high) && !(wavelen > old_ctx / low);
    if (medium) {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      scaled = (1 - smooth) * scaled / factor + smooth * scaled;
    }
    out.push_back(scaled);
  }
  return out;
}

TEST(HfLoader, Llama3RopeFactors) {
  TinyFolder f;
  // Llama 3.1's head_dim and rope settings, on the tiny model (head_dim need not be hidden / heads).
  constexpr int64_t kDim = 128;
  f.config["head_dim"] = kDim;
  f.config["rope_parameters"] = {{"rope_type", "llama3"},     {"rope_theta", 500000.0},
                                 {"factor", 8.0},            {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},  {"original_max_position_embeddings", 8192}};
  f.tensor("model.layers.0.self_attn.q_proj.weight").shape = {kHeads * kDim, kEmbd};
  f.tensor("model.layers.0.self_attn.k_proj.weight").shape = {kKvHeads * kDim, kEmbd};
  f.tensor("model.layers.0.self_attn.v_proj.weight").shape = {kKvHeads * kDim, kEmbd};
  f.tensor("model.layers.0.self_attn.o_proj.weight").shape = {kEmbd, kHeads * kDim};
  const LoadedModel m = f.load();
  const WeightView& rf = m.weight("rope_freqs.weight");
  ASSERT_EQ(rf.type, DType::F32);
  ASSERT_EQ(rf.ne, (std::vector<uint64_t>{kDim / 2}));
  std::vector<float> factors(kDim / 2);
  std::memcpy(factors.data(), rf.data, rf.nbytes);
  const std::vector<double> expected = transformers_llama3_inv_freq(500000.0, kDim, 8.0, 1.0, 4.0, 8192.0);
  int n_unscaled = 0, n_full = 0, n_medium = 0;
  for (int64_t i = 0; i < kDim / 2; ++i) {
    const double base_freq = std::pow(500000.0, -2.0 * static_cast<double>(i) / kDim);
    // The forward divides the base frequency by the factor.
    EXPECT_NEAR(base_freq / factors[i], expected[i], 1e-6 * expected[i]) << "pair " << i;
    n_unscaled += factors[i] == 1.0f;
    n_full += factors[i] == 8.0f;
    n_medium += factors[i] > 1.0f && factors[i] < 8.0f;
  }
  EXPECT_GT(n_unscaled, 0);
  EXPECT_GT(n_full, 0);
  EXPECT_GT(n_medium, 0) << "the blend band is exercised";
}

TEST(HfLoader, Vocabulary) {
  TinyFolder f;
  // A minimal byte-level BPE tokenizer.json.
  const json tok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}},
                    {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}};
  std::ofstream(f.dir() / "tokenizer.json") << tok.dump();
  const LoadedModel m = f.load();
  ASSERT_EQ(m.vocab.tokens.size(), 3u);
  EXPECT_EQ(m.vocab.tokens[2], "ab");
}

TEST(HfLoader, Refusals) {
  {
    TinyFolder f;
    f.remove("lm_head.weight");
    expect_load_error(f, ErrorKind::InvalidFormat, {"lm_head.weight", "tie_word_embeddings"});
  }
  {
    TinyFolder f;
    f.tensors.push_back({"model.layers.0.self_attn.o_proj.bias", "F32", {kEmbd}});
    expect_load_error(f, ErrorKind::Unsupported, {"model.layers.0.self_attn.o_proj.bias"});
  }
  {
    TinyFolder f;
    f.tensor("model.layers.0.mlp.up_proj.weight").dtype = "F64";
    expect_load_error(f, ErrorKind::Unsupported, {"model.layers.0.mlp.up_proj.weight", "F64"});
  }
  {
    TinyFolder f;
    f.tensor("model.layers.0.self_attn.q_proj.weight").shape = {kHeads * kHeadDim - 1, kEmbd};
    expect_load_error(f, ErrorKind::InvalidFormat, {"model.layers.0.self_attn.q_proj.weight"});
  }
  {
    TinyFolder f;
    f.remove("model.layers.0.mlp.down_proj.weight");
    expect_load_error(f, ErrorKind::InvalidFormat, {"ffn_down"});
  }
  {
    TinyFolder f;
    f.tensors.push_back({"model.layers.1.mlp.up_proj.weight", "F32", {kFf, kEmbd}});
    expect_load_error(f, ErrorKind::InvalidFormat, {"model.layers.1.mlp.up_proj.weight", "num_hidden_layers"});
  }
  {
    TinyFolder f;
    f.config["architectures"] = {"GPT2LMHeadModel"};
    expect_load_error(f, ErrorKind::Unsupported, {"GPT2LMHeadModel"});
  }
  {
    TinyFolder f;
    f.write();
    fs::remove(f.dir() / "config.json");
    EXPECT_THROW(load_hf_model(f.dir().string()), Error);
  }
}

TEST(HfLoader, IgnoresUnusedTensors) {
  TinyFolder f;
  f.tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {kHeadDim / 2}});
  f.tensors.push_back({"model.some_buffer", "I64", {3}});
  const LoadedModel m = f.load();
  EXPECT_EQ(m.weights.size(), 12u);
}

}  // namespace
}  // namespace ga
