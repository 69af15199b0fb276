// RWKV-4 as a Hugging Face folder (transformers' RwkvForCausalLM): the tiny rwkv.cpp v4 model written under
// transformers' names and conventions (time_decay as trained, i.e. log(-d) of rwkv.cpp's d = -exp(w)) loads
// through the HF loader and gives the rwkv.cpp file's logits; with rescale_every set, the eval-mode rescaling
// transformers applies (weights / 2^(il / n), the stream halved) is the same function up to the layer norms'
// eps; a missing tensor is named.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/process.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "model/formats/safetensors.h"
#include "runtime/tokenizer/pre_tokenizer.h"

namespace ga {
namespace {

std::vector<float> logits_of(const LoadedModel& model) {
  SessionOptions opts;
  opts.n_threads = 2;
  Session s(model, opts);
  std::vector<float> out;
  for (const int32_t t : {'"', 'i', 'n'}) out = s.eval(std::vector<int32_t>{t});
  return out;
}

// BlinkDL's name (rwkv.cpp's file) -> transformers' state-dict name and torch shape.
struct HfTensor {
  std::string name;
  std::vector<uint64_t> shape;
};
HfTensor hf_of(const WeightView& w, uint64_t C) {
  const std::string& n = w.name;
  if (n == "emb.weight") return {"rwkv.embeddings.weight", {w.ne[1], w.ne[0]}};
  if (n == "head.weight") return {"head.weight", {w.ne[1], w.ne[0]}};
  if (n.starts_with("ln_out.")) return {"rwkv." + n, {C}};
  const size_t dot = n.find('.', 7);
  const std::string layer = n.substr(7, dot - 7), rest = n.substr(dot + 1);
  const std::string base = "rwkv.blocks." + layer + ".";
  struct Pair {
    const char* ours;
    const char* hf;
  };
  static const Pair kPairs[] = {
      {"ln0.weight", "pre_ln.weight"},
      {"ln0.bias", "pre_ln.bias"},
      {"att.time_decay", "attention.time_decay"},
      {"att.time_first", "attention.time_first"},
      {"att.time_mix_k", "attention.time_mix_key"},
      {"att.time_mix_v", "attention.time_mix_value"},
      {"att.time_mix_r", "attention.time_mix_receptance"},
      {"ffn.time_mix_k", "feed_forward.time_mix_key"},
      {"ffn.time_mix_r", "feed_forward.time_mix_receptance"},
  };
  for (const Pair& p : kPairs) {
    if (rest == p.ours) {
      const bool mix = rest.find("time_mix") != std::string::npos;
      return {base + p.hf, mix ? std::vector<uint64_t>{1, 1, C} : std::vector<uint64_t>{C}};
    }
  }
  std::string hf = rest;  // ln1/ln2 keep their names; att.* / ffn.* matrices
  if (hf.starts_with("att.")) hf = "attention." + hf.substr(4);
  if (hf.starts_with("ffn.")) hf = "feed_forward." + hf.substr(4);
  if (w.ne.size() == 2) return {base + hf, {w.ne[1], w.ne[0]}};
  return {base + hf, {C}};
}

// Writes the folder; `skip` leaves one HF tensor out.
void write_hf_folder(const LoadedModel& bin, const std::string& dir, int64_t rescale_every, const std::string& skip = "") {
  const ModelConfig& c = bin.config;
  const uint64_t C = static_cast<uint64_t>(c.n_embd);
  safetensors::Writer w;
  for (const auto& [name, t] : bin.weights) {
    ASSERT_EQ(t.type, DType::F32) << name;
    const HfTensor h = hf_of(t, C);
    if (h.name == skip) continue;
    std::vector<float> v(reinterpret_cast<const float*>(t.data), reinterpret_cast<const float*>(t.data + t.nbytes));
    if (name.ends_with("att.time_decay")) {
      for (float& x : v) x = std::log(-x);  // transformers keeps w; rwkv.cpp's converter stored -exp(w)
    }
    w.add_tensor(h.name, DType::F32, h.shape, v.data(), v.size() * sizeof(float));
  }
  w.write(dir + "/model.safetensors");
  std::ofstream(dir + "/config.json") << "{\"architectures\": [\"RwkvForCausalLM\"], \"model_type\": \"rwkv\", "
                                      << "\"vocab_size\": " << c.n_vocab << ", \"hidden_size\": " << c.n_embd
                                      << ", \"num_hidden_layers\": " << c.n_layer << ", \"intermediate_size\": "
                                      << c.n_ff << ", \"attention_hidden_size\": " << c.n_embd
                                      << ", \"context_length\": 1024, \"layer_norm_epsilon\": 1e-05, "
                                      << "\"rescale_every\": " << rescale_every
                                      << ", \"tie_word_embeddings\": false, \"bos_token_id\": 0, \"eos_token_id\": 0}";
}

const char* kV4 = "models/rwkv-tiny/tiny-rwkv-4v0-660K-FP32.bin";

TEST(RwkvHf, TransformersFolderGivesTheRwkvCppFilesLogits) {
  const LoadedModel bin = load_model(test::shared_path(kV4));
  test::TempDir dir("ga_rwkv_hf");
  write_hf_folder(bin, dir.path().string(), 0);
  const LoadedModel hf = load_model(dir.path().string());
  EXPECT_EQ(hf.format, "safetensors");
  EXPECT_EQ(hf.config.arch, "rwkv4");
  EXPECT_EQ(hf.config.rwkv.rescale_every, 0);
  const std::vector<float> want = logits_of(bin), got = logits_of(hf);
  // time_decay went through log and exp: the same up to float rounding
  EXPECT_LT(test::max_abs_diff(got.data(), want.data(), want.size()), 1e-4);
  const std::vector<float> expected =
      test::read_f32_file(test::shared_path("models/rwkv-tiny/expected-logits-4v0-660K.bin"));
  EXPECT_LT(test::rel_l2(got.data(), expected.data(), expected.size()), 1e-3);
}

TEST(RwkvHf, EvalModeRescalingKeepsTheLogits) {
  const LoadedModel bin = load_model(test::shared_path(kV4));
  ASSERT_GE(bin.config.n_layer, 4);
  test::TempDir dir("ga_rwkv_hf");
  write_hf_folder(bin, dir.path().string(), 2);
  const LoadedModel hf = load_model(dir.path().string());
  EXPECT_EQ(hf.config.rwkv.rescale_every, 2);
  const float* raw = reinterpret_cast<const float*>(bin.weight("blocks.3.ffn.value.weight").data);
  EXPECT_EQ(reinterpret_cast<const float*>(hf.weight("blocks.3.ffn.value.weight").data)[5], raw[5] / 2.0f);
  // Scaling the stream changes only how large the layer norms' eps is beside its variance (transformers'
  // own rescaled logits differ from its unscaled ones the same way); with the eps out of the picture the two
  // forwards are the same function.
  const std::vector<float> want = logits_of(bin), got = logits_of(hf);
  EXPECT_LT(test::rel_l2(got.data(), want.data(), want.size()), 1e-2);
  LoadedModel bin_no_eps = bin, hf_no_eps = hf;
  bin_no_eps.config.rwkv.layer_norm_eps = hf_no_eps.config.rwkv.layer_norm_eps = 1e-12f;
  const std::vector<float> a = logits_of(bin_no_eps), b = logits_of(hf_no_eps);
  EXPECT_LT(test::rel_l2(b.data(), a.data(), a.size()), 1e-5);
}

// The Pile RWKV-4 models ship GPT-NeoX's tokenizer.json: byte-level BPE with an NFC normalizer, a ByteLevel
// pre-tokenizer without a prefix space, ByteLevel post-processor and decoder, <|endoftext|> and <|padding|> as
// added tokens. A small file of that structure (every byte's symbol, merges that make "hello" and "Ġworld")
// loads with the folder and encodes by its merges.
void write_neox_tokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<|endoftext|>"] = 0;
  vocab["<|padding|>"] = 1;
  for (int b = 0; b < 256; ++b) vocab[tok::byte_to_unicode_utf8(static_cast<uint8_t>(b))] = 2 + b;
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or",
                                           "\xC4\xA0wor l", "\xC4\xA0worl d"};
  int next = 258;
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    vocab[m.substr(0, sp) + m.substr(sp + 1)] = next++;
  }
  const auto added = [](int id, const char* text) {
    return nlohmann::json{{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const nlohmann::json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                     {"use_regex", true}};
  const nlohmann::json t = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {added(0, "<|endoftext|>"), added(1, "<|padding|>")}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", byte_level},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"vocab", vocab}, {"merges", merges}}},
  };
  std::ofstream(dir + "/tokenizer.json") << t.dump();
}

