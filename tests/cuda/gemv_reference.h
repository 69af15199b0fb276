// CPU references of the CUDA GEMV's numerics, shared by the GEMV and MoE parity tests: the float dot
// (float64 over the CPU's dequantized weights), the int8-activation path (x rounded per block of 32 to
// two int8 digits as kernels/x_int8.cuh does, the weight block's codes, scale and offset read from its
// bytes), with the bound of that rounding (see int8_reference), and the f16-activation path of the
// tensor-core F8_B128 kernels (x rounded to f16, see half_x_reference, or to two E4M3 digits, see
// e4m3x2_x_reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_blocks.h"
#include "cuda_harness.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {

// The fp16 at byte `off` of a block, as float.
inline float block_half(const uint8_t* blk, size_t off) {
  uint16_t h = 0;
  std::memcpy(&h, blk + off, 2);
  return fp16_to_f32(h);
}

// The offset o of a classic block, w = d * q + o: the min (Q4_1, Q5_1) or -bias * d.
inline double classic_offset(DType type, const uint8_t* blk, double d) {
  switch (type) {
    case DType::Q4_0: return -8.0 * d;
    case DType::Q5_0: return -16.0 * d;
    case DType::Q4_1: case DType::Q5_1: return block_half(blk, 2);
    default: return 0.0;  // Q8_0
  }
}

// One 32-weight block's scale d, offset o (w = d * q + o) and its 32 codes q, read from the row's
// bytes: classic blocks (codes recovered from the CPU's dequantized weights `w`), or sub-block b % 8
// of Q4_K super-block b / 8 (d = d_super * sc, o = -(dmin * m), the CPU's float products from
// quant_blocks.h; codes from the nibbles, since d may be 0 when sc is).
inline void int8_block(DType type, const uint8_t* row_bytes_ptr, const float* w, int64_t b, double& d, double& o,
                double* codes) {
  const auto& tr = traits(type);
  if (type == DType::Q4_K) {
    const uint8_t* sb = row_bytes_ptr + (b / 8) * static_cast<int64_t>(tr.type_size);
    const int j = static_cast<int>(b % 8);
    uint8_t sc = 0, m = 0;
    ::ga::cpu::blocks::k4_scale_min(j, sb + 4, &sc, &m);
    d = static_cast<double>(block_half(sb, 0) * static_cast<float>(sc));
    o = -static_cast<double>(block_half(sb, 2) * static_cast<float>(m));
    const uint8_t* qs = sb + 16 + 32 * (j / 2);
    for (int k = 0; k < 32; ++k) codes[k] = static_cast<double>((qs[k] >> (4 * (j % 2))) & 0xF);
    return;
  }
  const uint8_t* blk = row_bytes_ptr + b * static_cast<int64_t>(tr.type_size);
  d = block_half(blk, 0);
  o = classic_offset(type, blk, d);
  // the code (exact for w = d q + o)
  for (int k = 0; k < 32; ++k) codes[k] = std::nearbyint((static_cast<double>(w[32 * b + k]) - o) / d);
}

