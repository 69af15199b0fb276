#include "model/tools/quantize_fp8.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/quant.h"
#include "core/log.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"
#include "model/formats/safetensors.h"

namespace ga::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kBlock = 128;

// Linear-layer weights are quantized; embeddings, the LM head and MoE routers keep their type (the usual FP8
// recipes' ignore list: they are small next to the layers, and the most sensitive to rounding).
bool keeps_its_type(std::string_view name) {
  for (const char* kept : {"embed_tokens", "embeddings", "lm_head", "wte", "mlp.gate.weight", "router"}) {
    if (name.find(kept) != std::string_view::npos) return true;
  }
  return false;
}

struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  std::vector<uint64_t> scale_shape;
};

// Codes and scales of a [rows][cols] weight, one scale per tile of tile_r x tile_c elements.
Quantized quantize(const safetensors::TensorInfo& info, const uint8_t* data, uint64_t tile_r, uint64_t tile_c) {
  const uint64_t rows = info.shape[0], cols = info.shape[1];
  const uint64_t sr = (rows + tile_r - 1) / tile_r, sc = (cols + tile_c - 1) / tile_c;
  // the weight as floats once (the CPU backend's row conversion), read by both passes below
  std::vector<float> w(rows * cols);
  const uint64_t rb = row_bytes(*info.type, cols);
  for (uint64_t r = 0; r < rows; ++r) {
    cpu::dequantize_row(*info.type, data + r * rb, w.data() + r * cols, static_cast<int64_t>(cols));
  }
  Quantized q;
  q.codes.resize(rows * cols);
  q.scales.assign(sr * sc, 0.0f);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      float& amax = q.scales[(r / tile_r) * sc + c / tile_c];
      const float v = w[r * cols + c];
      GA_CHECK(std::isfinite(v), InvalidArgument, "quantize fp8: tensor ", info.name, " holds a non-finite value at [",
               r, ", ", c, "]");
      amax = std::max(amax, std::fabs(v));
    }
  }
  for (float& s : q.scales) s = cpu::e4m3_group_scale(s);  // the amax of each tile becomes its scale
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c0 = 0; c0 < cols; c0 += tile_c) {  // one scale per run of tile_c columns of a row
      const uint64_t n = std::min(tile_c, cols - c0);
      cpu::quantize_e4m3(w.data() + r * cols + c0, static_cast<int64_t>(n), q.scales[(r / tile_r) * sc + c0 / tile_c],
                         q.codes.data() + r * cols + c0);
    }
  }
  q.scale_shape = {sr, sc};
  return q;
}

