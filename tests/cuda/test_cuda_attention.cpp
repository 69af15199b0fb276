// Parity of the CUDA causal GQA attention (backends/cuda/kernels/attention.h) with a float64
// reference computed here from the same f16 K/V, and with the project's CPU reference
// (ga::cpu::attention, F16 cache) on its contiguous layout; and of the simple attention
// (kernels/attention_simple.h) the engine takes for other head sizes.
//
// Sliding windows (W = 1, 2, 7, 64, 255, 1000 keys: window_left W - 1) and soft-caps (1, 2, 30, 50) run
// the same grid of decode and prefill shapes; the keys below every query's window hold f16 NaN, so a
// kernel that reads a key tile outside the window (instead of skipping it) fails. Head dim 96 (Phi-3)
// joins 64 and 128 in the main grid.
//
// The grid covers both kernels (decode n_tokens 1, 2, 7 with split-KV; prefill 19, 37, 133), cache
// lengths 1, 7, 129, 1000, 4097 with pos0 0 and > 0 (a prompt continuing a cache), GQA ratios 1, 2,
// 4, 8 and head_dim 64 / 128 (a few head_dim 256 shapes apart). Traps: outputs are poisoned with NaN (an element never written fails),
// the padding of padded q/out strides must stay poisoned, and the cache past the valid length and
// the padding between KV rows hold f16 NaN, so a kernel that reads one key too many fails. pos0 from
// device memory is tested through a captured CUDA graph replayed for several positions, the way the
// decode loop uses it. Tolerance: relative L2 1e-3 per case (q and the probabilities are rounded to
// f16 on the GPU) plus an element-wise bound of 2e-2 of the row's RMS that catches a single bad row
// (attention_check.h, shared with test_cuda_paged_attention.cpp).
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "attention_check.h"
#include "backends/cpu/ops.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_simple.h"
#include "backends/cuda/stream.h"
#include "common/test_data.h"
#include "cuda_harness.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;

struct Shape {
  int head_dim, n_head, n_head_kv, n_tokens;
  int64_t pos0, capacity;
  bool padded;  // q/out/kv strides with padding
  int window_left = -1;   // AttentionParams::window_left
  float softcap = 0.0f;   // AttentionParams::softcap
  float scale_mul = 1.0f;  // times 1 / sqrt(head_dim): large scores that reach a large cap
};

std::string name_of(const Shape& s) {
  return str("hd ", s.head_dim, " heads ", s.n_head, "/", s.n_head_kv, " tokens ", s.n_tokens, " pos0 ", s.pos0,
             " cap ", s.capacity, s.padded ? " padded" : "",
             s.window_left >= 0 ? str(" window_left ", s.window_left) : std::string(),
             s.softcap > 0.0f ? str(" softcap ", s.softcap, " scale x", s.scale_mul) : std::string());
}

double scale_of(const Shape& s) { return s.scale_mul / std::sqrt(static_cast<double>(s.head_dim)); }

// Host copies of one problem: q as floats, K/V as f16 bits (NaN past the valid length).
struct Problem {
  Shape s;
  int64_t q_stride, out_stride, kv_stride;
  std::vector<float> q;
  std::vector<uint16_t> k, v;
};

Problem make_problem(const Shape& s, std::mt19937& rng) {
  Problem pr;
  pr.s = s;
  const int64_t q_row = int64_t{s.n_head} * s.head_dim;
  pr.q_stride = q_row + (s.padded ? 6 : 0);
  pr.out_stride = q_row + (s.padded ? 10 : 0);
  pr.kv_stride = int64_t{s.n_head_kv} * s.head_dim + (s.padded ? 8 : 0);
  pr.q = random_query_rows(rng, s.n_tokens, q_row, pr.q_stride);
  std::normal_distribution<float> kv_dist(0.0f, 1.0f);
  const int64_t kv_len = s.pos0 + s.n_tokens;
  pr.k.assign(static_cast<size_t>(pr.kv_stride * s.capacity), kHalfNaN);
  pr.v.assign(pr.k.size(), kHalfNaN);
  // Positions below the first query's window stay NaN: no kernel may read them (their tiles are skipped).
  for (int64_t j = window_first(s.pos0, s.window_left); j < kv_len; ++j) {
    random_kv_row(kv_dist, rng, pr.k.data() + j * pr.kv_stride, pr.v.data() + j * pr.kv_stride,
                  int64_t{s.n_head_kv} * s.head_dim);
  }
  return pr;
}

