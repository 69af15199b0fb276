// The forward pass's CPU ops against naive float64 references written here from the formulas
// (not from the op code), on awkward sizes (7, 19, 37, 733) so that no vector width or block size
// divides them. Attention runs with 1 and 3 threads to check that the split over (token, head)
// items and the per-thread workspace do not change results. Paged attention is checked against the
// same reference over each sequence's positions gathered into a contiguous cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/ops.h"
#include "common/test_data.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace {

using ga::DType;

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = offset + scale * dist(rng);
  return v;
}

// Checks |a - ref| <= atol + rtol * |ref| element-wise.
void expect_close(const std::vector<float>& a, const std::vector<double>& ref, double rtol, double atol) {
  ASSERT_EQ(a.size(), ref.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], ref[i], atol + rtol * std::abs(ref[i])) << "index " << i;
  }
}

const int64_t kSizes[] = {7, 19, 37, 733};

TEST(CpuOps, RmsNormMatchesFloat64) {
  for (int64_t n : kSizes) {
    const std::vector<float> x = random_vec(n, 1, 3.0f, 0.5f);
    const std::vector<float> w = random_vec(n, 2, 0.1f, 1.0f);
    const float eps = 1e-5f;
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps));
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = x[i] * inv * w[i];
    std::vector<float> out(n, NAN);  // poisoned: every element must be written
    ga::cpu::rms_norm(x.data(), w.data(), out.data(), n, eps);
    expect_close(out, ref, 1e-6, 1e-7);
    std::vector<float> in_place = x;  // out may alias x
    ga::cpu::rms_norm(in_place.data(), w.data(), in_place.data(), n, eps);
    expect_close(in_place, ref, 1e-6, 1e-7);
  }
}

TEST(CpuOps, SoftmaxIsStableAndMatchesFloat64) {
  for (int64_t n : kSizes) {
    // Offset 1000: a naive exp() would overflow to inf.
    std::vector<float> x = random_vec(n, 3, 5.0f, 1000.0f);
    double mx = -INFINITY;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    double sum = 0;
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) sum += ref[i] = std::exp(static_cast<double>(x[i]) - mx);
    for (double& r : ref) r /= sum;
    ga::cpu::softmax(x.data(), n);
    expect_close(x, ref, 2e-6, 1e-9);
  }
}

TEST(CpuOps, SwigluMatchesFloat64) {
  for (int64_t n : kSizes) {
    const std::vector<float> g = random_vec(n, 4, 4.0f);
    const std::vector<float> u = random_vec(n, 5, 2.0f);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    std::vector<float> out(n, NAN);
    ga::cpu::swiglu(g.data(), u.data(), out.data(), n);
    expect_close(out, ref, 1e-6, 1e-7);
  }
}

// Rope reference: pair i of each head rotated by pos * base^(-2i/n_rot) / factor[i].
std::vector<double> rope_ref(const std::vector<float>& x, int64_t n_heads, int64_t head_dim, int64_t n_rot, double pos,
                             double base, const std::vector<double>& factor, bool halves) {
  std::vector<double> out(x.begin(), x.end());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * std::pow(base, -2.0 * i / n_rot) / factor[i];
      const int64_t a = h * head_dim + (halves ? i : 2 * i);
      const int64_t b = h * head_dim + (halves ? i + n_rot / 2 : 2 * i + 1);
      out[a] = x[a] * std::cos(theta) - x[b] * std::sin(theta);
      out[b] = x[a] * std::sin(theta) + x[b] * std::cos(theta);
    }
  }
  return out;
}

TEST(CpuOps, RopeBothLayoutsPartialRotationMatchFloat64) {
  const int64_t n_heads = 3;
  for (int64_t head_dim : {int64_t{19}, int64_t{37}}) {
    const int64_t n_rot = head_dim - 7;  // 12 and 30: only the first n_rot dims rotate
    for (bool halves : {false, true}) {
      for (double pos : {0.0, 7.0, 733.0}) {
        const std::vector<float> x = random_vec(n_heads * head_dim, 6);
        const double base = 10000.0;
        std::vector<double> factor(n_rot / 2);
        std::vector<double> inv_freq(n_rot / 2);
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          factor[i] = 1.0 + 0.5 * i;  // as a rope_freqs.weight would give
          inv_freq[i] = std::pow(base, -2.0 * i / n_rot) / factor[i];
        }
        std::vector<float> cs(n_rot / 2), sn(n_rot / 2);
        ga::cpu::rope_angles(inv_freq.data(), n_rot / 2, pos, cs.data(), sn.data());
        std::vector<float> out = x;
        ga::cpu::rope(out.data(), n_heads, head_dim, n_rot, cs.data(), sn.data(),
                      halves ? ga::cpu::RopeLayout::Halves : ga::cpu::RopeLayout::AdjacentPairs);
        expect_close(out, rope_ref(x, n_heads, head_dim, n_rot, pos, base, factor, halves), 1e-6, 1e-6);
      }
    }
  }
}

