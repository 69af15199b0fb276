// Device-side row layouts of quantized weights: the GGUF block order, or "split rows", a one-time
// reordering done at upload that the decode GEMV reads with aligned 16-byte loads.
//
// Why: a Q8_0 block is 34 bytes and a Q4_0 block 18 (fp16 scale + codes), so in GGUF order a row's
// codes are never 16-byte aligned and the GEMV must stage rows through shared memory (cp.async) or
// transpose them between lanes before it can decode: measured 39-62 % of the copy bandwidth for Q8_0
// (H200, 2026-11-22) where F16, read straight into registers, reaches
// 72-100 %. Split rows keep every row's bytes and only change their order:
//
//   row r (row_stride bytes apart, unchanged):  [codes of block 0 | codes of block 1 | ... ] [d_0 d_1 ...]
//                                               nb * kCodeBytes bytes                          nb fp16
//
// so a row is still row_bytes(type, cols) bytes, every row is self-contained (a fused matrix, a slice
// of rows or a tied embedding/output matrix stays valid), and with 16-byte aligned rows the codes are
// whole aligned chunks (Q8_0: 16 codes, Q4_0: 32 codes = one block in GGUF nibble order, F8_B128: 16
// of a block's 128 E4M3 codes; its scales are float32, 4 bytes each). The bits are
// the model's; only their order changes. Every reader of a matrix must be told its layout: the GEMV
// (GemvParams::layout), the embedding gather (EmbeddingParams::layout) and the prefill dequantizer
// (dequantize_to_f16's layout argument).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu_accel/dtype.h"

namespace ga::cuda {

enum class WeightLayout : uint8_t {
  kGguf = 0,       // the file's block order
  kSplitRows = 1,  // per row: all codes, then all scales (see above); Q4_0, Q8_0 and F8_B128
};

// Whether split rows exist for `type` and a row of `cols` weights in it is whole 16-byte chunks
// (cols a multiple of 256 for Q4_0 and Q8_0, of 512 for F8_B128), so a matrix with row_stride = row_bytes
// can be split.
bool split_rows_supported(DType type, int64_t cols);

// Whether the forward should split this matrix at upload: supported and measured faster in the
// decode GEMV (H200 runs of 2026-11-22; their logs are in git history under docs/results/).
bool gemv_prefers_split_rows(DType type, int64_t cols);

// nullptr when split_rows_in_place() accepts the arguments, else why not.
const char* split_rows_unsupported_reason(DType type, int64_t rows, int64_t cols, int64_t row_stride, const void* w);

// Rewrites `rows` rows of GGUF blocks at w (row_stride bytes apart, 16-byte aligned) into split
// rows, in place, on the stream. cudaErrorInvalidValue when split_rows_unsupported_reason() objects.
cudaError_t split_rows_in_place(DType type, void* w, int64_t rows, int64_t cols, int64_t row_stride,
                                cudaStream_t stream);

namespace detail {
// The embedding gather and the f16 dequantizer of split rows (called by embedding() and
// dequantize_to_f16() for WeightLayout::kSplitRows; bit-exact with ga::cpu::dequantize_row of the
// original blocks, as their GGUF-order versions are).
cudaError_t split_rows_embedding(DType type, const void* w, int64_t n_rows_w, int64_t cols, int64_t row_stride,
                                 const int32_t* ids, int64_t n_ids, float* out, int64_t ld_out, cudaStream_t stream);
cudaError_t split_rows_dequantize_f16(DType type, const void* w, int64_t rows, int64_t cols, int64_t row_stride,
                                      void* dst_f16, cudaStream_t stream);
// The block scales of F8_B128 split rows as the FP8 prefill GEMM reads them (gemm.h): out[b * rows + r] = the scale
// of block b of row r ([cols / 128][rows] floats; cuBLASLt's VEC128_32F layout for the weights, whose codes it
// reads in place: a split row starts with its codes, row_stride bytes apart).
cudaError_t split_rows_f8_gemm_scales(const void* w, int64_t rows, int64_t cols, int64_t row_stride, float* out,
                                      cudaStream_t stream);
}  // namespace detail

}  // namespace ga::cuda