TEST(RwkvHf, GptNeoxTokenizerJsonLoadsWithTheFolder) {
  const LoadedModel bin = load_model(test::shared_path(kV4));
  test::TempDir dir("ga_rwkv_hf");
  write_hf_folder(bin, dir.path().string(), 0);
  write_neox_tokenizer(dir.path().string());
  const LoadedModel hf = load_model(dir.path().string());
  ASSERT_EQ(hf.vocab.type, VocabType::BPE);
  const Tokenizer tok(hf.vocab);
  const std::vector<int32_t> ids = tok.encode("hello world", false);
  EXPECT_EQ(ids, (std::vector<int32_t>{261, 266}));
  EXPECT_EQ(tok.decode(ids), "hello world");
  EXPECT_EQ(tok.encode("<|endoftext|>", false, true), (std::vector<int32_t>{0}));
}

TEST(RwkvHf, MissingTensorIsNamed) {
  const LoadedModel bin = load_model(test::shared_path(kV4));
  test::TempDir dir("ga_rwkv_hf");
  write_hf_folder(bin, dir.path().string(), 0, "rwkv.blocks.1.attention.key.weight");
  try {
    load_model(dir.path().string());
    FAIL() << "a folder without rwkv.blocks.1.attention.key.weight loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor blocks.1.att.key.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ga
