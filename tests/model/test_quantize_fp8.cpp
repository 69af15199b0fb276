// `gpu-accel quantize IN_DIR OUT_DIR fp8` (model/tools/quantize_fp8.h) on the tiny Qwen3 folder, in the three scale
// layouts: the output loads back through the FP8 loader; every quantized weight equals its original within E4M3's
// rounding (half a step: 2^-4 relative for normal codes, 2^-10 of the scale for subnormal ones); the embeddings, the
// LM head and the norms are copied unchanged; the logits stay near the float model's (the documented error of FP8
// weights: below 0.1 rel L2, measured on this model); the block layout's 128-column weight loads as F8_B128 blocks.
// An already quantized folder, a GGUF file and unknown scales are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "common/model_logits.h"
#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/tools/quantize_fp8.h"

namespace {

namespace fs = std::filesystem;


std::vector<float> values(const ga::WeightView& w) {
  std::vector<float> out(static_cast<size_t>(w.rows() * w.cols()));
  const uint64_t rb = ga::row_bytes(w.type, static_cast<uint64_t>(w.cols()));
  for (int64_t r = 0; r < w.rows(); ++r) {
    ga::cpu::dequantize_row(w.type, w.data + static_cast<uint64_t>(r) * rb, out.data() + r * w.cols(), w.cols());
  }
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) { return ga::test::rel_l2(a.data(), b.data(), a.size()); }

TEST(QuantizeFp8, EveryScaleLayoutLoadsBackWithinE4m3Rounding) {
  const fs::path src = ga::test::repo_path("tests/data/arch/qwen3");
  const ga::LoadedModel original = ga::load_model(src.string());
  const std::vector<int32_t> tokens{1, 17, 250, 99, 3, 42, 7};
  const std::vector<float> want = ga::test::all_logits(original, tokens);
  for (const char* scales : {"block", "channel", "tensor"}) {
    SCOPED_TRACE(scales);
    const fs::path out = fs::temp_directory_path() / ("ga-qfp8-" + std::string(scales) + "-" + std::to_string(::getpid()));
    const ga::tools::Fp8QuantizeSummary s =
        ga::tools::quantize_hf_fp8(src.string(), out.string(), ga::tools::fp8_scales_from_name(scales));
    EXPECT_GT(s.n_quantized, 0);
    EXPECT_LT(s.output_bytes, s.input_bytes);
    const ga::LoadedModel m = ga::load_model(out.string());
    for (const auto& [name, w] : original.weights) {
      const ga::WeightView& q = m.weights.at(name);
      const std::vector<float> a = values(w), b = values(q);
      ASSERT_EQ(a.size(), b.size()) << name;
      const bool quantized = w.ne.size() == 2 && name.rfind("blk.", 0) == 0;
      if (!quantized) {
        EXPECT_EQ(a, b) << name << " was to be copied unchanged";
        continue;
      }
      float amax = 0.0f;
      for (const float v : a) amax = std::max(amax, std::fabs(v));
      // the coarsest scale of the three layouts is the tensor's amax / 448: its subnormal step bounds them all
      const float subnormal_half_step = amax / 448.0f * 0x1p-10f;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_LE(std::fabs(a[i] - b[i]), std::max(std::fabs(a[i]) * 0x1p-4f, subnormal_half_step) * 1.0001f)
            << name << " element " << i;
      }
      EXPECT_NE(a, b) << name << " was not quantized";
    }
    const double e = rel_l2(ga::test::all_logits(m, tokens), want);
    EXPECT_LT(e, 0.1);
    EXPECT_GT(e, 1e-6);
    if (std::string(scales) == "block") {
      EXPECT_EQ(m.weights.at("blk.0.attn_output.weight").type, ga::DType::F8_B128);  // 128 columns
    }
    std::printf("fp8 %-7s: %d of %d tensors in FP8, logits rel L2 %.3e\n", scales, s.n_quantized, s.n_tensors, e);
    // a second run into the same folder replaces it
    EXPECT_NO_THROW(ga::tools::quantize_hf_fp8(src.string(), out.string(), ga::tools::fp8_scales_from_name(scales)));
    // an FP8 folder is not quantized again
    try {
      ga::tools::quantize_hf_fp8(out.string(), (out / "again").string(), ga::tools::Fp8Scales::kBlock128);
      ADD_FAILURE() << "an FP8 folder was quantized again";
    } catch (const ga::Error& err) {
      EXPECT_EQ(err.kind(), ga::ErrorKind::Unsupported) << err.what();
    }
    fs::remove_all(out);
  }
}

TEST(QuantizeFp8, BadInputsAreRefused) {
  EXPECT_THROW(ga::tools::fp8_scales_from_name("row"), ga::Error);
  try {
    ga::tools::quantize_hf_fp8(ga::test::shared_path("models/tinyllamas/stories260K.gguf"), "/tmp/ga-qfp8-x",
                               ga::tools::Fp8Scales::kBlock128);
    FAIL() << "a GGUF file was accepted";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("GGUF has no FP8 type"), std::string::npos) << e.what();
  }
}

}  // namespace
