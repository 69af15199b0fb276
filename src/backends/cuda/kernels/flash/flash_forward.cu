// Host side of the FlashAttention forward (flash_attention.h): validates parameters once, encodes the
// three TMA tensor maps (Q, K, V as 4-D [batch][head][seq][head_dim] views over the caller's strides)
// and dispatches on head dim to the per-head-dim instantiation files. FP8 inputs are checked here too and
// then handed to flash_fp8.cu (V^T pre-pass, 8-bit maps).
//
// Device support is decided here, not in the kernel: the kernel needs sm_90a (wgmma, setmaxnreg), so a
// device other than compute capability 9.0, or a build whose arch list has no 90a (CMake defines
// GA_CUDA_HAS_SM90A then), is refused with a reason before anything is launched.
#include "backends/cuda/kernels/flash/flash_attention.h"

#include <climits>
#include <cmath>

#include "backends/cuda/kernels/flash/flash_common.h"
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"
#include "backends/cuda/kernels/tile/tma_map.h"

namespace ga::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

const char* device_reason() {
#ifndef GA_CUDA_HAS_SM90A
  return "this build has no sm_90a code for the Hopper flash kernel (add 90a to GA_CUDA_ARCHS)";
#else
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "no current CUDA device";
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    return "cannot read the device's compute capability";
  }
  if (major != 9 || minor != 0) {
    return "the flash forward needs a Hopper GPU (compute capability 9.0: wgmma, TMA); use the mma.sync prefill";
  }
  return nullptr;
#endif
}

// Why the parameters themselves (not the device) are refused, or nullptr.
const char* params_reason(const FlashParams& p) {
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.o == nullptr) return "q, k, v and o must be non-null";
  const bool fp8 = p.dtype == FlashDtype::kFp8E4m3;
  if (p.dtype != FlashDtype::kBf16 && p.dtype != FlashDtype::kF16 && !fp8) {
    return "dtype must be bf16, fp16 or fp8 e4m3";
  }
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return "head_dim must be 64, 128 or 256";
  if (fp8) {
    if (p.head_dim == 64) return "the FP8 forward is built for head dims 128 and 256 only";
    if (p.out_dtype != FlashDtype::kBf16 && p.out_dtype != FlashDtype::kF16) {
      return "the FP8 forward writes o as bf16 or fp16 (out_dtype)";
    }
    for (float d : {p.descale_q, p.descale_k, p.descale_v}) {
      if (!std::isfinite(d) || d <= 0.0f) return "descale_q, descale_k and descale_v must be finite and > 0";
    }
    const int64_t qkv[9] = {p.q_batch_stride, p.q_seq_stride, p.q_head_stride, p.k_batch_stride, p.k_seq_stride,
                            p.k_head_stride,  p.v_batch_stride, p.v_seq_stride, p.v_head_stride};
    for (int64_t st : qkv) {
      if (st % 16 != 0) return "FP8 q, k and v strides must be multiples of 16 elements (16 bytes, TMA)";
    }
  }
  if (p.batch < 1 || p.n_head < 1 || p.n_head_kv < 1) return "batch, n_head and n_head_kv must be >= 1";
  if (p.n_head % p.n_head_kv != 0) return "n_head must be a multiple of n_head_kv (GQA groups of equal size)";
  if (p.seqlen_q < 1 || p.seqlen_k < 1) return "seqlen_q and seqlen_k must be >= 1";
  if (int64_t{(p.seqlen_q + 127) / 128} * p.n_head * p.batch > INT32_MAX) {
    return "too many 128-row query blocks (batch * n_head * ceil(seqlen_q / 128) must fit in int32)";
  }
  if (p.cu_seqlens_q != nullptr || p.cu_seqlens_k != nullptr) {
    return "variable-length batches (cu_seqlens) are not supported by the Hopper forward yet";
  }
  if (!std::isfinite(p.softmax_scale) || p.softmax_scale <= 0.0f) return "softmax_scale must be finite and > 0";
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.o)) {
    return "q, k, v and o must be 16-byte aligned";
  }
  const int64_t strides[12] = {p.q_batch_stride, p.q_seq_stride, p.q_head_stride, p.k_batch_stride,
                               p.k_seq_stride,   p.k_head_stride, p.v_batch_stride, p.v_seq_stride,
                               p.v_head_stride,  p.o_batch_stride, p.o_seq_stride, p.o_head_stride};
  for (int64_t s : strides) {
    if (s < 0 || s % 8 != 0) return "every stride must be a non-negative multiple of 8 elements (16 bytes, TMA)";
  }
  const bool zero_stride_on_long_dim =
      (p.batch > 1 && (p.q_batch_stride == 0 || p.k_batch_stride == 0 || p.v_batch_stride == 0 ||
                       p.o_batch_stride == 0)) ||
      (p.seqlen_q > 1 && (p.q_seq_stride == 0 || p.o_seq_stride == 0)) ||
      (p.seqlen_k > 1 && (p.k_seq_stride == 0 || p.v_seq_stride == 0)) ||
      (p.n_head > 1 && (p.q_head_stride == 0 || p.o_head_stride == 0)) ||
      (p.n_head_kv > 1 && (p.k_head_stride == 0 || p.v_head_stride == 0));
  if (zero_stride_on_long_dim) return "a stride may be 0 only where its extent is 1 (no broadcasting)";
  return nullptr;
}

// A stride for a dimension of extent 1: never stepped, but TMA still wants a valid multiple of 16.
uint64_t stride_bytes(int64_t stride_elems, int extent) {
  return (extent == 1 || stride_elems == 0) ? uint64_t{16} : static_cast<uint64_t>(stride_elems) * 2;
}

