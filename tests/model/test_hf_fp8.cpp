// FP8 Hugging Face checkpoints (hf_fp8.h): a copy of the tiny Qwen3 test folder whose projection matrices are
// stored as F8_E4M3 with block-wise weight_scale_inv (transformers' "fp8", blocks of 16 x 32: several per
// matrix, ragged at the edges) or per-channel weight_scale (compressed-tensors), against the same folder with
// those matrices written in F32 as value(e4m3) * scale by the test itself: identical logits (the loader's
// dequantization is that product). The FP8 model also stays near the original float weights, and a weight
// without its scale or an unknown quantization method is refused with the tensor or the method named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/model_logits.h"
#include "common/test_data.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "backends/cpu/quant.h"
#include "model/arch/forward.h"
#include "model/loader/hf_fp8.h"
#include "model/formats/safetensors.h"

namespace {

namespace fs = std::filesystem;

bool is_projection(const std::string& name) {
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}) {
    if (name.find(p) != std::string::npos && name.ends_with(".weight")) return true;
  }
  return false;
}

enum class Scheme { kBlocks, kChannels };

// Writes two folders from `src`: fp8 (the projections in F8_E4M3 with their scales) and ref (the same values
// dequantized by float math, F32). Returns nothing; the config of fp8 gets the quantization_config.
void write_pair(const fs::path& src, const fs::path& fp8, const fs::path& ref, Scheme scheme, bool drop_a_scale) {
  fs::create_directories(fp8);
  fs::create_directories(ref);
  for (const char* f : {"tokenizer.model", "generation_config.json"}) {
    if (fs::exists(src / f)) {
      fs::copy_file(src / f, fp8 / f, fs::copy_options::overwrite_existing);
      fs::copy_file(src / f, ref / f, fs::copy_options::overwrite_existing);
    }
  }
  nlohmann::json config = nlohmann::json::parse(ga::test::read_file((src / "config.json").string()));
  std::ofstream(ref / "config.json") << config.dump(1);
  config["quantization_config"] = scheme == Scheme::kBlocks
                                      ? nlohmann::json{{"quant_method", "fp8"}, {"weight_block_size", {16, 32}}}
                                      : nlohmann::json{{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}};
  std::ofstream(fp8 / "config.json") << config.dump(1);

  const ga::safetensors::Checkpoint ckpt = ga::safetensors::Checkpoint::open_dir(src.string());
  ga::safetensors::Writer wq, wr;
  std::vector<std::vector<uint8_t>> keep;  // the writers hold pointers
  bool dropped = false;
  for (const auto& [name, entry] : ckpt.entries()) {
    const ga::safetensors::TensorInfo& info = *ckpt.find(name);
    const uint8_t* data = ckpt.tensor_data(name);
    if (!is_projection(name) || info.shape.size() != 2 || info.dtype != "F32") {
      wq.add_tensor(name, info.dtype, info.shape, data, info.nbytes());
      wr.add_tensor(name, info.dtype, info.shape, data, info.nbytes());
      continue;
    }
    const uint64_t rows = info.shape[0], cols = info.shape[1];
    const uint64_t br = scheme == Scheme::kBlocks ? 16 : 1, bc = scheme == Scheme::kBlocks ? 32 : cols;
    const uint64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
    std::vector<float> w(rows * cols), scale(sr * sc, 0.0f), deq(rows * cols);
    std::memcpy(w.data(), data, w.size() * 4);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c)
        scale[(r / br) * sc + c / bc] = std::max(scale[(r / br) * sc + c / bc], std::abs(w[r * cols + c]) / 448.0f);
    std::vector<uint8_t> q(rows * cols);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) {
        const float s = scale[(r / br) * sc + c / bc];
        q[r * cols + c] = ga::f32_to_e4m3(s > 0 ? w[r * cols + c] / s : 0.0f);
        deq[r * cols + c] = ga::e4m3_to_f32(q[r * cols + c]) * s;
      }
    }
    keep.emplace_back(q.begin(), q.end());
    wq.add_tensor(name, "F8_E4M3", info.shape, keep.back().data(), keep.back().size());
    if (!(drop_a_scale && !dropped)) {
      std::vector<uint8_t> sb(scale.size() * 4);
      std::memcpy(sb.data(), scale.data(), sb.size());
      keep.push_back(std::move(sb));
      const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
      if (scheme == Scheme::kBlocks) {
        wq.add_tensor(stem + ".weight_scale_inv", "F32", {sr, sc}, keep.back().data(), keep.back().size());
      } else {
        wq.add_tensor(stem + ".weight_scale", "F32", {rows, 1}, keep.back().data(), keep.back().size());
      }
    }
    dropped = true;
    std::vector<uint8_t> db(deq.size() * 4);
    std::memcpy(db.data(), deq.data(), db.size());
    keep.push_back(std::move(db));
    wr.add_tensor(name, "F32", info.shape, keep.back().data(), keep.back().size());
  }
  wq.write((fp8 / "model.safetensors").string());
  wr.write((ref / "model.safetensors").string());
}

