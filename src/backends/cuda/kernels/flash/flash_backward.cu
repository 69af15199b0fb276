// Host side of the FlashAttention backward (flash_attention.h): validates the parameters (the forward's
// checks on q, k, v, o and the shape, then dO, dq, dk, dv and the LSE), picks the kernel (Hopper where it applies,
// else mma.sync, or the one the caller forces), carves the workspace and dispatches on head dim.
//
// mma.sync kernels (flash_bwd_sm80.cuh, flash_bwd_hd*.cu): any compute capability >= 8.0; sm_75 builds compile
// them to traps and the host refuses those devices here with a reason. Hopper kernel (flash_bwd_sm90.cuh,
// flash_bwd_sm90_hd128.cu): head dim 128 on compute capability 9.0 in a build with sm_90a code; the host encodes
// its four TMA maps here (Q, dO, K, V as 4-D [batch][head][seq][head_dim] views over the caller's strides).
// The two kernels lay out their workspace differently; flash_backward_plan sizes it for either. Sliding windows and
// soft-capping run on the mma.sync kernels only (kAuto takes them there; a forced Hopper run is refused).
#include <algorithm>
#include <climits>

#include "backends/cuda/kernels/flash/flash_attention.h"
#include "backends/cuda/kernels/flash/flash_bwd_sm80.cuh"
#include "backends/cuda/kernels/flash/flash_bwd_sm90.cuh"
#include "backends/cuda/kernels/flash/flash_bwd_variants.h"
#include "backends/cuda/kernels/flash/flash_common.h"
#include "backends/cuda/kernels/tile/tma_map.h"

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