const char* encode_map(CUtensorMap* map, bool bf16, const void* base, int hd, int seqlen, int heads, int batch,
                       int64_t seq_stride, int64_t head_stride, int64_t batch_stride, int box_rows) {
  const uint64_t dims[4] = {static_cast<uint64_t>(hd), static_cast<uint64_t>(seqlen), static_cast<uint64_t>(heads),
                            static_cast<uint64_t>(batch)};
  const uint64_t strides[3] = {stride_bytes(seq_stride, seqlen), stride_bytes(head_stride, heads),
                               stride_bytes(batch_stride, batch)};
  const uint32_t box[4] = {64, static_cast<uint32_t>(box_rows), 1, 1};
  return tile::encode_tma_map_16bit_sw128(map, bf16, base, dims, strides, box);
}

template <int HD>
cudaError_t run(const FlashParams& p, int variant, cudaStream_t stream) {
  using T = flash_detail::FwdTraits<HD>;
  const bool bf16 = p.dtype == FlashDtype::kBf16;
  flash_detail::FwdArgs a{};
  if (encode_map(&a.tm_q, bf16, p.q, HD, p.seqlen_q, p.n_head, p.batch, p.q_seq_stride, p.q_head_stride,
                 p.q_batch_stride, T::kBlockM) != nullptr ||
      encode_map(&a.tm_k, bf16, p.k, HD, p.seqlen_k, p.n_head_kv, p.batch, p.k_seq_stride, p.k_head_stride,
                 p.k_batch_stride, T::kBlockN) != nullptr ||
      encode_map(&a.tm_v, bf16, p.v, HD, p.seqlen_k, p.n_head_kv, p.batch, p.v_seq_stride, p.v_head_stride,
                 p.v_batch_stride, T::kBlockN) != nullptr) {
    return cudaErrorInvalidValue;
  }
  a.o = p.o;
  a.lse = p.lse;
  a.o_batch_stride = p.o_batch_stride;
  a.o_seq_stride = p.o_seq_stride;
  a.o_head_stride = p.o_head_stride;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_head_kv;
  a.m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  a.causal = p.causal ? 1 : 0;
  a.batch = p.batch;
  a.total_tiles = a.m_blocks * p.n_head * p.batch;
  int dev = 0, num_sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || num_sms < 1) {
    return cudaErrorInvalidDevice;
  }
  a.scale = p.softmax_scale;
  a.scale_log2 = p.softmax_scale * 1.4426950408889634f;
  return flash_detail::launch_fwd<HD>(a, bf16, variant, num_sms, stream);
}

}  // namespace

namespace flash_detail {
const char* shared_params_reason(const FlashParams& p) { return params_reason(p); }
}  // namespace flash_detail

const char* flash_unsupported_reason(const FlashParams& p) {
  if (const char* r = params_reason(p)) return r;
  return device_reason();
}

// 16-bit: none (the softmax state lives in registers). FP8: V^T for the second GEMM.
FlashPlan flash_plan(const FlashParams& p) {
  FlashPlan plan;
  if (p.dtype == FlashDtype::kFp8E4m3 && params_reason(p) == nullptr) {
    plan.workspace_bytes = flash_detail::fp8_workspace_bytes(p);
  }
  return plan;
}

int flash_variant_count() { return flash_detail::kFwdVariants; }
bool flash_variant_compiled(int variant) { return flash_detail::variant_compiled(variant); }
bool flash_variant_compiled(const FlashParams& p, int variant) {
  return p.dtype == FlashDtype::kFp8E4m3 ? flash_detail::fp8_variant_compiled(p.head_dim, variant)
                                         : flash_detail::variant_compiled(variant);
}

cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, cudaStream_t stream) {
  return flash_forward_with_schedule(p, sched, nullptr, 0, stream);
}

cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream) {
  if (params_reason(p) != nullptr || sched < 0 || sched >= flash_detail::kFwdVariants) return cudaErrorInvalidValue;
  if (device_reason() != nullptr) return cudaErrorNoKernelImageForDevice;
  if (!flash_variant_compiled(p, sched)) return cudaErrorNotSupported;
  if (p.dtype == FlashDtype::kFp8E4m3) {
    if (workspace_bytes < flash_detail::fp8_workspace_bytes(p) || workspace == nullptr || !aligned16(workspace)) {
      return cudaErrorInvalidValue;  // V^T needs flash_plan(p).workspace_bytes, 16-byte aligned
    }
    int dev = 0, num_sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || num_sms < 1) {
      return cudaErrorInvalidDevice;
    }
    return flash_detail::forward_fp8(p, sched, workspace, workspace_bytes, num_sms, stream);
  }
  switch (p.head_dim) {
    case 64: return run<64>(p, sched, stream);
    case 128: return run<128>(p, sched, stream);
    case 256: return run<256>(p, sched, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t flash_fp8_transpose_v(const FlashParams& p, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream) {
  if (params_reason(p) != nullptr || p.dtype != FlashDtype::kFp8E4m3) return cudaErrorInvalidValue;
  if (device_reason() != nullptr) return cudaErrorNoKernelImageForDevice;
  if (workspace_bytes < flash_detail::fp8_workspace_bytes(p) || workspace == nullptr || !aligned16(workspace)) {
    return cudaErrorInvalidValue;
  }
  return flash_detail::fp8_transpose_v(p, workspace, stream);
}

cudaError_t flash_forward(const FlashParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const int variant = p.dtype == FlashDtype::kFp8E4m3
                          ? flash_detail::fp8_default_variant(p.head_dim, p.causal, p.seqlen_k)
                          : flash_detail::default_variant(p.head_dim, p.causal, p.seqlen_k);
  return flash_forward_with_schedule(p, variant, workspace, workspace_bytes, stream);
}

}  // namespace ga::cuda