std::vector<float> logits(const std::string& path, const std::vector<int32_t>& tokens) {
  return ga::test::all_logits(ga::load_model(path), tokens);
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) { return ga::test::rel_l2(a.data(), b.data(), a.size()); }

fs::path temp_dir(const std::string& tag) {
  return fs::temp_directory_path() / ("ga-fp8-" + tag + "-" + std::to_string(::getpid()));
}

TEST(HfFp8, BlockAndChannelScalesLoadAsTheirDequantizedValues) {
  const fs::path src = ga::test::repo_path("tests/data/arch/qwen3");
  const std::vector<int32_t> tokens{1, 17, 250, 99, 3, 42, 7};
  const std::vector<float> original = logits(src.string(), tokens);
  for (const Scheme scheme : {Scheme::kBlocks, Scheme::kChannels}) {
    SCOPED_TRACE(scheme == Scheme::kBlocks ? "blocks of 16 x 32" : "per channel");
    const fs::path dir = temp_dir(scheme == Scheme::kBlocks ? "blocks" : "channels");
    write_pair(src, dir / "fp8", dir / "ref", scheme, false);
    const std::vector<float> got = logits((dir / "fp8").string(), tokens);
    const std::vector<float> want = logits((dir / "ref").string(), tokens);
    ASSERT_EQ(got.size(), want.size());
    // Blocks of 32 columns cannot be F8_B128 (128 per scale): dequantized to the test's F32 values, bit for bit.
    // Per channel, the 128-column attn_output stays FP8 (F8_B128) and the others (64 / 96 columns) dequantize:
    // the same weights, only the dot's summation order differs.
    const ga::LoadedModel m = ga::load_model((dir / "fp8").string());
    if (scheme == Scheme::kBlocks) {
      EXPECT_EQ(m.weights.at("blk.0.attn_output.weight").type, ga::DType::F32);
      EXPECT_EQ(got, want);
    } else {
      EXPECT_EQ(m.weights.at("blk.0.attn_output.weight").type, ga::DType::F8_B128);
      EXPECT_EQ(m.weights.at("blk.0.attn_q.weight").type, ga::DType::F32);
      EXPECT_LT(rel_l2(got, want), 1e-6);
    }
    EXPECT_LT(rel_l2(got, original), 0.1);     // and FP8 stays near the float weights
    EXPECT_GT(rel_l2(got, original), 1e-6);    // (it did quantize)
    fs::remove_all(dir);
  }
}

