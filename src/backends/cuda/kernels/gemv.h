// Quantized matrix-vector product for decode: y[t][r] = sum_k W[r][k] * x[t][k].
//
// The weights stay in their native block layout (GA_CUDA_WEIGHT_TYPES below: the GGUF types and F8_B128), or
// Q4_0 / Q8_0 / F8_B128 rows in the split layout of weight_layout.h; activations and outputs are float32. n_tokens 1 is
// the decode GEMV, 2..8 the small-batch variant (speculative decoding, a few parallel sequences) that reads the
// weights once for all tokens. Larger batches belong to the prefill GEMM. See gemv_impl.cuh for the design.
//
// Pure entry point (DESIGN.md): raw pointers, explicit strides, no allocation, the stream last, a
// cudaError_t back. gemv_unsupported_reason() says in words why a parameter set is rejected, so the
// dispatch layer and the tests can report it instead of a bare cudaErrorInvalidValue.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/kernels/weight_layout.h"
#include "gpu_accel/dtype.h"

namespace ga::cuda {

inline constexpr int kGemvMaxTokens = 8;

// The weight types of the CUDA weight readers (gemv, moe_gemv, the embedding gather, the prefill's f16
// dequantizer: kernels/dispatch.cuh has one decoder per type), for their messages; test_cuda_gemv checks it
// against gemv_supports(). A macro so that the reason strings stay literals.
#define GA_CUDA_WEIGHT_TYPES "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K F8_B128 MXFP4 NVFP4"
// ... and the row lengths they take: a multiple of the type's block.
#define GA_CUDA_WEIGHT_BLOCKS                                                                                   \
  "32 for Q4_0..Q8_0 and MXFP4, 64 for NVFP4, 128 for F8_B128, 256 for K-quants, 8 for F16/BF16, 4 for F32"

struct GemvParams {
  DType type = DType::F32;
  const void* w = nullptr;   // [rows] rows of `cols` weights of `type`, row_stride bytes apart;
                             // 16-byte aligned (cudaMalloc and CachingAllocator guarantee it)
  int64_t rows = 0;
  int64_t cols = 0;          // a multiple of the block size (GA_CUDA_WEIGHT_BLOCKS)
  int64_t row_stride = 0;    // bytes between rows, >= row_bytes(type, cols); any value (rows may be unaligned)
  const float* x = nullptr;  // [n_tokens][cols], ldx floats between tokens; 16-byte aligned
  int64_t ldx = 0;           // a multiple of 4
  float* y = nullptr;        // [n_tokens][rows], ldy floats between tokens; only y[t][0..rows) is written
  int64_t ldy = 0;
  int n_tokens = 1;          // 1 .. kGemvMaxTokens
  WeightLayout layout = WeightLayout::kGguf;  // kSplitRows: rows repacked by split_rows_in_place (Q4_0, Q8_0,
                                              // F8_B128; 16-byte aligned rows), read by the split-row kernels
  // Optional: x already rounded to the int8 path's two digits (quantize_x_int8(), swiglu() or rms_norm() with
  // out_int8 wrote it from these same x values; gemv_x_int8_bytes(cols, n_tokens) bytes, 16-byte aligned,
  // tokens packed, not ldx apart). Read instead of x (gemv_reads_x_int8) by the Q8_0 split-row int8 kernel,
  // which then skips its per-CTA quantization and takes rows of any length, and by the GGUF-order int8 kernel
  // of Q4_0 and Q4_K (the same rounding, no prologue); every other kernel reads x. The buffer must not be
  // written while the GEMV runs. The results are bit-identical to a call without it.
  const void* x_int8 = nullptr;
  // Optional: x rounded to two E4M3 digits per block of 128 (quantize_x_e4m3x2, x_fp8.h, from these same x values;
  // gemv_x_e4m3x2_bytes(cols, n_tokens) bytes, 16-byte aligned). F8_B128 split rows on sm_89+ then take the FP8
  // tensor-core kernel (gemv_rounds_x_to_e4m3x2); every other kernel ignores it. Must not be written while the
  // GEMV runs.
  const void* x_e4m3x2 = nullptr;
};

// Bytes of x rounded to two E4M3 digits (GemvParams::x_e4m3x2): [n_tokens][cols] first digits x1, [n_tokens][cols]
// second digits x2, then [n_tokens][cols / 128] float d; x ~ d (x1 + x2 / 16) per element.
inline int64_t gemv_x_e4m3x2_bytes(int64_t cols, int64_t n_tokens) { return n_tokens * (2 * cols + 4 * (cols / 128)); }

// Bytes of a pre-quantized x (GemvParams::x_int8): [n_tokens][cols / 32] blocks of 64 int8 (32 digits q1,
// 32 residual digits q2), then [n_tokens][cols / 32] float2 (d_x = amax / 127, float sum of the block).
// x ~ d_x * (q1 + q2 / 254) per element (kernels/x_int8.cuh).
inline int64_t gemv_x_int8_bytes(int64_t cols, int64_t n_tokens) { return n_tokens * (cols / 32) * (64 + 8); }

// out (gemv_x_int8_bytes(cols, n_tokens) bytes) = x [n_tokens][cols] (ld ldx) rounded as the int8 GEMV
// rounds it. Launched after the previous kernel with PDL (pdl.cuh): it may follow the kernel writing x.
struct QuantizeXInt8Params {
  const float* x = nullptr;  // [n_tokens][cols], ldx floats apart; 16-byte aligned, ldx a multiple of 4
  int64_t ldx = 0;
  int64_t cols = 0;          // a multiple of 32
  int64_t n_tokens = 0;
  void* out = nullptr;       // 16-byte aligned
};
const char* quantize_x_int8_unsupported_reason(const QuantizeXInt8Params& p);
cudaError_t quantize_x_int8(const QuantizeXInt8Params& p, cudaStream_t stream);

// nullptr when gemv() accepts `p`, else a sentence saying why not.
const char* gemv_unsupported_reason(const GemvParams& p);

// cudaErrorInvalidValue when gemv_unsupported_reason() is non-null, else the launch status.
cudaError_t gemv(const GemvParams& p, cudaStream_t stream);

// Whether gemv(p) rounds x to int8 per block of 32 (d = amax / 127, q = rint(x * (127 / amax)), as
// gemv_int8.cuh does) and dots it with the integer codes: the classic quant types (Q4_0 .. Q8_0) and
// Q4_K with 16-byte aligned GGUF rows, within per-type routing limits (Q8_0: rows > 4096, n_tokens <= 4).
// Split rows: Q8_0 does (gemv_split.cuh) for rows of <= 8192 weights while x of all tokens fits 48 KiB
// quantized, and for every shape when p.x_int8 is set; Q4_0 does not. GGUF-order Q4_0 / Q4_K given
// p.x_int8 also take rows whose quantized x would not fit the shared memory.
// Its results then differ from a float dot by up to sum |w| * d / 2 per block; the parity test picks
// its reference with this. False for parameters gemv() rejects.
bool gemv_uses_int8_activations(const GemvParams& p);

// Whether gemv(p) reads x rounded to two E4M3 digits per block of 128 (p.x_e4m3x2: d = amax / 448, x1 =
// e4m3(x / d), x2 = e4m3(16 (x / d - x1)), x ~ d (x1 + x2 / 16); gemv_split_f8x.cuh): F8_B128 split rows on sm_89+
// given p.x_e4m3x2. Other F8_B128 split rows round x to f16 (gemv_rounds_x_to_f16: the f16 tensor-core kernel,
// gemv_split_f8.cuh; |x| must stay below 65504).
// The parity test picks its reference with these. False for parameters gemv() rejects.
bool gemv_rounds_x_to_e4m3x2(const GemvParams& p);
bool gemv_rounds_x_to_f16(const GemvParams& p);

// Whether gemv(p) reads p.x_int8 (set, and a kernel that takes a pre-quantized x runs for p): the forward
// asks it to decide whether producing x_int8 for a projection is worth a kernel's work.
bool gemv_reads_x_int8(const GemvParams& p);

// Whether the GEMV kernels exist for a weight type (independent of shapes).
bool gemv_supports(DType type);

}  // namespace ga::cuda
