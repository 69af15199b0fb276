// qkv_rope_store (backends/cuda/engine/engine_kernels.h) against a float64 reference computed here:
// q rotated in place, k rotated and v stored as f16 into the cache row of each token: its position
// (contiguous cache) or its slot (QkvRopeStoreParams::slots, a paged pool), with RoPE always at the
// token's position. The cache is NaN-poisoned: every row no token owns must still hold the poison
// afterwards (a store at the position instead of the slot, or a padding token with slot -1 that
// stored anything, fails), and every owned row must hold the reference values.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/engine/engine_kernels.h"
#include "cuda_harness.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;

constexpr uint16_t kHalfPoison = 0xFFFF;  // f16 NaN, the pattern cudaMemset(0xFF) writes

double half_value(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return static_cast<double>(__half2float(__half(raw)));
}

struct StoreCase {
  int n_tokens, n_head, n_head_kv, head_dim, n_rot;
  bool neox, bias, paged;
};

// The RoPE table the kernel is given: pair i turns by pos * freq_scale * base^(-2i / n_rot) (a linear scaling).
std::vector<double> rope_table(int n_rot, double base, double freq_scale) {
  std::vector<double> t(static_cast<size_t>(n_rot / 2));
  for (int i = 0; i < n_rot / 2; ++i) t[static_cast<size_t>(i)] = freq_scale * std::pow(base, -2.0 * i / n_rot);
  return t;
}

// Rotates x[d0], x[d1] of each rotated pair by pos * inv_freq[i] and scales them by mscale, in double.
void rope_ref(std::vector<double>& x, int n_heads, int head_dim, int n_rot, bool neox, double pos,
              const std::vector<double>& inv_freq, double mscale) {
  for (int h = 0; h < n_heads; ++h) {
    double* v = x.data() + static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * inv_freq[static_cast<size_t>(i)];
      const int d0 = neox ? i : 2 * i, d1 = neox ? i + n_rot / 2 : 2 * i + 1;
      const double a = v[d0], b = v[d1];
      v[d0] = mscale * (a * std::cos(theta) - b * std::sin(theta));
      v[d1] = mscale * (a * std::sin(theta) + b * std::cos(theta));
    }
  }
}

