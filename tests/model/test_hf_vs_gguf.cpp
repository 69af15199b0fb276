// The Hugging Face load path against the GGUF load path and against the reference logits.
//
// Each case turns a GGUF fixture into a Hugging Face folder (config.json + safetensors with HF
// names), written by this test with its own name table, so a renaming bug in the loader cannot
// cancel out. The Q and K rows are put back from GGUF's interleaved-pair order into HF's
// rotate-half order: llama.cpp's converter permutes HF row (h, a, i) of head h, half a, pair i to
// GGUF row (h, i, a), i.e. w.reshape(n_head, 2, head_dim / 2, n_in).swapaxes(1, 2); we apply the
// inverse. The HF path then runs with NeoX rope on unpermuted rows, the GGUF path with Normal rope
// on permuted rows, and both must give the same logits (1e-5 rel L2, float32 math, F32 KV cache)
// for the fixture prompts teacher-forced with llama.cpp's greedy ids, and both must match the
// independent references in ../shared/fixtures/logits (llama.cpp with an F32 KV cache, numpy f64).
//
// The forward runs through arch::SequenceForward (what ga::Session wraps), because this suite links
// the model layer only.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "common/test_data.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"
#include "model/formats/safetensors.h"

namespace ga {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kSamePathTol = 1e-5;   // HF vs GGUF: the same float32 math on the same weights
constexpr double kReferenceTol = 1e-5;  // fixtures/README.md: float32 math, F32 KV cache

// GGUF -> HF names, written out independently of the loader's table.
std::string hf_name(const std::string& gguf) {
  static const std::map<std::string, std::string> kTop = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  static const std::map<std::string, std::string> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},     {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},       {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},  {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},        {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  if (kTop.count(gguf)) return kTop.at(gguf);
  // blk.N.<suffix>
  const size_t dot = gguf.find('.', 4);
  if (gguf.rfind("blk.", 0) != 0 || dot == std::string::npos) throw std::runtime_error("unexpected tensor " + gguf);
  const std::string layer = gguf.substr(4, dot - 4);
  return "model.layers." + layer + "." + kLayer.at(gguf.substr(dot + 1));
}

// HF row order of one Q or K matrix from GGUF's: hf row h*hd + a*hd/2 + i = gguf row h*hd + 2*i + a.
std::vector<uint8_t> unpermute_rows(const WeightView& w, int64_t n_heads) {
  const int64_t rows = w.rows();
  const uint64_t row_bytes = w.nbytes / static_cast<uint64_t>(rows);
  const int64_t hd = rows / n_heads;
  std::vector<uint8_t> out(w.nbytes);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const int64_t hf_row = h * hd + a * (hd / 2) + i;
        const int64_t gguf_row = h * hd + 2 * i + a;
        std::memcpy(out.data() + hf_row * row_bytes, w.data + gguf_row * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

struct FolderOptions {
  int shards = 1;
  bool tied = false;  // drop lm_head.weight and set tie_word_embeddings (needs output == token_embd)
};

// Writes config.json + safetensors for a loaded GGUF Llama model into dir.
void write_hf_folder(const LoadedModel& gguf, const fs::path& dir, const FolderOptions& opt) {
  const ModelConfig& c = gguf.config;
  ASSERT_EQ(c.arch, "llama");
  ASSERT_EQ(c.rope_mode, RopeMode::Normal);
  json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.n_ff},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.n_head_kv},
      {"vocab_size", c.n_vocab},
      {"max_position_embeddings", c.n_ctx_train},
      {"rms_norm_eps", static_cast<double>(c.rms_eps)},
      {"rope_theta", static_cast<double>(c.rope_freq_base)},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", opt.tied},
      {"rope_scaling", nullptr},
      {"torch_dtype", "float32"},
  };
  std::ofstream(dir / "config.json") << config.dump(2);

  std::vector<safetensors::Writer> shards(static_cast<size_t>(opt.shards));
  std::map<std::string, std::string> weight_map;
  size_t i = 0;
  for (const auto& [name, w] : gguf.weights) {
    if (opt.tied && name == "output.weight") continue;
    std::vector<uint8_t> bytes(w.data, w.data + w.nbytes);
    if (name.find("attn_q.weight") != std::string::npos) bytes = unpermute_rows(w, c.n_head);
    if (name.find("attn_k.weight") != std::string::npos) bytes = unpermute_rows(w, c.n_head_kv);
    const std::vector<uint64_t> shape(w.ne.rbegin(), w.ne.rend());  // ggml [in, out] -> torch [out, in]
    const size_t shard = i++ * shards.size() / gguf.weights.size();
    shards[shard].add_tensor(hf_name(name), w.type, shape, bytes.data(), bytes.size());
    weight_map[hf_name(name)] = "model-0000" + std::to_string(shard + 1) + "-of-0000" +
                                std::to_string(shards.size()) + ".safetensors";
  }
  if (opt.shards == 1) {
    shards[0].write((dir / "model.safetensors").string());
    return;
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    shards[s].write((dir / ("model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards.size()) +
                            ".safetensors"))
                        .string());
  }
  std::ofstream(dir / safetensors::kIndexFileName) << safetensors::index_json(weight_map);
}