// Reference of the int8 path for one row and token, from the CPU's dequantized weights `w`:
// x is rounded per block of 32 as gemv.h says (d_x = amax / 127, s = x * (127 / amax), q1 = rint(s),
// q2 = rint((s - q1) * 254), float steps), the block's dot is d * d_x * sum(q_w (q1 + q2 / 254)) +
// o * sum(x) in float64 (d, o, q: int8_block; sum(x) unquantized as in the kernel). `rounding_bound`
// gets the largest possible distance to the exact dot: element k errs by |d q_k| * |x_k - d_x (q1 +
// q2 / 254)| <= |w_k - o| * d_x * (1 / 508 + 1e-4) (the 1e-4: |s| <= 127.5 with 3 float roundings of
// relative 2^-24 between x / d_x and q1 + q2 / 254), summed over the row.
inline double int8_reference(DType type, const uint8_t* row_bytes_ptr, const float* w, const float* x, int64_t cols,
                      double& rounding_bound) {
  double sum = 0.0;
  rounding_bound = 0.0;
  for (int64_t b = 0; b < cols / 32; ++b) {
    double d = 0.0, o = 0.0, codes[32];
    int8_block(type, row_bytes_ptr, w, b, d, o, codes);
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(xb[k]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float dx = amax / 127.0f;
    double idot = 0.0, xsum = 0.0, wabs = 0.0;
    for (int k = 0; k < 32; ++k) {
      const float scaled = xb[k] * inv;  // rounded to float, as __fmul_rn
      const float q1 = std::nearbyint(scaled);
      const float residual = (scaled - q1) * 254.0f;  // exact difference, product rounded to float
      const double qx = static_cast<double>(q1) + static_cast<double>(std::nearbyint(residual)) / 254.0;
      const double qw = codes[k];
      idot += qw * qx;
      xsum += xb[k];
      wabs += std::fabs(d * qw);
    }
    sum += d * static_cast<double>(dx) * idot + o * xsum;
    rounding_bound += wabs * static_cast<double>(dx) * (1.0 / 508.0 + 1e-4);
  }
  return sum;
}

// The references of one GEMV output, y = w . x, for the parity tolerances: `ref` the float64 dot of the
// CPU's dequantized row, `magnitude` sum |w x| (the float path's scale: 1e-5 of it), and where the kernel
// rounds x (to int8 or to f16) `ref_rounded` (same rounding, float64 dot) and `bound_rounded` (the
// rounding's bound plus 1e-5 of the magnitude, the loose check against `ref`).
struct GemvRowRef {
  double ref = 0.0, magnitude = 0.0, ref_rounded = 0.0, bound_rounded = 0.0;
};

// The f16 rounding of x (gemv_rounds_x_to_f16): ref_rounded the float64 dot of the row with x rounded to f16
// (round to nearest even, as __floats2half2_rn), bound_rounded the rounding's bound: each |x - f16(x)| is at
// most 2^-11 |x| for normal halves (and 2^-25 absolutely below them), so the sum errs by at most
// sum |w| (2^-11 |x| + 2^-25), plus 1e-5 of the magnitude for the float accumulation.
inline void half_x_reference(GemvRowRef& r, const float* row, const float* x, int64_t cols) {
  r.ref_rounded = 0.0;
  r.bound_rounded = 1e-5 * r.magnitude;
  for (int64_t k = 0; k < cols; ++k) {
    const double xh = static_cast<double>(fp16_to_f32(f32_to_fp16(x[k])));
    r.ref_rounded += static_cast<double>(row[k]) * xh;
    r.bound_rounded += std::fabs(static_cast<double>(row[k])) * (std::ldexp(std::fabs(x[k]), -11) + std::ldexp(1.0, -25));
  }
}

// `w_row`: the row's stored bytes; `row`: its dequantized values (cols floats).
inline GemvRowRef gemv_row_reference(DType type, const uint8_t* w_row, const float* row, const float* x, int64_t cols,
                                     bool int8) {
  GemvRowRef r;
  for (int64_t k = 0; k < cols; ++k) {
    const double prod = static_cast<double>(row[k]) * x[k];
    r.ref += prod;
    r.magnitude += std::fabs(prod);
  }
  if (int8) {
    r.ref_rounded = int8_reference(type, w_row, row, x, cols, r.bound_rounded);
    r.bound_rounded += 1e-5 * r.magnitude;  // the kernel's float accumulation
  }
  return r;
}

// The two digits of one value in a block of scale d (float steps, rounded to nearest even, as quantize_x_e4m3x2).
inline void e4m3x2_digits(float x, float d, uint8_t& c1, uint8_t& c2) {
  const float q = x / d;
  c1 = f32_to_e4m3(q);
  c2 = f32_to_e4m3(16.0f * (q - e4m3_to_f32(c1)));
}

// The block scale of 128 values: the host's F8_B128 scale of their amax (amax / 448, 1 for zeros).
inline float e4m3x2_scale(const float* xb) {
  float amax = 0.0f;
  for (int k = 0; k < 128; ++k) amax = std::max(amax, std::fabs(xb[k]));
  return ::ga::cpu::e4m3_group_scale(amax);
}

// The bytes quantize_x_e4m3x2 must write for x [n][cols] (ld ldx): gemv_x_e4m3x2_bytes' layout.
inline std::vector<uint8_t> reference_x_e4m3x2(const std::vector<float>& x, int64_t ldx, int64_t cols, int64_t n) {
  const int64_t nb = cols / 128;
  std::vector<uint8_t> out(static_cast<size_t>(n * (2 * cols + 4 * nb)));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x.data() + t * ldx + 128 * b;
      const float d = e4m3x2_scale(xb);
      for (int64_t k = 0; k < 128; ++k) {
        e4m3x2_digits(xb[k], d, out[static_cast<size_t>(t * cols + 128 * b + k)],
                      out[static_cast<size_t>(n * cols + t * cols + 128 * b + k)]);
      }
      std::memcpy(out.data() + 2 * n * cols + 4 * (t * nb + b), &d, 4);
    }
  }
  return out;
}

