// Activations as the FP8 prefill GEMM reads them (gemm.h, GemmParams::type F8_B128): x [n][k] float rounded to
// E4M3 codes per token and block of 128 columns, with one float32 scale per (token, block).
//
// The rounding is the CPU's F8_B128 quantizer (backends/cpu/quant.h): d = amax / 448 (1 for an all-zero block),
// code = e4m3(x / d) rounded to nearest even, so the codes are bit-identical to quantize_e4m3 on the host and
// nothing saturates. The scales are laid out block-major, token-contiguous: scales[b * n + t] (cuBLASLt's
// VEC128_32F layout for a K-inner operand: the outer dimension is the contiguous one).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ga::cuda {

struct QuantizeXFp8Params {
  const float* x = nullptr;  // [n][k], ldx floats apart; 16-byte aligned, ldx a multiple of 4
  int64_t ldx = 0;
  int64_t n = 0;
  int64_t k = 0;             // a multiple of 128
  uint8_t* codes = nullptr;  // [n][k] E4M3 codes, k bytes apart; 16-byte aligned
  float* scales = nullptr;   // [k / 128][n]
};

// nullptr when quantize_x_fp8() accepts p, else why not.
const char* quantize_x_fp8_unsupported_reason(const QuantizeXFp8Params& p);
// Launched after the previous kernel with PDL (pdl.cuh): it may follow the kernel writing x.
cudaError_t quantize_x_fp8(const QuantizeXFp8Params& p, cudaStream_t stream);

// x rounded to the two E4M3 digits the FP8 tensor-core GEMV reads (gemv.h, GemvParams::x_e4m3x2): per token and
// block of 128, d = amax / 448 (1 for zeros) as above, q = x / d, x1 = e4m3(q), x2 = e4m3(16 (q - x1)), every step
// rounded to nearest even; out holds gemv_x_e4m3x2_bytes(k, n) bytes (x1, then x2, then d).
struct QuantizeXE4m3x2Params {
  const float* x = nullptr;  // [n][k], ldx floats apart; 16-byte aligned, ldx a multiple of 4
  int64_t ldx = 0;
  int64_t n = 0;
  int64_t k = 0;             // a multiple of 128
  void* out = nullptr;       // 16-byte aligned
};
const char* quantize_x_e4m3x2_unsupported_reason(const QuantizeXE4m3x2Params& p);
// Launched after the previous kernel with PDL (pdl.cuh): it may follow the kernel writing x.
cudaError_t quantize_x_e4m3x2(const QuantizeXE4m3x2Params& p, cudaStream_t stream);

}  // namespace ga::cuda
