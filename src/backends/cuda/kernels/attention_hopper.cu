// The engine's prefill attention on the Hopper flash kernel: AttentionParams (f32 q and out,
// f16 KV cache, contiguous or paged, several runs per call) mapped onto the flash kernel's varlen API
// (kernels/flash/flash_attention.h) instead of the mma.sync prefill (attention_prefill.cu).
//
// Why an adapter and not a second engine path: the engine, the Scheduler and their tests keep one attention
// entry point (attention.h), and attention() decides per call which prefill kernel runs, so every caller
// that passes the staging buffer gets the faster kernel on sm_90 and the old one everywhere else.
// The mapping:
//   - q is f32 [n_tokens][q_token_stride] in the engine; wgmma reads 16-bit operands from shared memory via
//     TMA, so one pass converts it to packed f16 [n_tokens][n_head][head_dim] in the staging buffer (a few us
//     at 8k tokens, against hundreds of the attention). The kernel writes out in f32 itself (o_f32).
//   - runs: cu_seqlens_q = the clamped seq_q_start; seqused_q[s] = the run's length, or 0 for runs the
//     decode launch of the same call owns (<= 8 tokens when the call has decode runs: the flash kernel
//     skips their tiles instead of spending a 128-row tile on one token); seqused_k[s] = seq_pos0[s] + n_q,
//     so the kernel's bottom-right causal mask is exactly "token i sees positions 0 .. pos0 + i".
//   - paged KV: the block table as is (page_size = block_size; the kernel assembles each key tile from
//     pages by TMA). Contiguous: one sequence over the cache as packed keys (cu_seqlens_k = {0, ..}), with
//     pos0 read on the device when pos0_device is set, like the mma.sync kernel.
//   - window_left and softcap map onto FlashParams' window_left (window_right is the causal diagonal) and softcap,
//     with the same semantics; head dim 96 runs on the flash kernel's 128 tiles (flash_forward.cu).
// The same clamps as the mma.sync path (attention.h) keep bad device values from faulting.
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_impl.cuh"
#include "backends/cuda/kernels/flash/flash_attention.h"

namespace ga::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t round_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

int runs_of(const AttentionParams& p) { return detail::attention_is_paged(p) ? p.n_seqs : 1; }
size_t q16_bytes(const AttentionParams& p) {
  return round_up(size_t(std::max(p.n_tokens, 0)) * size_t(std::max(p.n_head, 0)) * size_t(std::max(p.head_dim, 0)) *
                  sizeof(__half));
}

// The staging buffer: [q16 | cu_q (runs + 1) | used_q (runs) | used_k (runs) | cu_k (2)].
struct Staging {
  __half* q16;
  int32_t* cu_q;
  int32_t* used_q;
  int32_t* used_k;
  int32_t* cu_k;
};
Staging carve(const AttentionParams& p) {
  auto* base = static_cast<unsigned char*>(p.prefill_staging);
  Staging st;
  st.q16 = reinterpret_cast<__half*>(base);
  st.cu_q = reinterpret_cast<int32_t*>(base + q16_bytes(p));
  st.used_q = st.cu_q + runs_of(p) + 1;
  st.used_k = st.used_q + runs_of(p);
  st.cu_k = st.used_k + runs_of(p);
  return st;
}

struct StageArgs {
  const float* q;
  int64_t q_stride;
  __half* q16;
  int n_tokens, row_pairs;  // row_pairs: n_head * head_dim / 2
  int paged, n_seqs, min_q, max_q;
  const int32_t* seq_q_start;
  const int32_t* seq_pos0;
  int64_t pos0;
  const int32_t* pos0_device;
  int64_t max_kv;
  int32_t* cu_q;
  int32_t* used_q;
  int32_t* used_k;
  int32_t* cu_k;
};

// q f32 -> packed f16, and (block 0) the per-run lengths the flash kernel reads.
__global__ void stage_hopper_prefill(const StageArgs a) {
  const int64_t pairs = int64_t{a.n_tokens} * a.row_pairs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pairs; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / a.row_pairs, c = i % a.row_pairs;
    const float2 x = *reinterpret_cast<const float2*>(a.q + t * a.q_stride + 2 * c);
    reinterpret_cast<__half2*>(a.q16)[i] = __floats2half2_rn(x.x, x.y);
  }
  if (blockIdx.x != 0) return;
  if (!a.paged) {
    if (threadIdx.x == 0) {
      const int64_t pos0 = a.pos0_device != nullptr ? int64_t{*a.pos0_device} : a.pos0;
      const int64_t end = min(max(pos0, int64_t{0}), a.max_kv - a.n_tokens) + a.n_tokens;
      a.cu_q[0] = 0;
      a.cu_q[1] = a.n_tokens;
      a.used_q[0] = a.n_tokens;
      a.used_k[0] = static_cast<int32_t>(end);
      a.cu_k[0] = 0;
      a.cu_k[1] = static_cast<int32_t>(end);
    }
    return;
  }
  for (int s = static_cast<int>(threadIdx.x); s <= a.n_seqs; s += static_cast<int>(blockDim.x)) {
    const int start = min(max(__ldg(a.seq_q_start + s), 0), a.n_tokens);
    a.cu_q[s] = start;
    if (s == a.n_seqs) break;
    const int next = min(max(__ldg(a.seq_q_start + s + 1), 0), a.n_tokens);
    const int n_q = max(next - start, 0);
    // runs of <= min_q tokens belong to the decode launch; runs above max_q stay unwritten (attention.h)
    a.used_q[s] = n_q > a.min_q && n_q <= a.max_q ? n_q : 0;
    const int64_t pos0 = min(max(int64_t{__ldg(a.seq_pos0 + s)}, int64_t{0}), max(a.max_kv - n_q, int64_t{0}));
    a.used_k[s] = static_cast<int32_t>(pos0 + n_q);
  }
  if (threadIdx.x == 0) a.cu_k[0] = a.cu_k[1] = 0;
}