// F8_B128 blocks against the F32 dequantization of the same checkpoint: 128x128 scale blocks over 130 x 256 (a ragged
// last row of blocks) and a per-tensor scale: dequantize_row of the blocks equals dequantize_fp8_weight bit for bit,
// dot_row the float64 dot within float rounding; 64-column blocks stay F32 (nullopt); GGUF cannot hold the type.
TEST(HfFp8, Fp8BlocksEqualTheDequantizedWeights) {
  const uint64_t rows = 130, cols = 256;
  std::vector<uint8_t> q(rows * cols);
  for (uint64_t i = 0; i < q.size(); ++i) {
    q[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
    if ((q[i] & 0x7f) == 0x7f) q[i] ^= 1;  // no NaN codes
  }
  const std::vector<float> block_scales = {0.5f, 0.03125f, 1.75f, 0.0078125f}, one_scale = {0.013f};
  const fs::path dir = temp_dir("blocks128");
  fs::create_directories(dir);
  ga::safetensors::Writer w;
  w.add_tensor("a.weight", "F8_E4M3", {rows, cols}, q.data(), q.size());
  w.add_tensor("a.weight_scale_inv", "F32", {2, 2}, block_scales.data(), block_scales.size() * 4);
  w.add_tensor("b.weight", "F8_E4M3", {rows, cols}, q.data(), q.size());
  w.add_tensor("b.weight_scale", "F32", {1}, one_scale.data(), 4);
  const std::vector<float> narrow_scales(8, 0.25f);  // 128 x 64 blocks
  w.add_tensor("c.weight", "F8_E4M3", {rows, cols}, q.data(), q.size());
  w.add_tensor("c.weight_scale_inv", "F32", {2, 4}, narrow_scales.data(), narrow_scales.size() * 4);
  w.write((dir / "model.safetensors").string());
  const ga::safetensors::Checkpoint ckpt = ga::safetensors::Checkpoint::open_file((dir / "model.safetensors").string());
  std::vector<float> x(cols);
  for (uint64_t c = 0; c < cols; ++c) x[c] = std::sin(0.37f * static_cast<float>(c));
  for (const char* name : {"a.weight", "b.weight"}) {
    SCOPED_TRACE(name);
    const ga::hf::Fp8Layout layout{128, 128};
    const std::optional<std::vector<uint8_t>> blocks = ga::hf::fp8_weight_blocks(ckpt, name, layout);
    ASSERT_TRUE(blocks.has_value());
    const uint64_t rb = ga::row_bytes(ga::DType::F8_B128, cols);
    ASSERT_EQ(blocks->size(), rows * rb);
    const std::vector<float> want = ga::hf::dequantize_fp8_weight(ckpt, name, layout);
    std::vector<float> got(cols);
    for (uint64_t r = 0; r < rows; ++r) {
      ga::cpu::dequantize_row(ga::DType::F8_B128, blocks->data() + r * rb, got.data(), static_cast<int64_t>(cols));
      ASSERT_EQ(0, std::memcmp(got.data(), want.data() + r * cols, cols * 4)) << "row " << r;
      double ref = 0.0, magnitude = 0.0;  // float sums of 128 terms: the error bound scales with sum |w x|
      for (uint64_t c = 0; c < cols; ++c) {
        ref += double{want[r * cols + c]} * x[c];
        magnitude += std::abs(double{want[r * cols + c]} * x[c]);
      }
      const float dot = ga::cpu::dot_row(ga::DType::F8_B128, blocks->data() + r * rb, x.data(), static_cast<int64_t>(cols));
      EXPECT_NEAR(dot, ref, 1e-5 * magnitude) << "row " << r;
    }
  }
  EXPECT_FALSE(ga::hf::fp8_weight_blocks(ckpt, "c.weight", ga::hf::Fp8Layout{128, 64}).has_value());
  EXPECT_FALSE(ga::is_gguf_type(ga::DType::F8_B128));
  fs::remove_all(dir);
}

TEST(HfFp8, AMissingScaleOrAnUnknownMethodIsRefused) {
  const fs::path src = ga::test::repo_path("tests/data/arch/qwen3");
  const fs::path dir = temp_dir("bad");
  write_pair(src, dir / "fp8", dir / "ref", Scheme::kBlocks, true);
  try {
    ga::load_model((dir / "fp8").string());
    FAIL() << "no error";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::InvalidFormat);
    EXPECT_NE(std::string(e.what()).find("has no scale"), std::string::npos) << e.what();
  }
  nlohmann::json config = nlohmann::json::parse(ga::test::read_file((dir / "ref" / "config.json").string()));
  config["quantization_config"] = {{"quant_method", "gptq"}};
  std::ofstream(dir / "ref" / "config.json") << config.dump(1);
  try {
    ga::load_model((dir / "ref").string());
    FAIL() << "no error";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("gptq"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
