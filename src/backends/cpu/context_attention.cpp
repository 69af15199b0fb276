#include "backends/cpu/context_attention.h"

#include <algorithm>

#include "dist/ring_attention.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

// The shard's rows as float32: the pool's own memory for F32, a converted copy for F16.
std::span<const float> kv_as_f32(DType type, const void* rows, int64_t n, std::vector<float>& copy) {
  if (type == DType::F32) return {static_cast<const float*>(rows), static_cast<size_t>(n)};
  const auto* h = static_cast<const uint16_t*>(rows);
  copy.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) copy[static_cast<size_t>(i)] = fp16_to_f32(h[i]);
  return copy;
}

}  // namespace

void context_attention(const ContextAttentionParams& p, ContextAttentionScratch& scratch) {
  GA_CHECK(p.transport != nullptr, Internal, "context attention without its group's transport");
  GA_CHECK(p.kv_type == DType::F32 || p.kv_type == DType::F16, InvalidArgument, "context attention: KV type ",
           dtype_name(p.kv_type));
  GA_CHECK(static_cast<int64_t>(p.q_pos.size()) == p.n_tokens, Internal, "context attention: ", p.q_pos.size(),
           " query positions for ", p.n_tokens, " tokens");
  const int64_t q_row = p.n_head * p.head_dim, kv_row = p.n_head_kv * p.head_dim;
  const int64_t n_kv = static_cast<int64_t>(p.kv_pos.size());
  scratch.q.resize(static_cast<size_t>(p.n_tokens * q_row));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    std::copy_n(p.q + t * p.q_stride, q_row, scratch.q.data() + t * q_row);
  }
  dist::AttentionShape shape;
  shape.n_head = p.n_head;
  shape.n_head_kv = p.n_head_kv;
  shape.head_dim = p.head_dim;
  shape.scale = p.scale;
  shape.causal = true;
  shape.window_left = p.window_left;
  shape.softcap = p.softcap;
  dist::AttentionShard shard;
  shard.q_pos = p.q_pos;
  shard.q = scratch.q;
  shard.kv_pos = p.kv_pos;
  shard.k = kv_as_f32(p.kv_type, p.k_rows, n_kv * kv_row, scratch.k);
  shard.v = kv_as_f32(p.kv_type, p.v_rows, n_kv * kv_row, scratch.v);
  const dist::AttentionForward f = p.form == ContextAttention::kRing
                                       ? dist::ring_attention_forward(*p.transport, shape, shard)
                                       : dist::sharded_kv_attention(*p.transport, shape, shard);
  for (int64_t t = 0; t < p.n_tokens; ++t) std::copy_n(f.out.data() + t * q_row, q_row, p.out + t * p.out_stride);
}

}  // namespace ga::cpu
