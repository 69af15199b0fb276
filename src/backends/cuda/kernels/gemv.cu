// gemv(): validates the parameters once and dispatches to the per-type kernel instantiation
// (gemv_impl.cuh has the design; gemv_instances/ the instantiations, declared extern here so this
// file compiles none of them).
#include "backends/cuda/kernels/dispatch.cuh"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/gemv_impl.cuh"

namespace ga::cuda {
namespace detail {
extern template cudaError_t launch_gemv<DecodeF32>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeF16>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeBF16>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ4_0>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ4_1>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ5_0>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ5_1>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ8_0>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ2_K>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ3_K>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ4_K>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ5_K>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeQ6_K>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeF8B128>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeMXFP4>(const GemvParams&, cudaStream_t);
extern template cudaError_t launch_gemv<DecodeNVFP4>(const GemvParams&, cudaStream_t);
}  // namespace detail

bool gemv_supports(DType type) { return detail::decoder_block_elems(type) != 0; }

const char* gemv_unsupported_reason(const GemvParams& p) {
  const int block = detail::decoder_block_elems(p.type);
  if (block == 0) return "weight type not supported by the CUDA GEMV (supported: " GA_CUDA_WEIGHT_TYPES ")";
  if (p.w == nullptr || p.x == nullptr || p.y == nullptr) return "w, x and y must be device pointers, not null";
  if (p.rows <= 0 || p.cols <= 0) return "rows and cols must be positive";
  if (p.n_tokens < 1 || p.n_tokens > kGemvMaxTokens) return "n_tokens must be 1..8 (larger batches are a GEMM)";
  if (p.cols % block != 0) return "cols must be a multiple of the block size (" GA_CUDA_WEIGHT_BLOCKS ")";
  if (p.cols > (int64_t{1} << 30)) return "cols above 2^30";
  if (static_cast<uint64_t>(p.row_stride) < row_bytes(p.type, static_cast<uint64_t>(p.cols))) {
    return "row_stride is smaller than one row of weights";
  }
  if (reinterpret_cast<uintptr_t>(p.w) % 16 != 0) return "the weights must be 16-byte aligned";
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || p.ldx % 4 != 0) {
    return "x must be 16-byte aligned with ldx a multiple of 4 (float4 loads)";
  }
  if (p.n_tokens > 1 && (p.ldx < p.cols || p.ldy < p.rows)) return "ldx < cols or ldy < rows for several tokens";
  if (reinterpret_cast<uintptr_t>(p.x_int8) % 16 != 0) return "x_int8 must be 16-byte aligned";
  if (reinterpret_cast<uintptr_t>(p.x_e4m3x2) % 16 != 0) return "x_e4m3x2 must be 16-byte aligned";
  if (p.layout == WeightLayout::kSplitRows && (!split_rows_supported(p.type, p.cols) || p.row_stride % 16 != 0)) {
    return "split rows need Q4_0, Q8_0 or F8_B128 rows of whole 16-byte chunks (cols a multiple of 256; F8_B128: "
           "of 512), 16-byte aligned";
  }
  return nullptr;
}

bool gemv_uses_int8_activations(const GemvParams& p) {
  if (gemv_unsupported_reason(p) != nullptr) return false;
  bool uses = false;
  detail::visit_decoder(p.type, [&](auto decoder) {
    using D = decltype(decoder);
    const detail::GemvArgs a = detail::make_gemv_args<D>(p);
    uses = detail::gemv_int8_eligible<D>(a) || detail::gemv_split_int8_eligible<D>(a);
    return cudaSuccess;
  });
  return uses;
}

bool gemv_rounds_x_to_e4m3x2(const GemvParams& p) {
  if (gemv_unsupported_reason(p) != nullptr || p.type != DType::F8_B128 || p.layout != WeightLayout::kSplitRows) {
    return false;
  }
  return detail::gemv_split_f8x_eligible(detail::make_gemv_args<detail::DecodeF8B128>(p));
}

bool gemv_rounds_x_to_f16(const GemvParams& p) {
  return gemv_unsupported_reason(p) == nullptr && p.type == DType::F8_B128 && p.layout == WeightLayout::kSplitRows &&
         !gemv_rounds_x_to_e4m3x2(p);
}

bool gemv_reads_x_int8(const GemvParams& p) {
  if (p.x_int8 == nullptr || gemv_unsupported_reason(p) != nullptr) return false;
  bool reads = false;
  detail::visit_decoder(p.type, [&](auto decoder) {
    using D = decltype(decoder);
    const detail::GemvArgs a = detail::make_gemv_args<D>(p);
    reads = (detail::gemv_int8_eligible<D>(a) && detail::gemv_int8_reads_x_int8<D>(a)) ||
            detail::gemv_split_int8_eligible<D>(a);
    return cudaSuccess;
  });
  return reads;
}

cudaError_t gemv(const GemvParams& p, cudaStream_t stream) {
  if (gemv_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  return detail::visit_decoder(p.type, [&](auto decoder) {
    return detail::launch_gemv<decltype(decoder)>(p, stream);
  });
}

}  // namespace ga::cuda
