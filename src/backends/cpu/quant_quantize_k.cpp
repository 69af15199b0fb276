// K-quant reference quantizers (Q2_K ... Q6_K), following llama.cpp's quantize_row_q*_K_ref.
//
// A K-quant super-block of 256 weights has 8 or 16 sub-blocks, each with its own scale (and min)
// quantized again to 4-8 bits against one fp16 super-block scale. The sub-block scales come from
// small searches that minimise a weighted squared (or absolute) error:
// - search_signed_scale (ggml make_qx_quants, rmse_type 1): symmetric levels, weights x^2, tries
//   the scales -(nmax + 0.1 i) / max for i in -9..9 (Q6_K).
// - search_q3_scale (make_q3_quants): symmetric levels, then up to 5 passes of coordinate descent
//   on single levels (Q3_K).
// - search_scale_min (make_qkx2_quants): asymmetric levels with a min, least-squares fit of scale
//   and min for each of nstep+1 candidate level assignments (Q2_K, Q4_K, Q5_K).
// Each is written to produce the same bytes as llama-quantize without an importance matrix, so
// the order and grouping of every float operation follows the reference.
//
// Floating-point contraction is off in this file: llama.cpp's reference build rounds every multiply
// and add separately, and a fused multiply-add in the searches changes the chosen levels of ~10-30%
// of the blocks (measured against the fixtures); without fusion the bytes match exactly.
#include "backends/cpu/fp_contract_off.h"  // first: it covers every function after it

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/quant_blocks.h"
#include "backends/cpu/quant_kernels.h"

namespace ga::cpu::detail {
namespace {

using namespace blocks;

constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all zero

// Packs 2-bit levels: byte 32h + l holds levels 128h + l + 32p at bits 2p.
void pack_2bit(const uint8_t* levels, uint8_t* qs) {
  for (int j = 0; j < kQKK; j += 128) {
    for (int l = 0; l < 32; ++l) {
      qs[j / 4 + l] = static_cast<uint8_t>(levels[j + l] | (levels[j + l + 32] << 2) | (levels[j + l + 64] << 4) |
                                           (levels[j + l + 96] << 6));
    }
  }
}

// Packs 6-bit scale and min of sub-block j (Q4_K/Q5_K layout, the inverse of k4_scale_min).
void pack_k4_scale_min(int j, uint8_t sc, uint8_t m, uint8_t* scales) {
  if (j < 4) {
    scales[j] = sc;
    scales[j + 4] = m;
  } else {
    scales[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
    scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((sc >> 4) << 6));
    scales[j] = static_cast<uint8_t>(scales[j] | ((m >> 4) << 6));
  }
}

// make_qx_quants(n, nmax, x, L, rmse_type = 1, no importance): returns the scale; levels in L are
// offset by nmax (0 .. 2 nmax - 1).
float search_signed_scale(int n, int nmax, const float* x, int8_t* levels) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(levels, levels + n, int8_t{0});
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    levels[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
        levels[i] = static_cast<int8_t>(l + nmax);
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// make_q3_quants(n, nmax, x, L, do_rmse = true): levels offset by nmax.
float search_q3_scale(int n, int nmax, const float* x, int8_t* levels) {
  const float max = signed_absmax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(levels, levels + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f;
  float suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * x[i])));
    levels[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  // Coordinate descent: move one level to its best value given the others, keep it if the
  // weighted cosine sumlx^2 / suml2 improves.
  for (int pass = 0; pass < 5; ++pass) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(levels[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0.0f) {
        float sl2 = suml2 - w * li * li;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != levels[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            levels[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) levels[i] = static_cast<int8_t>(levels[i] + nmax);
  return sumlx / suml2;
}

// make_qkx2_quants: levels 0..nmax with weight = scale * level - the_min. Returns the scale and
// stores the (non-negative) min in *the_min.
float search_scale_min(int n, int nmax, const float* x, const float* weights, uint8_t* levels, float* the_min,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    std::fill(levels, levels + n, uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  auto error_of = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    levels[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * static_cast<float>(levels[i]) + min - x[i];
    best_error += weights[i] * error_of(diff);
  }
  uint8_t candidate[32];
  for (int step = 0; step <= nstep; ++step) {
    iscale = (rmin + rdelta * static_cast<float>(step) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - min))));
      candidate[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float lf = static_cast<float>(l);
      sum_l += w * lf;
      sum_l2 += w * lf * lf;
      sum_xl += w * lf * x[i];
    }
    // least-squares scale and min for these levels
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0.0f;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(candidate[i]) + this_min - x[i];
        error += weights[i] * error_of(diff);
      }
      if (error < best_error) {
        std::memcpy(levels, candidate, static_cast<size_t>(n));
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K and Q5_K share everything but the level count and search parameters.
struct K4Params {
  int nmax;
  float rmin;
  int nstep;
};

// Sub-block scales and mins -> 6-bit packed scales, fp16 d/dmin, and the final levels.
void quantize_k4_common(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out, uint8_t* levels,
                        const K4Params& p) {
  float scales[8];
  float mins[8];
  float weights[32];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = search_scale_min(32, p.nmax, xs, weights, levels + 32 * j, &mins[j], p.rmin, 0.1f, p.nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  std::memset(scales_out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    // uint8_t wrap as in the reference: the value is in 0..63 for finite input
    const auto ls = static_cast<uint8_t>(std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j]))));
    const auto lm = static_cast<uint8_t>(std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j]))));
    pack_k4_scale_min(j, ls, lm, scales_out);
  }
  *d_out = f32_to_fp16(max_scale / 63.0f);
  *dmin_out = f32_to_fp16(max_min / 63.0f);
  // Final levels against the rounded scales actually stored.
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, scales_out, &sc, &m);
    const float d = half(*d_out) * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = half(*dmin_out) * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      levels[32 * j + i] = static_cast<uint8_t>(std::max(0, std::min(p.nmax, l)));
    }
  }
}

}  // namespace