FlashParams flash_params_of(const AttentionParams& p, const Staging& st) {
  FlashParams f;
  f.q = st.q16;
  f.k = p.k;
  f.v = p.v;
  f.o = p.out;
  f.q_head_stride = p.head_dim;
  f.q_seq_stride = int64_t{p.n_head} * p.head_dim;
  f.k_head_stride = f.v_head_stride = p.head_dim;
  f.k_seq_stride = f.v_seq_stride = p.kv_pos_stride;
  f.o_head_stride = p.head_dim;
  f.o_seq_stride = p.out_token_stride;
  f.dtype = FlashDtype::kF16;
  f.o_f32 = true;
  f.head_dim = p.head_dim;
  f.n_head = p.n_head;
  f.n_head_kv = p.n_head_kv;
  f.causal = true;
  f.window_left = p.window_left;  // causal: the right side is the diagonal
  f.softcap = p.softcap;
  f.softmax_scale = p.scale;
  f.cu_seqlens_q = st.cu_q;
  f.seqused_q = st.used_q;
  f.seqused_k = st.used_k;
  f.total_q = p.n_tokens;
  if (detail::attention_is_paged(p)) {
    f.batch = p.n_seqs;
    f.seqlen_q = p.max_seq_tokens;
    f.seqlen_k = static_cast<int>(std::min<int64_t>(p.max_kv_positions, INT32_MAX));
    f.block_table = p.block_table;
    f.block_table_stride = p.block_table_stride;
    f.page_size = p.block_size;
    f.n_pages = p.n_kv_blocks;
  } else {
    const int64_t cap =
        p.pos0_device != nullptr ? p.max_kv_positions : std::max(p.max_kv_positions, p.pos0 + p.n_tokens);
    f.batch = 1;
    f.seqlen_q = p.n_tokens;
    f.seqlen_k = static_cast<int>(std::min<int64_t>(cap, INT32_MAX));
    f.cu_seqlens_k = st.cu_k;
    f.total_k = p.max_kv_positions;
  }
  return f;
}

// Why the prefill part of a valid call does not run on the flash kernel, or nullptr.
const char* hopper_reason(const AttentionParams& p) {
  if (!detail::attention_uses_prefill(p)) {
    return "this call has no prefill part (runs of <= 8 tokens take the decode kernel)";
  }
  if (p.prefill_kernel == AttentionParams::PrefillKernel::kMmaSync) return "prefill_kernel = kMmaSync";
  if (detail::attention_is_fp8(p)) return "an FP8 KV cache (the flash kernel reads f16 K/V; the mma.sync kernel serves)";
  if (p.prefill_staging == nullptr || p.prefill_staging_bytes < attention_prefill_staging_bytes(p)) {
    return "no prefill_staging of attention_prefill_staging_bytes(params) bytes";
  }
  if (reinterpret_cast<uintptr_t>(p.prefill_staging) % kAlign != 0) return "prefill_staging must be 256-byte aligned";
  return flash_unsupported_reason(flash_params_of(p, carve(p)));
}

}  // namespace

size_t attention_prefill_staging_bytes(const AttentionParams& p) {
  if (p.n_tokens < 1 || p.n_head < 1 || p.head_dim < 1 || !detail::attention_uses_prefill(p)) return 0;
  if (detail::attention_is_fp8(p)) return 0;  // the mma.sync kernel takes the FP8 cache's prefill (hopper_reason)
  return q16_bytes(p) + round_up(sizeof(int32_t) * (3 * size_t(std::max(runs_of(p), 1)) + 3));
}

const char* attention_hopper_prefill_reason(const AttentionParams& p) {
  if (const char* why = attention_unsupported_reason(p)) return why;
  return hopper_reason(p);
}

namespace detail {

// attention() asks this after validating p: whether its prefill part goes to the flash kernel.
bool hopper_prefill_selected(const AttentionParams& p) { return hopper_reason(p) == nullptr; }

// The prefill part of p (runs of more than min_q tokens) on the flash kernel; p as hopper_prefill_selected.
cudaError_t launch_hopper_prefill(const AttentionParams& p, int min_q, cudaStream_t stream) {
  const Staging st = carve(p);
  StageArgs a{};
  a.q = p.q;
  a.q_stride = p.q_token_stride;
  a.q16 = st.q16;
  a.n_tokens = p.n_tokens;
  a.row_pairs = p.n_head * p.head_dim / 2;
  a.paged = attention_is_paged(p) ? 1 : 0;
  a.n_seqs = p.n_seqs;
  a.min_q = min_q;
  a.max_q = a.paged ? p.max_seq_tokens : p.n_tokens;
  a.seq_q_start = p.seq_q_start;
  a.seq_pos0 = p.seq_pos0;
  a.pos0 = p.pos0;
  a.pos0_device = p.pos0_device;
  a.max_kv = a.paged ? p.max_kv_positions : std::max(p.max_kv_positions, int64_t{p.n_tokens});
  a.cu_q = st.cu_q;
  a.used_q = st.used_q;
  a.used_k = st.used_k;
  a.cu_k = st.cu_k;
  const int64_t pairs = int64_t{p.n_tokens} * a.row_pairs;
  const int blocks = static_cast<int>(std::clamp<int64_t>((pairs + 255) / 256, 1, 1024));
  stage_hopper_prefill<<<blocks, 256, 0, stream>>>(a);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  return flash_forward(flash_params_of(p, st), nullptr, 0, stream);
}

}  // namespace detail
}  // namespace ga::cuda
