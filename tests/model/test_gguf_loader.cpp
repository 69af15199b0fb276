// load_gguf_model on real files and on deliberately broken copies of them.
//
// Hyperparameters are checked against the values documented for the files (models/SOURCES.md,
// fixtures/README.md). Each broken file is a faithful copy of a real model (rewritten with
// gguf::Writer) with exactly one thing altered, and an unaltered copy must load, so every error
// below is caused by that one alteration. Variants that must NOT change the math (an explicit
// classifier equal to the embedding vs tied embeddings; rope_freqs.weight of all ones) are checked
// to give the same logits as the original file.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"

namespace {

using ga::gguf::File;
using ga::gguf::TensorInfo;
using ga::gguf::Writer;

const std::string kStories = "models/tinyllamas/stories260K.gguf";
const std::string kFixtureF32 = "fixtures/quant/fixture-f32.gguf";

struct Variant {
  std::function<bool(const std::string& key)> keep_key;          // default: keep every key
  std::function<void(Writer&)> add_metadata;                     // after the copied keys
  std::function<bool(const TensorInfo&, const File&, Writer&)> replace_tensor;  // true: handled (written or dropped)
};

// Writes a copy of `source` with the variant's changes and returns its path.
std::string write_variant(const std::string& source, const std::string& name, const Variant& v) {
  const File src = File::open(ga::test::shared_path(source));
  Writer w;
  for (const ga::gguf::KeyValue& kv : src.metadata()) {
    if (!v.keep_key || v.keep_key(kv.key)) w.set(kv.key, kv.value);
  }
  if (v.add_metadata) v.add_metadata(w);
  for (const TensorInfo& t : src.tensors()) {
    if (v.replace_tensor && v.replace_tensor(t, src, w)) continue;
    w.add_tensor(t.name, t.type, t.ne, src.tensor_data(t), t.nbytes);
  }
  const std::string path = ga::test::binary_dir() + "/test_gguf_loader_" + name + ".gguf";
  w.write(path);
  return path;
}

// Loads `path` expecting a ga::Error of `kind` whose message contains `needle`.
void expect_load_error(const std::string& path, ga::ErrorKind kind, const std::string& needle) {
  try {
    ga::load_gguf_model(path);
    FAIL() << "loading " << path << " should fail with: " << needle;
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << "message: " << e.message() << "\nexpected: " << needle;
  }
}

std::vector<float> last_logits(const ga::LoadedModel& model) {
  ga::arch::SequenceParams params;
  params.n_ctx = 16;
  ga::arch::SequenceForward forward(model, params, nullptr);
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};  // "Once upon a time" (fixtures/README.md)
  std::vector<float> logits(static_cast<size_t>(model.config.n_vocab));
  forward.eval(tokens, 0, false, logits.data());
  return logits;
}

TEST(GgufLoader, Stories260KConfigMatchesSources) {
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  ga::LoadOptions options;
  options.progress = [&](uint64_t done, uint64_t total) { progress.emplace_back(done, total); };
  const ga::LoadedModel m = ga::load_gguf_model(ga::test::shared_path(kStories), options);
  const ga::ModelConfig& c = m.config;
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_ctx_train, 2048);
  EXPECT_EQ(c.n_rot, 8);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_freq_base, 10000.0f);
  EXPECT_EQ(c.rope_mode, ga::RopeMode::Normal);
  EXPECT_FALSE(c.tied_embeddings);  // the GGUF stores output.weight explicitly
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(m.format, "gguf");
  EXPECT_EQ(m.weights.size(), 48u);  // SOURCES.md: 48 tensors
  EXPECT_EQ(m.metadata.size(), 19u);  // SOURCES.md: 19 metadata keys
  EXPECT_EQ(m.vocab.tokens.size(), 512u);
  EXPECT_EQ(m.weight("blk.4.ffn_down.weight").ne, (std::vector<uint64_t>{172, 64}));
  EXPECT_THROW(m.weight("blk.5.ffn_down.weight"), ga::Error);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().first, progress.back().second);
  EXPECT_EQ(progress.back().second, m.weight_bytes());  // every tensor of the file is used
  bool found_arch = false;
  for (const ga::MetadataEntry& e : m.metadata) {
    found_arch |= e.key == "general.architecture" && e.value.find("llama") != std::string::npos;
  }
  EXPECT_TRUE(found_arch);
}

