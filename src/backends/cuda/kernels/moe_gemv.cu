// moe_gemv(): validates the parameters once and dispatches to the per-type instantiation
// (moe_gemv_impl.cuh has the design; moe_gemv_instances/ the instantiations, declared extern here so this
// file compiles none of them).
#include "backends/cuda/kernels/dispatch.cuh"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/moe_gemv_impl.cuh"

namespace ga::cuda {
namespace detail {
extern template cudaError_t launch_moe_gemv<DecodeF32>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeF16>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeBF16>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ4_0>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ4_1>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ5_0>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ5_1>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ8_0>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ2_K>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ3_K>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ4_K>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ5_K>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeQ6_K>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeF8B128>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeMXFP4>(const MoeGemvParams&, cudaStream_t);
extern template cudaError_t launch_moe_gemv<DecodeNVFP4>(const MoeGemvParams&, cudaStream_t);
}  // namespace detail

namespace {

bool misaligned(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 != 0; }

}  // namespace

const char* moe_gemv_unsupported_reason(const MoeGemvParams& p) {
  if (const char* why = moe_shape_unsupported_reason(p.shape)) return why;
  const MoeExperts& w = p.w;
  const int block = detail::decoder_block_elems(w.type);
  if (block == 0) return "weight type not supported by the CUDA GEMV (supported: " GA_CUDA_WEIGHT_TYPES ")";
  if (p.plan == nullptr || w.data == nullptr || p.x == nullptr || p.y == nullptr) {
    return "plan, w, x and y must be device pointers, not null";
  }
  if (w.rows <= 0 || w.cols <= 0) return "rows and cols must be positive";
  if (moe_plan_max_items(p.shape) > 65535) return "more work items than one launch's grid.y (65535): split the tokens";
  if (w.cols % block != 0) return "cols must be a multiple of the block size (" GA_CUDA_WEIGHT_BLOCKS ")";
  if (w.cols > (int64_t{1} << 30)) return "cols above 2^30";
  if (static_cast<uint64_t>(w.row_stride) < row_bytes(w.type, static_cast<uint64_t>(w.cols))) {
    return "row_stride is smaller than one row of weights";
  }
  if (w.expert_stride % 16 != 0 || w.expert_stride < (w.rows - 1) * w.row_stride + w.row_stride) {
    return "expert_stride must be a multiple of 16 and hold an expert's rows";
  }
  if (misaligned(w.data) || misaligned(p.w2)) return "the weight stacks must be 16-byte aligned";
  if (misaligned(p.x) || p.ldx % 4 != 0) return "x must be 16-byte aligned with ldx a multiple of 4 (float4 loads)";
  if (p.ldx < w.cols) return "ldx < cols";
  if (p.ldy < (p.w2 != nullptr ? 2 : 1) * w.rows) return "ldy < rows (2 rows with w2: gate | up)";
  if (p.input != MoeGemvInput::kTokenRows && p.input != MoeGemvInput::kPairRows) return "unknown input rows";
  if (p.kernel == MoeGemvKernel::kInt8) {
    bool possible = false;
    detail::visit_decoder(w.type, [&](auto decoder) {
      using D = decltype(decoder);
      possible = detail::gemv_int8_possible<D>(detail::make_expert_launch<D>(p).g);
      return cudaSuccess;
    });
    if (!possible) {
      return "the int8 kernel takes Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K with 16-byte aligned rows of whole units whose "
             "quantized x fits its shared memory";
    }
  }
  if (p.kernel != MoeGemvKernel::kAuto && p.kernel != MoeGemvKernel::kFloat && p.kernel != MoeGemvKernel::kInt8) {
    return "unknown kernel choice";
  }
  return nullptr;
}

bool moe_gemv_uses_int8_activations(const MoeGemvParams& p) {
  if (moe_gemv_unsupported_reason(p) != nullptr) return false;
  bool uses = false;
  detail::visit_decoder(p.w.type, [&](auto decoder) {
    using D = decltype(decoder);
    const detail::ExpertGemvLaunch l = detail::make_expert_launch<D>(p);
    uses = detail::Int8Traits<D>::kEnabled &&
           detail::gemv_routes_to_int8<D>(detail::ExpertBatch::routing(l), detail::gemv_path(p.kernel));
    return cudaSuccess;
  });
  return uses;
}

cudaError_t moe_gemv(const MoeGemvParams& p, cudaStream_t stream) {
  if (moe_gemv_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (p.shape.n_pairs() == 0) return cudaSuccess;
  return detail::visit_decoder(p.w.type, [&](auto decoder) {
    return detail::launch_moe_gemv<decltype(decoder)>(p, stream);
  });
}

}  // namespace ga::cuda