// The two-digit E4M3 rounding of x (gemv_rounds_x_to_e4m3x2), per block of 128 as the kernel does it: d = amax / 448
// (1 for zeros), q = x / d, x1 = e4m3(q), x2 = e4m3(16 (q - x1)), every step a float operation rounded to nearest
// even, x ~ d (x1 + x2 / 16). ref_rounded is the float64 dot with the rounded x; bound_rounded the rounding's
// exact effect bound, sum |w| |x - rounded x|, plus 2e-4 of the magnitude: the FP8 tensor cores sum each 32-term
// product with a narrower mantissa than float32 (the same as cuBLAS's FP8 GEMM, test_cuda_fp8_gemm.cpp).
inline constexpr double kE4m3x2Accumulation = 2e-4;
inline void e4m3x2_x_reference(GemvRowRef& r, const float* row, const float* x, int64_t cols) {
  r.ref_rounded = 0.0;
  r.bound_rounded = kE4m3x2Accumulation * r.magnitude;
  for (int64_t b = 0; b < cols / 128; ++b) {
    const float* xb = x + 128 * b;
    const float d = e4m3x2_scale(xb);
    for (int k = 0; k < 128; ++k) {
      uint8_t c1 = 0, c2 = 0;
      e4m3x2_digits(xb[k], d, c1, c2);
      const double xr = static_cast<double>(d) * (static_cast<double>(e4m3_to_f32(c1)) +
                                                  static_cast<double>(e4m3_to_f32(c2)) / 16.0);
      const double w = row[128 * b + k];
      r.ref_rounded += w * xr;
      r.bound_rounded += std::fabs(w) * std::fabs(static_cast<double>(xb[k]) - xr);
    }
  }
}

// Compares n GEMV outputs with their references: with rounded activations (int8, f16 or two E4M3 digits, `how`
// names it) tightly against the same rounding (rounded_rtol of sum |w x|: 1e-5 for float accumulation,
// kE4m3x2Accumulation for the FP8 tensor cores) and loosely against the float
// dot (within the rounding's bound); else against the float dot within 1e-5 of sum |w x| (float
// accumulation over a few thousand terms).
inline void compare_gemv(Parity& parity, const std::string& name, const float* got, const GemvRowRef* refs, size_t n,
                         bool rounded, const char* how = "int8", double rounded_rtol = 1e-5) {
  std::vector<double> ref(n), magnitude(n), ref_rounded(n), bound_rounded(n);
  for (size_t i = 0; i < n; ++i) {
    ref[i] = refs[i].ref;
    magnitude[i] = refs[i].magnitude;
    ref_rounded[i] = refs[i].ref_rounded;
    bound_rounded[i] = refs[i].bound_rounded;
  }
  if (rounded) {
    parity.compare(name + " " + how, got, ref_rounded.data(), n, rounded_rtol, 1e-30, magnitude.data());
    parity.compare(name + " " + how + " vs float", got, ref.data(), n, 1.0, 1e-30, bound_rounded.data());
  } else {
    parity.compare(name, got, ref.data(), n, 1e-5, 1e-30, magnitude.data());
  }
}

}  // namespace ga::test::cuda
