// FP8 E4M3 with a shared float32 scale: the one quantizer behind DType::F8_B128 (quantize_row: a scale per
// block of 128 weights) and `gpu-accel quantize ... fp8` (model/tools/quantize_fp8.cpp: a scale per 128 x 128
// tile, per row or per tensor). The scale is the group's largest magnitude / 448, E4M3's largest finite value, so
// no weight saturates; a code is value / scale rounded to nearest even (f32_to_e4m3). This is the recipe of the
// FP8 checkpoints that ship (DeepSeek-V3, Qwen3-FP8, compressed-tensors' dynamic-free weights).
#include <algorithm>
#include <cmath>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_blocks.h"
#include "backends/cpu/quant_kernels.h"

namespace ga::cpu {

float e4m3_group_scale(float amax) { return amax > 0.0f ? amax / kE4m3Max : 1.0f; }

void quantize_e4m3(const float* x, int64_t n, float scale, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = f32_to_e4m3(x[i] / scale);
}

namespace detail {

void quantize_f8_b128(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<blocks::BlockF8B128*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += blocks::kQKF8) {
    float amax = 0.0f;
    for (int j = 0; j < blocks::kQKF8; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = e4m3_group_scale(amax);
    std::memcpy(y[i].d, &d, sizeof d);
    quantize_e4m3(x, blocks::kQKF8, d, y[i].qs);
  }
}

}  // namespace detail
}  // namespace ga::cpu