TEST(CpuOps, RopeLayoutsDiffer) {
  // The two layouts must rotate different element pairs (a swapped mode is a real bug to catch).
  const std::vector<float> x = random_vec(8, 7);
  std::vector<double> inv_freq = {1.0, 0.1};
  std::vector<float> cs(2), sn(2);
  ga::cpu::rope_angles(inv_freq.data(), 2, 3.0, cs.data(), sn.data());
  std::vector<float> a = x, b = x;
  ga::cpu::rope(a.data(), 2, 4, 4, cs.data(), sn.data(), ga::cpu::RopeLayout::AdjacentPairs);
  ga::cpu::rope(b.data(), 2, 4, 4, cs.data(), sn.data(), ga::cpu::RopeLayout::Halves);
  EXPECT_GT(ga::test::max_abs_diff(a.data(), b.data(), a.size()), 1e-3);
}

TEST(CpuOps, StoreKvRoundsToHalf) {
  const std::vector<float> x = random_vec(37, 8, 100.0f);
  std::vector<uint16_t> h(37);
  ga::cpu::store_kv(DType::F16, x.data(), h.data(), 37);
  for (size_t i = 0; i < x.size(); ++i) {
    const float back = ga::fp16_to_f32(h[i]);
    EXPECT_LE(std::abs(back - x[i]), std::abs(x[i]) * (1.0 / 2048.0)) << i;  // half an f16 ulp
  }
  std::vector<float> f(37);
  ga::cpu::store_kv(DType::F32, x.data(), f.data(), 37);
  EXPECT_EQ(f, x);
  EXPECT_THROW(ga::cpu::store_kv(DType::Q8_0, x.data(), f.data(), 32), ga::Error);
}

// Naive causal GQA attention in float64 over caches of float values: query position i sees every
// position j <= i with i - j <= window_left (when >= 0), scores soft-capped (c tanh(s / c)) when
// softcap > 0, written from the definitions (a mask of -inf on the others, not a shorter loop).
std::vector<double> attention_ref(const ga::cpu::AttentionParams& p, const std::vector<float>& kc,
                                  const std::vector<float>& vc) {
  const int64_t kv_row = p.n_head_kv * p.head_dim;
  std::vector<double> out(p.n_tokens * p.n_head * p.head_dim, 0.0);
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t kvh = h / (p.n_head / p.n_head_kv);
      const int64_t i = p.pos0 + t, n_keys = i + 1;
      std::vector<double> s(n_keys);
      double mx = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        double d = 0;
        for (int64_t e = 0; e < p.head_dim; ++e) {
          d += static_cast<double>(p.q[t * p.q_stride + h * p.head_dim + e]) * kc[j * kv_row + kvh * p.head_dim + e];
        }
        s[j] = d * static_cast<double>(p.scale);
        if (p.softcap > 0) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
        if (p.window_left >= 0 && i - j > p.window_left) s[j] = -INFINITY;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& v : s) sum += v = std::exp(v - mx);
      for (int64_t j = 0; j < n_keys; ++j) {
        for (int64_t e = 0; e < p.head_dim; ++e) {
          out[(t * p.n_head + h) * p.head_dim + e] += s[j] / sum * vc[j * kv_row + kvh * p.head_dim + e];
        }
      }
    }
  }
  return out;
}

