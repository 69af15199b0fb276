// The architecture families against independent implementations: tiny random-weight models saved by
// Hugging Face transformers, with transformers' float32 logits, and the same weights converted to GGUF by
// llama.cpp's convert_hf_to_gguf.py, with llama.cpp's own float32 logits (tests/data/arch, README there:
// how each was made, and the cross-check of the two references against each other).
//
// Per model, 32 tokens in one batch, every position's logits (F32 KV cache):
//   HF folder vs transformers            rel L2 <= 1e-4 per row (the bar; float32 rounding is ~1e-6)
//   GGUF      vs llama.cpp               rel L2 <= 1e-5 per row, except Gemma: 3e-4 (llama.cpp's CPU GELU goes
//                                        through an fp16 table; its own distance to transformers is 1.5e-4)
//   HF folder vs GGUF of the same weights: 1e-5 (the two loaders must build the same model)
// Phi-3 LongRoPE picks its short or long factors by the context (rope.h): at n_ctx 64 (= the original
// context) the short ones, as transformers does for a 32-token forward; at 512 the long ones, as llama.cpp
// does at its context of 512; both references exist for both choices.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <unistd.h>
#include <cstdio>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/model.h"
#include "model/arch/forward.h"
#include "model/tools/quantize_model.h"
#include "backends/cpu/quant.h"

