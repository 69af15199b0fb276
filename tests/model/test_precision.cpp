// Precision selection at load (gpu_accel/precision.h): the option parsers, which tensors each mode converts, and the
// CPU logits of the converted models against the same model as stored.
//
// Bars (relative L2 of every position's logits against the native forward; measured values in
// docs/performance.md, "Precision at load"): fp8 within kFp8Bar on the fixture models and the random presets (their
// weights are Gaussian, with no outlier structure, so a 3-bit mantissa's rounding is what it is on every weight;
// trained models usually do better), bf16 within kBf16Bar. stories260K has 64- and 172-column matrices, which F8_B128 (blocks
// of 128) cannot hold: under fp8 it stays native, and its logits must be the native ones bit for bit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/model_logits.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "gpu_accel/precision.h"
#include "model/tools/random_model.h"

namespace ga {
namespace {

namespace fs = std::filesystem;

// Above the 3e-2: E4M3's 3 mantissa bits leave every Gaussian weight a ~3.6% rms rounding error, and on
// random weights nothing concentrates the logits' signal in fewer, larger weights. Measured at most 6.0e-2 (the
// 4-layer `tiny` preset, every layer converted).
constexpr double kFp8Bar = 6.5e-2;
constexpr double kBf16Bar = 6e-3;  // measured at most 4.7e-3 (`tiny`)

const std::vector<int32_t> kTokens = {1, 415, 2217, 11818, 22870, 29892, 278, 4700, 5232, 263, 3271, 29889};

PrecisionTarget gpu(int major, int minor) {
  PrecisionTarget t;
  t.gpu = true;
  t.cc_major = major;
  t.cc_minor = minor;
  return t;
}

LoadedModel converted(const std::string& path, Precision mode, std::vector<int64_t> keep = {},
                      const PrecisionTarget& target = {}) {
  LoadedModel m = load_model(path);
  apply_precision(m, PrecisionOptions{mode, std::move(keep)}, target);
  return m;
}

std::vector<int32_t> tokens_for(const LoadedModel& m) {
  std::vector<int32_t> t;
  for (const int32_t id : kTokens) t.push_back(id % static_cast<int32_t>(m.config.n_vocab));
  return t;
}

double logits_rel_l2(const LoadedModel& got, const LoadedModel& want) {
  const std::vector<float> a = test::all_logits(got, tokens_for(got));
  const std::vector<float> b = test::all_logits(want, tokens_for(want));
  return test::rel_l2(a.data(), b.data(), b.size());
}

std::string fixture(const std::string& type) { return test::shared_path("fixtures/quant/fixture-" + type + ".gguf"); }

// A random-weight preset as an F32 GGUF, made once per test binary.
std::string preset_model(const std::string& preset) {
  const fs::path path = fs::temp_directory_path() / ("ga_precision_" + std::to_string(getpid()) + "_" + preset + ".gguf");
  if (!fs::exists(path)) {
    tools::MakeModelOptions o;
    o.preset = preset;
    o.type = "F32";
    o.vocab_path = preset.starts_with("tiny-rwkv") ? "" : test::shared_path("vocab/ggml-vocab-llama-spm.gguf");
    o.seed = 7;
    o.n_threads = 2;
    tools::make_random_model(path.string(), o);
  }
  return path.string();
}

class PresetFiles : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const auto& entry : fs::directory_iterator(fs::temp_directory_path())) {
      if (entry.path().filename().string().starts_with("ga_precision_" + std::to_string(getpid()) + "_")) {
        std::error_code ec;
        fs::remove(entry.path(), ec);
      }
    }
  }
};
const auto* const kPresetFiles = ::testing::AddGlobalTestEnvironment(new PresetFiles);

