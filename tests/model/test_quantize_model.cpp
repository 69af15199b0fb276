// quantize_model against llama-quantize (fixtures/quant/fixture-<T>.gguf, made with
// `llama-quantize --pure` from fixture-f32.gguf).
//
// - --pure, every type: our output FILE is byte-identical to llama-quantize's (metadata order,
//   tensor order, offsets, padding and every quantized block);
// - the k-quant mixes: each tensor of our Q3_K_M / Q4_K_M / Q5_K_M / Q2_K output must be
//   byte-identical to the same tensor of the llama.cpp file of the type our rules chose for it (so
//   the conversion path is checked for every type a mix uses), and the rules' choices for this
//   2-layer model and for a 32-layer Llama-2-7B shape are checked against llama-quant.cpp's rules;
// - weight RMSE of each type vs the F32 source within 5% of llama.cpp's (computed from its files);
// - fallbacks for row lengths a type cannot hold, and bad arguments.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/tools/quantize_model.h"

namespace ga::tools {
namespace {

namespace fs = std::filesystem;

const char* const kPureTypes[] = {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                  "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};

std::string fixture(const std::string& type) { return test::shared_path("fixtures/quant/fixture-" + type + ".gguf"); }

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ga_quantize_" + std::to_string(getpid()) + "_" + name)).string();
}

// Removes the file at the end of the scope.
struct TempFile {
  explicit TempFile(const std::string& name) : path(temp_path(name)) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  std::string path;
};

std::string quantize_to_temp(const std::string& type, bool pure, TempFile& out) {
  QuantizeOptions o;
  o.type = type;
  o.pure = pure;
  o.n_threads = 2;
  quantize_model(fixture("f32"), out.path, o);
  return out.path;
}

class QuantizePure : public testing::TestWithParam<const char*> {};

TEST_P(QuantizePure, FileIsByteIdenticalToLlamaQuantize) {
  const std::string type = GetParam();
  TempFile out("pure_" + type + ".gguf");
  quantize_to_temp(type, true, out);
  const std::string ours = test::read_file(out.path);
  const std::string theirs = test::read_file(fixture(type));
  ASSERT_EQ(ours.size(), theirs.size()) << type;
  EXPECT_TRUE(ours == theirs) << type << ": same size, different bytes";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantizePure, testing::ValuesIn(kPureTypes),
                         [](const testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

// Sum of squared differences between a tensor's dequantization and the F32 source.
double squared_error(const gguf::File& file, const gguf::TensorInfo& t, const float* source) {
  std::vector<float> row(t.ne[0]);
  const uint64_t row_size = row_bytes(t.type, t.ne[0]);
  const uint64_t rows = t.n_elements / t.ne[0];
  double sum = 0.0;
  for (uint64_t r = 0; r < rows; ++r) {
    cpu::dequantize_row(t.type, file.tensor_data(t) + r * row_size, row.data(), static_cast<int64_t>(t.ne[0]));
    for (uint64_t i = 0; i < t.ne[0]; ++i) {
      const double d = static_cast<double>(row[i]) - source[r * t.ne[0] + i];
      sum += d * d;
    }
  }
  return sum;
}

TEST(QuantizeRmse, EveryTypeWithinFivePercentOfLlamaCpp) {
  const auto source = gguf::File::open(fixture("f32"));
  for (const char* type : kPureTypes) {
    TempFile out(std::string("rmse_") + type + ".gguf");
    const auto ours = gguf::File::open(quantize_to_temp(type, true, out));
    const auto theirs = gguf::File::open(fixture(type));
    double err_ours = 0.0, err_theirs = 0.0;
    uint64_t n = 0;
    for (const auto& t : source.tensors()) {
      if (t.ne.size() != 2) continue;
      const auto* src = reinterpret_cast<const float*>(source.tensor_data(t));
      err_ours += squared_error(ours, *ours.find_tensor(t.name), src);
      err_theirs += squared_error(theirs, *theirs.find_tensor(t.name), src);
      n += t.n_elements;
    }
    const double rmse_ours = std::sqrt(err_ours / static_cast<double>(n));
    const double rmse_theirs = std::sqrt(err_theirs / static_cast<double>(n));
    std::printf("  %-5s weight RMSE ours %.6e  llama.cpp %.6e\n", type, rmse_ours, rmse_theirs);
    EXPECT_GT(rmse_theirs, 0.0) << type;
    EXPECT_LE(rmse_ours, 1.05 * rmse_theirs) << type;
    EXPECT_GE(rmse_ours, 0.95 * rmse_theirs) << type;
  }
}

// Each tensor of a mix output, whatever type the rules gave it, equals llama.cpp's bytes of that
// tensor in that type; returns tensor name -> type for the rule checks.
std::map<std::string, std::string> check_mix_against_pure_files(const std::string& type) {
  TempFile out("mix_" + type + ".gguf");
  const auto ours = gguf::File::open(quantize_to_temp(type, false, out));
  std::map<std::string, std::string> types;
  for (const auto& t : ours.tensors()) {
    types[t.name] = dtype_name(t.type);
    if (t.ne.size() != 2) {
      EXPECT_EQ(t.type, DType::F32) << t.name;
      continue;
    }
    const auto theirs = gguf::File::open(fixture(dtype_name(t.type)));
    const gguf::TensorInfo* ref = theirs.find_tensor(t.name);
    EXPECT_TRUE(ref != nullptr && ref->type == t.type && ref->nbytes == t.nbytes &&
                std::memcmp(ours.tensor_data(t), theirs.tensor_data(*ref), t.nbytes) == 0)
        << type << ": " << t.name << " (" << dtype_name(t.type) << ") differs from llama-quantize's";
  }
  EXPECT_EQ(ours.get_uint("general.file_type"), file_type_from_name(type)->id);
  EXPECT_EQ(ours.get_uint("general.quantization_version"), 2u);
  return types;
}

// The fixture has 2 layers, n_head 8, n_head_kv 4 (n_gqa 2). Expected types follow llama-quant.cpp:
// use_more_bits(i, 2) is true for layer 1 only (i >= 7*2/8), Q3_K_M gives attn_v Q5_K in layers
// 0-1 and ffn_down Q4_K (0 < 2/16 is false), Q2_K gives attn_v Q3_K (n_gqa < 4).
TEST(QuantizeMix, TensorsMatchLlamaCppBytesAndRules) {
  struct Expect {
    const char* ftype;
    const char* base;
    std::map<std::string, std::string> special;
  };
  const Expect cases[] = {
      {"Q4_K_M", "Q4_K",
       {{"output.weight", "Q6_K"}, {"blk.1.attn_v.weight", "Q6_K"}, {"blk.1.ffn_down.weight", "Q6_K"}}},
      {"Q5_K_M", "Q5_K",
       {{"output.weight", "Q6_K"}, {"blk.1.attn_v.weight", "Q6_K"}, {"blk.1.ffn_down.weight", "Q6_K"}}},
      {"Q3_K_M", "Q3_K",
       {{"output.weight", "Q6_K"}, {"blk.0.attn_v.weight", "Q5_K"}, {"blk.1.attn_v.weight", "Q5_K"},
        {"blk.0.ffn_down.weight", "Q4_K"}, {"blk.1.ffn_down.weight", "Q4_K"},
        {"blk.0.attn_output.weight", "Q4_K"}, {"blk.1.attn_output.weight", "Q4_K"}}},
      {"Q2_K", "Q2_K",
       {{"output.weight", "Q6_K"}, {"blk.0.attn_v.weight", "Q3_K"}, {"blk.1.attn_v.weight", "Q3_K"},
        {"blk.0.ffn_down.weight", "Q3_K"}, {"blk.1.ffn_down.weight", "Q3_K"},
        {"blk.0.attn_output.weight", "Q3_K"}, {"blk.1.attn_output.weight", "Q3_K"}}},
      {"Q4_0", "Q4_0", {{"output.weight", "Q6_K"}}},
      {"Q8_0", "Q8_0", {}},
  };
  for (const auto& c : cases) {
    const auto types = check_mix_against_pure_files(c.ftype);
    ASSERT_EQ(types.size(), 21u) << c.ftype;
    for (const auto& [name, type] : types) {
      if (name.find("_norm.weight") != std::string::npos) continue;
      const auto it = c.special.find(name);
      EXPECT_EQ(type, it != c.special.end() ? it->second : c.base) << c.ftype << ": " << name;
    }
  }
}

// A 32-layer Llama-2-7B shape (n_gqa 1): llama.cpp's Q4_K_M gives attn_v and ffn_down Q6_K in layers
// 0-3 and 28-31 and in every third layer from 6 to 27 (use_more_bits), Q4_K_S gives Q5_K to attn_v
// in layers 0-3 and to ffn_down in layers 0-3 (< 32/8), Q3_K_M gives ffn_down Q5_K in layers 0-1.
TEST(QuantizeMix, RulesForA32LayerModel) {
  MixContext ctx;
  ctx.n_layer = 32;
  ctx.n_gqa = 1;
  ctx.n_attn_v = 32;
  const std::vector<int> more_bits = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  auto in = [](const std::vector<int>& v, int i) { return std::find(v.begin(), v.end(), i) != v.end(); };
  const FileType q4km = *file_type_from_name("Q4_K_M"), q4ks = *file_type_from_name("Q4_K_S");
  const FileType q3km = *file_type_from_name("Q3_K_M");
  for (int i = 0; i < 32; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const DType want = in(more_bits, i) ? DType::Q6_K : DType::Q4_K;
    EXPECT_EQ(choose_tensor_type(q4km, ctx, b + "attn_v.weight", 4096, false), want) << i;
    EXPECT_EQ(choose_tensor_type(q4km, ctx, b + "ffn_down.weight", 11008, false), want) << i;
    EXPECT_EQ(choose_tensor_type(q4km, ctx, b + "attn_q.weight", 4096, false), DType::Q4_K) << i;
    EXPECT_EQ(choose_tensor_type(q4km, ctx, b + "attn_v.weight", 4096, true), DType::Q4_K) << i;  // pure
    EXPECT_EQ(choose_tensor_type(q4ks, ctx, b + "attn_v.weight", 4096, false), i < 4 ? DType::Q5_K : DType::Q4_K);
    EXPECT_EQ(choose_tensor_type(q4ks, ctx, b + "ffn_down.weight", 11008, false), i < 4 ? DType::Q5_K : DType::Q4_K);
    EXPECT_EQ(choose_tensor_type(q3km, ctx, b + "ffn_down.weight", 11008, false), i < 2 ? DType::Q5_K : DType::Q4_K);
  }
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "output.weight", 4096, false), DType::Q6_K);
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "token_embd.weight", 4096, false), DType::Q4_K);
  ctx.has_output = false;  // tied embeddings: token_embd is the classifier and gets its type
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "token_embd.weight", 4096, false), DType::Q6_K);
}

