// What the parity tests of the FlashAttention forward (test_cuda_flash_attention.cpp) and backward
// (test_cuda_flash_backward.cpp) share: the case shape and its name, the 16-bit conversions, the random
// inputs, the float64 softmax of one query row (the forward's reference and the first half of the
// backward's) and the unpacking of a padded 16-bit output with its error measures. One copy, so both
// tests mean the same thing by a shape, a causal mask and a relative L2 error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/flash/flash_attention.h"

namespace ga::test::cuda {

struct FlashShape {
  ::ga::cuda::FlashDtype dtype;
  int hd, n_head, n_head_kv, batch, seqlen_q, seqlen_k;
  bool causal;
  bool padded;  // the outputs' rows (O; dq, dk, dv) with 64 elements of padding
  int causal_section_heads = -1;  // forward: FlashParams::causal_section_heads (the causal tile order)
  // forward: FlashParams::window_left / window_right (-1: unbounded) and softcap (0: off); scale_mul multiplies
  // the softmax scale 1 / sqrt(hd), so that scores reach a large cap
  int window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float scale_mul = 1.0f;
};

inline std::string name_of(const FlashShape& s) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s hd%d h%d/%d b%d q%d k%d %s%s",
                s.dtype == ::ga::cuda::FlashDtype::kBf16   ? "bf16"
                : s.dtype == ::ga::cuda::FlashDtype::kF16  ? "f16"
                                                           : "fp8", s.hd, s.n_head, s.n_head_kv, s.batch,
                s.seqlen_q, s.seqlen_k, s.causal ? "causal" : "full", s.padded ? " padded" : "");
  std::string name = buf;
  if (s.causal_section_heads >= 0) name += " sections of " + std::to_string(s.causal_section_heads);
  if (s.window_left >= 0 || s.window_right >= 0) {
    name += " window (" + std::to_string(s.window_left) + ", " + std::to_string(s.window_right) + ")";
  }
  if (s.softcap > 0.0f) name += " softcap " + std::to_string(s.softcap) + " scale x" + std::to_string(s.scale_mul);
  return name;
}

inline uint16_t to_bits(double x, ::ga::cuda::FlashDtype dt) {
  const float f = static_cast<float>(x);
  if (dt == ::ga::cuda::FlashDtype::kBf16) return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x;
  return static_cast<__half_raw>(__float2half_rn(f)).x;
}

inline float from_bits(uint16_t bits, ::ga::cuda::FlashDtype dt) {
  if (dt == ::ga::cuda::FlashDtype::kBf16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// Random 16-bit tensor of n elements (values rounded to the dtype, kept as V for the reference).
template <class V>
void random_tensor(std::mt19937& rng, size_t n, float amp, ::ga::cuda::FlashDtype dt, std::vector<uint16_t>* bits,
                   std::vector<V>* values) {
  std::normal_distribution<float> dist(0.0f, amp);
  bits->resize(n);
  values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bits)[i] = to_bits(dist(rng), dt);
    (*values)[i] = from_bits((*bits)[i], dt);
  }
}

// The last key query row i sees (causal and windows are bottom-right aligned: i' = i + seqlen_k - seqlen_q sees
// keys i' - window_left .. i' + window_right, causal being window_right 0); < first_visible_key when it sees none.
inline int last_visible_key(const FlashShape& s, int i) {
  const int diag = i + s.seqlen_k - s.seqlen_q;
  if (s.causal) return std::min(s.seqlen_k - 1, diag);
  return s.window_right >= 0 ? std::min(s.seqlen_k - 1, diag + s.window_right) : s.seqlen_k - 1;
}

// The first key query row i sees (0 without a left window).
inline int first_visible_key(const FlashShape& s, int i) {
  return s.window_left >= 0 ? std::max(0, i + s.seqlen_k - s.seqlen_q - s.window_left) : 0;
}

// float64 softmax of query row qi[hd] over keys first..last of batch b, kv head hk (k contiguous
// [b][sk][hkv][d]): p[j] = softmax(cap(q.k_j * scale)), normalised, cap(x) = softcap tanh(x / softcap) when
// softcap > 0. Returns the row's log-sum-exp.
template <class T>
double softmax_row(const FlashShape& s, double scale, const T* qi, const std::vector<T>& k, int b, int hk, int last,
                   std::vector<double>& p, int first = 0, double softcap = 0.0) {
  const int d = s.hd;
  double mx = -INFINITY;
  for (int j = first; j <= last; ++j) {
    const T* kj = &k[((size_t(b) * s.seqlen_k + j) * s.n_head_kv + hk) * d];
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += double(qi[c]) * double(kj[c]);
    p[j] = dot * scale;
    if (softcap > 0.0) p[j] = softcap * std::tanh(p[j] / softcap);
    mx = std::max(mx, p[j]);
  }
  double sum = 0.0;
  for (int j = first; j <= last; ++j) sum += (p[j] = std::exp(p[j] - mx));
  for (int j = first; j <= last; ++j) p[j] /= sum;
  return mx + std::log(sum);
}

// A 16-bit output of `rows` rows of `pitch` elements (`width` of them data, the rest poisoned padding)
// against its dense float64 reference.
struct UnpackedRows {
  std::vector<float> got;      // dense [rows][width]
  size_t touched_padding = 0;  // padding elements no longer holding the poison (0xFFFF)
  double rel_l2 = 0.0;         // ||got - ref|| / ||ref|| (||got - ref|| when ref is all zero)
  double ref_rms = 0.0;
};

inline UnpackedRows unpack_rows(const std::vector<uint16_t>& got_bits, const std::vector<double>& ref, size_t rows,
                                size_t width, size_t pitch, ::ga::cuda::FlashDtype dt) {
  UnpackedRows u;
  u.got.resize(ref.size());
  double err_sq = 0.0, ref_sq = 0.0;
  for (size_t row = 0; row < rows; ++row) {
    for (size_t c = 0; c < width; ++c) {
      const size_t i = row * width + c;
      u.got[i] = from_bits(got_bits[row * pitch + c], dt);
      const double e = double(u.got[i]) - ref[i];
      err_sq += e * e;
      ref_sq += ref[i] * ref[i];
    }
    for (size_t c = width; c < pitch; ++c) u.touched_padding += got_bits[row * pitch + c] != 0xFFFF;
  }
  u.rel_l2 = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  u.ref_rms = std::sqrt(ref_sq / double(std::max<size_t>(ref.size(), 1)));
  return u;
}

}  // namespace ga::test::cuda