// float64 causal GQA attention: [n_tokens][n_head][head_dim], contiguous. Tokens are split over threads.
std::vector<double> reference(const Problem& pr, int64_t pos0) {
  const Shape& s = pr.s;
  const int hd = s.head_dim, group = s.n_head / s.n_head_kv;
  const double scale = scale_of(s);
  std::vector<double> out(static_cast<size_t>(s.n_tokens) * s.n_head * hd);
  std::vector<double> k(pr.k.size()), v(pr.v.size());  // decoded once (exact: f16 fits a double)
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = half_value(pr.k[i]);
    v[i] = half_value(pr.v[i]);
  }
  std::vector<int64_t> rows(static_cast<size_t>(pos0 + s.n_tokens));  // position j's row: j * kv_stride
  for (size_t j = 0; j < rows.size(); ++j) rows[j] = static_cast<int64_t>(j) * pr.kv_stride;
  for_tokens_in_parallel([&](int t_begin, int t_step) {
    std::vector<double> p(static_cast<size_t>(pos0 + s.n_tokens));
    for (int t = t_begin; t < s.n_tokens; t += t_step) {
      for (int h = 0; h < s.n_head; ++h) {
        attend_one_head(pr.q.data() + t * pr.q_stride + int64_t{h} * hd, hd, scale, pos0 + t, rows.data(), k.data(),
                        v.data(), int64_t{h / group} * hd, p.data(),
                        out.data() + (static_cast<size_t>(t) * s.n_head + h) * hd,
                        window_first(pos0 + t, s.window_left), s.softcap);
      }
    }
  });
  return out;
}

// The problem's buffers on the device, and the params that point at them.
struct DeviceProblem {
  DeviceArray<float> q, out;
  DeviceArray<uint16_t> k, v;
  DeviceArray<uint8_t> workspace;
  DeviceArray<int32_t> pos0;
  ::ga::cuda::AttentionParams p;

  DeviceProblem(CachingAllocator& alloc, const Problem& pr, bool device_pos0)
      : q(alloc, pr.q.size()),
        out(alloc, static_cast<size_t>(pr.out_stride * pr.s.n_tokens)),
        k(alloc, pr.k.size()),
        v(alloc, pr.v.size()),
        workspace(alloc, workspace_for(pr, device_pos0) + 1),
        pos0(alloc, 1) {
    q.upload(pr.q);
    k.upload(pr.k);
    v.upload(pr.v);
    p = params_for(pr, device_pos0);
    p.q = q.get();
    p.k = reinterpret_cast<const __half*>(k.get());
    p.v = reinterpret_cast<const __half*>(v.get());
    p.out = out.get();
    p.pos0_device = device_pos0 ? pos0.get() : nullptr;
    p.workspace = workspace.get();
    p.workspace_bytes = workspace.size();
    // the contract: zero-filled before the first call (the split merge's counters live in it)
    EXPECT_EQ(cudaMemset(workspace.get(), 0, workspace.size()), cudaSuccess);
  }