TEST(PrecisionOptions, NamesAndLayerLists) {
  EXPECT_EQ(precision_from_name("auto"), Precision::Auto);
  EXPECT_EQ(precision_from_name("native"), Precision::Native);
  EXPECT_EQ(precision_from_name("BF16"), Precision::Bf16);
  EXPECT_EQ(precision_from_name("fp8"), Precision::Fp8);
  try {
    precision_from_name("fp9");
    FAIL() << "fp9 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("'fp9'"), std::string::npos) << e.message();
  }
  EXPECT_EQ(parse_layer_list("0,-1"), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(parse_layer_list("3"), (std::vector<int64_t>{3}));
  EXPECT_TRUE(parse_layer_list("none").empty());
  EXPECT_TRUE(parse_layer_list("").empty());
  for (const char* bad : {"0,", ",1", "a", "1.5", "0;1", "0, 1", "--1"}) {
    try {
      parse_layer_list(bad);
      FAIL() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(e.message().find(std::string("'") + bad + "'"), std::string::npos) << e.message();
    }
  }
}

TEST(PrecisionOptions, AKeptLayerOutsideTheModelIsRefused) {
  LoadedModel m = load_model(fixture("f32"));  // 2 layers
  for (const int64_t bad : {2, -3}) {
    try {
      apply_precision(m, PrecisionOptions{Precision::Fp8, {bad}}, {});
      FAIL() << "layer " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(e.message().find("layer " + std::to_string(bad)), std::string::npos) << e.message();
    }
  }
  EXPECT_EQ(m.precision.mode, "native");  // nothing converted
}

// The shared E4M3 quantizer behind F8_B128: every weight within half a step of E4M3 (2^-4 relative for normals)
// times the block's scale amax / 448, and the block's largest weight exact.
TEST(PrecisionConvert, F8B128QuantizeRowRoundTrips) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(512), back(512);
  for (float& v : x) v = n01(rng);
  x[5] = 0.0f;
  std::fill(x.begin() + 256, x.begin() + 384, 0.0f);  // an all-zero block
  std::vector<uint8_t> blocks(row_bytes(DType::F8_B128, x.size()));
  cpu::quantize_row(DType::F8_B128, x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  cpu::dequantize_row(DType::F8_B128, blocks.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < 4; ++b) {
    float amax = 0.0f;
    for (size_t j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(x[b * 128 + j]));
    const float scale = amax / 448.0f;
    for (size_t j = 0; j < 128; ++j) {
      const size_t i = b * 128 + j;
      // normal E4M3 values have 3 mantissa bits (half a step: 2^-4 relative); below 2^-6 the step is 2^-9
      const float tol = std::max(std::fabs(x[i]) / 16.0f, scale * 0x1p-10f);
      EXPECT_LE(std::fabs(back[i] - x[i]), tol) << "weight " << i;
      if (std::fabs(x[i]) == amax) {
        EXPECT_EQ(back[i], x[i]) << "the block's largest weight " << i;
      }
    }
  }
  EXPECT_EQ(back[5], 0.0f);
  EXPECT_EQ(back[300], 0.0f);
}

// fixture-f32: 2 layers of 256 / 768 columns, every matrix F8_B128-shaped.
TEST(PrecisionConvert, Fp8ConvertsTheLayerMatricesOutsideTheKeptLayers) {
  const LoadedModel native = load_model(fixture("f32"));
  const LoadedModel m = converted(fixture("f32"), Precision::Fp8, {-1});
  EXPECT_EQ(m.precision.mode, "fp8");
  EXPECT_NE(m.precision.detail.find("7 matrices F8_B128"), std::string::npos) << m.precision.detail;
  EXPECT_NE(m.precision.detail.find("layer 1"), std::string::npos) << m.precision.detail;
  int n_f8 = 0;
  for (const auto& [name, w] : m.weights) {
    const bool layer0_matrix = name.starts_with("blk.0.") && w.ne.size() == 2;
    EXPECT_EQ(w.type, layer0_matrix ? DType::F8_B128 : DType::F32) << name;
    EXPECT_EQ(w.ne, native.weight(name).ne) << name;
    if (w.type == DType::F8_B128) {
      ++n_f8;
      EXPECT_EQ(w.nbytes, row_bytes(DType::F8_B128, w.ne[0]) * w.ne[1]) << name;
    }
  }
  EXPECT_EQ(n_f8, 7);  // q, k, v, output, gate, up, down
  EXPECT_LT(m.weight_bytes(), native.weight_bytes());
}

// A MoE model: the router (ffn_gate_inp, 256 columns: F8_B128 could hold it) stays, the expert stacks convert.
TEST(PrecisionConvert, Fp8KeepsTheRoutersAndConvertsTheExpertStacks) {
  const LoadedModel m = converted(preset_model("tiny-qwen3moe"), Precision::Fp8);
  int n_stacks = 0;
  for (const auto& [name, w] : m.weights) {
    if (name.find("ffn_gate_inp") != std::string::npos) {
      EXPECT_EQ(w.type, DType::F32) << name;
    }
    if (name.find("_exps") != std::string::npos) {
      EXPECT_EQ(w.type, DType::F8_B128) << name;
      ++n_stacks;
    }
    if (name.find("norm") != std::string::npos) {
      EXPECT_EQ(w.type, DType::F32) << name;
    }
  }
  EXPECT_EQ(n_stacks, 6);  // 2 layers x gate, up, down
  EXPECT_NE(m.precision.detail.find("routers"), std::string::npos) << m.precision.detail;
}

// Quantized matrices stay as they are under every mode.
TEST(PrecisionConvert, QuantizedMatricesStayAsStored) {
  const LoadedModel stored = load_model(fixture("Q4_0"));
  for (const Precision mode : {Precision::Fp8, Precision::Bf16}) {
    const LoadedModel m = converted(fixture("Q4_0"), mode);
    for (const auto& [name, w] : m.weights) {
      const WeightView& s = stored.weight(name);
      if (is_gguf_type(s.type) && traits(s.type).quantized) {
        EXPECT_EQ(w.type, s.type) << name;
        EXPECT_EQ(w.nbytes, s.nbytes) << name;
      }
    }
    EXPECT_NE(m.precision.detail.find("quantized (Q4_0"), std::string::npos) << m.precision.detail;
  }
}

TEST(PrecisionConvert, Bf16ConvertsEveryFloatMatrixAndNoVector) {
  const LoadedModel m = converted(fixture("F16"), Precision::Bf16);
  EXPECT_EQ(m.precision.mode, "bf16");
  for (const auto& [name, w] : m.weights) {
    EXPECT_EQ(w.type, w.ne.size() >= 2 ? DType::BF16 : DType::F32) << name;
  }
}

TEST(PrecisionAuto, NativeOnTheCpuAndOnGpusWithoutFp8) {
  for (const PrecisionTarget& t : {PrecisionTarget{}, gpu(8, 6), gpu(7, 5), gpu(8, 0)}) {
    const LoadedModel m = converted(fixture("f32"), Precision::Auto, {}, t);
    EXPECT_EQ(m.precision.mode, "native") << t.name();
    EXPECT_NE(m.precision.detail.find("auto"), std::string::npos) << m.precision.detail;
    for (const auto& [name, w] : m.weights) EXPECT_EQ(w.type, DType::F32) << name;
  }
  // on the CPU, auto's logits are the native ones bit for bit
  const std::vector<float> a = test::all_logits(converted(fixture("f32"), Precision::Auto), tokens_for(load_model(fixture("f32"))));
  const std::vector<float> b = test::all_logits(load_model(fixture("f32")), tokens_for(load_model(fixture("f32"))));
  EXPECT_EQ(a, b);
}

TEST(PrecisionAuto, NativeWhereFp8IsNotMeasuredFaster) {
  // Ada and Blackwell have FP8 tensor cores, but the FP8 prefill GEMM is Hopper's (precision.h, auto_picks_fp8)
  for (const PrecisionTarget& t : {gpu(8, 9), gpu(10, 0)}) {
    const LoadedModel m = converted(fixture("F16"), Precision::Auto, {}, t);
    EXPECT_EQ(m.precision.mode, "native") << t.name();
    EXPECT_NE(m.precision.detail.find(t.name() + " has FP8 tensor cores, but the FP8 prefill GEMM is measured on Hopper"),
              std::string::npos)
        << m.precision.detail;
    EXPECT_EQ(m.weight("blk.0.attn_q.weight").type, DType::F16);
  }
  // on Hopper a small model stays native: FP8 decodes slower below kAutoFp8MinWeights
  const LoadedModel small = converted(fixture("F16"), Precision::Auto, {}, gpu(9, 0));
  EXPECT_EQ(small.precision.mode, "native");
  EXPECT_NE(small.precision.detail.find("FP8 is faster from 3B on"), std::string::npos) << small.precision.detail;
  EXPECT_EQ(small.weight("blk.0.attn_q.weight").type, DType::F16);
  const LoadedModel q = converted(fixture("Q8_0"), Precision::Auto, {}, gpu(9, 0));
  EXPECT_EQ(q.precision.mode, "native");
  EXPECT_NE(q.precision.detail.find("already quantized (Q8_0"), std::string::npos) << q.precision.detail;
}

TEST(PrecisionAuto, PicksFp8OnHopperForModelsFromTheMeasuredSize) {
  EXPECT_TRUE(auto_picks_fp8(gpu(9, 0), kAutoFp8MinWeights));
  EXPECT_TRUE(auto_picks_fp8(gpu(9, 0), int64_t{7'000'000'000}));
  EXPECT_FALSE(auto_picks_fp8(gpu(9, 0), kAutoFp8MinWeights - 1));
  EXPECT_FALSE(auto_picks_fp8(gpu(8, 9), int64_t{7'000'000'000}));
  EXPECT_FALSE(auto_picks_fp8(gpu(10, 0), int64_t{7'000'000'000}));
  EXPECT_FALSE(auto_picks_fp8(PrecisionTarget{}, int64_t{7'000'000'000}));
}

// The parity bars, with every layer converted (keep none): the fixture models, random presets of several families
// (Llama, Qwen3, Qwen3-MoE, Gemma 2, RWKV-7 under its rwkv.cpp names).
TEST(PrecisionLogits, Fp8AndBf16StayCloseToTheNativeForward) {
  const std::vector<std::string> paths = {fixture("f32"),        fixture("F16"),
                                          preset_model("tiny"),  preset_model("tiny-qwen3"),
                                          preset_model("tiny-qwen3moe"), preset_model("tiny-gemma2"),
                                          preset_model("tiny-rwkv7")};
  for (const std::string& path : paths) {
    const LoadedModel native = load_model(path);
    const LoadedModel fp8 = converted(path, Precision::Fp8);
    const LoadedModel bf16 = converted(path, Precision::Bf16);
    const double e8 = logits_rel_l2(fp8, native), e16 = logits_rel_l2(bf16, native);
    std::printf("precision %-36s fp8 rel L2 %.2e (%s)  bf16 rel L2 %.2e\n", fs::path(path).filename().c_str(), e8,
                fp8.precision.detail.c_str(), e16);
    if (path == fixture("F16")) {  // the reference: the F32 forward of the same weights
      std::printf("precision fixture-F16 as fp8 vs the fixture-f32 forward: rel L2 %.2e\n",
                  logits_rel_l2(fp8, load_model(fixture("f32"))));
    }
    EXPECT_GT(e8, 0.0) << path << ": fp8 changed nothing";
    EXPECT_LT(e8, kFp8Bar) << path;
    if (path != fixture("F16")) {  // F32 models: bf16 rounds them
      EXPECT_GT(e16, 0.0) << path;
      EXPECT_LT(e16, kBf16Bar) << path;
    }
    // the default keep list (first and last layer) is closer still
    const double e8_kept = logits_rel_l2(converted(path, Precision::Fp8, {0, -1}), native);
    std::printf("precision %-36s fp8 keeping layers 0 and -1: rel L2 %.2e\n", fs::path(path).filename().c_str(), e8_kept);
    EXPECT_LE(e8_kept, e8) << path;
  }
}

// stories260K (trained, 64-wide): F8_B128 cannot hold its matrices, so fp8 leaves it as stored and says so.
TEST(PrecisionLogits, Stories260KStaysNativeUnderFp8) {
  const std::string path = test::shared_path("models/tinyllamas/stories260K.gguf");
  const LoadedModel fp8 = converted(path, Precision::Fp8);
  EXPECT_NE(fp8.precision.detail.find("0 matrices F8_B128"), std::string::npos) << fp8.precision.detail;
  EXPECT_EQ(fp8.precision.mode, "native");  // what the weights are
  EXPECT_NE(fp8.precision.detail.find("stay as stored (rows not a multiple of 128)"), std::string::npos)
      << fp8.precision.detail;
  EXPECT_EQ(test::all_logits(fp8, tokens_for(fp8)), test::all_logits(load_model(path), tokens_for(fp8)));
  const LoadedModel bf16 = converted(path, Precision::Bf16);
  // its 172-wide matrices (the FFN's down rows) are not whole 16-byte BF16 chunks: kept, and said so
  EXPECT_NE(bf16.precision.detail.find("stay as stored (rows not a multiple of 8)"), std::string::npos)
      << bf16.precision.detail;
  EXPECT_EQ(bf16.weight("blk.0.ffn_down.weight").type, DType::F32);
  EXPECT_EQ(bf16.weight("blk.0.attn_q.weight").type, DType::BF16);
  const double e16 = logits_rel_l2(bf16, load_model(path));
  std::printf("precision stories260K bf16 rel L2 %.2e\n", e16);
  EXPECT_GT(e16, 0.0);
  EXPECT_LT(e16, kBf16Bar);
}

}  // namespace
}  // namespace ga
