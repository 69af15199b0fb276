// RWKV-7 as a Hugging Face folder in flash-linear-attention's layout (fla's RWKV7ForCausalLM, the fla-hub models):
// the tiny rwkv.cpp v7 model written under fla's names and shapes (x_* [1, 1, C], r_k [H, S], the LoRAs as
// nn.Linear pairs with w0 / a0 / v0 as the up-projection's bias, no v_lora in layer 0) loads through the HF
// loader and gives the rwkv.cpp file's logits, in F32 and in BF16; fla's first layout (one x_x stack), layer-0
// dummies, tied embeddings and the World vocabulary file load too; a missing or misshaped tensor and a bad config field each
// give one error naming it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/process.h"
#include "common/model_logits.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "model/formats/safetensors.h"

namespace ga {
namespace {

const char* kV7 = "models/rwkv-tiny/tiny-rwkv-7v0-834K-FP32.bin";

std::vector<float> logits_of(const LoadedModel& model, const std::vector<int32_t>& prompt = {'"', 'i', 'n'}) {
  return test::last_token_logits(model, prompt);
}

struct Tensor {
  std::vector<uint64_t> shape;  // torch order
  std::vector<float> values;
};
using Folder = std::map<std::string, Tensor>;

// BlinkDL's per-layer name (rwkv.cpp's file) -> fla's, as fla/layers/rwkv7.py and fla/models/rwkv7 name them.
const std::map<std::string, std::string>& fla_layer_names() {
  static const std::map<std::string, std::string> names = {
      {"ln0.weight", "pre_norm.weight"},
      {"ln0.bias", "pre_norm.bias"},
      {"ln1.weight", "attn_norm.weight"},
      {"ln1.bias", "attn_norm.bias"},
      {"ln2.weight", "ffn_norm.weight"},
      {"ln2.bias", "ffn_norm.bias"},
      {"att.receptance.weight", "attn.r_proj.weight"},
      {"att.key.weight", "attn.k_proj.weight"},
      {"att.value.weight", "attn.v_proj.weight"},
      {"att.output.weight", "attn.o_proj.weight"},
      {"att.w1", "attn.w_lora.lora.0.weight"},
      {"att.w2", "attn.w_lora.lora.2.weight"},
      {"att.w0", "attn.w_lora.lora.2.bias"},
      {"att.a1", "attn.a_lora.lora.0.weight"},
      {"att.a2", "attn.a_lora.lora.2.weight"},
      {"att.a0", "attn.a_lora.lora.2.bias"},
      {"att.v1", "attn.v_lora.lora.0.weight"},
      {"att.v2", "attn.v_lora.lora.2.weight"},
      {"att.v0", "attn.v_lora.lora.2.bias"},
      {"att.g1", "attn.g_lora.lora.0.weight"},
      {"att.g2", "attn.g_lora.lora.2.weight"},
      {"att.ln_x.weight", "attn.g_norm.weight"},
      {"att.ln_x.bias", "attn.g_norm.bias"},
      {"ffn.key.weight", "ffn.key.weight"},
      {"ffn.value.weight", "ffn.value.weight"},
  };
  return names;
}

Folder fla_folder(const LoadedModel& bin) {
  const ModelConfig& c = bin.config;
  const uint64_t C = static_cast<uint64_t>(c.n_embd);
  Folder f;
  for (const auto& [name, w] : bin.weights) {
    EXPECT_EQ(w.type, DType::F32) << name;
    std::vector<float> v(reinterpret_cast<const float*>(w.data), reinterpret_cast<const float*>(w.data + w.nbytes));
    const std::vector<uint64_t> torch = w.ne.size() == 2 ? std::vector<uint64_t>{w.ne[1], w.ne[0]}
                                                         : std::vector<uint64_t>{C};
    if (name == "emb.weight") { f["model.embeddings.weight"] = {torch, v}; continue; }
    if (name == "head.weight") { f["lm_head.weight"] = {torch, v}; continue; }
    if (name.starts_with("ln_out.")) { f["model.norm." + name.substr(7)] = {{C}, v}; continue; }
    const size_t dot = name.find('.', 7);
    const std::string layer = name.substr(7, dot - 7), rest = name.substr(dot + 1);
    const std::string base = "model.layers." + layer + ".";
    if (rest.starts_with("att.x_")) {
      f[base + "attn." + rest.substr(4)] = {{1, 1, C}, v};
    } else if (rest == "att.k_k" || rest == "att.k_a") {
      f[base + "attn." + rest.substr(4)] = {{C}, v};
    } else if (rest == "att.r_k") {
      f[base + "attn.r_k"] = {{static_cast<uint64_t>(c.n_head), static_cast<uint64_t>(c.head_dim)}, v};
    } else if (rest == "ffn.x_k") {
      f[base + "ffn.x_k"] = {{C}, v};
    } else {
      const auto it = fla_layer_names().find(rest);
      EXPECT_NE(it, fla_layer_names().end()) << "no fla name for " << name;
      if (it != fla_layer_names().end()) f[base + it->second] = {torch, v};
    }
  }
  return f;
}

nlohmann::json fla_config(const LoadedModel& bin) {
  const ModelConfig& c = bin.config;
  const auto rows = [&](const char* n) { return bin.weight(std::string("blocks.1.att.") + n).rows(); };
  // fla's g_norm eps is head_dim * norm_eps; rwkv.cpp's is 64e-5 (so the tiny model's head size must be 64 for the
  // two to agree with the layer norms' 1e-5)
  return {{"architectures", nlohmann::json::array({"RWKV7ForCausalLM"})}, {"model_type", "rwkv7"}, {"attn", nullptr},
          {"attn_mode", "chunk"}, {"hidden_size", c.n_embd}, {"num_hidden_layers", c.n_layer},
          {"head_dim", c.head_dim}, {"num_heads", nullptr}, {"intermediate_size", c.n_ff}, {"hidden_ratio", 4},
          {"decay_low_rank_dim", rows("w1")}, {"a_low_rank_dim", rows("a1")}, {"v_low_rank_dim", rows("v1")},
          {"gate_low_rank_dim", rows("g1")}, {"hidden_act", "sqrelu"}, {"norm_first", true}, {"norm_bias", true},
          {"norm_eps", 1e-5}, {"fuse_norm", true}, {"tie_word_embeddings", false}, {"vocab_size", c.n_vocab},
          {"bos_token_id", 0}, {"eos_token_id", 0}, {"max_position_embeddings", 2048}, {"value_dim", nullptr}};
}

// bfloat16 of x, rounded to nearest even (the values are finite)
uint16_t bf16_bits(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float bf16_value(float x) {
  const uint32_t u = static_cast<uint32_t>(bf16_bits(x)) << 16;
  float y = 0;
  std::memcpy(&y, &u, sizeof y);
  return y;
}

// `type`: F32, or BF16 as the fla-hub checkpoints store every tensor.
void write_folder(const Folder& f, const nlohmann::json& config, const std::string& dir, DType type = DType::F32) {
  safetensors::Writer w;
  for (const auto& [name, t] : f) {
    if (type == DType::BF16) {
      std::vector<uint16_t> bits;
      for (const float x : t.values) bits.push_back(bf16_bits(x));
      w.add_tensor(name, DType::BF16, t.shape, bits.data(), bits.size() * sizeof(uint16_t));
    } else {
      w.add_tensor(name, DType::F32, t.shape, t.values.data(), t.values.size() * sizeof(float));
    }
  }
  w.write(dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << config.dump(2);
}

// Loading `dir` fails with an Error whose message holds `needle`.
void expect_load_error(const std::string& dir, const std::string& needle) {
  try {
    load_model(dir);
    ADD_FAILURE() << "the folder loaded; expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(RwkvFlaHf, FolderGivesTheRwkvCppFilesLogits) {
  const LoadedModel bin = load_model(test::shared_path(kV7));
  ASSERT_EQ(bin.config.arch, "rwkv7");
  ASSERT_EQ(bin.config.head_dim, 64) << "fla's g_norm eps (head_dim * norm_eps) equals rwkv.cpp's 64e-5 only here";
  test::TempDir dir("ga_rwkv7_hf");
  write_folder(fla_folder(bin), fla_config(bin), dir.path().string());
  const LoadedModel hf = load_model(dir.path().string());
  EXPECT_EQ(hf.format, "safetensors");
  EXPECT_EQ(hf.config.arch, "rwkv7");
  EXPECT_EQ(hf.config.n_head, bin.config.n_head);
  EXPECT_FLOAT_EQ(hf.config.rwkv.group_norm_eps, 64e-5f);
  const std::vector<float> want = logits_of(bin), got = logits_of(hf);
  EXPECT_LT(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-5);
  const std::vector<float> expected =
      test::read_f32_file(test::shared_path("models/rwkv-tiny/expected-logits-7v0-834K.bin"));
  EXPECT_LT(test::rel_l2(got.data(), expected.data(), expected.size()), 1e-3);
}

// BF16 tensors, as the fla-hub checkpoints store them (the mixes, r_k and the LoRA biases among them, bound as
// vectors). The tiny model was trained in bfloat16: its FP32 values round to themselves, so the BF16 folder must
// give the .bin's logits.
TEST(RwkvFlaHf, Bf16FolderGivesTheSameLogits) {
  const LoadedModel bin = load_model(test::shared_path(kV7));
  const Folder f = fla_folder(bin);
  size_t changed = 0;
  for (const auto& [name, t] : f) {
    for (const float x : t.values) changed += bf16_value(x) != x ? 1 : 0;
  }
  ASSERT_EQ(changed, 0u) << "the tiny model's weights are no longer bfloat16 values";
  test::TempDir dir("ga_rwkv7_hf");
  write_folder(f, fla_config(bin), dir.path().string(), DType::BF16);
  const LoadedModel hf = load_model(dir.path().string());
  EXPECT_EQ(hf.weight("blocks.3.att.x_g").type, DType::BF16);
  EXPECT_EQ(hf.weight("blocks.3.att.r_k").ne, (std::vector<uint64_t>{static_cast<uint64_t>(bin.config.n_embd)}));
  const std::vector<float> want = logits_of(bin), got = logits_of(hf);
  EXPECT_LT(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-5);
}

TEST(RwkvFlaHf, FirstLayoutDummiesAndTiedEmbeddingsLoad) {
  const LoadedModel bin = load_model(test::shared_path(kV7));
  Folder f = fla_folder(bin);
  const uint64_t C = static_cast<uint64_t>(bin.config.n_embd);
  // fla's first layout: x_r, x_w, x_k, x_v, x_a, x_g as one [6, C] x_x (RWKV7Model.load_state_dict migrates it)
  for (int64_t il = 0; il < bin.config.n_layer; ++il) {
    const std::string base = "model.layers." + std::to_string(il) + ".attn.";
    Tensor xx{{6, C}, {}};
    for (const char* m : {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"}) {
      const Tensor& t = f.at(base + m);
      xx.values.insert(xx.values.end(), t.values.begin(), t.values.end());
      f.erase(base + m);
    }
    f[base + "x_x"] = xx;
  }
  // some converters give layer 0 a dummy v_lora (llama.cpp's copies the a_lora); fla has none there
  for (const char* part : {"lora.0.weight", "lora.2.weight", "lora.2.bias"}) {
    f[std::string("model.layers.0.attn.v_lora.") + part] = f.at(std::string("model.layers.0.attn.a_lora.") + part);
  }
  test::TempDir dir("ga_rwkv7_hf");
  write_folder(f, fla_config(bin), dir.path().string());
  const LoadedModel hf = load_model(dir.path().string());
  EXPECT_EQ(hf.find_weight("blocks.0.att.v1"), nullptr);
  const std::vector<float> want = logits_of(bin), got = logits_of(hf);
  EXPECT_LT(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-5);

  // tie_word_embeddings: no lm_head, the classifier is the embedding table
  f.erase("lm_head.weight");
  nlohmann::json config = fla_config(bin);
  config["tie_word_embeddings"] = true;
  test::TempDir tied_dir("ga_rwkv7_hf");
  write_folder(f, config, tied_dir.path().string());
  const LoadedModel tied = load_model(tied_dir.path().string());
  EXPECT_EQ(tied.weight("head.weight").data, tied.weight("emb.weight").data);
}

// fla-hub's World folders ship rwkv_vocab_v20230424.txt (read by their hf_rwkv_tokenizer.py) and no
// tokenizer.json. A model padded to a 260-token vocabulary with a small file of that form: every byte, then
// three longer tokens; <|endoftext|> is id 0 and the greedy longest match picks the longer tokens.
TEST(RwkvFlaHf, WorldVocabularyFileIsTheTokenizer) {
  const LoadedModel bin = load_model(test::shared_path(kV7));
  Folder f = fla_folder(bin);
  const uint64_t C = static_cast<uint64_t>(bin.config.n_embd), V = 260;
  for (const char* name : {"model.embeddings.weight", "lm_head.weight"}) {
    Tensor& t = f.at(name);
    t.values.resize(V * C, 0.0f);
    t.shape[0] = V;
  }
  nlohmann::json config = fla_config(bin);
  config["vocab_size"] = V;
  test::TempDir dir("ga_rwkv7_hf");
  write_folder(f, config, dir.path().string());
  std::ofstream vocab(dir.path() / "rwkv_vocab_v20230424.txt");
  for (int b = 0; b < 256; ++b) {
    char line[32];
    std::snprintf(line, sizeof line, "%d b'\\x%02x' 1\n", b + 1, b);
    vocab << line;
  }
  vocab << "257 'in' 2\n258 'ing' 3\n259 '\\n\\n' 2\n";
  vocab.close();
  const LoadedModel hf = load_model(dir.path().string());
  ASSERT_EQ(hf.vocab.type, VocabType::RwkvWorld);
  const Tokenizer tok(hf.vocab);
  const std::vector<int32_t> ids = tok.encode("sing\n\nin", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{'s' + 1, 258, 259, 257}));
  EXPECT_EQ(tok.decode(ids), "sing\n\nin");
  // the padded rows change nothing for the model's own 256 ids
  const std::vector<float> want = logits_of(bin), got = logits_of(hf);
  ASSERT_EQ(got.size(), V);
  EXPECT_LT(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-5);
}

TEST(RwkvFlaHf, MissingOrMisshapedTensorIsNamed) {
  const LoadedModel bin = load_model(test::shared_path(kV7));
  const nlohmann::json config = fla_config(bin);
  {
    Folder f = fla_folder(bin);
    f.erase("model.layers.3.attn.w_lora.lora.0.weight");
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    expect_load_error(dir.path().string(), "missing tensor model.layers.3.attn.w_lora.lora.0.weight");
  }
  {
    Folder f = fla_folder(bin);
    f.erase("model.layers.5.attn.v_lora.lora.2.bias");  // v0
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    expect_load_error(dir.path().string(), "missing tensor model.layers.5.attn.v_lora.lora.2.bias");
  }
  {
    Folder f = fla_folder(bin);
    Tensor& key = f.at("model.layers.2.ffn.key.weight");  // stored [in, out], as if not an nn.Linear
    std::swap(key.shape[0], key.shape[1]);
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    expect_load_error(dir.path().string(), "model.layers.2.ffn.key.weight is [");
  }
  {
    Folder f = fla_folder(bin);
    Tensor& rk = f.at("model.layers.1.attn.r_k");  // [S, H] instead of [H, S]
    std::swap(rk.shape[0], rk.shape[1]);
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    if (bin.config.n_head != bin.config.head_dim) expect_load_error(dir.path().string(), "model.layers.1.attn.r_k is [");
  }
  {
    Folder f = fla_folder(bin);
    f.at("model.layers.4.attn.x_k").shape = {1, 2, static_cast<uint64_t>(bin.config.n_embd) / 2};
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    expect_load_error(dir.path().string(), "model.layers.4.attn.x_k");
  }
  {
    Folder f = fla_folder(bin);
    f["model.layers.12.attn.k_k"] = f.at("model.layers.0.attn.k_k");  // a layer the config does not have
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    expect_load_error(dir.path().string(), "model.layers.12.attn.k_k is beyond the 12 layers");
  }
}

TEST(RwkvFlaHf, BadConfigFieldIsNamed) {
  const LoadedModel bin = load_model(test::shared_path(kV7));
  const Folder f = fla_folder(bin);
  const auto check = [&](const char* key, const nlohmann::json& value, const std::string& needle) {
    nlohmann::json config = fla_config(bin);
    config[key] = value;
    test::TempDir dir("ga_rwkv7_hf");
    write_folder(f, config, dir.path().string());
    SCOPED_TRACE(key);
    expect_load_error(dir.path().string(), needle);
  };
  check("decay_low_rank_dim", 48, "decay_low_rank_dim");
  check("gate_low_rank_dim", 16, "gate_low_rank_dim");
  check("intermediate_size", 100, "intermediate_size");
  check("head_dim", 48, "head_dim 48 does not divide hidden_size");
  check("hidden_act", "gelu", "hidden_act 'gelu'");
  check("attn", {{"layers", nlohmann::json::array({1})}, {"num_heads", 4}}, "attn is set");
  check("value_dim", {64, 32, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64}, "value_dim");
  check("norm_first", false, "norm_first is false");
  check("num_hidden_layers", 13, "missing tensor model.layers.12.");
}

}  // namespace
}  // namespace ga
