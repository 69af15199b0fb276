#include "model/loader/hf_fp8.h"

#include <algorithm>
#include <cstring>

#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga::hf {
namespace {

float scale_value(const safetensors::TensorInfo& info, const uint8_t* data, uint64_t i) {
  if (info.dtype == "F32") {
    float f;
    std::memcpy(&f, data + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, data + i * 2, 2);
  return info.dtype == "BF16" ? bf16_to_f32(h) : fp16_to_f32(h);
}

}  // namespace

std::optional<Fp8Layout> fp8_layout(const HfConfig& config) {
  const std::optional<JsonReader> q = config.root.object("quantization_config");
  if (!q) return std::nullopt;
  const std::string method = q->string("quant_method", "");
  if (method == "fp8") {
    Fp8Layout l;
    if (q->has("weight_block_size")) {
      const std::vector<int64_t> b = q->integers("weight_block_size");
      GA_CHECK(b.size() == 2 && b[0] > 0 && b[1] > 0, InvalidFormat, config.root.source(),
               ": quantization_config.weight_block_size must be two positive integers");
      l.block_out = b[0];
      l.block_in = b[1];
    }
    return l;
  }
  if (method == "compressed-tensors") {
    const std::string format = q->string("format", "");
    GA_CHECK(format == "float-quantized" || format == "naive-quantized", Unsupported, config.root.source(),
             ": compressed-tensors format '", format, "' (gpu_accel reads FP8 float-quantized checkpoints)");
    return Fp8Layout{};
  }
  GA_THROW(Unsupported, config.root.source(), ": quantization_config.quant_method '", method,
           "' (gpu_accel reads unquantized and FP8 checkpoints)");
}

bool is_fp8_scale_name(std::string_view n) {
  return n.ends_with(".weight_scale_inv") || n.ends_with(".weight_scale") || n.ends_with(".input_scale");
}

namespace {

// Which scale multiplies element (r, c) of an FP8 weight: scale index (r / block_r) * scale_cols + c / block_c.
struct ScaleGrid {
  const safetensors::TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  uint64_t rows = 0, cols = 0;
  uint64_t block_r = 0, block_c = 0, scale_cols = 0;
  float at(uint64_t r, uint64_t c) const { return scale_value(*info, data, (r / block_r) * scale_cols + c / block_c); }
};

// The weight's shape and its scale tensor's tiling (per tensor, per output row, or per block), checked.
ScaleGrid scale_grid(const safetensors::Checkpoint& ckpt, const std::string& hf_name, const Fp8Layout& layout) {
  const safetensors::TensorInfo& w = *ckpt.find(hf_name);
  GA_CHECK(w.dtype == "F8_E4M3", Unsupported, "'", ckpt.path_of(hf_name), "': tensor '", hf_name, "' has dtype ",
           w.dtype, " (of the FP8 types gpu_accel reads F8_E4M3)");
  GA_CHECK(w.shape.size() == 2, InvalidFormat, "'", ckpt.path_of(hf_name), "': FP8 tensor '", hf_name,
           "' is not a matrix");
  const uint64_t rows = w.shape[0], cols = w.shape[1];
  const std::string stem = hf_name.substr(0, hf_name.size() - std::string_view(".weight").size());
  std::string scale_name = stem + ".weight_scale_inv";
  if (ckpt.find(scale_name) == nullptr) scale_name = stem + ".weight_scale";
  const safetensors::TensorInfo* s = ckpt.find(scale_name);
  GA_CHECK(s != nullptr, InvalidFormat, "'", ckpt.path_of(hf_name), "': FP8 tensor '", hf_name,
           "' has no scale (", stem, ".weight_scale_inv or .weight_scale)");
  GA_CHECK(s->dtype == "F32" || s->dtype == "BF16" || s->dtype == "F16", InvalidFormat, "'", ckpt.path_of(scale_name),
           "': scale '", scale_name, "' has dtype ", s->dtype);
  uint64_t n_scale = 1;
  for (const uint64_t d : s->shape) n_scale *= d;
  uint64_t block_r = rows, block_c = cols;
  if (n_scale == rows && (s->shape.size() == 1 || (s->shape.size() == 2 && s->shape[1] == 1)) && rows > 1) {
    block_r = 1;  // per output channel
  } else if (s->shape.size() == 2 && n_scale > 1) {
    block_r = layout.block_out > 0 ? static_cast<uint64_t>(layout.block_out) : (rows + s->shape[0] - 1) / s->shape[0];
    block_c = layout.block_in > 0 ? static_cast<uint64_t>(layout.block_in) : (cols + s->shape[1] - 1) / s->shape[1];
    GA_CHECK(s->shape[0] == (rows + block_r - 1) / block_r && s->shape[1] == (cols + block_c - 1) / block_c,
             InvalidFormat, "'", ckpt.path_of(scale_name), "': scale '", scale_name, "' of shape [", s->shape[0], ", ",
             s->shape[1], "] does not tile [", rows, ", ", cols, "] in blocks of ", block_r, "x", block_c);
  } else {
    GA_CHECK(n_scale == 1, InvalidFormat, "'", ckpt.path_of(scale_name), "': scale '", scale_name, "' has ", n_scale,
             " values for a [", rows, ", ", cols, "] weight");
  }
  return ScaleGrid{s, ckpt.tensor_data(scale_name), rows, cols, block_r, block_c, (cols + block_c - 1) / block_c};
}

}  // namespace

std::vector<float> dequantize_fp8_weight(const safetensors::Checkpoint& ckpt, const std::string& hf_name,
                                         const Fp8Layout& layout) {
  const ScaleGrid g = scale_grid(ckpt, hf_name, layout);
  const uint8_t* q = ckpt.tensor_data(hf_name);
  std::vector<float> out(g.rows * g.cols);
  for (uint64_t r = 0; r < g.rows; ++r) {
    for (uint64_t c0 = 0; c0 < g.cols; c0 += g.block_c) {  // one scale per run of block_c columns
      const float scale = g.at(r, c0);
      const uint64_t end = std::min(g.cols, c0 + g.block_c);
      for (uint64_t c = c0; c < end; ++c) out[r * g.cols + c] = e4m3_to_f32(q[r * g.cols + c]) * scale;
    }
  }
  return out;
}

std::optional<std::vector<uint8_t>> fp8_weight_blocks(const safetensors::Checkpoint& ckpt, const std::string& hf_name,
                                                      const Fp8Layout& layout) {
  constexpr uint64_t kBlock = 128, kBlockBytes = 132;  // DType::F8_B128
  const ScaleGrid g = scale_grid(ckpt, hf_name, layout);
  if (g.cols % kBlock != 0 || g.block_c % kBlock != 0) return std::nullopt;  // a block would straddle two scales
  const uint8_t* q = ckpt.tensor_data(hf_name);
  const uint64_t blocks_per_row = g.cols / kBlock;
  std::vector<uint8_t> out(g.rows * blocks_per_row * kBlockBytes);
  uint8_t* dst = out.data();
  for (uint64_t r = 0; r < g.rows; ++r) {
    for (uint64_t b = 0; b < blocks_per_row; ++b, dst += kBlockBytes) {
      const float scale = g.at(r, b * kBlock);
      std::memcpy(dst, &scale, 4);
      std::memcpy(dst + 4, q + r * g.cols + b * kBlock, kBlock);
    }
  }
  return out;
}

}  // namespace ga::hf
