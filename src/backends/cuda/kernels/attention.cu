// attention(): validates AttentionParams once, sizes the split-KV workspace and dispatches on
// head_dim to the decode (n_tokens <= 8, attention_decode.cu) or prefill (attention_prefill.cu)
// kernels; the paged form may launch both (decode runs and prompt chunks of one batch). The prefill part runs on
// the Hopper flash kernel when the caller passes staging for it (attention_hopper.cu). The kernel
// files hold the design notes; attention_impl.cuh the split policy and workspace layout.
#include <cmath>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_impl.cuh"

namespace ga::cuda {
namespace {

// SMs of the current device (the decode grid is sized to fill them). A failed query falls back to
// the H100/H200 count so the workspace size and the launch still agree.
int current_sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();
    return 132;
  }
  return sms;
}

// The most keys a decode column (one run) may read: the capacity when pos0 is read on the device, else the
// real length; with a sliding window at most the window plus the run's tokens (the decode kernel reads
// [pos0 - window_left, pos0 + n_q) only), so the split count and the workspace follow the window's range,
// not the cache's.
int64_t kv_len_bound(const AttentionParams& p, bool for_workspace) {
  int64_t bound = p.pos0 + p.n_tokens;
  if (detail::attention_is_paged(p)) {
    bound = p.max_kv_positions;  // the sequences' ends live on the device
  } else if (p.pos0_device != nullptr || for_workspace) {
    bound = std::max<int64_t>(p.max_kv_positions, p.pos0 + p.n_tokens);
  }
  if (p.window_left >= 0) {
    const int tokens = detail::attention_is_paged(p) ? detail::paged_decode_q(p) : p.n_tokens;
    bound = std::min<int64_t>(bound, int64_t{p.window_left} + tokens);
  }
  return bound;
}

// Decode CTAs the device holds at once (of p's decode kernel): the split count is sized from this
// (attention_impl.cuh).
int resident_decode_ctas(const AttentionParams& p) {
  int per_sm = 1;
  (void)detail::visit_head_dim(p.head_dim, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if constexpr (detail::fp8_kv_head_dim_supported(HD)) {
      if (detail::attention_is_fp8(p)) {
        per_sm = detail::decode_fp8_ctas_per_sm<HD>();
        return cudaSuccess;
      }
    }
    per_sm = detail::decode_ctas_per_sm<HD>(detail::decode_stages(p));
    return cudaSuccess;
  });
  return per_sm * current_sm_count();
}

bool aligned(const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// The kernels use sm_80 instructions (attention_detail.cuh); older devices (Turing) get a reason and
// the caller's fallback. Asked per call: a cheap attribute query, and the device may differ per thread.
bool current_device_has_sm80() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major >= 8;
}

// The paged form's own checks (attention.h); the shared ones follow in attention_unsupported_reason.
const char* paged_unsupported_reason(const AttentionParams& p) {
  if (p.seq_q_start == nullptr || p.seq_pos0 == nullptr) return "paged attention: seq_q_start and seq_pos0 must be set";
  if (p.n_seqs < 1 || p.n_seqs > 65535) return "paged attention: n_seqs must be in 1..65535";
  if (p.block_size < 1) return "paged attention: block_size must be >= 1";
  if (p.n_kv_blocks < 1 || p.n_kv_blocks * p.block_size > (int64_t{1} << 31) - 1) {
    return "paged attention: n_kv_blocks must be >= 1 with n_kv_blocks * block_size below 2^31 (int32 slots)";
  }
  if (p.max_seq_tokens < 1 || p.max_seq_tokens > p.n_tokens) return "paged attention: max_seq_tokens must be in 1..n_tokens";
  if (p.max_kv_positions < p.max_seq_tokens) return "paged attention: max_kv_positions must be >= max_seq_tokens";
  if (p.block_table_stride < (p.max_kv_positions + p.block_size - 1) / p.block_size) {
    return "paged attention: block_table_stride * block_size must cover max_kv_positions";
  }
  if (int64_t{p.n_seqs} * detail::decode_row_tiles(p) > 65535) return "paged attention: n_seqs * row tiles above 65535";
  return nullptr;
}

