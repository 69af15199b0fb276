// Random quantized weights for kernel tests: random stored bytes made decodable.
//
// Kernel tests want every bit pattern of the packed levels to occur, so a weight row starts as random
// bytes. Levels are valid whatever their bits, but an fp16 scale of random bits can be Inf or NaN, which
// would hide any error of the kernel; so the fp16 fields of each block (where ggml-common.h puts them)
// are overwritten with finite values of the size real models have. The CPU dot / matmul tests and the
// CUDA GEMV tests build their rows this way.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "gpu_accel/dtype.h"

namespace ga::test {

// Byte offsets of the fp16 fields inside one block of `type`: the scale first, then the min (Q4_1/Q5_1 m,
// K-quant dmin) where there is one. Empty for the dense types (F32, F16, BF16) and other types.
std::vector<int> fp16_field_offsets(DType type);

// Overwrites the fp16 fields of n_blocks consecutive blocks of `type` at `blocks`: the scale with
// +-U(0.001, 0.05) (either sign), the min with U(0.001, 0.05).
void set_finite_fp16_fields(DType type, uint8_t* blocks, int64_t n_blocks, std::mt19937& rng);

// `rows` random rows of `cols` weights of `type`, row_stride bytes apart: F32 / F16 / BF16 values from N(0, 1),
// quant types random stored bytes with set_finite_fp16_fields (F8_B128: float32 scales of U(0.001, 0.05) and no
// NaN codes; MXFP4: exponents of real weights' sizes and a few subnormal scales; NVFP4's scale bytes stay
// random, every one being finite). The buffer ends right after the last row's
// bytes (row_stride * (rows - 1) + row_bytes), so a read past it is caught by a sanitizer; padding is random.
std::vector<uint8_t> random_weight_rows(DType type, int64_t rows, int64_t cols, uint64_t row_stride, std::mt19937& rng);

}  // namespace ga::test