void check_attention(DType kv_type, int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t pos0,
                     int64_t n_tokens, int threads, int64_t window_left = -1, float softcap = 0.0f,
                     float scale_mul = 1.0f) {
  SCOPED_TRACE(testing::Message() << "kv " << ga::dtype_name(kv_type) << " heads " << n_head << "/" << n_head_kv
                                  << " head_dim " << head_dim << " pos0 " << pos0 << " n " << n_tokens << " threads "
                                  << threads << " window_left " << window_left << " softcap " << softcap);
  const int64_t n_pos = pos0 + n_tokens;
  const int64_t kv_n = n_pos * n_head_kv * head_dim;
  std::vector<float> q = random_vec(n_tokens * n_head * head_dim, 11, 1.5f);
  std::vector<float> kf = random_vec(kv_n, 12, 1.5f);
  std::vector<float> vf = random_vec(kv_n, 13);
  std::vector<uint16_t> kh(kv_n), vh(kv_n);
  if (kv_type == DType::F16) {  // the reference sees exactly the rounded cache
    ga::cpu::store_kv(DType::F16, kf.data(), kh.data(), kv_n);
    ga::cpu::store_kv(DType::F16, vf.data(), vh.data(), kv_n);
    for (int64_t i = 0; i < kv_n; ++i) {
      kf[i] = ga::fp16_to_f32(kh[i]);
      vf[i] = ga::fp16_to_f32(vh[i]);
    }
  }
  ga::ThreadPool pool(threads);
  std::vector<float> work(threads * ga::cpu::attention_work_floats(n_pos, head_dim));
  std::vector<float> out(n_tokens * n_head * head_dim, NAN);
  ga::cpu::AttentionParams p;
  p.n_tokens = n_tokens;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.pos0 = pos0;
  p.scale = static_cast<float>(scale_mul / std::sqrt(static_cast<double>(head_dim)));
  p.window_left = window_left;
  p.softcap = softcap;
  p.q = q.data();
  p.q_stride = n_head * head_dim;
  p.kv_type = kv_type;
  p.k_cache = kv_type == DType::F16 ? static_cast<const void*>(kh.data()) : kf.data();
  p.v_cache = kv_type == DType::F16 ? static_cast<const void*>(vh.data()) : vf.data();
  p.out = out.data();
  p.out_stride = n_head * head_dim;
  p.work = work.data();
  p.work_stride = ga::cpu::attention_work_floats(n_pos, head_dim);
  ga::cpu::attention(p, &pool);
  expect_close(out, attention_ref(p, kf, vf), 1e-5, 1e-5);
}

TEST(CpuOps, AttentionMatchesFloat64) {
  for (DType kv : {DType::F32, DType::F16}) {
    for (int threads : {1, 3}) {
      check_attention(kv, 6, 2, 19, 7, 5, threads);   // GQA 3:1, prefill after 7 cached positions
      check_attention(kv, 4, 4, 7, 0, 37, threads);   // MHA, whole prompt from position 0
      check_attention(kv, 8, 1, 37, 733, 1, threads);  // MQA decode step deep into the cache
    }
  }
}

// Sliding windows of 1, 2, 7 and 64 positions (HF sliding_window W = window_left W - 1) over caches
// shorter and longer than the window, and soft-caps small enough to bend every score (1, 2) or only the
// large ones (30, 50, with scores scaled up 12x so that they reach the cap).
TEST(CpuOps, AttentionWindowAndSoftcapMatchFloat64) {
  for (DType kv : {DType::F32, DType::F16}) {
    for (int threads : {1, 3}) {
      for (int64_t w : {1, 2, 7, 64}) {
        check_attention(kv, 6, 2, 19, 7, 5, threads, w - 1);
        check_attention(kv, 4, 4, 7, 0, 37, threads, w - 1);
        check_attention(kv, 8, 1, 37, 733, 1, threads, w - 1);
        check_attention(kv, 6, 3, 19, 100, 19, threads, w - 1, 2.0f);
      }
      check_attention(kv, 6, 2, 19, 7, 5, threads, -1, 1.0f);
      check_attention(kv, 8, 1, 37, 733, 1, threads, -1, 2.0f);
      check_attention(kv, 4, 4, 7, 0, 37, threads, -1, 30.0f, 12.0f);
      check_attention(kv, 6, 2, 19, 40, 3, threads, 6, 50.0f, 12.0f);
    }
  }
}