TEST(QuantizeMix, FallbacksForRowLengthsTheTypeCannotHold) {
  const MixContext ctx{2, 1, 2, true};
  std::string note;
  const FileType q4km = *file_type_from_name("Q4_K_M");
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "blk.0.attn_q.weight", 96, false, &note), DType::Q5_0);  // llama.cpp
  EXPECT_NE(note.find("fallback"), std::string::npos) << note;
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "blk.0.attn_q.weight", 40, false), DType::F16);  // 40 % 32 != 0
  EXPECT_EQ(choose_tensor_type(*file_type_from_name("Q6_K"), ctx, "blk.0.attn_q.weight", 64, true), DType::Q8_0);
  EXPECT_EQ(choose_tensor_type(*file_type_from_name("Q5_K_S"), ctx, "blk.0.attn_q.weight", 64, true), DType::Q5_1);
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "output.weight", 96, false), DType::Q8_0);  // output: Q8_0 first
  EXPECT_EQ(choose_tensor_type(*file_type_from_name("Q4_0"), ctx, "blk.0.attn_q.weight", 48, true), DType::F16);
  note.clear();
  EXPECT_EQ(choose_tensor_type(q4km, ctx, "blk.0.attn_q.weight", 512, false, &note), DType::Q4_K);
  EXPECT_TRUE(note.empty());
}