namespace {

constexpr int64_t kTokens = 32;
constexpr int64_t kVocab = 384;
const std::vector<int32_t> kIds = {363, 241, 263, 344, 223, 298, 320, 88,  24,  117, 111, 335, 350, 5,   193, 315,
                                   53,  306, 48,  181, 314, 118, 133, 109, 277, 100, 380, 172, 185, 195, 224, 213};

std::string dir(const std::string& model) { return ga::test::repo_path("tests/data/arch/" + model); }

std::vector<float> logits(const ga::LoadedModel& model, int64_t n_ctx) {
  ga::arch::SequenceParams params;
  params.n_ctx = n_ctx;
  ga::arch::SequenceForward forward(model, params, nullptr);
  std::vector<float> out(static_cast<size_t>(kTokens * kVocab));
  forward.eval(kIds, 0, true, out.data());
  return out;
}

void expect_close(const std::vector<float>& ours, const std::vector<float>& ref, double limit, const std::string& what) {
  ASSERT_EQ(ref.size(), ours.size()) << what;
  double worst = 0;
  int64_t worst_row = 0;
  for (int64_t r = 0; r < kTokens; ++r) {
    const double rel = ga::test::rel_l2(ours.data() + r * kVocab, ref.data() + r * kVocab, kVocab);
    if (rel > worst) {
      worst = rel;
      worst_row = r;
    }
  }
  std::printf("  %-48s rel L2 %.2e (limit %.1e)\n", what.c_str(), worst, limit);
  EXPECT_LE(worst, limit) << what << " (worst row " << worst_row << ")";
}

struct ArchCase {
  std::string name;
  double llamacpp_limit = 1e-5;
  int64_t n_ctx = 64;
};

class ArchLogits : public testing::TestWithParam<ArchCase> {};

TEST_P(ArchLogits, MatchTransformersAndLlamaCpp) {
  const ArchCase& c = GetParam();
  const ga::LoadedModel hf = ga::load_model(dir(c.name));
  const ga::LoadedModel gguf = ga::load_model(dir(c.name) + "/model.gguf");
  ASSERT_EQ(hf.config.n_vocab, kVocab);
  ASSERT_EQ(gguf.config.arch, hf.config.arch);
  const std::vector<float> ours_hf = logits(hf, c.n_ctx);
  const std::vector<float> ours_gguf = logits(gguf, 512);
  expect_close(ours_hf, ga::test::read_f32_file(dir(c.name) + "/logits-hf.f32"), 1e-4, c.name + " HF vs transformers");
  expect_close(ours_gguf, ga::test::read_f32_file(dir(c.name) + "/logits-llamacpp.f32"), c.llamacpp_limit,
               c.name + " GGUF vs llama.cpp");
  expect_close(logits(gguf, c.n_ctx), ours_hf, 1e-5, c.name + " GGUF vs HF folder");
}

INSTANTIATE_TEST_SUITE_P(Families, ArchLogits,
                         testing::Values(ArchCase{"qwen3"}, ArchCase{"qwen3-yarn"}, ArchCase{"gemma2", 3e-4},
                                         ArchCase{"gemma3", 3e-4}, ArchCase{"phi3"}, ArchCase{"phi3-gqa"},
                                         ArchCase{"mixtral"}, ArchCase{"qwen2moe"}, ArchCase{"qwen3moe"}),
                         [](const testing::TestParamInfo<ArchCase>& p) {
                           std::string n = p.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(ArchLogits, Phi3LongRopeFactorsFollowTheContext) {
  const std::string d = dir("phi3-longrope");
  const ga::LoadedModel hf = ga::load_model(d);
  const ga::LoadedModel gguf = ga::load_model(d + "/model.gguf");
  ASSERT_EQ(hf.config.rope_scaling.type, ga::RopeScalingType::LongRope);
  ASSERT_EQ(gguf.config.rope_scaling.type, ga::RopeScalingType::LongRope);
  // short factors: a context within the original 64 positions
  expect_close(logits(hf, 64), ga::test::read_f32_file(d + "/logits-hf.f32"), 1e-4, "HF short vs transformers");
  expect_close(logits(gguf, 64), ga::test::read_f32_file(d + "/logits-llamacpp-short.f32"), 1e-5,
               "GGUF short vs llama.cpp");
  // long factors: a context past it
  expect_close(logits(hf, 512), ga::test::read_f32_file(d + "/logits-hf-long.f32"), 1e-4, "HF long vs transformers");
  expect_close(logits(gguf, 512), ga::test::read_f32_file(d + "/logits-llamacpp.f32"), 1e-5, "GGUF long vs llama.cpp");
}

TEST(ArchLogits, ShardedFolderEqualsOneFile) {
  const ga::LoadedModel sharded = ga::load_model(dir("qwen3-sharded"));
  const ga::LoadedModel whole = ga::load_model(dir("qwen3"));
  expect_close(logits(sharded, 64), logits(whole, 64), 1e-7, "qwen3 3 shards vs 1 file");
}

// Expert stacks in quantized types: `gpu-accel quantize` converts 3-D tensors row by row like any matrix, and the
// forward must read each expert's rows in that type. The reference is the same quantized file with every
// quantized tensor replaced by its dequantization in F32 (cpu::dequantize_row, bit-exact with ggml's): the
// same numbers, so only summation order may differ. (Against the float model the quantization noise moves
// the hidden states enough to flip near-tied routing decisions: no useful bar.)
ga::LoadedModel dequantized_copy(const ga::LoadedModel& q) {
  ga::LoadedModel d = q;  // views into q's storage, shared
  for (auto& [name, w] : d.weights) {
    if (!ga::traits(w.type).quantized) continue;
    uint64_t n = 1;
    for (const uint64_t e : w.ne) n *= e;
    auto values = std::make_shared<std::vector<float>>(n);
    const uint64_t row = ga::row_bytes(w.type, w.ne[0]);
    for (uint64_t r = 0; r < n / w.ne[0]; ++r) {
      ga::cpu::dequantize_row(w.type, w.data + r * row, values->data() + r * w.ne[0], static_cast<int64_t>(w.ne[0]));
    }
    w.type = ga::DType::F32;
    w.data = reinterpret_cast<const uint8_t*>(values->data());
    w.nbytes = n * 4;
    d.storage.push_back(values);
  }
  return d;
}

TEST(ArchLogits, QuantizedExpertsReadInTheirType) {
  for (const char* m : {"mixtral", "qwen2moe", "qwen3moe"}) {
    for (const char* type : {"Q8_0", "Q5_1", "Q4_0"}) {
      const std::string out = (std::filesystem::temp_directory_path() /
                               (std::string("ga_arch_") + m + "_" + type + std::to_string(getpid()) + ".gguf"))
                                  .string();
      ga::tools::QuantizeOptions o;
      o.type = type;
      o.pure = true;  // every matrix of the type, the experts too
      o.n_threads = 2;
      ga::tools::quantize_model(dir(m) + "/model.gguf", out, o);
      const ga::LoadedModel q = ga::load_model(out);
      std::filesystem::remove(out);  // the mapping stays valid
      EXPECT_STREQ(ga::dtype_name(q.weight("blk.0.ffn_gate_exps.weight").type), type) << m;
      EXPECT_STREQ(ga::dtype_name(q.weight("blk.1.ffn_down_exps.weight").type), type) << m;
      expect_close(logits(q, 64), logits(dequantized_copy(q), 64), 1e-5,
                   std::string(m) + " " + type + " vs its dequantization");
    }
  }
}

}  // namespace