// Why p's paged decode cannot merge n_splits splits in a cluster (AttentionParams::decode_merge), or
// nullptr when it can: the paged form, at most kMaxClusterSplits splits, an sm_90 device and binary.
const char* cluster_merge_unavailable(const AttentionParams& p, int n_splits) {
  if (!detail::attention_is_paged(p)) return "decode_merge kCluster: the paged form only";
  if (n_splits > detail::kMaxClusterSplits) return "decode_merge kCluster: more than 8 decode splits";
  bool built = false;
  (void)detail::visit_head_dim(p.head_dim, [&](auto hd) {
    built = detail::decode_cluster_merge_supported<decltype(hd)::value>(detail::decode_stages(p));
    return cudaSuccess;
  });
  return built ? nullptr : "decode_merge kCluster: needs an sm_90 device and a build for it";
}

// Whether the decode launch of p (n_splits splits) merges them in a cluster. kAuto: only when the grid
// fits in one wave of resident CTAs. A cluster's CTAs must be resident together in one GPC, and with a
// second wave that costs more than the merge saves (the merge sweep, b16: 4 splits = 512 CTAs on 264
// slots, 98.3 us with clusters vs 81.7 us with the workspace merge; one wave, 2 splits: 74.3 vs 76.1 us).
bool decode_cluster_merge(const AttentionParams& p, int n_splits) {
  if (n_splits < 2 || p.decode_merge == AttentionParams::DecodeMerge::kWorkspace) return false;
  if (p.decode_merge == AttentionParams::DecodeMerge::kAuto) {
    const int64_t columns = int64_t{p.n_seqs} * p.n_head_kv * detail::decode_row_tiles(p);
    if (columns * n_splits > resident_decode_ctas(p)) return false;
  }
  return cluster_merge_unavailable(p, n_splits) == nullptr;
}

// The cache's pointers and alignment, by its element type (kv_pos_stride in elements of that type).
const char* cache_unsupported_reason(const AttentionParams& p) {
  if (detail::attention_is_fp8(p)) {
    if (p.k_fp8 == nullptr || p.v_fp8 == nullptr || p.k_scale == nullptr || p.v_scale == nullptr) {
      return "an FP8 cache needs k_fp8, v_fp8, k_scale and v_scale (device pointers)";
    }
    if (p.k != nullptr || p.v != nullptr) return "an FP8 cache takes k_fp8 / v_fp8, not the f16 k / v";
    if (!detail::fp8_kv_head_dim_supported(p.head_dim)) {
      return "head_dim has no FP8-cache kernel (FP8 KV cache: 64, 128, 256)";
    }
    if (p.decode_stages != 0) return "decode_stages must be 0 with an FP8 cache (its kernel has one stage count)";
    if (!aligned(p.k_fp8, 16) || !aligned(p.v_fp8, 16) || p.kv_pos_stride % 16 != 0) {
      return "k_fp8 and v_fp8 must be 16-byte aligned with kv_pos_stride a multiple of 16 codes (16-byte copies)";
    }
    if (!aligned(p.k_scale, 4) || !aligned(p.v_scale, 4)) return "k_scale and v_scale must be float-aligned";
    return nullptr;
  }
  if (p.kv_dtype != AttentionParams::KvDType::kF16) return "unknown kv_dtype";
  if (p.k == nullptr || p.v == nullptr) return "q, k, v and out must be device pointers, not null";
  if (!aligned(p.k, 16) || !aligned(p.v, 16) || p.kv_pos_stride % 8 != 0) {
    return "k and v must be 16-byte aligned with kv_pos_stride a multiple of 8 halves (16-byte copies)";
  }
  return nullptr;
}

}  // namespace