void run_case(Parity& parity, CachingAllocator& alloc, const StoreCase& c, std::mt19937& rng) {
  const std::string name = str("tokens ", c.n_tokens, " heads ", c.n_head, "/", c.n_head_kv, " hd ", c.head_dim,
                               " rot ", c.n_rot, c.neox ? " neox" : "", c.bias ? " bias" : "",
                               c.paged ? " slots" : " positions");
  const int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  const int ld = q_dim + 2 * kv_dim + 4;  // q|k|v slices of one padded buffer, as the fused projection
  const int64_t n_rows = 4 * c.n_tokens + 40;  // cache rows (positions or pool slots)
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(ld) * c.n_tokens);
  for (float& x : qkv) x = dist(rng);
  std::vector<float> bias(static_cast<size_t>(q_dim + 2 * kv_dim));
  for (float& x : bias) x = 0.1f * dist(rng);
  // distinct positions and distinct slots (a shuffled pool), one padding token (slot -1) when paged
  std::vector<int32_t> rows(static_cast<size_t>(n_rows));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::vector<int32_t> positions(rows.begin(), rows.begin() + c.n_tokens);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::vector<int32_t> slots(rows.begin(), rows.begin() + c.n_tokens);
  if (c.paged && c.n_tokens > 2) slots[static_cast<size_t>(c.n_tokens / 2)] = -1;
  const std::vector<int32_t>& cache_rows = c.paged ? slots : positions;
  const std::vector<double> inv_freq = rope_table(c.n_rot, 500000.0, 0.5);
  const double mscale = c.neox ? 1.25 : 1.0;  // YaRN / LongRoPE's attention factor, and none

  DeviceArray<float> d_qkv(alloc, qkv.size()), d_bias(alloc, bias.size());
  DeviceArray<uint16_t> k_cache(alloc, static_cast<size_t>(n_rows * kv_dim)), v_cache(alloc, k_cache.size());
  DeviceArray<int32_t> d_pos(alloc, positions.size()), d_slots(alloc, slots.size());
  DeviceArray<double> d_inv_freq(alloc, inv_freq.size());
  d_inv_freq.upload(inv_freq);
  d_qkv.upload(qkv);
  d_bias.upload(bias);
  d_pos.upload(positions);
  d_slots.upload(slots);
  GA_CUDA_CHECK(cudaMemset(k_cache.get(), 0xFF, k_cache.size() * 2));
  GA_CUDA_CHECK(cudaMemset(v_cache.get(), 0xFF, v_cache.size() * 2));

  ::ga::cuda::engine::QkvRopeStoreParams p;
  p.q = d_qkv.get();
  p.k = d_qkv.get() + q_dim;
  p.v = d_qkv.get() + q_dim + kv_dim;
  p.ld_q = p.ld_kv = ld;
  if (c.bias) {
    p.bq = d_bias.get();
    p.bk = d_bias.get() + q_dim;
    p.bv = d_bias.get() + q_dim + kv_dim;
  }
  p.k_cache = reinterpret_cast<__half*>(k_cache.get());
  p.v_cache = reinterpret_cast<__half*>(v_cache.get());
  p.positions = d_pos.get();
  p.slots = c.paged ? d_slots.get() : nullptr;
  p.n_tokens = c.n_tokens;
  p.n_head = c.n_head;
  p.n_head_kv = c.n_head_kv;
  p.head_dim = c.head_dim;
  p.n_rot = c.n_rot;
  p.neox = c.neox;
  p.inv_freq = d_inv_freq.get();
  p.mscale = static_cast<float>(mscale);
  if (const char* why = ::ga::cuda::engine::qkv_rope_store_unsupported_reason(p)) {
    parity.fail(name + ": rejected: " + why);
    return;
  }
  GA_CUDA_CHECK(::ga::cuda::engine::qkv_rope_store(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got_qkv = d_qkv.download();
  const std::vector<uint16_t> got_k = k_cache.download(), got_v = v_cache.download();

  std::vector<double> want_q, want_k, want_v;
  std::vector<float> got_q, got_k_rows, got_v_rows;
  std::vector<bool> owned(static_cast<size_t>(n_rows), false);
  for (int t = 0; t < c.n_tokens; ++t) {
    const float* src = qkv.data() + static_cast<size_t>(t) * ld;
    std::vector<double> q(static_cast<size_t>(q_dim)), k(static_cast<size_t>(kv_dim)), v(static_cast<size_t>(kv_dim));
    auto biased = [&](int i) { return double{src[i]} + (c.bias ? double{bias[static_cast<size_t>(i)]} : 0.0); };
    for (int i = 0; i < q_dim; ++i) q[static_cast<size_t>(i)] = biased(i);
    for (int i = 0; i < kv_dim; ++i) {
      k[static_cast<size_t>(i)] = biased(q_dim + i);
      v[static_cast<size_t>(i)] = biased(q_dim + kv_dim + i);
    }
    const double pos = positions[static_cast<size_t>(t)];
    rope_ref(q, c.n_head, c.head_dim, c.n_rot, c.neox, pos, inv_freq, mscale);
    rope_ref(k, c.n_head_kv, c.head_dim, c.n_rot, c.neox, pos, inv_freq, mscale);
    want_q.insert(want_q.end(), q.begin(), q.end());
    got_q.insert(got_q.end(), got_qkv.begin() + static_cast<ptrdiff_t>(t) * ld,
                 got_qkv.begin() + static_cast<ptrdiff_t>(t) * ld + q_dim);
    const int32_t row = cache_rows[static_cast<size_t>(t)];
    if (row < 0) continue;  // a padding token stores nothing
    owned[static_cast<size_t>(row)] = true;
    want_k.insert(want_k.end(), k.begin(), k.end());
    want_v.insert(want_v.end(), v.begin(), v.end());
    for (int i = 0; i < kv_dim; ++i) {
      got_k_rows.push_back(static_cast<float>(half_value(got_k[static_cast<size_t>(int64_t{row} * kv_dim + i)])));
      got_v_rows.push_back(static_cast<float>(half_value(got_v[static_cast<size_t>(int64_t{row} * kv_dim + i)])));
    }
  }
  parity.compare(name + " q", got_q.data(), want_q.data(), want_q.size(), 1e-5, 1e-5);
  parity.compare(name + " k cache", got_k_rows.data(), want_k.data(), want_k.size(), 1e-3, 1e-4);  // f16 rounding
  parity.compare(name + " v cache", got_v_rows.data(), want_v.data(), want_v.size(), 1e-3, 1e-4);
  for (int64_t r = 0; r < n_rows; ++r) {
    if (owned[static_cast<size_t>(r)]) continue;
    for (int i = 0; i < kv_dim; ++i) {
      const size_t e = static_cast<size_t>(r * kv_dim + i);
      if (got_k[e] != kHalfPoison || got_v[e] != kHalfPoison) {
        parity.fail(name + ": wrote cache row " + std::to_string(r) + ", which no token owns");
        return;
      }
    }
  }
}

TEST(CudaQkvRopeStore, StoresAtPositionsOrSlotsAndMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("qkv_rope_store");
  std::mt19937 rng(17);
  for (bool paged : {false, true}) {
    run_case(parity, alloc, StoreCase{1, 32, 8, 128, 128, false, false, paged}, rng);
    run_case(parity, alloc, StoreCase{13, 32, 8, 128, 128, false, true, paged}, rng);
    run_case(parity, alloc, StoreCase{37, 8, 8, 64, 32, true, false, paged}, rng);
    run_case(parity, alloc, StoreCase{7, 8, 2, 256, 256, true, true, paged}, rng);
  }
  parity.finish();
}

}  // namespace
}  // namespace ga::test::cuda