// A window that covers the whole cache and the options off give the plain attention's bits (the
// engine's default path stays bit-identical); a window or cap that acts changes the result.
TEST(CpuOps, AttentionOptionsOffAreBitIdentical) {
  const int64_t n_head = 6, n_head_kv = 2, head_dim = 19, pos0 = 30, n_tokens = 4, n_pos = pos0 + n_tokens;
  const std::vector<float> q = random_vec(n_tokens * n_head * head_dim, 51, 1.5f);
  const std::vector<float> kc = random_vec(n_pos * n_head_kv * head_dim, 52, 1.5f);
  const std::vector<float> vc = random_vec(n_pos * n_head_kv * head_dim, 53);
  auto run = [&](int64_t window_left, float softcap) {
    std::vector<float> work(ga::cpu::attention_work_floats(n_pos, head_dim));
    std::vector<float> out(n_tokens * n_head * head_dim, NAN);
    ga::cpu::AttentionParams p;
    p.n_tokens = n_tokens;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.head_dim = head_dim;
    p.pos0 = pos0;
    p.scale = 0.3f;
    p.q = q.data();
    p.q_stride = n_head * head_dim;
    p.k_cache = kc.data();
    p.v_cache = vc.data();
    p.out = out.data();
    p.out_stride = n_head * head_dim;
    p.work = work.data();
    p.work_stride = static_cast<int64_t>(work.size());
    p.window_left = window_left;
    p.softcap = softcap;
    ga::cpu::attention(p, nullptr);
    return out;
  };
  const std::vector<float> plain = run(-1, 0.0f);
  EXPECT_EQ(run(n_pos, 0.0f), plain);
  EXPECT_EQ(run(n_pos - 1, 0.0f), plain);
  EXPECT_NE(run(n_pos - 2 - n_tokens, 0.0f), plain);
  EXPECT_NE(run(-1, 1.0f), plain);
}

// Paged attention: two sequences of different lengths whose positions are scattered over a shuffled
// pool of 5-position blocks (partial last blocks), queries of both sequences interleaved in one
// call. The reference for each query is the float64 attention over that sequence's positions laid
// out contiguously.
void check_paged_attention(DType kv_type, int threads, int64_t window_left = -1, float softcap = 0.0f) {
  SCOPED_TRACE(testing::Message() << "kv " << ga::dtype_name(kv_type) << " threads " << threads << " window_left "
                                  << window_left << " softcap " << softcap);
  const int64_t n_head = 6, n_head_kv = 2, head_dim = 19, block_size = 5, n_blocks = 11;
  const int64_t kv_row = n_head_kv * head_dim;
  const std::vector<int64_t> seq_len = {23, 7};
  const std::vector<std::vector<int32_t>> tables = {{9, 2, 7, 0, 4}, {5, 10}};  // ceil(23/5), ceil(7/5)
  // Queries: positions 18..22 of sequence 0 and position 6 of sequence 1, interleaved.
  const std::vector<int> q_seq = {0, 1, 0, 0, 0, 0};
  const std::vector<int64_t> q_pos = {18, 6, 19, 20, 21, 22};
  const int64_t n_tokens = static_cast<int64_t>(q_seq.size());

  // Contiguous per-sequence caches (rounded to F16 when the pool is F16), scattered into the pool.
  std::vector<float> pool_f(n_blocks * block_size * kv_row, NAN), pool_vf(pool_f.size(), NAN);
  std::vector<std::vector<float>> kc(2), vc(2);
  for (int s = 0; s < 2; ++s) {
    kc[s] = random_vec(seq_len[s] * kv_row, 20 + s, 1.5f);
    vc[s] = random_vec(seq_len[s] * kv_row, 30 + s);
    for (auto* c : {&kc[s], &vc[s]}) {
      if (kv_type == DType::F16) {
        for (float& x : *c) x = ga::fp16_to_f32(ga::f32_to_fp16(x));
      }
    }
    for (int64_t j = 0; j < seq_len[s]; ++j) {
      const int64_t row = tables[s][j / block_size] * block_size + j % block_size;
      std::copy_n(kc[s].begin() + j * kv_row, kv_row, pool_f.begin() + row * kv_row);
      std::copy_n(vc[s].begin() + j * kv_row, kv_row, pool_vf.begin() + row * kv_row);
    }
  }
  std::vector<uint16_t> pool_h(pool_f.size()), pool_vh(pool_f.size());
  ga::cpu::store_kv(DType::F16, pool_f.data(), pool_h.data(), static_cast<int64_t>(pool_f.size()));
  ga::cpu::store_kv(DType::F16, pool_vf.data(), pool_vh.data(), static_cast<int64_t>(pool_f.size()));

  const std::vector<float> q = random_vec(n_tokens * n_head * head_dim, 41, 1.5f);
  std::vector<const int32_t*> token_tables(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) token_tables[t] = tables[q_seq[t]].data();
  ga::ThreadPool pool(threads);
  const int64_t stride = ga::cpu::attention_work_floats(23, head_dim);
  std::vector<float> work(threads * stride);
  std::vector<float> out(n_tokens * n_head * head_dim, NAN);
  ga::cpu::PagedAttentionParams p;
  p.n_tokens = n_tokens;
  p.n_head = n_head;
  p.n_head_kv = n_head_kv;
  p.head_dim = head_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  p.q = q.data();
  p.q_stride = n_head * head_dim;
  p.positions = q_pos.data();
  p.block_tables = token_tables.data();
  p.block_size = block_size;
  p.kv_type = kv_type;
  p.k_blocks = kv_type == DType::F16 ? static_cast<const void*>(pool_h.data()) : pool_f.data();
  p.v_blocks = kv_type == DType::F16 ? static_cast<const void*>(pool_vh.data()) : pool_vf.data();
  p.out = out.data();
  p.out_stride = n_head * head_dim;
  p.work = work.data();
  p.work_stride = stride;
  p.window_left = window_left;
  p.softcap = softcap;
  ga::cpu::paged_attention(p, &pool);

  std::vector<double> ref;
  for (int64_t t = 0; t < n_tokens; ++t) {
    ga::cpu::AttentionParams one;
    one.n_tokens = 1;
    one.n_head = n_head;
    one.n_head_kv = n_head_kv;
    one.head_dim = head_dim;
    one.pos0 = q_pos[t];
    one.q = q.data() + t * n_head * head_dim;
    one.q_stride = n_head * head_dim;
    one.scale = p.scale;
    one.window_left = window_left;
    one.softcap = softcap;
    const std::vector<double> r = attention_ref(one, kc[q_seq[t]], vc[q_seq[t]]);
    ref.insert(ref.end(), r.begin(), r.end());
  }
  expect_close(out, ref, 1e-5, 1e-5);

  p.work_stride = ga::cpu::attention_work_floats(22, head_dim);  // one position short
  EXPECT_THROW(ga::cpu::paged_attention(p, &pool), ga::Error);
}

