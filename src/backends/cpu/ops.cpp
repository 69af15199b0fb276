// Element-wise and per-row ops of the Llama-family forward (see ops.h for the contracts).
//
// These are deliberately plain loops: the activations of one token are a few thousand floats, so
// the time goes into the matmuls, and plain loops keep the numerics obvious. Where a sum over a
// whole row feeds a normalisation (RMSNorm, softmax), it is accumulated in double so the result
// stays within float32 rounding of a float64 reference for rows of any length.
#include "backends/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/activation.h"
#include "backends/cpu/quant.h"
#include "gpu_accel/error.h"

namespace ga::cpu {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const double mean = sum_sq / static_cast<double>(n);
  const float inv_rms = static_cast<float>(1.0 / std::sqrt(mean + static_cast<double>(eps)));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv_rms * w[i];
}

void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - mean;
    sq += static_cast<double>(d) * d;
  }
  const float var = static_cast<float>(sq / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float y = (x[i] - mean) * scale;
    out[i] = w != nullptr ? y * w[i] + b[i] : y;
  }
}

void softmax(float* x, int64_t n) {
  float max_v = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max_v = std::max(max_v, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_v);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

void geglu_tanh(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void embedding_row(DType type, const uint8_t* data, int64_t n, int64_t row, float* dst) {
  const uint64_t stride = row_bytes(type, static_cast<uint64_t>(n));
  dequantize_row(type, data + static_cast<uint64_t>(row) * stride, dst, n);
}

void rope_angles(const double* inv_freq, int64_t half, double pos, float* cos_out, float* sin_out) {
  for (int64_t i = 0; i < half; ++i) {
    const double theta = pos * inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* cos_v, const float* sin_v,
          RopeLayout layout) {
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // The two members of pair i: adjacent elements, or the same index in both halves.
      const int64_t i0 = layout == RopeLayout::AdjacentPairs ? 2 * i : i;
      const int64_t i1 = layout == RopeLayout::AdjacentPairs ? 2 * i + 1 : i + half;
      const float x0 = v[i0];
      const float x1 = v[i1];
      v[i0] = x0 * cos_v[i] - x1 * sin_v[i];
      v[i1] = x0 * sin_v[i] + x1 * cos_v[i];
    }
  }
}

void store_kv(DType type, const float* src, void* dst, int64_t n) {
  if (type == DType::F32) {
    float* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
  } else if (type == DType::F16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
  } else {
    GA_THROW(Unsupported, "KV cache type ", dtype_name(type), " (supported: F32, F16; F8_E4M3 by store_kv_fp8)");
  }
}

void store_kv_fp8(const float* src, uint8_t* codes, float* scales, int64_t n_head_kv, int64_t head_dim) {
  for (int64_t h = 0; h < n_head_kv; ++h) {
    const float* x = src + h * head_dim;
    float amax = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(x[d]));
    scales[h] = e4m3_group_scale(amax);
    quantize_e4m3(x, head_dim, scales[h], codes + h * head_dim);
  }
}

}  // namespace ga::cpu
