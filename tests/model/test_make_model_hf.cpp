// make-model's Hugging Face output (make_random_hf_model) and the streamed, sharded safetensors writer under it.
//
// The same preset, seed and float type give the same model as the GGUF writer's, so the folder and its GGUF twin
// load through ga::load_model to the same logits (Llama: with the q/k rows un-permuted into HF's rotate_half
// order; Qwen3: stored as they are); the folder splits into shards and an index below the shard limit and loads
// the same; `quantize ... fp8` of a folder loads back; families without an HF writer are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/model_logits.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/formats/safetensors.h"
#include "model/tools/quantize_fp8.h"
#include "model/tools/random_hf_model.h"
#include "model/tools/random_model.h"

namespace ga::tools {
namespace {

namespace fs = std::filesystem;

struct TempPath {
  explicit TempPath(const std::string& name)
      : path(fs::temp_directory_path() / ("ga_make_hf_" + std::to_string(getpid()) + "_" + name)) {}
  ~TempPath() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

MakeModelOptions options(const std::string& preset, const std::string& type) {
  MakeModelOptions o;
  o.preset = preset;
  o.type = type;
  o.vocab_path = test::shared_path("vocab/ggml-vocab-llama-spm.gguf");
  o.seed = 11;
  o.n_threads = 2;
  return o;
}

const std::vector<int32_t> kTokens{1, 17, 250, 9000, 3, 42, 31999};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

void expect_same_logits_as_gguf_twin(const std::string& preset) {
  SCOPED_TRACE(preset);
  TempPath gguf(preset + ".gguf"), hf(preset + "_hf");
  make_random_model(gguf.path.string(), options(preset, "F32"));
  const MakeHfModelSummary s = make_random_hf_model(hf.path.string(), options(preset, "F32"));
  EXPECT_EQ(s.n_files, 1);
  EXPECT_TRUE(fs::exists(hf.path / "model.safetensors"));
  EXPECT_FALSE(fs::exists(hf.path / "model.safetensors.index.json"));
  const LoadedModel from_gguf = load_model(gguf.path.string());
  const LoadedModel from_hf = load_model(hf.path.string());
  EXPECT_EQ(from_hf.config.n_vocab, 32000);
  EXPECT_EQ(from_hf.config.n_layer, from_gguf.config.n_layer);
  EXPECT_EQ(from_hf.config.head_dim, from_gguf.config.head_dim);
  const std::vector<float> want = test::all_logits(from_gguf, kTokens);
  const std::vector<float> got = test::all_logits(from_hf, kTokens);
  EXPECT_LT(max_abs_diff(got, want), 1e-5);
}

TEST(MakeModelHf, LlamaFolderGivesTheGgufTwinsLogits) {
  expect_same_logits_as_gguf_twin("tiny-hd64");
}
TEST(MakeModelHf, Qwen3FolderGivesTheGgufTwinsLogits) {
  expect_same_logits_as_gguf_twin("tiny-qwen3");
}

TEST(MakeModelHf, ConfigIsTheFamilysTransformersConfig) {
  TempPath hf("config");
  make_random_hf_model(hf.path.string(), options("tiny-qwen3", "BF16"));
  std::ifstream in(hf.path / "config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_EQ(c["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(c["model_type"], "qwen3");
  EXPECT_EQ(c["hidden_size"], 256);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["head_dim"], 64);
  EXPECT_EQ(c["torch_dtype"], "bfloat16");
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["rms_norm_eps"].get<double>(), 1e-5);  // the shortest decimal of the float, as configs spell it
  EXPECT_EQ(c["rope_theta"].get<double>(), 1e6);
  const safetensors::Checkpoint ckpt = safetensors::Checkpoint::open_dir(hf.path.string());
  const safetensors::TensorInfo* q = ckpt.find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, "BF16");
  EXPECT_EQ(q->shape, (std::vector<uint64_t>{4 * 64, 256}));  // torch order: [out, in]
  EXPECT_NE(ckpt.find("model.layers.0.self_attn.k_norm.weight"), nullptr);
  EXPECT_NE(ckpt.find("lm_head.weight"), nullptr);
}

TEST(MakeModelHf, ShardsAndTheirIndexLoadTheSameModel) {
  TempPath one("single"), sharded("sharded");
  make_random_hf_model(one.path.string(), options("tiny-hd64", "F32"));
  // below the 32 MB embedding: a shard for each of the two big tensors and some for the layers
  constexpr uint64_t kLimit = 3ull << 20;
  const MakeHfModelSummary s = make_random_hf_model(sharded.path.string(), options("tiny-hd64", "F32"), kLimit);
  EXPECT_GT(s.n_files, 3);
  EXPECT_FALSE(fs::exists(sharded.path / "model.safetensors"));
  std::ifstream in(sharded.path / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"], s.data_bytes);
  EXPECT_EQ(index["weight_map"].size(), static_cast<size_t>(s.n_tensors));
  const auto shard_name = [&](int i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i, s.n_files);
    return std::string(name);
  };
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], shard_name(1));  // the first tensor written
  for (int i = 1; i <= s.n_files; ++i) {
    const std::string name = shard_name(i);
    ASSERT_TRUE(fs::exists(sharded.path / name)) << name;
    const safetensors::File shard = safetensors::File::open((sharded.path / name).string());
    EXPECT_EQ(shard.metadata().at("format"), "pt");
    // one tensor over the limit gets a shard alone; otherwise a shard stays within it
    if (shard.tensors().size() > 1) {
      EXPECT_LE(shard.file_size() - shard.data_offset(), kLimit) << name;
    }
  }
  const std::vector<float> want = test::all_logits(load_model(one.path.string()), kTokens);
  EXPECT_EQ(test::all_logits(load_model(sharded.path.string()), kTokens), want);
  // writing a single file over the shards leaves no stale shard behind
  make_random_hf_model(sharded.path.string(), options("tiny-hd64", "F32"));
  EXPECT_FALSE(fs::exists(sharded.path / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(sharded.path / shard_name(1)));
}

TEST(MakeModelHf, QuantizedToFp8LoadsBackNearTheFloatModel) {
  TempPath hf("bf16"), fp8("fp8");
  make_random_hf_model(hf.path.string(), options("tiny-hd64", "BF16"));
  const Fp8QuantizeSummary s = quantize_hf_fp8(hf.path.string(), fp8.path.string(), Fp8Scales::kBlock128);
  EXPECT_GT(s.n_quantized, 0);
  const LoadedModel m = load_model(fp8.path.string());
  EXPECT_EQ(m.weight("blk.0.attn_q.weight").type, DType::F8_B128);
  const std::vector<float> want = test::all_logits(load_model(hf.path.string()), kTokens);
  const std::vector<float> got = test::all_logits(m, kTokens);
  EXPECT_LT(test::rel_l2(got.data(), want.data(), want.size()), 0.1);
}

TEST(MakeModelHf, OtherFamiliesAndQuantizedTypesAreRefused) {
  TempPath hf("refused");
  for (const auto& [preset, type] : {std::pair{"tiny-gemma2", "F16"}, {"tiny-mixtral", "F16"}, {"tiny-hd64", "Q4_0"}}) {
    try {
      make_random_hf_model(hf.path.string(), options(preset, type));
      ADD_FAILURE() << preset << " " << type << " was written";
    } catch (const Error& e) {
      EXPECT_TRUE(e.kind() == ErrorKind::Unsupported || e.kind() == ErrorKind::InvalidArgument) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(hf.path / "model.safetensors"));
}

}  // namespace
}  // namespace ga::tools
