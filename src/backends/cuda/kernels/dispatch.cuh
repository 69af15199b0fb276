// The one place where a runtime weight type becomes a compile-time decoder (DESIGN.md: dispatch
// header with a loud default). visit_decoder(type, f) calls f(DecodeX{}) for a supported type and
// returns cudaErrorNotSupported otherwise; callers pair that status with a sentence from their
// *_unsupported_reason() function, so an unsupported type never fails silently.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/kernels/weight_decode.cuh"
#include "gpu_accel/dtype.h"

namespace ga::cuda::detail {

template <class F>
cudaError_t visit_decoder(DType type, F&& f) {
  switch (type) {
    case DType::F32: return f(DecodeF32{});
    case DType::F16: return f(DecodeF16{});
    case DType::BF16: return f(DecodeBF16{});
    case DType::Q4_0: return f(DecodeQ4_0{});
    case DType::Q4_1: return f(DecodeQ4_1{});
    case DType::Q5_0: return f(DecodeQ5_0{});
    case DType::Q5_1: return f(DecodeQ5_1{});
    case DType::Q8_0: return f(DecodeQ8_0{});
    case DType::Q2_K: return f(DecodeQ2_K{});
    case DType::Q3_K: return f(DecodeQ3_K{});
    case DType::Q4_K: return f(DecodeQ4_K{});
    case DType::Q5_K: return f(DecodeQ5_K{});
    case DType::Q6_K: return f(DecodeQ6_K{});
    case DType::F8_B128: return f(DecodeF8B128{});
    case DType::MXFP4: return f(DecodeMXFP4{});
    case DType::NVFP4: return f(DecodeNVFP4{});
    default: return cudaErrorNotSupported;
  }
}

// Weights per decoder block for a supported type (the unit `cols` must be a multiple of), else 0.
inline int decoder_block_elems(DType type) {
  switch (type) {
    case DType::F32: return DecodeF32::kBlockElems;
    case DType::F16: return DecodeF16::kBlockElems;
    case DType::BF16: return DecodeBF16::kBlockElems;
    case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1: case DType::Q8_0:
      return ClassicShape::kBlockElems;
    case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return KShape::kBlockElems;
    case DType::F8_B128: return DecodeF8B128::kBlockElems;
    case DType::MXFP4: return DecodeMXFP4::kBlockElems;
    case DType::NVFP4: return DecodeNVFP4::kBlockElems;
    default: return 0;
  }
}

}  // namespace ga::cuda::detail