// The FP4 file types: every matrix in the type, the classifier Q8_0 (llama.cpp's choice for its MXFP4_MOE and
// NVFP4), the general.file_type ids of llama.cpp; NVFP4 rows that are not whole blocks of 64 take MXFP4.
TEST(QuantizeMix, Fp4FileTypes) {
  MixContext ctx{32, 4, 32, true};
  for (const char* name : {"MXFP4", "nvfp4"}) {
    const std::optional<FileType> f = file_type_from_name(name);
    ASSERT_TRUE(f.has_value()) << name;
    const DType t = f->base;
    EXPECT_EQ(f->id, t == DType::MXFP4 ? 38u : 39u);
    EXPECT_EQ(t, std::string(name) == "MXFP4" ? DType::MXFP4 : DType::NVFP4);
    for (const char* m : {"blk.0.attn_q.weight", "blk.0.attn_v.weight", "blk.31.ffn_down.weight",
                          "blk.3.attn_output.weight", "token_embd.weight"}) {
      EXPECT_EQ(choose_tensor_type(*f, ctx, m, 4096, false), t) << name << " " << m;
    }
    EXPECT_EQ(choose_tensor_type(*f, ctx, "output.weight", 4096, false), DType::Q8_0) << name;
  }
  const FileType nv = *file_type_from_name("NVFP4");
  EXPECT_EQ(choose_tensor_type(nv, ctx, "blk.0.attn_q.weight", 96, false), DType::MXFP4);
  EXPECT_EQ(choose_tensor_type(nv, ctx, "blk.0.attn_q.weight", 40, false), DType::F16);
  ctx.has_output = false;
  EXPECT_EQ(choose_tensor_type(nv, ctx, "token_embd.weight", 4096, false), DType::Q8_0);
  EXPECT_NE(file_type_names().find("MXFP4"), std::string::npos);
}