TEST(GgufLoader, FixtureConfigMatchesReadme) {
  const ga::LoadedModel m = ga::load_gguf_model(ga::test::shared_path(kFixtureF32));
  const ga::ModelConfig& c = m.config;
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_ff, 768);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.n_ctx_train, 512);
  EXPECT_EQ(c.n_rot, 32);
  EXPECT_EQ(c.name, "fixture-random-f32");
}

TEST(GgufLoader, UnalteredCopyLoadsAndMatches) {
  const ga::LoadedModel copy = ga::load_gguf_model(write_variant(kStories, "copy", {}));
  const ga::LoadedModel orig = ga::load_gguf_model(ga::test::shared_path(kStories));
  EXPECT_EQ(last_logits(copy), last_logits(orig));
}

TEST(GgufLoader, UnsupportedArchitecture) {
  Variant v;
  v.add_metadata = [](Writer& w) { w.set("general.architecture", ga::gguf::Value::string("gpt2")); };
  expect_load_error(write_variant(kStories, "arch", v), ga::ErrorKind::Unsupported,
                    "unsupported architecture 'gpt2' (supported: llama, qwen2, qwen3");
}

TEST(GgufLoader, MissingTensor) {
  Variant v;
  v.replace_tensor = [](const TensorInfo& t, const File&, Writer&) { return t.name == "blk.3.attn_k.weight"; };
  expect_load_error(write_variant(kStories, "missing", v), ga::ErrorKind::InvalidFormat,
                    "missing tensor blk.3.attn_k.weight");
}

TEST(GgufLoader, WrongShape) {
  Variant v;
  v.replace_tensor = [](const TensorInfo& t, const File& src, Writer& w) {
    if (t.name != "blk.3.attn_k.weight") return false;
    w.add_tensor(t.name, t.type, {t.ne[1], t.ne[0]}, src.tensor_data(t), t.nbytes);  // transposed: [32, 64]
    return true;
  };
  expect_load_error(write_variant(kStories, "shape", v), ga::ErrorKind::InvalidFormat,
                    "tensor blk.3.attn_k.weight has shape [32, 64], expected [64, 32]");
}

TEST(GgufLoader, UnsupportedTensorType) {
  // fixture-f32's rows are 256 long, so an IQ2_XXS (256-element blocks) tensor fits its shape.
  Variant v;
  v.replace_tensor = [](const TensorInfo& t, const File&, Writer& w) {
    if (t.name != "blk.1.attn_k.weight") return false;
    const uint64_t nbytes = ga::row_bytes(ga::DType::IQ2_XXS, t.ne[0]) * t.ne[1];
    const std::vector<uint8_t> zeros(nbytes, 0);
    w.add_tensor(t.name, ga::DType::IQ2_XXS, t.ne, zeros.data(), nbytes);
    return true;
  };
  expect_load_error(write_variant(kFixtureF32, "type", v), ga::ErrorKind::Unsupported,
                    "tensor blk.1.attn_k.weight has type IQ2_XXS, which gpu_accel does not support");
}

TEST(GgufLoader, MissingHyperparameter) {
  Variant v;
  v.keep_key = [](const std::string& key) { return key != "llama.embedding_length"; };
  expect_load_error(write_variant(kStories, "key", v), ga::ErrorKind::InvalidFormat, "llama.embedding_length");
}

TEST(GgufLoader, BadHeadCounts) {
  Variant v;
  v.add_metadata = [](Writer& w) { w.set("llama.attention.head_count_kv", ga::gguf::Value::u32(3)); };
  expect_load_error(write_variant(kStories, "heads", v), ga::ErrorKind::InvalidFormat,
                    "n_head 8 is not a multiple of n_head_kv 3");
}

TEST(GgufLoader, TiedEmbeddingsWhenOutputIsAbsent) {
  // stories260K's output.weight equals token_embd.weight (models/SOURCES.md), so dropping it must
  // not change the logits, only switch the classifier to the embedding.
  Variant v;
  v.replace_tensor = [](const TensorInfo& t, const File&, Writer&) { return t.name == "output.weight"; };
  const ga::LoadedModel tied = ga::load_gguf_model(write_variant(kStories, "tied", v));
  const ga::LoadedModel orig = ga::load_gguf_model(ga::test::shared_path(kStories));
  EXPECT_TRUE(tied.config.tied_embeddings);
  EXPECT_EQ(last_logits(tied), last_logits(orig));
}