  static ::ga::cuda::AttentionParams params_for(const Problem& pr, bool device_pos0) {
    ::ga::cuda::AttentionParams p;
    p.q_token_stride = pr.q_stride;
    p.kv_pos_stride = pr.kv_stride;
    p.out_token_stride = pr.out_stride;
    p.n_tokens = pr.s.n_tokens;
    p.n_head = pr.s.n_head;
    p.n_head_kv = pr.s.n_head_kv;
    p.head_dim = pr.s.head_dim;
    p.pos0 = device_pos0 ? 0 : pr.s.pos0;
    p.max_kv_positions = pr.s.capacity;
    p.scale = static_cast<float>(scale_of(pr.s));
    p.window_left = pr.s.window_left;
    p.softcap = pr.s.softcap;
    return p;
  }
  static size_t workspace_for(const Problem& pr, bool device_pos0) {
    ::ga::cuda::AttentionParams p = params_for(pr, device_pos0);
    if (device_pos0) p.pos0_device = reinterpret_cast<const int32_t*>(16);  // only its presence matters here
    return ::ga::cuda::attention_workspace_bytes(p);
  }
};

// Checks a downloaded output against the reference for tokens at pos0.
void check_output(Parity& parity, const std::string& name, const Problem& pr, const std::vector<float>& got,
                  const std::vector<double>& ref) {
  check_attention_output(parity, name, pr.s.n_tokens, pr.s.n_head, pr.s.head_dim, pr.out_stride, got, ref);
}