TEST(QuantizeMix, WhatGetsQuantized) {
  EXPECT_TRUE(should_quantize("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(should_quantize("token_embd.weight", 2));
  EXPECT_FALSE(should_quantize("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(should_quantize("blk.0.attn_norm.weight", 2));  // norms never, whatever their shape
  EXPECT_FALSE(should_quantize("blk.0.attn_q.bias", 1));
  EXPECT_FALSE(should_quantize("blk.0.attn_q.bias", 2));  // not a ".weight"
  EXPECT_FALSE(should_quantize("blk.0.ffn_gate_inp.weight", 2));
}

TEST(QuantizeArgs, TypeNamesAndAliases) {
  EXPECT_EQ(file_type_from_name("q4_k_m")->id, 15u);
  EXPECT_EQ(file_type_from_name("Q4_K")->id, 15u);  // llama-quantize alias
  EXPECT_EQ(file_type_from_name("Q3_K")->id, 12u);
  EXPECT_EQ(file_type_from_name("Q5_K")->id, 17u);
  EXPECT_EQ(file_type_from_name("bf16")->id, 32u);
  EXPECT_EQ(file_type_from_name("F32")->id, 0u);
  EXPECT_FALSE(file_type_from_name("Q4_2").has_value());
  EXPECT_FALSE(file_type_from_name("").has_value());
}

TEST(QuantizeArgs, BadInputIsAClearError) {
  TempFile out("bad.gguf");
  QuantizeOptions o;
  o.type = "Q7_X";
  try {
    quantize_model(fixture("f32"), out.path, o);
    FAIL() << "no error for an unknown type";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.message()).find("Q7_X"), std::string::npos) << e.message();
  }
  o.type = "Q4_0";
  EXPECT_THROW(quantize_model(temp_path("does_not_exist.gguf"), out.path, o), Error);
  EXPECT_FALSE(fs::exists(out.path));
  EXPECT_FALSE(fs::exists(out.path + ".tmp"));
}

}  // namespace
}  // namespace ga::tools
