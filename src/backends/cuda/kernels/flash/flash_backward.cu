// Host side of the FlashAttention backward (flash_attention.h): validates the parameters (the forward's
// checks on q, k, v, o and the shape, then dO, dq, dk, dv and the LSE), carves the workspace into the f32
// dq accumulator and the row sums D, and dispatches on head dim to flash_bwd_hd*.cu.
//
// The kernels are mma.sync (flash_bwd_sm80.cuh), so any compute capability >= 8.0 runs them; sm_75 builds
// compile them to traps and the host refuses those devices here with a reason.
#include <climits>

#include "backends/cuda/kernels/flash/flash_attention.h"
#include "backends/cuda/kernels/flash/flash_bwd_sm80.cuh"
#include "backends/cuda/kernels/flash/flash_common.h"

namespace ga::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t round_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

size_t accum_bytes(const FlashParams& f) {
  return round_up(size_t(f.batch) * size_t(f.n_head) * size_t(f.seqlen_q) * size_t(f.head_dim) * sizeof(float));
}
size_t dsum_bytes(const FlashParams& f) {
  return round_up(size_t(f.batch) * size_t(f.n_head) * size_t(f.seqlen_q) * sizeof(float));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

const char* params_reason(const FlashBwdParams& p) {
  if (const char* r = flash_detail::shared_params_reason(p.fwd)) return r;
  const FlashParams& f = p.fwd;
  if (f.dtype == FlashDtype::kFp8E4m3) return "the backward takes bf16 or fp16 tensors (FP8 is forward-only)";
  if (f.cu_seqlens_q != nullptr || f.block_table != nullptr || f.o_f32) {
    return "the backward takes dense [batch][seq][head][dim] tensors (varlen, paged KV and f32 o are forward-only)";
  }
  if (f.lse == nullptr) return "the backward needs the forward's lse (fwd.lse)";
  if (p.dout == nullptr || p.dq == nullptr || p.dk == nullptr || p.dv == nullptr) {
    return "dout, dq, dk and dv must be non-null";
  }
  if (!aligned16(p.dout) || !aligned16(p.dq) || !aligned16(p.dk) || !aligned16(p.dv) ||
      reinterpret_cast<uintptr_t>(f.lse) % 4 != 0) {
    return "dout, dq, dk and dv must be 16-byte aligned (lse 4-byte)";
  }
  const int64_t strides[12] = {p.do_batch_stride, p.do_seq_stride, p.do_head_stride, p.dq_batch_stride,
                               p.dq_seq_stride,   p.dq_head_stride, p.dk_batch_stride, p.dk_seq_stride,
                               p.dk_head_stride,  p.dv_batch_stride, p.dv_seq_stride, p.dv_head_stride};
  for (int64_t s : strides) {
    if (s < 0 || s % 8 != 0) return "every stride must be a non-negative multiple of 8 elements (16 bytes)";
  }
  const bool zero_stride_on_long_dim =
      (f.batch > 1 && (p.do_batch_stride == 0 || p.dq_batch_stride == 0 || p.dk_batch_stride == 0 ||
                       p.dv_batch_stride == 0)) ||
      (f.seqlen_q > 1 && (p.do_seq_stride == 0 || p.dq_seq_stride == 0)) ||
      (f.seqlen_k > 1 && (p.dk_seq_stride == 0 || p.dv_seq_stride == 0)) ||
      (f.n_head > 1 && (p.do_head_stride == 0 || p.dq_head_stride == 0)) ||
      (f.n_head_kv > 1 && (p.dk_head_stride == 0 || p.dv_head_stride == 0));
  if (zero_stride_on_long_dim) return "a stride may be 0 only where its extent is 1 (no broadcasting)";
  if (f.n_head_kv > 65535 || f.batch > 65535) return "n_head_kv and batch must be <= 65535 (grid dimensions)";
  if ((int64_t{f.batch} * f.seqlen_q * f.n_head + 7) / 8 > INT32_MAX) return "batch * seqlen_q * n_head too large";
  return nullptr;
}

const char* device_reason() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "no current CUDA device";
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    return "cannot read the device's compute capability";
  }
  if (major < 8) return "the flash backward needs compute capability >= 8.0 (mma.sync bf16/f16, cp.async)";
  return nullptr;
}

flash_bwd::Strides strides(int64_t batch, int64_t seq, int64_t head) { return flash_bwd::Strides{batch, seq, head}; }

}  // namespace

const char* flash_backward_unsupported_reason(const FlashBwdParams& p) {
  if (const char* r = params_reason(p)) return r;
  return device_reason();
}

FlashPlan flash_backward_plan(const FlashBwdParams& p) {
  FlashPlan plan;
  if (params_reason(p) == nullptr) plan.workspace_bytes = accum_bytes(p.fwd) + dsum_bytes(p.fwd);
  return plan;
}

cudaError_t flash_backward(const FlashBwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (params_reason(p) != nullptr) return cudaErrorInvalidValue;
  if (device_reason() != nullptr) return cudaErrorNoKernelImageForDevice;
  const FlashParams& f = p.fwd;
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % kAlign != 0 ||
      workspace_bytes < accum_bytes(f) + dsum_bytes(f)) {
    return cudaErrorInvalidValue;
  }
  flash_bwd::BwdArgs a{};
  a.q = static_cast<const uint16_t*>(f.q);
  a.k = static_cast<const uint16_t*>(f.k);
  a.v = static_cast<const uint16_t*>(f.v);
  a.o = static_cast<const uint16_t*>(f.o);
  a.dout = static_cast<const uint16_t*>(p.dout);
  a.lse = f.lse;
  a.dq = static_cast<uint16_t*>(p.dq);
  a.dk = static_cast<uint16_t*>(p.dk);
  a.dv = static_cast<uint16_t*>(p.dv);
  a.q_st = strides(f.q_batch_stride, f.q_seq_stride, f.q_head_stride);
  a.k_st = strides(f.k_batch_stride, f.k_seq_stride, f.k_head_stride);
  a.v_st = strides(f.v_batch_stride, f.v_seq_stride, f.v_head_stride);
  a.o_st = strides(f.o_batch_stride, f.o_seq_stride, f.o_head_stride);
  a.do_st = strides(p.do_batch_stride, p.do_seq_stride, p.do_head_stride);
  a.dq_st = strides(p.dq_batch_stride, p.dq_seq_stride, p.dq_head_stride);
  a.dk_st = strides(p.dk_batch_stride, p.dk_seq_stride, p.dk_head_stride);
  a.dv_st = strides(p.dv_batch_stride, p.dv_seq_stride, p.dv_head_stride);
  a.dq_accum = static_cast<float*>(workspace);
  a.dsum = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + accum_bytes(f));
  a.seqlen_q = f.seqlen_q;
  a.seqlen_k = f.seqlen_k;
  a.n_head = f.n_head;
  a.n_head_kv = f.n_head_kv;
  a.group = f.n_head / f.n_head_kv;
  a.batch = f.batch;
  a.causal = f.causal ? 1 : 0;
  a.scale = f.softmax_scale;
  a.scale_log2 = f.softmax_scale * detail::kLog2e;
  const bool bf16 = f.dtype == FlashDtype::kBf16;
  switch (f.head_dim) {
    case 64: return flash_bwd::launch_bwd<64>(a, bf16, stream);
    case 128: return flash_bwd::launch_bwd<128>(a, bf16, stream);
    case 256: return flash_bwd::launch_bwd<256>(a, bf16, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ga::cuda