void quantize_q2_k(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  constexpr float kScaleLevels = 15.0f;  // 4-bit sub-block scales and mins
  for (int64_t i = 0; i < n_blocks; ++i, x += kQKK) {
    uint8_t levels[kQKK];
    float weights[16];
    float scales[16];
    float mins[16];
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = search_scale_min(16, 3, x + 16 * j, weights, levels + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0.0f) {
      const float iscale = kScaleLevels / max_scale;
      for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = f32_to_fp16(max_scale / kScaleLevels);
    } else {
      std::memset(y[i].scales, 0, sizeof y[i].scales);
      y[i].d = f32_to_fp16(0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = kScaleLevels / max_min;
      for (int j = 0; j < 16; ++j) {
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (nearest_int(iscale * mins[j]) << 4));
      }
      y[i].dmin = f32_to_fp16(max_min / kScaleLevels);
    } else {
      y[i].dmin = f32_to_fp16(0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = half(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = half(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int((x[16 * j + l] + dm) / d);
        levels[16 * j + l] = static_cast<uint8_t>(std::max(0, std::min(3, q)));
      }
    }
    pack_2bit(levels, y[i].qs);
  }
}

void quantize_q3_k(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += kQKK) {
    int8_t levels[kQKK];
    float scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = search_q3_scale(16, 4, x + 16 * j, levels + 16 * j);
    const float max_scale = signed_absmax(scales, 16);
    std::memset(y[i].scales, 0, sizeof y[i].scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        auto l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(std::max<int>(-32, std::min<int>(31, l)) + 32);
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
      }
      y[i].d = f32_to_fp16(1.0f / iscale);
    } else {
      y[i].d = f32_to_fp16(0.0f);
    }
    int8_t sc[16];
    q3k_scales(y[i].scales, sc);
    for (int j = 0; j < 16; ++j) {
      const float d = half(y[i].d) * static_cast<float>(sc[j]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int(x[16 * j + l] / d);
        levels[16 * j + l] = static_cast<int8_t>(std::max(-4, std::min(3, q)) + 4);
      }
    }
    // The high bit of level j goes to bit j / 32 of hmask[j % 32].
    std::memset(y[i].hmask, 0, sizeof y[i].hmask);
    uint8_t low[kQKK];
    for (int j = 0; j < kQKK; ++j) {
      int l = levels[j];
      if (l > 3) {
        y[i].hmask[j % 32] = static_cast<uint8_t>(y[i].hmask[j % 32] | (1u << (j / 32)));
        l -= 4;
      }
      low[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(low, y[i].qs);
  }
}

void quantize_q4_k(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += kQKK) {
    uint8_t levels[kQKK];
    quantize_k4_common(x, &y[i].d, &y[i].dmin, y[i].scales, levels, K4Params{15, -1.0f, 20});
    // 4 groups of 64: byte l of group g = level 64g + l | level 64g + 32 + l << 4
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * g + l] = static_cast<uint8_t>(levels[64 * g + l] | (levels[64 * g + 32 + l] << 4));
      }
    }
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += kQKK) {
    uint8_t levels[kQKK];
    quantize_k4_common(x, &y[i].d, &y[i].dmin, y[i].scales, levels, K4Params{31, -0.5f, 15});
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int g = 0; g < 4; ++g) {
      for (int l = 0; l < 32; ++l) {
        int l1 = levels[64 * g + l];
        int l2 = levels[64 * g + 32 + l];
        // the 5th bit of sub-block s (= 2g or 2g + 1) goes to bit s of qh[l]
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (1u << (2 * g)));
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[l] = static_cast<uint8_t>(y[i].qh[l] | (2u << (2 * g)));
        }
        y[i].qs[32 * g + l] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

void quantize_q6_k(const float* x, void* dst, int64_t n_blocks) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n_blocks; ++i, x += kQKK) {
    int8_t levels[kQKK];
    float scales[16];
    for (int s = 0; s < 16; ++s) scales[s] = search_signed_scale(16, 32, x + 16 * s, levels + 16 * s);
    const float max_scale = signed_absmax(scales, 16);
    if (std::fabs(max_scale) < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = f32_to_fp16(1.0f / iscale);
    for (int s = 0; s < 16; ++s) y[i].scales[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[s])));
    for (int s = 0; s < 16; ++s) {
      const float d = half(y[i].d) * static_cast<float>(y[i].scales[s]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = nearest_int(x[16 * s + l] / d);
        levels[16 * s + l] = static_cast<int8_t>(std::max(-32, std::min(31, q)) + 32);
      }
    }
    // weight 128h + 32k + l: low nibble into ql[64h + l + 32(k & 1)] (k >= 2: high nibble),
    // 2 high bits into qh[32h + l] at bit 2k
    for (int h = 0; h < 2; ++h) {
      const auto* lv = reinterpret_cast<const uint8_t*>(levels) + 128 * h;
      uint8_t* ql = y[i].ql + 64 * h;
      uint8_t* qh = y[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((lv[l] & 0xF) | ((lv[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((lv[l + 32] & 0xF) | ((lv[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((lv[l] >> 4) | ((lv[l + 32] >> 4) << 2) | ((lv[l + 64] >> 4) << 4) |
                                     ((lv[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace ga::cpu::detail
