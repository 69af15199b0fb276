// Host side of the FlashAttention forward (flash_attention.h): validates parameters once, then runs one of two
// kernels. Hopper (sm_90a build on a compute capability 9.0 device): encodes the three TMA tensor maps (Q, K, V
// as 4-D [batch][head][seq][head_dim] views over the caller's strides) and dispatches on head dim to the
// per-head-dim instantiation files; FP8 inputs are checked here too and then handed to flash_fp8.cu (V^T
// pre-pass, 8-bit maps). Any other GPU of compute capability >= 8.0: the mma.sync forward (flash_fwd_sm80.cuh,
// variant kFlashSm80Variant); compute capability 7.5 (Turing): its sm_75 build (variant kFlashSm75Variant, fp16
// only). Hopper can be asked to run either.
//
// Device support is decided here, not in the kernels: wgmma/setmaxnreg need sm_90a (a device other than 9.0, or
// a build whose arch list has no 90a, is refused for the Hopper variants); cp.async and bf16 mma.sync need
// sm_80; the sm_75 variant needs 7.5 and fp16, so bf16 on Turing is refused with a reason before anything runs.
#include "backends/cuda/kernels/flash/flash_attention.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "backends/cuda/kernels/flash/flash_common.h"
#include "backends/cuda/kernels/flash/flash_fwd_launch.h"
#include "backends/cuda/kernels/flash/flash_fwd_sm80.cuh"
#include "backends/cuda/kernels/tile/tma_map.h"

namespace ga::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Why the Hopper kernels cannot run on the current device, or nullptr.
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
    return "this flash forward variant needs a Hopper GPU (compute capability 9.0: wgmma, TMA)";
  }
  return nullptr;
#endif
}

// Why the mma.sync forward (kFlashSm80Variant) cannot run on the current device, or nullptr.
const char* sm80_device_reason() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "no current CUDA device";
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    return "cannot read the device's compute capability";
  }
  if (major < 8) {
    return "the mma.sync flash forward (variant kFlashSm80Variant) needs compute capability >= 8.0 (cp.async, "
           "bf16/f16 mma.sync m16n8k16); Turing (sm_75) runs the fp16 variant kFlashSm75Variant";
  }
  return nullptr;
}

// Why the sm_75 build of the mma.sync forward (kFlashSm75Variant) cannot run on the current device, or nullptr.
const char* sm75_device_reason() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "no current CUDA device";
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    return "cannot read the device's compute capability";
  }
  if (major * 10 + minor < 75) {
    return "the flash forward needs compute capability >= 7.5 (ldmatrix, mma.sync m16n8k8: Turing or newer)";
  }
  return nullptr;
}

// The variant a GPU without the Hopper kernel runs: the mma.sync forward, or its sm_75 build on Turing.
int fallback_variant() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major < 8) {
    return kFlashSm75Variant;
  }
  return kFlashSm80Variant;
}

// The key tile of head dim hd (FwdTraits::kBlockN for 16-bit inputs): paged KV assembles it from pages.
int key_tile(int hd) { return hd == 256 ? 64 : 128; }

// The variable-length / paged-KV checks (flash_attention.h), or nullptr (also for dense parameters).
const char* varlen_reason(const FlashParams& p) {
  const bool varlen = p.cu_seqlens_q != nullptr, paged = p.block_table != nullptr;
  if (!varlen) {
    if (p.cu_seqlens_k != nullptr || paged || p.seqused_q != nullptr || p.seqused_k != nullptr) {
      return "cu_seqlens_k, seqused_q/k and block_table need cu_seqlens_q (the variable-length form)";
    }
    return nullptr;
  }
  if (p.dtype == FlashDtype::kFp8E4m3) return "variable-length batches and paged KV take bf16 or fp16 (not FP8)";
  if (p.total_q < 1 || p.total_q > INT32_MAX) return "varlen: total_q (rows of q and o) must be in 1..2^31-1";
  if (paged == (p.cu_seqlens_k != nullptr)) {
    return "varlen: give exactly one of cu_seqlens_k (packed keys) and block_table";
  }
  if (!paged && (p.total_k < 1 || p.total_k > INT32_MAX)) {
    return "varlen: total_k (rows of k and v) must be in 1..2^31-1";
  }
  if (paged) {
    if (p.seqused_k == nullptr) return "paged KV needs seqused_k (each sequence's key count)";
    const int tile = key_tile(p.head_dim);
    if (p.page_size < 8 || p.page_size % 8 != 0 || (tile % p.page_size != 0 && p.page_size % tile != 0)) {
      return "paged KV: page_size must be a multiple of 8 that divides the key tile (128 keys; 64 at head dim 256) "
             "or a multiple of it (the producer loads whole pages by TMA)";
    }
    if (p.n_pages < 1 || p.n_pages * p.page_size > INT32_MAX) {
      return "paged KV: n_pages * page_size must be in 1..2^31-1";
    }
    if (p.block_table_stride < (p.seqlen_k + p.page_size - 1) / p.page_size) {
      return "paged KV: block_table_stride * page_size must cover seqlen_k (the bound on every sequence's keys)";
    }
  }
  return nullptr;
}