// Hopper layout: query rows padded to whole 64-row blocks; dq accumulator tiles, then LSE * log2 e, then D.
int64_t padded_rows(const FlashParams& f) {
  return int64_t{f.batch} * f.n_head * ((int64_t{f.seqlen_q} + 63) / 64) * 64;
}
size_t sm90_accum_bytes(const FlashParams& f) {
  return round_up(size_t(padded_rows(f)) * size_t(f.head_dim) * sizeof(float));
}
size_t sm90_vec_bytes(const FlashParams& f) { return round_up(size_t(padded_rows(f)) * sizeof(float)); }
size_t sm90_workspace_bytes(const FlashParams& f) { return sm90_accum_bytes(f) + 2 * sm90_vec_bytes(f); }
size_t sm80_workspace_bytes(const FlashParams& f) { return accum_bytes(f) + dsum_bytes(f); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

const char* params_reason(const FlashBwdParams& p) {
  if (const char* r = flash_detail::shared_params_reason(p.fwd)) return r;
  const FlashParams& f = p.fwd;
  if (f.dtype == FlashDtype::kFp8E4m3) return "the backward takes bf16 or fp16 tensors (FP8 is forward-only)";
  if (f.head_dim == 96) return "the backward is built for head dims 64, 128 and 256 (head dim 96 is forward-only)";
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

// Why the Hopper kernel cannot run valid parameters here, or nullptr.
const char* hopper_reason(const FlashBwdParams& p) {
#ifndef GA_CUDA_HAS_SM90A
  (void)p;
  return "this build has no sm_90a code for the Hopper flash backward (add 90a to GA_CUDA_ARCHS)";
#else
  if (p.fwd.head_dim != 128) return "the Hopper flash backward is built for head dim 128 only";
  // Its consumers recompute P with the plain causal / full mask and exp2: windows and soft-capping run on the
  // mma.sync backward (kAuto picks it), never silently as another function's gradients here.
  if (p.fwd.window_left >= 0 || p.fwd.window_right >= 0 || p.fwd.softcap > 0.0f) {
    return "the Hopper flash backward has no sliding window or soft-capping (the mma.sync backward has both)";
  }
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "no current CUDA device";
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    return "cannot read the device's compute capability";
  }
  if (major != 9 || minor != 0) return "the Hopper flash backward needs compute capability 9.0 (wgmma, TMA)";
  return nullptr;
#endif
}

// The kernel flash_backward_with_kernel runs, or why none can (params already valid).
const char* resolve(const FlashBwdParams& p, FlashBwdKernel want, FlashBwdKernel* got) {
  if (want == FlashBwdKernel::kHopper || want == FlashBwdKernel::kAuto) {
    const char* r = hopper_reason(p);
    if (r == nullptr) {
      *got = FlashBwdKernel::kHopper;
      return nullptr;
    }
    if (want == FlashBwdKernel::kHopper) return r;
  }
  *got = FlashBwdKernel::kMmaSync;
  return device_reason();
}

flash_bwd::Strides strides(int64_t batch, int64_t seq, int64_t head) { return flash_bwd::Strides{batch, seq, head}; }

cudaError_t run_hopper(const FlashBwdParams& p, flash_bwd::BwdArgs a, void* workspace, int sched,
                       cudaStream_t stream) {
  const FlashParams& f = p.fwd;
  const bool bf16 = f.dtype == FlashDtype::kBf16;
  using T = flash_bwd_sm90::Traits<128>;
  flash_bwd_sm90::Args m{};
  if (tile::encode_tma_map_bshd(&m.tm_q, 2, bf16, f.q, f.head_dim, f.seqlen_q, f.n_head, f.batch, f.q_seq_stride,
                                f.q_head_stride, f.q_batch_stride, T::kBlockM) != nullptr ||
      tile::encode_tma_map_bshd(&m.tm_do, 2, bf16, p.dout, f.head_dim, f.seqlen_q, f.n_head, f.batch, p.do_seq_stride,
                                p.do_head_stride, p.do_batch_stride, T::kBlockM) != nullptr ||
      tile::encode_tma_map_bshd(&m.tm_k, 2, bf16, f.k, f.head_dim, f.seqlen_k, f.n_head_kv, f.batch, f.k_seq_stride,
                                f.k_head_stride, f.k_batch_stride, T::kBlockN) != nullptr ||
      tile::encode_tma_map_bshd(&m.tm_v, 2, bf16, f.v, f.head_dim, f.seqlen_k, f.n_head_kv, f.batch, f.v_seq_stride,
                                f.v_head_stride, f.v_batch_stride, T::kBlockN) != nullptr) {
    return cudaErrorInvalidValue;
  }
  // dK, dV maps for schedule 26's TMA-store epilogue (64-key boxes); without them it stores from registers.
  m.tma_dkdv = tile::encode_tma_map_bshd(&m.tm_dk, 2, bf16, p.dk, f.head_dim, f.seqlen_k, f.n_head_kv, f.batch,
                                         p.dk_seq_stride, p.dk_head_stride, p.dk_batch_stride, 64) == nullptr &&
               tile::encode_tma_map_bshd(&m.tm_dv, 2, bf16, p.dv, f.head_dim, f.seqlen_k, f.n_head_kv, f.batch,
                                         p.dv_seq_stride, p.dv_head_stride, p.dv_batch_stride, 64) == nullptr;
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  float* lse_log2 = reinterpret_cast<float*>(ws + sm90_accum_bytes(f));
  a.dq_accum = reinterpret_cast<float*>(ws);
  a.dsum = reinterpret_cast<float*>(ws + sm90_accum_bytes(f) + sm90_vec_bytes(f));
  m.lse_log2 = lse_log2;
  m.dsum = a.dsum;
  m.dq_accum = a.dq_accum;
  m.dk = a.dk;
  m.dv = a.dv;
  m.dk_st = a.dk_st;
  m.dv_st = a.dv_st;
  m.seqlen_q = f.seqlen_q;
  m.seqlen_k = f.seqlen_k;
  m.n_head = f.n_head;
  m.group = a.group;
  m.m_blocks = (f.seqlen_q + 63) / 64;
  m.causal = a.causal;
  m.scale = a.scale;
  m.scale_log2 = a.scale_log2;
  return flash_bwd_sm90::launch<128>(a, m, lse_log2, bf16, sched, stream);
}

}  // namespace