// Logits of every position of `ids`, evaluated in one batch: [n][n_vocab].
std::vector<float> eval_all(const LoadedModel& model, const std::vector<int32_t>& ids) {
  ThreadPool pool(2);
  arch::SequenceParams params;
  params.n_ctx = 64;
  params.kv_type = DType::F32;
  arch::SequenceForward forward(model, params, &pool);
  std::vector<float> logits(ids.size() * static_cast<size_t>(forward.n_vocab()));
  forward.eval(ids, 0, true, logits.data());
  return logits;
}

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = fs::temp_directory_path() / ("ga_hf_vs_gguf_" + std::to_string(::getpid()) + "_" + tag);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Case {
  std::string gguf;     // relative to ../shared
  std::string fixture;  // logits file prefix: fixtures/logits/<fixture>__<prompt>
  FolderOptions options;
  std::string tag;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.tag; }

class HfVsGguf : public ::testing::TestWithParam<Case> {};

TEST_P(HfVsGguf, SameLogitsAsGgufAndReference) {
  const Case& tc = GetParam();
  const LoadedModel gguf = load_model(test::shared_path(tc.gguf));
  if (tc.options.tied) {
    const WeightView& out = gguf.weight("output.weight");
    const WeightView& emb = gguf.weight("token_embd.weight");
    ASSERT_TRUE(out.nbytes == emb.nbytes && std::memcmp(out.data, emb.data, out.nbytes) == 0)
        << "the tied variant needs output.weight == token_embd.weight";
  }
  TempDir dir(tc.tag);
  write_hf_folder(gguf, dir.path(), tc.options);
  const LoadedModel hf = load_model(dir.path().string());

  EXPECT_EQ(hf.format, "safetensors");
  EXPECT_EQ(hf.config.arch, "llama");
  EXPECT_EQ(hf.config.rope_mode, RopeMode::NeoX);
  EXPECT_EQ(hf.config.n_vocab, gguf.config.n_vocab);
  EXPECT_EQ(hf.config.head_dim, gguf.config.head_dim);
  EXPECT_EQ(hf.config.rms_eps, gguf.config.rms_eps);
  EXPECT_EQ(hf.config.tied_embeddings, tc.options.tied);
  EXPECT_EQ(hf.find_weight("output.weight") == nullptr, tc.options.tied);
  EXPECT_TRUE(hf.vocab.tokens.empty()) << "no tokenizer.json in the folder";
  const int64_t n_vocab = gguf.config.n_vocab;

  int compared = 0;
  for (const std::string prompt : {"once_upon_a_time", "the_little_dog"}) {
    const std::string stem = "fixtures/logits/" + tc.fixture + "__" + prompt;
    const json meta = json::parse(test::read_file(test::shared_path(stem + ".json")));
    std::vector<int32_t> ids = meta.at("prompt_ids").get<std::vector<int32_t>>();
    const size_t n_prompt = ids.size();
    for (int32_t id : meta.at("generated_ids")) ids.push_back(id);  // teacher forcing, one batch

    const std::vector<float> from_hf = eval_all(hf, ids);
    const std::vector<float> from_gguf = eval_all(gguf, ids);
    ASSERT_EQ(from_hf.size(), ids.size() * static_cast<size_t>(n_vocab));
    double worst = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const size_t off = t * static_cast<size_t>(n_vocab);
      worst = std::max(worst, test::rel_l2(from_hf.data() + off, from_gguf.data() + off, static_cast<size_t>(n_vocab)));
    }
    EXPECT_LT(worst, kSamePathTol) << tc.tag << " " << prompt << ": HF vs GGUF load path";

    // Reference rows: row 0 = last prompt position, row i+1 = after generated_ids[i].
    std::vector<std::string> refs = {"fixtures/logits/numpy-f64/" + tc.fixture + "__" + prompt + ".f32"};
    if (fs::exists(fs::path(test::shared_path("fixtures/logits")) / (tc.fixture + "__" + prompt + "__kvf32.f32"))) {
      refs.push_back(stem + "__kvf32.f32");
    }
    for (const std::string& ref_path : refs) {
      const std::vector<float> ref = test::read_f32_file(test::shared_path(ref_path));
      const size_t rows = ref.size() / static_cast<size_t>(n_vocab);
      ASSERT_EQ(rows, 33u) << ref_path;
      double ref_worst = 0;
      for (size_t r = 0; r < rows; ++r) {
        const size_t t = n_prompt - 1 + r;
        ASSERT_LT(t, ids.size());
        ref_worst = std::max(ref_worst, test::rel_l2(from_hf.data() + t * static_cast<size_t>(n_vocab),
                                                     ref.data() + r * static_cast<size_t>(n_vocab),
                                                     static_cast<size_t>(n_vocab)));
      }
      EXPECT_LT(ref_worst, kReferenceTol) << tc.tag << " vs " << ref_path;
      ++compared;
    }
  }
  EXPECT_GE(compared, 2) << "no reference compared";
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, HfVsGguf,
    ::testing::Values(Case{"fixtures/quant/fixture-f32.gguf", "fixture-f32", {}, "fixture_f32"},
                      Case{"fixtures/quant/fixture-f32.gguf", "fixture-f32", {2, false}, "fixture_f32_sharded"},
                      Case{"fixtures/quant/fixture-F16.gguf", "fixture-F16", {}, "fixture_F16"},
                      Case{"fixtures/quant/fixture-BF16.gguf", "fixture-BF16", {}, "fixture_BF16"},
                      Case{"models/tinyllamas/stories260K.gguf", "stories260K", {}, "stories260K"},
                      Case{"models/tinyllamas/stories260K.gguf", "stories260K", {1, true}, "stories260K_tied"}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.tag; });

}  // namespace
}  // namespace ga