const char* attention_unsupported_reason(const AttentionParams& p) {
  if (p.q == nullptr || p.out == nullptr) return "q, k, v and out must be device pointers, not null";
  if (const char* why = cache_unsupported_reason(p)) return why;
  if (!current_device_has_sm80()) {
    return "the CUDA attention kernels need compute capability 8.0 or newer (cp.async, mma.sync m16n8k16)";
  }
  if (p.head_dim != 64 && p.head_dim != 96 && p.head_dim != 128 && p.head_dim != 256) {
    return "head_dim not supported by the CUDA attention (supported: 64, 96, 128, 256)";
  }
  if (p.window_left < -1) return "window_left must be -1 (no sliding window) or >= 0";
  if (!std::isfinite(p.softcap) || p.softcap < 0.0f) return "softcap must be 0 (off) or finite and > 0";
  if (p.n_tokens < 1 || p.n_head < 1 || p.n_head_kv < 1) return "n_tokens, n_head and n_head_kv must be positive";
  if (p.n_head % p.n_head_kv != 0) return "n_head must be a multiple of n_head_kv (grouped-query attention)";
  if (p.n_head_kv > 65535) return "n_head_kv above 65535 (a grid dimension)";
  if (int64_t{p.n_tokens} * p.n_head > (int64_t{1} << 30)) return "n_tokens * n_head above 2^30";
  if (p.max_kv_positions > (int64_t{1} << 31) - 1) return "max_kv_positions above 2^31 - 1";
  if (p.decode_splits < 0 || p.decode_splits > detail::kMaxSplits) return "decode_splits must be in 0..256";
  if (p.decode_stages != 0 &&
      !detail::decode_stages_supported(p.head_dim, detail::attention_is_paged(p), p.decode_stages)) {
    return "decode_stages must be 0 or 2 (3: paged form, head_dim 128, in a build with the 3-stage decode kernel)";
  }
  if (detail::attention_is_paged(p)) {
    if (const char* why = paged_unsupported_reason(p)) return why;
  } else {
    if (p.pos0_device == nullptr && p.pos0 < 0) return "pos0 must be >= 0";
    if (p.pos0_device == nullptr ? p.max_kv_positions < p.pos0 + p.n_tokens : p.max_kv_positions < p.n_tokens) {
      return "max_kv_positions (the cache capacity) must be >= pos0 + n_tokens";
    }
  }
  if (p.kv_pos_stride < int64_t{p.n_head_kv} * p.head_dim) return "kv_pos_stride is smaller than n_head_kv * head_dim";
  if (!aligned(p.q, 8) || !aligned(p.out, 8) || p.q_token_stride % 2 != 0 || p.out_token_stride % 2 != 0) {
    return "q and out must be 8-byte aligned with even token strides (float2 accesses)";
  }
  if (p.n_tokens > 1 && (p.q_token_stride < int64_t{p.n_head} * p.head_dim ||
                         p.out_token_stride < int64_t{p.n_head} * p.head_dim)) {
    return "q_token_stride or out_token_stride is smaller than n_head * head_dim";
  }
  if (!std::isfinite(p.scale)) return "scale must be finite";
  if (p.decode_merge == AttentionParams::DecodeMerge::kCluster && detail::attention_uses_decode(p)) {
    if (const char* why = cluster_merge_unavailable(p, detail::decode_splits(p, kv_len_bound(p, false),
                                                                             resident_decode_ctas(p)))) {
      return why;
    }
  }
  const size_t ws = attention_workspace_bytes(p);
  if (ws > 0 && (p.workspace == nullptr || p.workspace_bytes < ws)) {
    return "workspace is smaller than attention_workspace_bytes(params) (the split-KV partials)";
  }
  if (ws > 0 && !aligned(p.workspace, 16)) return "workspace must be 16-byte aligned";
  return nullptr;
}

size_t attention_workspace_bytes(const AttentionParams& p) {
  if (p.n_tokens < 1 || p.n_head_kv < 1 || p.n_head % p.n_head_kv != 0 || !detail::attention_uses_decode(p)) return 0;
  if (detail::attention_is_paged(p)) {
    if (p.n_seqs < 1 || p.max_seq_tokens < 1) return 0;
    const size_t partials = detail::paged_partial_bound(p, kv_len_bound(p, true), resident_decode_ctas(p));
    return partials == 0 ? 0 : detail::paged_done_bytes(p) + partials + 16;  // 16: the partials' alignment
  }
  return detail::decode_workspace_bytes(p,
                                        detail::decode_splits(p, kv_len_bound(p, true), resident_decode_ctas(p)));
}

int attention_decode_splits(const AttentionParams& p) {
  if (attention_unsupported_reason(p) != nullptr || !detail::attention_uses_decode(p)) return 1;
  return detail::decode_splits(p, kv_len_bound(p, false), resident_decode_ctas(p));
}

bool attention_decode_merges_in_cluster(const AttentionParams& p) {
  if (attention_unsupported_reason(p) != nullptr || !detail::attention_uses_decode(p)) return false;
  return detail::attention_is_paged(p) && decode_cluster_merge(p, attention_decode_splits(p));
}