// One case: random inputs for shape s, a direct launch on a poisoned output, compared with the
// float64 reference. A rejected shape is a failure: every shape the tests name is meant to run.
void run_and_check(Parity& parity, CachingAllocator& alloc, const Shape& s, std::mt19937& rng) {
  const std::string name = name_of(s);
  const Problem pr = make_problem(s, rng);
  DeviceProblem dev(alloc, pr, false);
  if (const char* why = ::ga::cuda::attention_unsupported_reason(dev.p)) {
    parity.fail(name + ": rejected: " + why);
    return;
  }
  dev.out.poison();
  GA_CUDA_CHECK(::ga::cuda::attention(dev.p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  check_output(parity, name, pr, dev.out.download(), reference(pr, s.pos0));
}

TEST(CudaAttention, DecodeAndPrefillMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("attention");
  std::mt19937 rng(2026);
  struct Heads {
    int n_head, n_head_kv;
  };
  const Heads heads[] = {{3, 3}, {4, 2}, {8, 2}, {8, 1}};  // GQA ratios 1, 2, 4, 8
  int case_index = 0;
  for (int hd : {64, 96, 128}) {
    for (const Heads& h : heads) {
      for (int n_tokens : {1, 2, 7, 19, 37, 133}) {
        std::vector<int64_t> kv_lens = {n_tokens};  // pos0 0
        for (int64_t len : {1, 7, 129, 1000, 4097}) {
          if (len > n_tokens) kv_lens.push_back(len);
        }
        for (int64_t kv_len : kv_lens) {
          ++case_index;
          // capacities past the valid length (NaN-filled) exercise the capacity-sized split count
          const Shape s{hd, h.n_head, h.n_head_kv, n_tokens, kv_len - n_tokens, kv_len + (case_index % 3) * 700,
                        case_index % 2 == 1};
          run_and_check(parity, alloc, s, rng);
        }
      }
    }
  }
  parity.finish();
}

// head_dim 256 (Gemma-style heads), decode and prefill, on a few shapes of the grid above.
TEST(CudaAttention, HeadDim256MatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("attention hd256");
  std::mt19937 rng(256);
  for (const Shape& s : {Shape{256, 8, 2, 1, 999, 1500, false}, Shape{256, 8, 2, 7, 4090, 4097, true},
                         Shape{256, 4, 4, 37, 92, 129, true}, Shape{256, 8, 1, 133, 0, 133, false}}) {
    run_and_check(parity, alloc, s, rng);
  }
  parity.finish();
}

// pos0 read from device memory inside a captured graph, replayed for several positions.
TEST(CudaAttention, DevicePos0GraphReplayMatchesReference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("attention pos0_device");
  std::mt19937 rng(11);
  ::ga::cuda::Stream stream(0);
  for (int n_tokens : {1, 4, 19}) {
    for (int hd : {64, 128}) {
      const int64_t capacity = 3001;
      const Shape s{hd, 8, 2, n_tokens, capacity - n_tokens, capacity, n_tokens == 4};
      Problem pr = make_problem(s, rng);  // every position valid: each replay sees a different prefix
      DeviceProblem dev(alloc, pr, true);
      ASSERT_EQ(::ga::cuda::attention_unsupported_reason(dev.p), nullptr) << name_of(s);
      cudaGraphExec_t exec = capture_attention_graph(dev.p, stream.get());
      for (int64_t pos0 : {int64_t{0}, int64_t{5}, int64_t{1200}, capacity - n_tokens}) {
        const std::string name = name_of(s) + " device pos0 " + std::to_string(pos0);
        dev.pos0.upload({static_cast<int32_t>(pos0)});
        dev.out.poison();
        GA_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
        GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        check_output(parity, name, pr, dev.out.download(), reference(pr, pos0));
      }
      GA_CUDA_CHECK(cudaGraphExecDestroy(exec));
    }
  }
  parity.finish();
}

// The same inputs through ga::cpu::attention (F16 cache, contiguous layout): the GPU agrees with the
// project's reference, not only with this file's.
TEST(CudaAttention, AgreesWithCpuReferenceOp) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("attention vs cpu::attention");
  std::mt19937 rng(5);
  for (const Shape& s : {Shape{128, 8, 2, 1, 300, 301, false}, Shape{128, 8, 2, 5, 300, 305, false},
                         Shape{64, 6, 3, 40, 100, 140, false}}) {
    const Problem pr = make_problem(s, rng);
    DeviceProblem dev(alloc, pr, false);
    dev.out.poison();
    GA_CUDA_CHECK(::ga::cuda::attention(dev.p, nullptr));
    GA_CUDA_CHECK(cudaDeviceSynchronize());
    ::ga::cpu::AttentionParams c;
    c.n_tokens = s.n_tokens;
    c.n_head = s.n_head;
    c.n_head_kv = s.n_head_kv;
    c.head_dim = s.head_dim;
    c.pos0 = s.pos0;
    c.scale = dev.p.scale;
    c.q = pr.q.data();
    c.q_stride = pr.q_stride;
    c.kv_type = DType::F16;
    c.k_cache = pr.k.data();
    c.v_cache = pr.v.data();
    std::vector<float> cpu_out(static_cast<size_t>(s.n_tokens) * s.n_head * s.head_dim);
    c.out = cpu_out.data();
    c.out_stride = int64_t{s.n_head} * s.head_dim;
    std::vector<float> work(static_cast<size_t>(::ga::cpu::attention_work_floats(s.capacity, s.head_dim)));
    c.work = work.data();
    c.work_stride = static_cast<int64_t>(work.size());
    ::ga::cpu::attention(c, nullptr);
    check_output(parity, name_of(s) + " vs cpu", pr, dev.out.download(),
                 std::vector<double>(cpu_out.begin(), cpu_out.end()));
  }
  parity.finish();
}

// Sliding windows over the decode (1, 2, 7 tokens: split-KV) and prefill (19, 133 tokens) kernels: windows of 1, 2,
// 7, 64, 255 and 1000 keys over caches of 1, 7, 129, 1000 and 4097 positions (shorter and longer than the window),
// head dims 64 / 96 / 128 / 256, GQA 1-8; the keys below the first query's window are NaN (make_problem).
TEST(CudaAttention, SlidingWindowsMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("attention windows");
  std::mt19937 rng(777);
  const int heads[][2] = {{3, 3}, {4, 2}, {8, 2}, {8, 1}};
  int case_index = 0;
  for (int w : {1, 2, 7, 64, 255, 1000}) {
    for (int n_tokens : {1, 2, 7, 19, 133}) {
      for (int64_t len : {1, 7, 129, 1000, 4097}) {
        if (len < n_tokens) continue;
        const int ci = case_index++;
        const int hd = ci % 7 == 6 ? 256 : ci % 3 == 0 ? 64 : ci % 3 == 1 ? 96 : 128;
        Shape s{hd, heads[ci % 4][0], heads[ci % 4][1], n_tokens, len - n_tokens, len + (ci % 3) * 300, ci % 2 == 1};
        s.window_left = w - 1;
        run_and_check(parity, alloc, s, rng);
      }
    }
  }
  parity.finish();
}

// Soft-caps that bend every score (1, 2) and caps only large scores reach (30, 50, with the scale 6x), alone and with
// a window, decode and prefill; the cap must act (the uncapped reference is far off).
TEST(CudaAttention, SoftcapMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("attention softcap");
  std::mt19937 rng(3050);
  const float caps[][2] = {{1.0f, 1.0f}, {2.0f, 1.0f}, {30.0f, 6.0f}, {50.0f, 6.0f}};
  int case_index = 0;
  for (const auto& cap : caps) {
    for (int n_tokens : {1, 5, 37, 133}) {
      const int ci = case_index++;
      Shape s{ci % 3 == 0 ? 64 : ci % 3 == 1 ? 96 : 128, 8, ci % 2 ? 2 : 8, n_tokens, ci % 2 ? 1000 : 64, 1200, ci % 2 == 0};
      s.softcap = cap[0];
      s.scale_mul = cap[1];
      if (ci % 3 == 2) s.window_left = 63;
      const Problem pr = make_problem(s, rng);
      Shape plain = s;
      plain.softcap = 0.0f;
      Problem pr_plain = pr;
      pr_plain.s = plain;
      const std::vector<double> capped = reference(pr, s.pos0), uncapped = reference(pr_plain, s.pos0);
      double diff = 0.0, norm = 0.0;
      for (size_t i = 0; i < capped.size(); ++i) {
        diff += (capped[i] - uncapped[i]) * (capped[i] - uncapped[i]);
        norm += uncapped[i] * uncapped[i];
      }
      if (!(std::sqrt(diff / norm) > 1e-2)) parity.fail(name_of(s) + ": the cap does not act");
      DeviceProblem dev(alloc, pr, false);
      if (const char* why = ::ga::cuda::attention_unsupported_reason(dev.p)) {
        parity.fail(name_of(s) + ": rejected: " + why);
        continue;
      }
      dev.out.poison();
      GA_CUDA_CHECK(::ga::cuda::attention(dev.p, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      check_output(parity, name_of(s), pr, dev.out.download(), capped);
    }
  }
  parity.finish();
}

// The decode's split count and workspace follow the window's range, not the cache's: a 4k window over a 32k cache
// splits like a 4k cache (the kernels then read ~4k keys per column), here for a device-side pos0 (graph replay: the
// bound is the capacity).
TEST(CudaAttention, DecodeSplitsFollowTheWindow) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  std::mt19937 rng(32768);
  const Problem pr = make_problem(Shape{128, 32, 8, 1, 100, 32768, false}, rng);
  DeviceProblem dev(alloc, pr, true);
  ::ga::cuda::AttentionParams full = dev.p;
  ::ga::cuda::AttentionParams window = dev.p;
  window.window_left = 4095;
  ::ga::cuda::AttentionParams short_cache = dev.p;
  short_cache.max_kv_positions = 4096;
  ASSERT_EQ(::ga::cuda::attention_unsupported_reason(window), nullptr);
  EXPECT_EQ(::ga::cuda::attention_decode_splits(window), ::ga::cuda::attention_decode_splits(short_cache));
  EXPECT_EQ(::ga::cuda::attention_workspace_bytes(window), ::ga::cuda::attention_workspace_bytes(short_cache));
  EXPECT_GT(::ga::cuda::attention_decode_splits(full), ::ga::cuda::attention_decode_splits(window));
  std::printf("decode splits: 32k cache %d, 4k window over it %d, 4k cache %d\n",
              ::ga::cuda::attention_decode_splits(full), ::ga::cuda::attention_decode_splits(window),
              ::ga::cuda::attention_decode_splits(short_cache));
}

// The simple attention (attention_simple.h: any head_dim <= 256) against the same float64 reference: tiny and odd
// head dims, decode and prefill, with and without a window and a soft-cap; pos0 from device memory.
TEST(CudaAttention, SimpleAttentionMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("simple attention");
  std::mt19937 rng(88);
  int case_index = 0;
  for (int hd : {8, 32, 96, 200}) {
    for (int n_tokens : {1, 7, 40}) {
      const int ci = case_index++;
      Shape s{hd, 4, ci % 2 ? 2 : 4, n_tokens, ci % 3 == 0 ? 0 : 300, 400, false};
      if (ci % 3 != 1) s.window_left = ci % 2 ? 6 : 63;
      if (ci % 4 == 1) s.softcap = 2.0f;
      const Problem pr = make_problem(s, rng);
      DeviceArray<float> q(alloc, pr.q.size()), out(alloc, static_cast<size_t>(pr.out_stride * n_tokens));
      DeviceArray<uint16_t> k(alloc, pr.k.size()), v(alloc, pr.v.size());
      DeviceArray<int32_t> pos0(alloc, 1);
      q.upload(pr.q);
      k.upload(pr.k);
      v.upload(pr.v);
      pos0.upload({static_cast<int32_t>(s.pos0)});
      ::ga::cuda::SimpleAttentionParams sp;
      sp.q = q.get();
      sp.q_stride = pr.q_stride;
      sp.k = reinterpret_cast<const __half*>(k.get());
      sp.v = reinterpret_cast<const __half*>(v.get());
      sp.out = out.get();
      sp.out_stride = pr.out_stride;
      sp.n_tokens = n_tokens;
      sp.n_head = s.n_head;
      sp.n_head_kv = s.n_head_kv;
      sp.head_dim = hd;
      sp.pos0 = pos0.get();
      sp.max_positions = s.capacity;
      sp.scale = static_cast<float>(scale_of(s));
      sp.window_left = s.window_left;
      sp.softcap = s.softcap;
      if (const char* why = ::ga::cuda::simple_attention_unsupported_reason(sp)) {
        parity.fail(name_of(s) + ": rejected: " + why);
        continue;
      }
      out.poison();
      GA_CUDA_CHECK(::ga::cuda::simple_attention(sp, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      check_output(parity, "simple " + name_of(s), pr, out.download(), reference(pr, s.pos0));
    }
  }
  parity.finish();
}

TEST(CudaAttention, UnsupportedParamsAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  std::mt19937 rng(3);
  const Problem pr = make_problem(Shape{128, 8, 2, 1, 40, 32768, false}, rng);
  DeviceProblem dev(alloc, pr, false);
  ASSERT_EQ(::ga::cuda::attention_unsupported_reason(dev.p), nullptr);
  ASSERT_GT(::ga::cuda::attention_workspace_bytes(dev.p), 0u) << "a 32k cache at batch 1 splits the KV range";
  auto expect_rejected = [&](const ::ga::cuda::AttentionParams& p, const std::string& word) {
    expect_attention_rejected(dev.out, p, word);
  };
  ::ga::cuda::AttentionParams p = dev.p;
  p.head_dim = 80;
  expect_rejected(p, "head_dim");
  p = dev.p;
  p.window_left = -2;
  expect_rejected(p, "window_left");
  p = dev.p;
  p.softcap = -1.0f;
  expect_rejected(p, "softcap");
  p = dev.p;
  p.softcap = NAN;
  expect_rejected(p, "softcap");
  p = dev.p;
  p.n_head = 6;
  p.n_head_kv = 4;
  expect_rejected(p, "multiple of n_head_kv");
  p = dev.p;
  p.workspace_bytes = 16;
  expect_rejected(p, "workspace");
  p = dev.p;
  p.max_kv_positions = p.pos0;
  expect_rejected(p, "max_kv_positions");
  p = dev.p;
  p.kv_pos_stride += 4;
  expect_rejected(p, "kv_pos_stride");
}

}  // namespace
}  // namespace ga::test::cuda