TEST(CpuOps, PagedAttentionMatchesFloat64) {
  for (DType kv : {DType::F32, DType::F16}) {
    for (int threads : {1, 3}) check_paged_attention(kv, threads);
  }
}

// Windows that start inside a block, on a block boundary and before position 0 (the 5-position blocks
// of check_paged_attention), with and without a soft-cap.
TEST(CpuOps, PagedAttentionWindowAndSoftcapMatchFloat64) {
  for (DType kv : {DType::F32, DType::F16}) {
    for (int threads : {1, 3}) {
      for (int64_t window_left : {0, 1, 4, 5, 6, 12, 30}) check_paged_attention(kv, threads, window_left);
      check_paged_attention(kv, threads, -1, 1.0f);
      check_paged_attention(kv, threads, 6, 2.0f);
    }
  }
}

TEST(CpuOps, AttentionRejectsBadHeadsAndSmallWorkspace) {
  ga::cpu::AttentionParams p;
  p.n_tokens = 1;
  p.n_head = 6;
  p.n_head_kv = 4;  // 6 % 4 != 0
  p.head_dim = 8;
  p.work_stride = 100;
  EXPECT_THROW(ga::cpu::attention(p, nullptr), ga::Error);
  p.n_head_kv = 3;
  p.work_stride = 8;  // needs 1 + 8
  EXPECT_THROW(ga::cpu::attention(p, nullptr), ga::Error);
  p.work_stride = 100;
  p.window_left = -2;
  EXPECT_THROW(ga::cpu::attention(p, nullptr), ga::Error);
  p.window_left = -1;
  p.softcap = -1.0f;
  EXPECT_THROW(ga::cpu::attention(p, nullptr), ga::Error);
  p.softcap = NAN;
  EXPECT_THROW(ga::cpu::attention(p, nullptr), ga::Error);
}

TEST(CpuOps, EmbeddingRowDecodesTheRequestedRow) {
  const int64_t n = 19, rows = 7;
  const std::vector<float> table = random_vec(n * rows, 14);
  std::vector<uint16_t> half(n * rows);
  for (size_t i = 0; i < half.size(); ++i) half[i] = ga::f32_to_fp16(table[i]);
  std::vector<float> out(n, NAN);
  ga::cpu::embedding_row(DType::F32, reinterpret_cast<const uint8_t*>(table.data()), n, 5, out.data());
  EXPECT_EQ(out, std::vector<float>(table.begin() + 5 * n, table.begin() + 6 * n));
  ga::cpu::embedding_row(DType::F16, reinterpret_cast<const uint8_t*>(half.data()), n, 6, out.data());
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], ga::fp16_to_f32(half[6 * n + i])) << i;
}

}  // namespace