cudaError_t attention(const AttentionParams& p, cudaStream_t stream) {
  if (attention_unsupported_reason(p) != nullptr) return cudaErrorInvalidValue;
  detail::AttnArgs a{};
  a.q = p.q;
  a.q_stride = p.q_token_stride;
  a.k = p.k;
  a.v = p.v;
  a.kv_stride = p.kv_pos_stride;
  const bool fp8 = detail::attention_is_fp8(p);
  a.k8 = p.k_fp8;
  a.v8 = p.v_fp8;
  a.k_scale = p.k_scale;
  a.v_scale = p.v_scale;
  a.scale_stride = p.n_head_kv;
  a.out = p.out;
  a.out_stride = p.out_token_stride;
  a.n_tokens = p.n_tokens;
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.group = p.n_head / p.n_head_kv;
  a.pos0 = p.pos0;
  a.pos0_device = p.pos0_device;
  a.max_kv = p.max_kv_positions;
  // Soft-capping: q carries 2 log2(e) scale / c, and the kernels turn q.k into c log2(e) tanh(scale q.k / c)
  // (attention_softcap.cuh); otherwise scale log2(e), scores in log2 units for the exp2 softmax.
  a.softcap_log2 = p.softcap > 0.0f ? p.softcap * detail::kLog2e : 0.0f;
  a.q_scale = p.softcap > 0.0f ? 2.0f * detail::kLog2e * p.scale / p.softcap : p.scale * detail::kLog2e;
  a.window_left = p.window_left;
  a.n_splits = 1;
  a.ws_rows_total = int64_t{p.n_tokens} * p.n_head;
  const bool paged = detail::attention_is_paged(p);
  if (paged) {
    a.n_seqs = p.n_seqs;
    a.seq_q_start = p.seq_q_start;
    a.seq_pos0 = p.seq_pos0;
    a.block_table = p.block_table;
    a.block_table_stride = p.block_table_stride;
    a.block_size = p.block_size;
    a.n_kv_blocks_max = static_cast<int>(p.n_kv_blocks - 1);
    a.max_seq_tokens = p.max_seq_tokens;
    a.seq_row_tiles = detail::decode_row_tiles(p);
    a.ws_q_per_seq = detail::paged_decode_q(p);
    a.ws_rows_total = int64_t{p.n_seqs} * a.ws_q_per_seq * p.n_head;
  }
  const bool decode = detail::attention_uses_decode(p);
  const bool prefill = detail::attention_uses_prefill(p);
  a.prefill_min_q = decode ? detail::kDecodeMaxTokens : 0;
  a.decode_stages = detail::decode_stages(p);
  if (decode) {
    a.n_splits = detail::decode_splits(p, kv_len_bound(p, false), resident_decode_ctas(p));
    a.cluster_merge = paged && decode_cluster_merge(p, a.n_splits) ? 1 : 0;
    a.trace = paged ? p.decode_trace : nullptr;
    if (a.n_splits > 1 && !paged) {  // counters, [n_splits][rows][head_dim] accumulators, [n_splits][rows][2] max/sum
      a.done = static_cast<unsigned*>(p.workspace);
      a.done_stride = detail::decode_done_stride(p);
      a.ws_o = reinterpret_cast<float*>(static_cast<unsigned char*>(p.workspace) + detail::decode_done_bytes(p));
      a.ws_ml = a.ws_o + static_cast<size_t>(a.n_splits) * p.n_tokens * p.n_head * p.head_dim;
    } else if (a.n_splits > 1) {  // counters first, partials at the end (attention_impl.cuh)
      a.done = static_cast<unsigned*>(p.workspace);
      a.done_stride = a.seq_row_tiles;
      const size_t partials = detail::paged_partial_bytes(p, p.n_seqs, a.n_splits);
      const uintptr_t end = reinterpret_cast<uintptr_t>(p.workspace) + p.workspace_bytes;
      a.ws_o = reinterpret_cast<float*>((end - partials) / 16 * 16);
      a.ws_ml = a.ws_o + static_cast<size_t>(a.n_splits) * static_cast<size_t>(a.ws_rows_total) * p.head_dim;
    }
  }
  const int row_tiles = detail::decode_row_tiles(p);
  const bool hopper_prefill = prefill && detail::hopper_prefill_selected(p);  // attention_hopper.cu
  return detail::visit_head_dim(p.head_dim, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if constexpr (detail::fp8_kv_head_dim_supported(HD)) {
      if (fp8) {
        if (decode) {
          const cudaError_t status = detail::launch_attention_decode_fp8<HD>(a, row_tiles, stream);
          if (status != cudaSuccess || !prefill) return status;
        }
        return detail::launch_attention_prefill_fp8<HD>(a, stream);
      }
    }
    if (fp8) return cudaErrorNotSupported;  // attention_unsupported_reason refuses it first
    if (decode) {
      const cudaError_t status = detail::launch_attention_decode<HD>(a, row_tiles, stream);
      if (status != cudaSuccess || !prefill) return status;
    }
    if (hopper_prefill) return detail::launch_hopper_prefill(p, a.prefill_min_q, stream);
    return detail::launch_attention_prefill<HD>(a, stream);
  });
}

}  // namespace ga::cuda
