#include "model/loader/hf_fp8.h"

#include <cstring>

#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga::hf {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

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
  return ends_with(n, ".weight_scale_inv") || ends_with(n, ".weight_scale") || ends_with(n, ".input_scale");
}

std::vector<float> dequantize_fp8_weight(const safetensors::Checkpoint& ckpt, const std::string& hf_name,
                                         const Fp8Layout& layout) {
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
  // which scale multiplies element (r, c): per tensor, per output row, or per block
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
  const uint64_t scale_cols = (cols + block_c - 1) / block_c;
  const uint8_t* q = ckpt.tensor_data(hf_name);
  const uint8_t* sd = ckpt.tensor_data(scale_name);
  std::vector<float> out(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      const float scale = scale_value(*s, sd, (r / block_r) * scale_cols + c / block_c);
      out[r * cols + c] = e4m3_to_f32(q[r * cols + c]) * scale;
    }
  }
  return out;
}

}  // namespace ga::hf