TEST(GgufLoader, RopeFreqFactorsAreApplied) {
  const auto with_factors = [](float value) {
    Variant v;
    v.replace_tensor = [value](const TensorInfo& t, const File& src, Writer& w) {
      if (t.name != "output_norm.weight") return false;
      w.add_tensor(t.name, t.type, t.ne, src.tensor_data(t), t.nbytes);
      const std::vector<float> factors(4, value);  // [n_rot / 2]
      w.add_tensor("rope_freqs.weight", ga::DType::F32, {4}, factors.data(), factors.size() * sizeof(float));
      return true;
    };
    return v;
  };
  const ga::LoadedModel orig = ga::load_gguf_model(ga::test::shared_path(kStories));
  const ga::LoadedModel ones = ga::load_gguf_model(write_variant(kStories, "rope1", with_factors(1.0f)));
  const ga::LoadedModel fours = ga::load_gguf_model(write_variant(kStories, "rope4", with_factors(4.0f)));
  const std::vector<float> a = last_logits(orig);
  EXPECT_EQ(last_logits(ones), a);
  const std::vector<float> b = last_logits(fours);
  EXPECT_GT(ga::test::rel_l2(b.data(), a.data(), a.size()), 1e-3);  // slower rotation changes the result

  Variant bad;  // a rope_freqs.weight of the wrong length
  bad.replace_tensor = [](const TensorInfo& t, const File& src, Writer& w) {
    if (t.name != "output_norm.weight") return false;
    w.add_tensor(t.name, t.type, t.ne, src.tensor_data(t), t.nbytes);
    const std::vector<float> factors(8, 1.0f);
    w.add_tensor("rope_freqs.weight", ga::DType::F32, {8}, factors.data(), factors.size() * sizeof(float));
    return true;
  };
  expect_load_error(write_variant(kStories, "rope_bad", bad), ga::ErrorKind::InvalidFormat,
                    "tensor rope_freqs.weight has shape [8], expected [4]");
}

TEST(GgufLoader, Qwen2UsesNeoxRope) {
  // The same weights under general.architecture = qwen2 (keys renamed): NeoX rope is the only change.
  Variant v;
  v.keep_key = [](const std::string& key) { return key.rfind("llama.", 0) != 0; };
  const File src = File::open(ga::test::shared_path(kStories));
  v.add_metadata = [&src](Writer& w) {
    w.set("general.architecture", ga::gguf::Value::string("qwen2"));
    for (const ga::gguf::KeyValue& kv : src.metadata()) {
      if (kv.key.rfind("llama.", 0) == 0) w.set("qwen2." + kv.key.substr(6), kv.value);
    }
  };
  const ga::LoadedModel qwen = ga::load_gguf_model(write_variant(kStories, "qwen2", v));
  EXPECT_EQ(qwen.config.arch, "qwen2");
  EXPECT_EQ(qwen.config.rope_mode, ga::RopeMode::NeoX);
  EXPECT_EQ(qwen.config.n_embd, 64);
  const ga::LoadedModel orig = ga::load_gguf_model(ga::test::shared_path(kStories));
  const std::vector<float> a = last_logits(orig);
  const std::vector<float> b = last_logits(qwen);
  EXPECT_GT(ga::test::rel_l2(b.data(), a.data(), a.size()), 1e-3);
}

}  // namespace

namespace {

TEST(LoadModel, DispatchesOnPathKind) {
  const ga::LoadedModel m = ga::load_model(ga::test::shared_path(kStories));  // a file: GGUF
  EXPECT_EQ(m.format, "gguf");
  EXPECT_EQ(m.config.n_layer, 5);
  try {
    ga::load_model(ga::test::binary_dir() + "/no-such-model.gguf");
    FAIL() << "expected an Io error";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::Io) << e.what();
    EXPECT_NE(e.message().find("no-such-model.gguf"), std::string::npos) << e.message();
  }
}

}  // namespace