// What the mma.sync forward (turing: its sm_75 build, kFlashSm75Variant, fp16 only) refuses among parameters
// params_reason accepts, then its device reason.
const char* mma_sync_reason(const FlashParams& p, bool turing) {
  if (turing && p.dtype == FlashDtype::kBf16) {
    return "the sm_75 (Turing) flash forward is fp16 only: Turing tensor cores have no bf16 mma.sync (use fp16 "
           "inputs, or a GPU of compute capability >= 8.0 for bf16)";
  }
  if (p.dtype == FlashDtype::kFp8E4m3) return "the FP8 forward needs a Hopper GPU (the mma.sync path is bf16/fp16)";
  if (p.cu_seqlens_q != nullptr) {
    return "variable-length batches and paged KV run on the Hopper kernel only (not the mma.sync path)";
  }
  if (p.o_f32) return "o_f32 runs on the Hopper kernel only (the mma.sync path writes bf16/fp16)";
  if (p.n_head > 65535 || p.batch > 65535) return "n_head and batch must be <= 65535 (grid dimensions)";
  return turing ? sm75_device_reason() : sm80_device_reason();
}

// turing: the sm_75 build (fp16; the caller checked mma_sync_reason's parameter part).
cudaError_t run_sm80(const FlashParams& p, bool turing, cudaStream_t stream) {
  flash_sm80::FwdSm80Args a{};
  a.q = static_cast<const uint16_t*>(p.q);
  a.k = static_cast<const uint16_t*>(p.k);
  a.v = static_cast<const uint16_t*>(p.v);
  a.o = static_cast<uint16_t*>(p.o);
  a.lse = p.lse;
  a.q_st = {p.q_batch_stride, p.q_seq_stride, p.q_head_stride};
  a.k_st = {p.k_batch_stride, p.k_seq_stride, p.k_head_stride};
  a.v_st = {p.v_batch_stride, p.v_seq_stride, p.v_head_stride};
  a.o_st = {p.o_batch_stride, p.o_seq_stride, p.o_head_stride};
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.n_head = p.n_head;
  a.group = p.n_head / p.n_head_kv;
  a.causal = p.causal ? 1 : 0;
  const flash_detail::DiagonalBand band = flash_detail::diagonal_band(p);  // the causal mask and the window
  a.diag_lo = band.lo;
  a.diag_hi = band.hi;
  a.windowed = band.windowed;
  constexpr float kLog2e = 1.4426950408889634f;
  if (p.softcap > 0.0f) {  // S becomes tanh(softmax_scale q.k / softcap); the cap moves into the scales
    a.softcap_k2 = 2.0f * kLog2e * p.softmax_scale / p.softcap;
    a.scale = p.softcap;
  } else {
    a.softcap_k2 = 0.0f;
    a.scale = p.softmax_scale;
  }
  a.scale_log2 = a.scale * kLog2e;
  const bool bf16 = p.dtype == FlashDtype::kBf16;
  if (turing) {
    switch (p.head_dim) {
      case 64: return flash_sm80::launch_fwd_sm75<64>(a, p.batch, stream);
      case 96: return flash_sm80::launch_fwd_sm75<96>(a, p.batch, stream);
      case 128: return flash_sm80::launch_fwd_sm75<128>(a, p.batch, stream);
      case 256: return flash_sm80::launch_fwd_sm75<256>(a, p.batch, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (p.head_dim) {
    case 64: return flash_sm80::launch_fwd_sm80<64>(a, bf16, p.batch, stream);
    case 96: return flash_sm80::launch_fwd_sm80<96>(a, bf16, p.batch, stream);
    case 128: return flash_sm80::launch_fwd_sm80<128>(a, bf16, p.batch, stream);
    case 256: return flash_sm80::launch_fwd_sm80<256>(a, bf16, p.batch, stream);
    default: return cudaErrorInvalidValue;
  }
}

// Why the parameters themselves (not the device) are refused, or nullptr.
const char* params_reason(const FlashParams& p) {
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.o == nullptr) return "q, k, v and o must be non-null";
  const bool fp8 = p.dtype == FlashDtype::kFp8E4m3;
  if (p.dtype != FlashDtype::kBf16 && p.dtype != FlashDtype::kF16 && !fp8) {
    return "dtype must be bf16, fp16 or fp8 e4m3";
  }
  if (p.head_dim != 64 && p.head_dim != 96 && p.head_dim != 128 && p.head_dim != 256) {
    return "head_dim must be 64, 96, 128 or 256";
  }
  if (p.window_left < -1 || p.window_right < -1) {
    return "window_left and window_right must be -1 (unbounded) or >= 0 (a sliding window)";
  }
  if (p.causal && p.window_right > 0) {
    return "causal attention is window_right = 0: pass window_right -1 or 0 with causal (or causal = false for a "
           "window that reaches past the diagonal)";
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f) return "softcap must be 0 (off) or finite and > 0";
  if (fp8) {
    if (p.head_dim != 128 && p.head_dim != 256) return "the FP8 forward is built for head dims 128 and 256 only";
    if (p.softcap > 0.0f) {
      return "soft-capping runs on 16-bit inputs only (the FP8 kernels have no soft-cap code: compiled into them, it "
             "made FP8 head dim 256 spill)";
    }
    // causal with window_right 0 is plain causal attention (flash-attn's spelling of it), not a window
    if (p.head_dim == 256 && (p.window_left >= 0 || (p.window_right >= 0 && !p.causal))) {
      return "the FP8 forward at head dim 256 has no sliding window (its kernel's registers are full: the window's "
             "bounds made it spill; FP8 head dim 128 and 16-bit inputs have windows)";
    }
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
  if (p.o_f32 && fp8) return "o_f32 is for 16-bit inputs (FP8 picks out_dtype)";
  if (p.batch < 1 || p.n_head < 1 || p.n_head_kv < 1) return "batch, n_head and n_head_kv must be >= 1";
  if (p.n_head % p.n_head_kv != 0) return "n_head must be a multiple of n_head_kv (GQA groups of equal size)";
  if (p.seqlen_q < 1 || p.seqlen_k < 1) return "seqlen_q and seqlen_k must be >= 1";
  // (the kernels add a window's offsets, up to flash_detail::kNoWindow = 2^29, to key and row numbers in int32)
  if (p.seqlen_q >= (1 << 30) || p.seqlen_k >= (1 << 30)) return "seqlen_q and seqlen_k must be below 2^30";
  if (int64_t{(p.seqlen_q + 127) / 128} * p.n_head * p.batch > INT32_MAX) {
    return "too many 128-row query blocks (batch * n_head * ceil(seqlen_q / 128) must fit in int32)";
  }
  if (const char* r = varlen_reason(p)) return r;
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
  const bool varlen = p.cu_seqlens_q != nullptr;  // batch strides are not used
  const bool zero_stride_on_long_dim =
      (p.batch > 1 && !varlen && (p.q_batch_stride == 0 || p.k_batch_stride == 0 || p.v_batch_stride == 0 ||
                       p.o_batch_stride == 0)) ||
      (p.seqlen_q > 1 && (p.q_seq_stride == 0 || p.o_seq_stride == 0)) ||
      (p.seqlen_k > 1 && (p.k_seq_stride == 0 || p.v_seq_stride == 0)) ||
      (p.n_head > 1 && (p.q_head_stride == 0 || p.o_head_stride == 0)) ||
      (p.n_head_kv > 1 && (p.k_head_stride == 0 || p.v_head_stride == 0));
  if (zero_stride_on_long_dim) return "a stride may be 0 only where its extent is 1 (no broadcasting)";
  return nullptr;
}

// workspace: the caller's (flash_plan); the split-tail variant uses it when its schedule applies and it is large
// enough, and otherwise runs as its persistent counterpart (the kernel's split_tail flag off).
// HD: the kernels' head dim; p.head_dim may be smaller (96 on the 128 tiles): the tensor maps are p.head_dim wide,
// so the boxes' columns past it arrive as zeros (Q K^T and P V unchanged), and the epilogue writes p.head_dim
// columns (FwdArgs::o_cols).
template <int HD>
cudaError_t run(const FlashParams& p, int variant, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using T = flash_detail::FwdTraits<HD>;
  const bool bf16 = p.dtype == FlashDtype::kBf16;
  flash_detail::FwdArgs a{};
  const bool varlen = p.cu_seqlens_q != nullptr, paged = p.block_table != nullptr;
  // soft-capping: the one kernel with the cap's code (flash_fwd_launch.h, 59), whatever variant was named
  variant = flash_detail::softcap_variant(variant, p.softcap > 0.0f);
  if (paged) variant = flash_detail::paged_variant(variant);  // pages divide the default key tile only
  variant = flash_detail::head_dim_variant<HD>(variant);        // Q in registers, split tail: head dim 128 only
  const bool split_kernel = flash_detail::split_tail_kernel(variant);  // 21, 24 (hd 128: head_dim_variant)
  // Keys per tile of this variant (the wide ones: FA3's 176 / 80 / 192; paged KV keeps T::kBlockN).
  const int block_n = flash_detail::variant_block_n<HD>(variant, paged);
  // Dense: 4-D [batch][head][seq][dim] views. Varlen: one batch of total rows (tiles offset their row
  // coordinate by cu_seqlens). Paged: K/V as [page][head][row in page][dim], one page per box.
  const int q_rows = varlen ? static_cast<int>(p.total_q) : p.seqlen_q, q_batches = varlen ? 1 : p.batch;
  int k_rows = p.seqlen_k, k_batches = p.batch, kv_box = block_n;
  int64_t k_batch_stride = p.k_batch_stride, v_batch_stride = p.v_batch_stride;
  if (varlen && !paged) {
    k_rows = static_cast<int>(p.total_k);
    k_batches = 1;
  } else if (paged) {
    k_rows = p.page_size;
    k_batches = static_cast<int>(p.n_pages);
    kv_box = p.page_size < T::kBlockN ? p.page_size : T::kBlockN;
    k_batch_stride = p.k_seq_stride * p.page_size;
    v_batch_stride = p.v_seq_stride * p.page_size;
  }
  const int cols = p.head_dim;  // <= HD
  if (tile::encode_tma_map_bshd(&a.tm_q, 2, bf16, p.q, cols, q_rows, p.n_head, q_batches, p.q_seq_stride,
                                p.q_head_stride, p.q_batch_stride, T::kBlockM) != nullptr ||
      tile::encode_tma_map_bshd(&a.tm_k, 2, bf16, p.k, cols, k_rows, p.n_head_kv, k_batches, p.k_seq_stride,
                                p.k_head_stride, k_batch_stride, kv_box) != nullptr ||
      tile::encode_tma_map_bshd(&a.tm_v, 2, bf16, p.v, cols, k_rows, p.n_head_kv, k_batches, p.v_seq_stride,
                                p.v_head_stride, v_batch_stride, kv_box) != nullptr) {
    return cudaErrorInvalidValue;
  }
  a.varlen = varlen ? 1 : 0;
  a.paged = paged ? 1 : 0;
  a.cu_q = p.cu_seqlens_q;
  a.cu_k = p.cu_seqlens_k;
  a.used_q = p.seqused_q;
  a.used_k = p.seqused_k;
  a.block_table = p.block_table;
  a.block_table_stride = p.block_table_stride;
  a.page_size = p.page_size;
  a.n_pages = static_cast<int>(p.n_pages);
  a.kv_box_rows = kv_box;
  a.kv_boxes = block_n / kv_box;
  a.total_q = static_cast<int>(p.total_q);
  a.out_f32 = p.o_f32 ? 1 : 0;
  flash_detail::set_fwd_problem(a, p, T::kBlockM);
  const int num_sms = flash_detail::current_sm_count();
  if (num_sms < 1) return cudaErrorInvalidDevice;
  flash_detail::set_fwd_scales(a, p, p.softmax_scale);
  // The TMA-store epilogue (variant 24): dense non-causal O of the input dtype only (varlen / paged: a box would run
  // into the next sequence's rows; f32 O: another element size; causal or a window: a tile may have no key block,
  // hence no V slot to stage O in; head dim 96: the slot's tile is 128 columns). The kernel has no register store:
  // those cases, and an O map the driver refuses, run 21.
  if (variant == flash_detail::kStageInVVariant) {
    const bool usable = !varlen && !paged && !p.o_f32 && !p.causal && p.window_left < 0 && p.window_right < 0 &&
                        p.head_dim == HD;
    a.o_tma = usable && tile::encode_tma_map_bshd(&a.tm_o, 2, bf16, p.o, HD, p.seqlen_q, p.n_head, p.batch,
                                                  p.o_seq_stride, p.o_head_stride, p.o_batch_stride,
                                                  T::kBlockM) == nullptr
                  ? 1
                  : 0;
    if (!a.o_tma) {
      variant = flash_detail::variant_compiled(flash_detail::kSplitTailVariant) ? flash_detail::kSplitTailVariant : 4;
    }
  }
  // The dynamic-tile variants (55, 56): dense batches with a workspace for their tile counter, zeroed here (same
  // stream, before the launch); otherwise their static counterparts 4 / 13.
  if (flash_detail::dynamic_variant(variant)) {
    if (varlen || paged || workspace == nullptr || workspace_bytes < sizeof(int) || !aligned16(workspace)) {
      variant = flash_detail::static_variant(variant);
    } else {
      a.tile_counter = static_cast<int*>(workspace);
      const cudaError_t e = cudaMemsetAsync(workspace, 0, sizeof(int), stream);
      if (e != cudaSuccess) return e;
    }
  }
  if (HD == 128 && split_kernel) {
    const flash_detail::SplitTailPlan sp = flash_detail::split_tail_plan(p, num_sms);
    if (sp.on && workspace != nullptr && workspace_bytes >= sp.bytes && aligned16(workspace)) {
      a.split_tail = 1;
      a.full_rounds = sp.full_rounds;
      a.tail_first_tile = sp.first_tile;
      a.tail_units = sp.units;
      a.kv_blocks = sp.kv_blocks;
      a.split_flags = static_cast<int*>(workspace);
      a.split_partials = reinterpret_cast<float4*>(static_cast<unsigned char*>(workspace) +
                                                   flash_detail::split_flag_bytes(num_sms));
      const cudaError_t e = cudaMemsetAsync(workspace, 0, size_t(num_sms) * sizeof(int), stream);
      if (e != cudaSuccess) return e;
    }
  }
  return flash_detail::launch_fwd<HD>(a, bf16, variant, num_sms, stream);
}

}  // namespace

namespace flash_detail {
const char* shared_params_reason(const FlashParams& p) { return params_reason(p); }

int current_sm_count() {
  int dev = 0, num_sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    return 0;
  }
  return num_sms;
}
}  // namespace flash_detail

// Hopper runs everything params_reason accepts; other GPUs run 16-bit inputs on the mma.sync forward (Turing: fp16
// on its sm_75 build).
const char* flash_unsupported_reason(const FlashParams& p) {
  if (const char* r = params_reason(p)) return r;
  const char* hopper = device_reason();
  if (hopper == nullptr) return nullptr;
  if (p.dtype == FlashDtype::kFp8E4m3) return hopper;
  return mma_sync_reason(p, fallback_variant() == kFlashSm75Variant);
}

// 16-bit: none (the softmax state lives in registers), except for the split-tail variant where it applies (its
// partials and flags: flash_fwd_split_tail.cuh) when the build has it, and at least 16 bytes for the dynamic-tile
// variants' counter. FP8: V^T for the second GEMM.
FlashPlan flash_plan(const FlashParams& p) {
  FlashPlan plan;
  if (params_reason(p) != nullptr) return plan;
  if (p.dtype == FlashDtype::kFp8E4m3) {
    plan.workspace_bytes = flash_detail::fp8_workspace_bytes(p);
  } else {
    if (flash_detail::variant_compiled(flash_detail::kSplitTailVariant) ||
        flash_detail::variant_compiled(flash_detail::kStageInVVariant)) {
      plan.workspace_bytes = flash_detail::split_tail_plan(p, flash_detail::current_sm_count()).bytes;
    }
    // the dynamic-tile variants' counter (55, in every build: a causal default at head dims 64 and 128)
    plan.workspace_bytes = std::max<size_t>(plan.workspace_bytes, 16);
  }
  return plan;
}

static_assert(kFlashSm80Variant == flash_detail::kFwdVariants, "the mma.sync variant follows the Hopper ones");
static_assert(kFlashSm75Variant == flash_detail::kFwdVariantsEnd, "the sm_75 variant follows the tile variants");
static_assert(flash_detail::kFirstQRegVariant == kFlashSm75Variant + 1, "the Q-in-registers variants follow it");
static_assert(flash_detail::kSplitTailVariant == flash_detail::kQRegVariantsEnd, "the split tail follows them");
static_assert(flash_detail::kStageInVVariant == flash_detail::kSplitTailVariant + 3, "22, 23 retired");
int flash_variant_count() { return flash_detail::kFwdAllVariantsEnd; }
bool flash_variant_compiled(int variant) {
  return variant == kFlashSm80Variant || variant == kFlashSm75Variant || flash_detail::variant_compiled(variant);
}
bool flash_variant_compiled(const FlashParams& p, int variant) {
  if (p.dtype == FlashDtype::kFp8E4m3) return flash_detail::fp8_variant_compiled(p.head_dim, variant);
  return flash_variant_compiled(variant);
}
const char* flash_variant_unsupported_reason(const FlashParams& p, int variant) {
  if (const char* r = params_reason(p)) return r;
  if (variant < 0 || variant >= flash_variant_count()) return "no such variant";
  const bool mma_sync = variant == kFlashSm80Variant || variant == kFlashSm75Variant;
  if (mma_sync && p.dtype == FlashDtype::kFp8E4m3) {
    return "the mma.sync flash forward (variants kFlashSm80Variant / kFlashSm75Variant) is 16-bit only; FP8 e4m3 runs "
           "on the Hopper (sm_90a) kernels";
  }
  if (!flash_variant_compiled(p, variant)) {
    return "this build did not compile the variant for these parameters (-DGA_FLASH_ALL_VARIANTS=ON adds them)";
  }
  if (mma_sync) return mma_sync_reason(p, variant == kFlashSm75Variant);
  return device_reason();
}

cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, cudaStream_t stream) {
  return flash_forward_with_schedule(p, sched, nullptr, 0, stream);
}