const char* flash_backward_unsupported_reason(const FlashBwdParams& p) {
  return flash_backward_unsupported_reason(p, FlashBwdKernel::kAuto);
}

const char* flash_backward_unsupported_reason(const FlashBwdParams& p, FlashBwdKernel kernel) {
  if (const char* r = params_reason(p)) return r;
  FlashBwdKernel got{};
  return resolve(p, kernel, &got);
}

FlashPlan flash_backward_plan(const FlashBwdParams& p) {
  FlashPlan plan;
  // What kAuto runs needs the most: the Hopper layout (padded rows, one more vector) whenever Hopper applies, and
  // a forced mma.sync run needs less; where Hopper does not apply, only mma.sync can run.
  if (params_reason(p) == nullptr) {
    plan.workspace_bytes = hopper_reason(p) == nullptr ? sm90_workspace_bytes(p.fwd) : sm80_workspace_bytes(p.fwd);
  }
  return plan;
}

cudaError_t flash_backward(const FlashBwdParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return flash_backward_with_kernel(p, FlashBwdKernel::kAuto, workspace, workspace_bytes, stream);
}

namespace {

// flash_backward_with_kernel, with the Hopper kernel's schedule (-1: its default) for flash_backward_hopper_variant.
cudaError_t run_backward(const FlashBwdParams& p, FlashBwdKernel kernel, int sched, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  if (params_reason(p) != nullptr) return cudaErrorInvalidValue;
  FlashBwdKernel got{};
  if (resolve(p, kernel, &got) != nullptr) return cudaErrorNoKernelImageForDevice;
  const FlashParams& f = p.fwd;
  const size_t need = got == FlashBwdKernel::kHopper ? sm90_workspace_bytes(f) : sm80_workspace_bytes(f);
  if (workspace == nullptr || reinterpret_cast<uintptr_t>(workspace) % kAlign != 0 || workspace_bytes < need) {
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
  // The window as offsets from the bottom-right diagonal (query i sees keys i + diag_lo .. i + diag_hi), clamped so
  // that an unbounded side never masks and the sums stay in int (keys in [0, seqlen_k), rows in [0, seqlen_q)).
  const int64_t diag = int64_t{f.seqlen_k} - f.seqlen_q;
  const int64_t hi = f.causal ? diag : f.window_right >= 0 ? diag + f.window_right : int64_t{f.seqlen_k};
  const int64_t lo = f.window_left >= 0 ? diag - f.window_left : -int64_t{f.seqlen_q};
  a.diag_hi = static_cast<int>(std::min<int64_t>(hi, f.seqlen_k));
  a.diag_lo = static_cast<int>(std::max<int64_t>(lo, -int64_t{f.seqlen_q}));
  a.windowed = f.window_left >= 0 ? 1 : 0;
  a.softcap_k2 = f.softcap > 0.0f ? 2.0f * detail::kLog2e * f.softmax_scale / f.softcap : 0.0f;
  a.cap_log2 = f.softcap * detail::kLog2e;
  if (got == FlashBwdKernel::kHopper) return run_hopper(p, a, workspace, sched, stream);
  const bool bf16 = f.dtype == FlashDtype::kBf16;
  switch (f.head_dim) {
    case 64: return flash_bwd::launch_bwd<64>(a, bf16, stream);
    case 128: return flash_bwd::launch_bwd<128>(a, bf16, stream);
    case 256: return flash_bwd::launch_bwd<256>(a, bf16, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t flash_backward_with_kernel(const FlashBwdParams& p, FlashBwdKernel kernel, void* workspace,
                                       size_t workspace_bytes, cudaStream_t stream) {
  return run_backward(p, kernel, -1, workspace, workspace_bytes, stream);
}

cudaError_t flash_backward_hopper_variant(const FlashBwdParams& p, int variant, void* workspace,
                                          size_t workspace_bytes, cudaStream_t stream) {
  return run_backward(p, FlashBwdKernel::kHopper, variant, workspace, workspace_bytes, stream);
}

}  // namespace ga::cuda