json quantization_config(Fp8Scales scales, const std::vector<std::string>& kept) {
  if (scales == Fp8Scales::kBlock128) {
    return json{{"quant_method", "fp8"},
                {"fmt", "e4m3"},
                {"activation_scheme", "dynamic"},
                {"weight_block_size", {kBlock, kBlock}},
                {"modules_to_not_convert", kept}};
  }
  const char* strategy = scales == Fp8Scales::kChannel ? "channel" : "tensor";
  return json{{"quant_method", "compressed-tensors"},
              {"format", "float-quantized"},
              {"ignore", kept},
              {"config_groups",
               {{"group_0",
                 {{"targets", {"Linear"}},
                  {"weights",
                   {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}, {"symmetric", true}, {"dynamic", false}}},
                  {"input_activations", nullptr}}}}}};
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  GA_CHECK(in.good(), Io, "quantize fp8: cannot read '", p.string(), "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

Fp8Scales fp8_scales_from_name(const std::string& name) {
  if (name == "block" || name == "128") return Fp8Scales::kBlock128;
  if (name == "channel") return Fp8Scales::kChannel;
  if (name == "tensor") return Fp8Scales::kTensor;
  GA_THROW(InvalidArgument, "FP8 scales '", name, "' (block, channel or tensor)");
}

Fp8QuantizeSummary quantize_hf_fp8(const std::string& in_dir, const std::string& out_dir, Fp8Scales scales) {
  const auto t0 = std::chrono::steady_clock::now();
  const fs::path in(in_dir), out(out_dir);
  GA_CHECK(fs::is_directory(in) && fs::exists(in / "config.json"), InvalidArgument, "quantize fp8: '", in_dir,
           "' is not a Hugging Face folder (config.json and safetensors); FP8 output exists only as such a folder "
           "(GGUF has no FP8 type)");
  json config = json::parse(read_text(in / "config.json"), nullptr, false);
  GA_CHECK(config.is_object(), InvalidFormat, "quantize fp8: '", (in / "config.json").string(), "' is not a JSON object");
  GA_CHECK(!config.contains("quantization_config"), Unsupported, "quantize fp8: '", in_dir,
           "' is already quantized (config.json has a quantization_config); quantize its float original");
  GA_CHECK(fs::weakly_canonical(in) != fs::weakly_canonical(out), InvalidArgument,
           "quantize fp8: the output folder must differ from the input");
  const safetensors::Checkpoint ckpt = safetensors::Checkpoint::open_dir(in.string());

  Fp8QuantizeSummary summary;
  safetensors::Writer writer;
  std::vector<std::vector<uint8_t>> storage;  // the writer keeps pointers until write()
  std::vector<std::string> kept;
  for (const auto& [name, entry] : ckpt.entries()) {
    const safetensors::TensorInfo& info = *ckpt.find(name);
    const uint8_t* data = ckpt.tensor_data(name);
    ++summary.n_tensors;
    summary.input_bytes += info.nbytes();
    const bool linear = name.ends_with(".weight") && info.shape.size() == 2;
    if (!linear || keeps_its_type(name)) {
      if (linear) kept.push_back(name.substr(0, name.size() - std::string_view(".weight").size()));
      writer.add_tensor(name, info.dtype, info.shape, data, info.nbytes());
      summary.output_bytes += info.nbytes();
      continue;
    }
    GA_CHECK(info.type.has_value(), Unsupported, "quantize fp8: tensor ", name, " is ", info.dtype,
             "; FP8 quantization reads F32, F16 and BF16 weights");
    const uint64_t rows = info.shape[0], cols = info.shape[1];
    const uint64_t tile_r = scales == Fp8Scales::kBlock128 ? kBlock : scales == Fp8Scales::kChannel ? 1 : rows;
    const uint64_t tile_c = scales == Fp8Scales::kBlock128 ? kBlock : cols;
    Quantized q = quantize(info, data, tile_r, tile_c);
    // the layouts' scale shapes: [rows / 128, cols / 128] blocks, [rows, 1] channels, [1] for the tensor
    if (scales == Fp8Scales::kTensor) q.scale_shape = {1};
    const std::string stem = name.substr(0, name.size() - std::string_view(".weight").size());
    storage.push_back(std::move(q.codes));
    writer.add_tensor(name, "F8_E4M3", info.shape, storage.back().data(), storage.back().size());
    std::vector<uint8_t> scale_bytes(q.scales.size() * 4);
    std::memcpy(scale_bytes.data(), q.scales.data(), scale_bytes.size());
    storage.push_back(std::move(scale_bytes));
    writer.add_tensor(stem + (scales == Fp8Scales::kBlock128 ? ".weight_scale_inv" : ".weight_scale"), DType::F32,
                      q.scale_shape, storage.back().data(), storage.back().size());
    summary.output_bytes += rows * cols + q.scales.size() * 4;
    ++summary.n_quantized;
  }
  GA_CHECK(summary.n_quantized > 0, InvalidArgument, "quantize fp8: '", in_dir, "' has no linear-layer weights");

  fs::create_directories(out);
  config["quantization_config"] = quantization_config(scales, kept);
  for (const fs::directory_entry& f : fs::directory_iterator(in)) {
    const std::string file = f.path().filename().string();
    if (!f.is_regular_file() || file.ends_with(".safetensors") || file == "model.safetensors.index.json" ||
        file == "config.json") {
      continue;
    }
    fs::copy_file(f.path(), out / file, fs::copy_options::overwrite_existing);
  }
  // Stale shards of an earlier run would be read beside the new file: the folder gets exactly one weights file.
  for (const fs::directory_entry& f : fs::directory_iterator(out)) {
    const std::string file = f.path().filename().string();
    if (file.ends_with(".safetensors") || file == "model.safetensors.index.json") fs::remove(f.path());
  }
  writer.write((out / "model.safetensors").string());
  {
    std::ofstream c(out / "config.json", std::ios::binary | std::ios::trunc);
    c << config.dump(2) << "\n";
    GA_CHECK(c.good(), Io, "quantize fp8: cannot write '", (out / "config.json").string(), "'");
  }
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GA_LOG(Info, "quantize fp8: ", summary.n_quantized, " of ", summary.n_tensors, " tensors in F8_E4M3 -> ", out_dir);
  return summary;
}

}  // namespace ga::tools