cudaError_t flash_forward_with_schedule(const FlashParams& p, int sched, void* workspace, size_t workspace_bytes,
                                        cudaStream_t stream) {
  if (params_reason(p) != nullptr || sched < 0 || sched >= flash_variant_count()) return cudaErrorInvalidValue;
  if (sched == kFlashSm80Variant) {
    if (p.dtype == FlashDtype::kFp8E4m3 || p.cu_seqlens_q != nullptr || p.o_f32) return cudaErrorNotSupported;
    if (p.n_head > 65535 || p.batch > 65535) return cudaErrorInvalidValue;
    if (sm80_device_reason() != nullptr) return cudaErrorNoKernelImageForDevice;
    return run_sm80(p, false, stream);
  }
  if (sched == kFlashSm75Variant) {
    if (p.dtype != FlashDtype::kF16 || p.cu_seqlens_q != nullptr || p.o_f32) return cudaErrorNotSupported;
    if (p.n_head > 65535 || p.batch > 65535) return cudaErrorInvalidValue;
    if (sm75_device_reason() != nullptr) return cudaErrorNoKernelImageForDevice;
    return run_sm80(p, true, stream);
  }
  if (device_reason() != nullptr) return cudaErrorNoKernelImageForDevice;
  if (!flash_variant_compiled(p, sched)) return cudaErrorNotSupported;
  if (p.dtype == FlashDtype::kFp8E4m3) {
    if (workspace_bytes < flash_detail::fp8_workspace_bytes(p) || workspace == nullptr || !aligned16(workspace)) {
      return cudaErrorInvalidValue;  // V^T needs flash_plan(p).workspace_bytes, 16-byte aligned
    }
    const int num_sms = flash_detail::current_sm_count();
    if (num_sms < 1) return cudaErrorInvalidDevice;
    return flash_detail::forward_fp8(p, sched, workspace, workspace_bytes, num_sms, stream);
  }
  switch (p.head_dim) {
    case 64: return run<64>(p, sched, workspace, workspace_bytes, stream);
    case 96: return run<128>(p, sched, workspace, workspace_bytes, stream);  // the 128 tiles, 32 zero columns
    case 128: return run<128>(p, sched, workspace, workspace_bytes, stream);
    case 256: return run<256>(p, sched, workspace, workspace_bytes, stream);
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
  int variant = flash_detail::default_variant(p.head_dim, p.causal, p.seqlen_k);
  if (p.dtype == FlashDtype::kFp8E4m3) {
    variant = flash_detail::fp8_default_variant(p.head_dim, p.causal, p.seqlen_k);
  } else if (device_reason() != nullptr) {
    variant = fallback_variant();  // not Hopper (or no sm_90a code): the mma.sync forward (Turing: its sm_75 build)
  }
  return flash_forward_with_schedule(p, variant, workspace, workspace_bytes, stream);
}

}  // namespace ga::cuda
