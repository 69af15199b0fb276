// Parity of the Hopper FlashAttention forward (backends/cuda/kernels/flash/flash_attention.h) with a
// float64 reference computed here from the same 16-bit inputs, and of the mma.sync forward
// (flash_fwd_sm80.cuh, variant kFlashSm80Variant: what non-Hopper GPUs run) on every case.
//
// Grid: dtype (bf16, fp16) x head dim (64, 128, 256) x causal x GQA ratio (1, 2, 4 = MQA) x awkward
// lengths (1, 7, 129, 1000, and 4097 on a few cases), including seqlen_q != seqlen_k both ways (causal is
// bottom-right aligned; seqlen_q > seqlen_k leaves rows that see no key: zeros and lse = -inf). Every
// kernel variant (consumer schedule serial / overlap / ping-pong, persistent or not, K/V ring depth; the
// mma.sync forward) runs on the same inputs (GA_FLASH_TEST_VARIANT=N runs only variant N: the sanitizer
// runs); PersistentCtasRunManyTiles has more tiles than SMs. Outputs are NaN-poisoned before each run; O is
// written with a padded row stride on every other case and the padding must still hold the poison. Bars: relative L2 error of O <= 1e-2, every element within
// 5% of the output RMS, no NaN; LSE within 2e-3 + 1e-3 |lse|.
// FP8 (e4m3 q/k/v with per-tensor scales, bf16/fp16 o; head dims 128 and 256): the Fp8* tests quantize random
// real tensors here (nearest e4m3 by table search, independent of the kernel's conversions) and compare with
// the float64 reference on the dequantized inputs; bar relative L2 <= 5e-2 (issue 4), every element within
// 25% of the output RMS plus 2^-4 of its own magnitude (P's e4m3 rounding); the V^T workspace is poisoned with 0xFF (e4m3 NaN) so a column the pre-pass misses
// turns the output NaN.
// Without a GPU the tests SKIP; on a non-Hopper GPU the Hopper variants SKIP with the kernel's reason (the
// mma.sync one runs on compute capability >= 8.0, its sm_75 build, variant kFlashSm75Variant, on >= 7.5 with fp16;
// the Sm75* tests below). The shape, the random inputs, the softmax of the reference and the output unpacking are flash_check.h (shared with
// test_cuda_flash_backward.cpp).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <initializer_list>
#include <string>
#include <vector>

#include "backends/cuda/kernels/flash/flash_attention.h"
#include "cuda_harness.h"
#include "flash_check.h"

namespace {

using ::ga::cuda::CachingAllocator;
using ::ga::cuda::FlashDtype;
using ::ga::cuda::FlashParams;
using ::ga::test::cuda::DeviceArray;
using ::ga::test::cuda::Parity;

using Shape = ::ga::test::cuda::FlashShape;
using ::ga::test::cuda::from_bits;
using ::ga::test::cuda::first_visible_key;
using ::ga::test::cuda::last_visible_key;
using ::ga::test::cuda::name_of;
using ::ga::test::cuda::random_tensor;
using ::ga::test::cuda::softmax_row;
using ::ga::test::cuda::unpack_rows;

// float64 attention for contiguous [b][s][h][d] q, k, v; out [b][sq][h][d], lse [b][h][sq].
void reference(const Shape& s, float scale, const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v, std::vector<double>* out, std::vector<double>* lse) {
  const int d = s.hd, group = s.n_head / s.n_head_kv;
  out->assign(size_t(s.batch) * s.seqlen_q * s.n_head * d, 0.0);
  lse->assign(size_t(s.batch) * s.n_head * s.seqlen_q, -INFINITY);
  std::vector<double> p(s.seqlen_k);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.n_head; ++h) {
      const int hk = h / group;
      for (int i = 0; i < s.seqlen_q; ++i) {
        const int first = first_visible_key(s, i), last = last_visible_key(s, i);
        if (last < first) continue;  // sees no key: zeros, lse -inf
        const float* qi = &q[((size_t(b) * s.seqlen_q + i) * s.n_head + h) * d];
        const double row_lse = softmax_row(s, scale, qi, k, b, hk, last, p, first, s.softcap);
        double* o = &(*out)[((size_t(b) * s.seqlen_q + i) * s.n_head + h) * d];
        for (int j = first; j <= last; ++j) {
          const float* vj = &v[((size_t(b) * s.seqlen_k + j) * s.n_head_kv + hk) * d];
          for (int c = 0; c < d; ++c) o[c] += p[j] * vj[c];
        }
        (*lse)[(size_t(b) * s.n_head + h) * s.seqlen_q + i] = row_lse;
      }
    }
}

// Whether run_and_check runs `variant`: all compiled ones, or only those GA_FLASH_TEST_VARIANT lists when set
// ("24" or "22,24,25": one run shares the float64 references between the variants).
bool variant_selected(int variant) {
  const char* only = std::getenv("GA_FLASH_TEST_VARIANT");
  if (only == nullptr || *only == '\0') return true;
  for (const char* p = only; *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) return false;  // not a number: selects nothing
    if (v == variant) return true;
    p = *end == ',' ? end + 1 : end;
  }
  return false;
}

FlashParams make_params(const Shape& s, const void* q, const void* k, const void* v, void* o, float* lse,
                        int64_t o_seq_stride) {
  FlashParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = o;
  p.lse = lse;
  p.q_head_stride = s.hd;
  p.q_seq_stride = int64_t{s.n_head} * s.hd;
  p.q_batch_stride = p.q_seq_stride * s.seqlen_q;
  p.k_head_stride = p.v_head_stride = s.hd;
  p.k_seq_stride = p.v_seq_stride = int64_t{s.n_head_kv} * s.hd;
  p.k_batch_stride = p.v_batch_stride = p.k_seq_stride * s.seqlen_k;
  p.o_head_stride = s.hd;
  p.o_seq_stride = o_seq_stride;
  p.o_batch_stride = o_seq_stride * s.seqlen_q;
  p.dtype = s.dtype;
  p.head_dim = s.hd;
  p.n_head = s.n_head;
  p.n_head_kv = s.n_head_kv;
  p.batch = s.batch;
  p.seqlen_q = s.seqlen_q;
  p.seqlen_k = s.seqlen_k;
  p.causal = s.causal;
  p.softmax_scale = s.scale_mul / std::sqrt(float(s.hd));
  p.causal_section_heads = s.causal_section_heads;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  p.softcap = s.softcap;
  return p;
}

// The LSE rows against the float64 reference: a row that sees no key must be exactly -inf (the harness treats
// NaN specially, so only the finite rows go through compare), the others within 2e-3 + 1e-3 |lse|.
void check_lse(Parity& parity, const std::string& cname, const std::vector<float>& got_lse,
               const std::vector<double>& ref_lse) {
  std::vector<double> ref_finite;
  std::vector<float> got_finite;
  for (size_t i = 0; i < ref_lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      if (!(std::isinf(got_lse[i]) && got_lse[i] < 0)) {
        parity.fail(cname + ": lse of a row with no visible key is " + std::to_string(got_lse[i]) + ", want -inf");
        return;
      }
    } else {
      ref_finite.push_back(ref_lse[i]);
      got_finite.push_back(got_lse[i]);
    }
  }
  if (!ref_finite.empty()) {
    parity.compare(cname + " lse", got_finite.data(), ref_finite.data(), ref_finite.size(), 1e-3, 2e-3);
  }
}

void run_and_check(Parity& parity, CachingAllocator& alloc, const Shape& s, std::mt19937& rng) {
  const std::string name = name_of(s);
  std::vector<uint16_t> qb, kb, vb;
  std::vector<float> qf, kf, vf;
  const size_t nq = size_t(s.batch) * s.seqlen_q * s.n_head * s.hd;
  const size_t nk = size_t(s.batch) * s.seqlen_k * s.n_head_kv * s.hd;
  random_tensor(rng, nq, 1.5f, s.dtype, &qb, &qf);  // amplitude > 1: peaked softmax rows, not near-uniform
  random_tensor(rng, nk, 1.5f, s.dtype, &kb, &kf);
  random_tensor(rng, nk, 1.0f, s.dtype, &vb, &vf);
  const int64_t o_seq_stride = int64_t{s.n_head} * s.hd + (s.padded ? 64 : 0);
  const size_t no = size_t(s.batch) * s.seqlen_q * o_seq_stride;
  const size_t nlse = size_t(s.batch) * s.n_head * s.seqlen_q;

  DeviceArray<uint16_t> dq(alloc, nq), dk(alloc, nk), dv(alloc, nk), dout(alloc, no);
  DeviceArray<float> dlse(alloc, nlse);
  dq.upload(qb);
  dk.upload(kb);
  dv.upload(vb);
  FlashParams p = make_params(s, dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), o_seq_stride);
  if (const char* reason = ::ga::cuda::flash_unsupported_reason(p)) {
    parity.skip(name, reason);
    return;
  }
  // The lean default build has two Hopper variants and the mma.sync ones (sm_80 and its sm_75 build).
  std::vector<int> runnable;
  for (int sched = 0; sched < ::ga::cuda::flash_variant_count(); ++sched) {
    if (!::ga::cuda::flash_variant_compiled(sched) || !variant_selected(sched)) continue;
    if (const char* why = ::ga::cuda::flash_variant_unsupported_reason(p, sched)) {
      parity.skip(name + " sched" + std::to_string(sched), why);  // a Hopper variant on another GPU; bf16 on sm75
      continue;
    }
    runnable.push_back(sched);
  }
  if (runnable.empty()) return;  // no float64 reference for nothing to compare
  std::vector<double> ref, ref_lse;
  reference(s, p.softmax_scale, qf, kf, vf, &ref, &ref_lse);
  // flash_plan's workspace (the split-tail variant's partials where it applies, the dynamic-tile variants' counter),
  // poisoned: a partial merged before it is written is NaN in O, and a counter not zeroed before the launch skips
  // tiles, whose O stays poisoned.
  const size_t ws_bytes = ::ga::cuda::flash_plan(p).workspace_bytes;
  DeviceArray<float> ws(alloc, std::max<size_t>((ws_bytes + 3) / 4, 1));

  for (int sched : runnable) {
    const std::string cname = name + " sched" + std::to_string(sched);
    dout.poison();
    dlse.poison();
    ws.poison();
    ASSERT_EQ(::ga::cuda::flash_forward_with_schedule(p, sched, ws_bytes > 0 ? ws.get() : nullptr, ws_bytes, nullptr),
              cudaSuccess)
        << cname;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cname;
    const std::vector<float> got_lse = dlse.download();
    const auto o = unpack_rows(dout.download(), ref, size_t(s.batch) * s.seqlen_q, size_t(s.n_head) * s.hd,
                               size_t(o_seq_stride), s.dtype);
    if (o.touched_padding > 0) parity.fail(cname + ": wrote into the padding of O's rows");
    if (!(o.rel_l2 <= 1e-2)) parity.fail(cname + ": relative L2 error " + std::to_string(o.rel_l2) + " > 1e-2");
    // Per element: 5% of the output RMS, plus the 16-bit output's own rounding (half an ulp: up to 2^-8 of the
    // value in bf16), which alone exceeds 5% of the RMS for a rare large value (|o| ~ 4 where the RMS is ~0.3).
    parity.compare(cname + " O", o.got.data(), ref.data(), ref.size(), 1.0 / 256, 0.05 * std::max(o.ref_rms, 1e-3));
    check_lse(parity, cname, got_lse, ref_lse);
  }
}

// One table of shapes, each through every variant run_and_check covers (seeded, so a failure reproduces), stopping at
// the first fatal failure.
void check_shape_table(const char* name, unsigned seed, std::initializer_list<Shape> shapes) {
  CachingAllocator alloc(0);
  Parity parity(name);
  std::mt19937 rng(seed);
  for (const Shape& s : shapes) {
    run_and_check(parity, alloc, s, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
  parity.finish();
}

TEST(CudaFlashAttention, ForwardMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward");
  std::mt19937 rng(20261122);
  const int lengths[][2] = {{1, 1}, {7, 7}, {129, 129}, {1000, 1000}, {7, 1000}, {129, 7}, {1000, 129}};
  const int gqa[][2] = {{2, 2}, {4, 2}, {4, 1}};
  int long_index = 0, case_index = 0;
  for (FlashDtype dt : {FlashDtype::kBf16, FlashDtype::kF16})
    for (int hd : {64, 128, 256})
      for (bool causal : {false, true})
        for (const auto& g : gqa)
          for (const auto& len : lengths) {
            // Keep the float64 reference affordable: the long pairs only for GQA 4/1 and 2/2 alternately.
            const bool long_pair = len[0] * int64_t{len[1]} >= 100000;
            if (long_pair && (long_index++ % 2 == 1)) continue;
            const bool padded = (case_index++ % 2) == 0;
            const Shape s{dt, hd, g[0], g[1], len[0] > 200 ? 1 : 2, len[0], len[1], causal, padded};
            run_and_check(parity, alloc, s, rng);
            if (testing::Test::HasFatalFailure()) return;
          }
  parity.finish();
}

TEST(CudaFlashAttention, LongSequences4097) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward 4097");
  std::mt19937 rng(4097);
  for (bool causal : {false, true}) {
    run_and_check(parity, alloc, Shape{FlashDtype::kBf16, 128, 2, 1, 1, 4097, 4097, causal, false}, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
  run_and_check(parity, alloc, Shape{FlashDtype::kF16, 64, 2, 2, 1, 4097, 4097, true, true}, rng);
  run_and_check(parity, alloc, Shape{FlashDtype::kBf16, 256, 1, 1, 1, 4097, 4097, false, false}, rng);
  parity.finish();
}

// A few small shapes through every variant: what the device script runs under compute-sanitizer memcheck
// and racecheck (the fourth shape has 160 one-block tiles, more than the SMs, so persistent CTAs loop; the last is
// dense non-causal head dim 128 with 240 tiles, where variant 24 stages each tile's O in a V slot that the next
// tiles' loads reuse, and the split tail cuts the last round).
TEST(CudaFlashAttention, SmallShapesForSanitizer) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_table("flash forward small", 7, {
      {FlashDtype::kBf16, 128, 2, 1, 1, 129, 129, true, true},
      {FlashDtype::kF16, 64, 2, 2, 2, 7, 300, false, false},
      {FlashDtype::kBf16, 256, 2, 1, 1, 129, 7, true, false},
      {FlashDtype::kF16, 64, 16, 4, 10, 7, 200, true, true},
      {FlashDtype::kBf16, 128, 16, 4, 5, 300, 129, false, true},
  });
}

// More tiles (batch x heads x 128-row query blocks) than the GPU has SMs, so the persistent variants'
// CTAs each run several tiles back to back (Q reloaded behind its empty barrier, the K/V ring and the
// ping-pong turns carried across tiles), including causal tiles that see no key at all.
TEST(CudaFlashAttention, PersistentCtasRunManyTiles) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_table("flash forward many tiles", 132, {
      {FlashDtype::kBf16, 128, 16, 4, 5, 300, 257, false, true},   // 5 x 16 x 3 = 240 tiles
      {FlashDtype::kBf16, 128, 16, 4, 5, 300, 257, true, false},   // causal, seqlen_q > seqlen_k
      {FlashDtype::kF16, 64, 16, 16, 5, 300, 129, true, true},     // first query block sees no key
      {FlashDtype::kBf16, 256, 16, 2, 4, 257, 300, false, false},  // 4 x 16 x 3 = 192 tiles
      {FlashDtype::kF16, 256, 16, 8, 4, 257, 300, true, true},
  });
}

// The causal tile order's sections (FlashParams::causal_section_heads, decode_tile): (batch, head) pairs that do not
// divide into whole sections (the last one is smaller), GQA groups split across sections, a section larger than the
// whole problem, and one head at a time (0), with more tiles than SMs so persistent CTAs walk several sections. Every
// order must give the same results; only the order of the tiles differs.
TEST(CudaFlashAttention, CausalSectionsCoverEveryTileOnce) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_table("flash forward causal sections", 1212, {
      {FlashDtype::kBf16, 128, 8, 2, 2, 700, 700, true, false, 3},     // 16 pairs: 5 sections of 3 and one of 1
      {FlashDtype::kF16, 64, 6, 3, 5, 300, 257, true, true, 4},        // 30 pairs, 150 tiles, q > k
      {FlashDtype::kBf16, 256, 4, 1, 3, 257, 300, true, false, 5},     // 12 pairs: 5, 5, 2
      {FlashDtype::kBf16, 128, 16, 4, 5, 300, 257, true, true, 1000},  // one section of all 80 pairs
      {FlashDtype::kF16, 128, 16, 4, 5, 300, 257, true, false, 0},     // one head at a time
  });
}

// The split tail (variant 21, flash_fwd_split_tail.cuh): more tiles than SMs with a partial last round, so the last
// round's key blocks are cut between all CTAs and merged by LSE. On a 132-SM H200: 160 tiles, 28 in the tail;
// 700 keys = 6 key tiles, so about 1.3 key tiles per CTA: tiles split into up to 6 pieces (an owner folds in several
// partials); 1100 keys = 9 key tiles, 1.9 per CTA, seqlen_q 130 (the second query block has 2 rows). Other variants
// run the same shapes as plain persistent / one-tile kernels.
TEST(CudaFlashAttention, SplitTailMergesPieces) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_table("flash forward split tail", 21, {
      {FlashDtype::kBf16, 128, 16, 4, 5, 130, 700, false, true},   // 2 x 16 x 5 = 160 tiles
      {FlashDtype::kF16, 128, 16, 16, 5, 130, 1100, false, false},
      {FlashDtype::kBf16, 128, 8, 2, 9, 257, 600, false, false},  // 3 x 8 x 9 = 216 tiles, 84 in the tail
  });
}

// A refusal: the check gives a reason (unless `by_reason` is false: refused at the launch only, e.g. a missing
// workspace), the launch fails, and the NaN-poisoned output is left as it was.
void expect_refusal_leaves_output_alone(DeviceArray<uint16_t>& out, const char* what, const char* reason,
                                        const std::function<cudaError_t()>& launch, bool by_reason = true) {
  if (by_reason) {
    ASSERT_NE(reason, nullptr) << what;
    std::printf("refused (%s): %s\n", what, reason);
  }
  out.poison();
  EXPECT_NE(launch(), cudaSuccess) << what;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (uint16_t x : out.download()) {
    if (x != 0xFFFF) {
      ADD_FAILURE() << what << ": output touched although refused";
      break;
    }
  }
}

TEST(CudaFlashAttention, UnsupportedParamsAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  const Shape s{FlashDtype::kBf16, 128, 4, 2, 1, 64, 64, false, false};
  DeviceArray<uint16_t> buf(alloc, 4 * 64 * 128 + 64);
  DeviceArray<uint16_t> out(alloc, 4 * 64 * 128);
  const FlashParams good = make_params(s, buf.get(), buf.get(), buf.get(), out.get(), nullptr, 4 * 128);
  auto expect_refused = [&](FlashParams p, const char* what) {
    expect_refusal_leaves_output_alone(out, what, ::ga::cuda::flash_unsupported_reason(p),
                                       [&] { return ::ga::cuda::flash_forward(p, nullptr, 0, nullptr); });
  };
  FlashParams p = good;
  p.head_dim = 80;
  expect_refused(p, "head_dim 80");
  p = good;
  p.causal = true;
  p.window_right = 3;  // causal is window_right 0
  expect_refused(p, "causal with window_right 3");
  p = good;
  p.window_left = -2;
  expect_refused(p, "window_left -2");
  p = good;
  p.softcap = -1.0f;
  expect_refused(p, "softcap -1");
  p = good;
  p.softcap = INFINITY;
  expect_refused(p, "softcap inf");
  p = good;
  p.n_head_kv = 3;
  expect_refused(p, "n_head % n_head_kv");
  p = good;
  int32_t fake_offsets[2] = {0, 64};
  p.cu_seqlens_q = fake_offsets;  // host pointer is fine: refused before any use
  expect_refused(p, "varlen");
  p = good;
  p.q_seq_stride += 4;  // not a multiple of 16 bytes
  expect_refused(p, "misaligned stride");
  p = good;
  p.q = static_cast<const uint16_t*>(good.q) + 1;
  expect_refused(p, "misaligned q");
  if (const char* device = ::ga::cuda::flash_unsupported_reason(good)) {
    GTEST_SKIP() << device;  // no flash forward for this GPU: the parameter checks above still ran
  }
}

// ---- sliding windows, soft-capping and head dim 96 (Gemma 2/3, Mistral, Phi-3) ----
// Every compiled variant (the Hopper defaults, the mma.sync forward and its sm_75 build) on each case. Windows of
// W = 1, 2, 7, 64, 255, 1000 keys (window_left W - 1) with causal (window_right 0) and without (a band of W - 1 keys
// on each side, or only a left side), over lengths 1, 7, 129, 1000 and 4097, seqlen_q != seqlen_k both ways
// (bottom-right aligned: rows of a band may see no key at all: zeros, lse -inf), GQA, every head dim.

TEST(CudaFlashAttention, SlidingWindowsMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward windows");
  std::mt19937 rng(4242);
  const int lengths[][2] = {{1, 1}, {7, 7}, {129, 129}, {1000, 1000}, {129, 1000}, {1000, 129}};
  const int windows[] = {1, 2, 7, 64, 255, 1000};
  const int gqa[][2] = {{2, 2}, {4, 2}, {4, 1}};
  int case_index = 0;
  for (int hd : {64, 96, 128, 256})
    for (bool causal : {true, false})
      for (int w : windows)
        for (const auto& len : lengths) {
          if (w >= 255 && len[1] < 255) continue;  // the same as no window: covered by the plain grid
          const int ci = case_index++;
          const FlashDtype dt = ci % 2 ? FlashDtype::kF16 : FlashDtype::kBf16;
          const auto& g = gqa[ci % 3];
          Shape s{dt, hd, g[0], g[1], len[0] > 200 ? 1 : 2, len[0], len[1], causal, ci % 4 == 1};
          s.window_left = w - 1;
          s.window_right = causal ? (ci % 2 ? 0 : -1) : (ci % 3 == 0 ? -1 : w - 1);  // causal: -1 and 0 alike
          run_and_check(parity, alloc, s, rng);
          if (testing::Test::HasFatalFailure()) return;
        }
  parity.finish();
}

// Long sequences: 4097 keys under windows of 64 and 1000 (a key tile range in the middle of the sequence for most
// query tiles), causal and a band, and a right-only window (window_left -1).
TEST(CudaFlashAttention, SlidingWindows4097) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward windows 4097");
  std::mt19937 rng(40970);
  auto with_window = [](Shape s, int left, int right) {
    s.window_left = left;
    s.window_right = right;
    return s;
  };
  for (const Shape& s : {with_window(Shape{FlashDtype::kBf16, 128, 4, 1, 1, 4097, 4097, true, false}, 63, 0),
                         with_window(Shape{FlashDtype::kF16, 64, 2, 2, 1, 4097, 4097, true, true}, 999, 0),
                         with_window(Shape{FlashDtype::kBf16, 96, 2, 1, 1, 4097, 4097, false, false}, 254, 254),
                         with_window(Shape{FlashDtype::kF16, 256, 2, 1, 1, 4097, 4097, false, true}, 63, 0),
                         with_window(Shape{FlashDtype::kBf16, 128, 2, 2, 1, 1000, 4097, false, false}, -1, 6)}) {
    run_and_check(parity, alloc, s, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
  parity.finish();
}

// Soft-caps that bend every score (1, 2) and caps that only large scores reach (30, 50, with the softmax scale 8x so
// scores reach them), alone and with a window; the LSE is that of the capped scores. Each case also checks that the
// cap acts: the reference without it differs by more than 10x the bar.
TEST(CudaFlashAttention, SoftcapMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward softcap");
  std::mt19937 rng(5050);
  const float caps[][2] = {{1.0f, 1.0f}, {2.0f, 1.0f}, {30.0f, 8.0f}, {50.0f, 8.0f}};
  int case_index = 0;
  for (int hd : {64, 96, 128, 256})
    for (bool causal : {true, false})
      for (const auto& cap : caps) {
        const int ci = case_index++;
        const int len_q = ci % 3 == 0 ? 1000 : ci % 3 == 1 ? 129 : 7, len_k = ci % 2 ? len_q : 300;
        Shape s{ci % 2 ? FlashDtype::kBf16 : FlashDtype::kF16, hd, 4, ci % 2 ? 2 : 1, 2, len_q, len_k, causal,
                ci % 2 == 0};
        s.softcap = cap[0];
        s.scale_mul = cap[1];
        if (ci % 4 == 3) s.window_left = 63;
        // the cap must act: the uncapped reference is far from the capped one
        std::vector<float> qf(size_t(s.batch) * s.seqlen_q * s.n_head * hd), kf(size_t(s.batch) * s.seqlen_k *
                                                                               s.n_head_kv * hd);
        std::mt19937 probe(ci);
        std::normal_distribution<float> dist(0.0f, 1.5f);
        for (float& x : qf) x = dist(probe);
        for (float& x : kf) x = dist(probe);
        std::vector<float> vf(kf.size(), 0.0f);
        for (size_t i = 0; i < vf.size(); ++i) vf[i] = float(i % 7) - 3.0f;
        std::vector<double> capped, plain, lse;
        Shape u = s;
        u.softcap = 0.0f;
        const float scale = s.scale_mul / std::sqrt(float(hd));
        reference(s, scale, qf, kf, vf, &capped, &lse);
        reference(u, scale, qf, kf, vf, &plain, &lse);
        double diff = 0.0, norm = 0.0;
        for (size_t i = 0; i < plain.size(); ++i) {
          diff += (capped[i] - plain[i]) * (capped[i] - plain[i]);
          norm += plain[i] * plain[i];
        }
        if (!(std::sqrt(diff / std::max(norm, 1e-30)) > 0.1)) parity.fail(name_of(s) + ": the cap does not act");
        run_and_check(parity, alloc, s, rng);
        if (testing::Test::HasFatalFailure()) return;
      }
  parity.finish();
}

// Head dim 96 (Phi-3) on the plain grid's lengths, causal and full, GQA, O with and without row padding (the kernels
// run the 128 tiles with 32 zero columns and must write exactly 96 columns), and one 4097-token case.
TEST(CudaFlashAttention, HeadDim96MatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward hd96");
  std::mt19937 rng(96);
  const int lengths[][2] = {{1, 1}, {7, 7}, {129, 129}, {1000, 1000}, {7, 1000}, {129, 7}};
  int case_index = 0;
  for (bool causal : {false, true})
    for (const auto& len : lengths) {
      const int ci = case_index++;
      const Shape s{ci % 2 ? FlashDtype::kF16 : FlashDtype::kBf16, 96, 4, ci % 3 == 0 ? 4 : 1, 2, len[0], len[1],
                    causal, ci % 2 == 0};
      run_and_check(parity, alloc, s, rng);
      if (testing::Test::HasFatalFailure()) return;
    }
  run_and_check(parity, alloc, Shape{FlashDtype::kBf16, 96, 2, 1, 1, 4097, 4097, true, true}, rng);
  parity.finish();
}

// Small window / soft-cap / head dim 96 shapes for compute-sanitizer (what the device script runs under memcheck).
TEST(CudaFlashAttention, WindowSoftcapSmallShapesForSanitizer) {
  GA_REQUIRE_CUDA_DEVICE();
  Shape a{FlashDtype::kBf16, 128, 2, 1, 1, 300, 300, true, true};
  a.window_left = 63;
  Shape b{FlashDtype::kF16, 96, 2, 2, 2, 7, 300, false, false};
  b.window_left = b.window_right = 6;
  Shape c{FlashDtype::kF16, 64, 16, 4, 10, 7, 200, true, true};
  c.softcap = 2.0f;
  c.window_left = 1;
  check_shape_table("flash forward window small", 77, {a, b, c});
}

// ---- sm_75 (Turing) build of the mma.sync forward: variant kFlashSm75Variant, fp16 only ----
// The parity grids above already run it on every fp16 case (the variant loop of run_and_check; bf16 cases SKIP it
// with its reason). These add what is particular to it: its smaller tiles (64 query rows; 64 / 32 / 32 keys) at
// lengths around their edges, 4097 at head dims 128 and 256, shapes small enough for compute-sanitizer
// (GA_FLASH_TEST_VARIANT=12), and its refusals. On the H200 this is the evidence that code built only from sm_75
// instructions (register-staged loads, m16n8k8, <= 64 KB of shared memory) is right.

TEST(CudaFlashAttention, Sm75SmallShapesForSanitizer) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_table("flash forward sm75 small", 75, {
      {FlashDtype::kF16, 128, 2, 1, 1, 129, 129, true, true},
      {FlashDtype::kF16, 256, 2, 2, 2, 7, 300, false, false},
      {FlashDtype::kF16, 256, 4, 1, 1, 129, 7, true, true},   // rows that see no key: zeros, lse -inf
      {FlashDtype::kF16, 64, 16, 4, 3, 65, 97, true, false},  // 2 query blocks of 64, a partial key block
      {FlashDtype::kF16, 128, 4, 2, 2, 33, 31, false, true},  // one key short of the 32-key block
  });
}

TEST(CudaFlashAttention, Sm75LongSequences4097) {
  GA_REQUIRE_CUDA_DEVICE();
  if (!variant_selected(::ga::cuda::kFlashSm75Variant)) GTEST_SKIP() << "GA_FLASH_TEST_VARIANT selects another variant";
  CachingAllocator alloc(0);
  Parity parity("flash forward sm75 4097");
  std::mt19937 rng(754097);
  run_and_check(parity, alloc, Shape{FlashDtype::kF16, 128, 2, 1, 1, 4097, 4097, true, false}, rng);
  if (testing::Test::HasFatalFailure()) return;
  run_and_check(parity, alloc, Shape{FlashDtype::kF16, 256, 2, 2, 1, 4097, 4097, false, true}, rng);
  parity.finish();
}

// bf16 (no bf16 mma.sync on Turing), FP8, varlen and o_f32 are refused by the sm_75 variant with a reason, and the
// launcher then touches nothing.
TEST(CudaFlashAttention, Sm75RefusesWhatTuringCannotRun) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  const Shape s{FlashDtype::kF16, 128, 4, 2, 1, 64, 64, false, false};
  DeviceArray<uint16_t> buf(alloc, 4 * 64 * 128 + 64);
  DeviceArray<uint16_t> out(alloc, 4 * 64 * 128);
  const FlashParams good = make_params(s, buf.get(), buf.get(), buf.get(), out.get(), nullptr, 4 * 128);
  constexpr int kSm75 = ::ga::cuda::kFlashSm75Variant;
  ASSERT_TRUE(::ga::cuda::flash_variant_compiled(kSm75));
  auto expect_refused = [&](FlashParams p, const char* what, const char* reason_mentions) {
    const char* reason = ::ga::cuda::flash_variant_unsupported_reason(p, kSm75);
    if (reason != nullptr) {
      EXPECT_NE(std::string(reason).find(reason_mentions), std::string::npos) << what << ": " << reason;
    }
    expect_refusal_leaves_output_alone(out, what, reason,
                                       [&] { return ::ga::cuda::flash_forward_with_schedule(p, kSm75, nullptr); });
  };
  FlashParams p = good;
  p.dtype = FlashDtype::kBf16;
  expect_refused(p, "bf16", "bf16");
  p = good;
  int32_t fake_offsets[2] = {0, 64};
  p.cu_seqlens_q = fake_offsets;  // host pointer is fine: refused before any use
  p.total_q = 64;
  p.total_k = 64;
  p.cu_seqlens_k = fake_offsets;
  expect_refused(p, "varlen", "variable-length");
  p = good;
  p.o_f32 = true;
  expect_refused(p, "o_f32", "o_f32");
  p = good;
  p.head_dim = 80;
  expect_refused(p, "head_dim 80", "head_dim");
  // fp16 is accepted wherever compute capability >= 7.5 (every GPU this build can run on).
  EXPECT_EQ(::ga::cuda::flash_variant_unsupported_reason(good, kSm75), nullptr);
}

// ---- FP8 e4m3 forward ----

// The 254 finite e4m3 values (sign, 4-bit exponent with bias 7, 3-bit mantissa; S.1111.111 is NaN, no inf).
double e4m3_value(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
  const double mag = exp == 0 ? std::ldexp(man / 8.0, -6) : std::ldexp(1.0 + man / 8.0, exp - 7);
  return sign ? -mag : mag;
}

// Nearest e4m3 byte to x (ties to the even mantissa), saturating to +-448: a plain search over the table.
uint8_t to_e4m3(double x) {
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7F) == 0x7F) continue;  // NaN
    const double err = std::fabs(e4m3_value(static_cast<uint8_t>(b)) - x);
    if (err < best_err || (err == best_err && (b & 1) == 0)) {
      best_err = err;
      best = static_cast<uint8_t>(b);
    }
  }
  return best;
}

// A real tensor quantized with a per-tensor scale (amax / 448): the e4m3 bytes for the GPU, the dequantized values
// (byte value * descale) for the reference, and the descale itself.
float quantize_e4m3(const std::vector<float>& real, std::vector<uint8_t>* bytes, std::vector<float>* deq) {
  const size_t n = real.size();
  float amax = 1e-30f;
  for (float x : real) amax = std::max(amax, std::fabs(x));
  const float descale = amax / 448.0f;
  std::vector<double> table(256);
  for (int b = 0; b < 256; ++b) table[b] = e4m3_value(static_cast<uint8_t>(b));
  bytes->resize(n);
  deq->resize(n);
  for (size_t i = 0; i < n; ++i) {
    (*bytes)[i] = to_e4m3(double(real[i]) / descale);
    (*deq)[i] = static_cast<float>(table[(*bytes)[i]] * descale);
  }
  return descale;
}

std::vector<float> normal_tensor(std::mt19937& rng, size_t n, float amp) {
  std::normal_distribution<float> dist(0.0f, amp);
  std::vector<float> real(n);
  for (float& x : real) x = dist(rng);
  return real;
}

// Real q and k in [b][s][h][d] order, before quantization (default: N(0, 1.5) each).
using Fp8QkMaker = std::function<void(const Shape&, std::mt19937&, std::vector<float>* q, std::vector<float>* k)>;

void run_and_check_fp8(Parity& parity, CachingAllocator& alloc, const Shape& s, FlashDtype out_dtype,
                       std::mt19937& rng, const Fp8QkMaker& make_qk = nullptr, const std::string& label = "") {
  const std::string name = label + name_of(s) + (out_dtype == FlashDtype::kBf16 ? " ->bf16" : " ->f16");
  const size_t nq = size_t(s.batch) * s.seqlen_q * s.n_head * s.hd;
  const size_t nk = size_t(s.batch) * s.seqlen_k * s.n_head_kv * s.hd;
  std::vector<uint8_t> qb, kb, vb;
  std::vector<float> qf, kf, vf;
  std::vector<float> q_real, k_real;
  if (make_qk) {
    make_qk(s, rng, &q_real, &k_real);
  } else {
    q_real = normal_tensor(rng, nq, 1.5f);
    k_real = normal_tensor(rng, nk, 1.5f);
  }
  const float dq_scale = quantize_e4m3(q_real, &qb, &qf);
  const float dk_scale = quantize_e4m3(k_real, &kb, &kf);
  const float dv_scale = quantize_e4m3(normal_tensor(rng, nk, 1.0f), &vb, &vf);
  const int64_t o_seq_stride = int64_t{s.n_head} * s.hd + (s.padded ? 64 : 0);
  const size_t no = size_t(s.batch) * s.seqlen_q * o_seq_stride;
  const size_t nlse = size_t(s.batch) * s.n_head * s.seqlen_q;

  DeviceArray<uint8_t> dq(alloc, nq), dk(alloc, nk), dv(alloc, nk);
  DeviceArray<uint16_t> dout(alloc, no);
  DeviceArray<float> dlse(alloc, nlse);
  dq.upload(qb);
  dk.upload(kb);
  dv.upload(vb);
  FlashParams p = make_params(s, dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), o_seq_stride);
  p.out_dtype = out_dtype;
  p.descale_q = dq_scale;
  p.descale_k = dk_scale;
  p.descale_v = dv_scale;
  if (const char* reason = ::ga::cuda::flash_unsupported_reason(p)) {
    parity.skip(name, reason);
    return;
  }
  const size_t ws_bytes = ::ga::cuda::flash_plan(p).workspace_bytes;
  if (ws_bytes == 0) {
    parity.fail(name + ": flash_plan gave no workspace for V^T");
    return;
  }
  DeviceArray<uint8_t> ws(alloc, ws_bytes);
  std::vector<double> ref, ref_lse;
  reference(s, p.softmax_scale, qf, kf, vf, &ref, &ref_lse);

  for (int sched = -1; sched < ::ga::cuda::flash_variant_count(); ++sched) {  // -1: flash_forward's default
    // (GA_FLASH_TEST_VARIANT narrows the explicit variants, e.g. for the sanitizers; the default always runs)
    if (sched >= 0 && (!::ga::cuda::flash_variant_compiled(p, sched) || !variant_selected(sched))) continue;
    const std::string cname = name + (sched < 0 ? " default" : " sched" + std::to_string(sched));
    dout.poison();
    dlse.poison();
    ws.poison();
    const cudaError_t err = sched < 0 ? ::ga::cuda::flash_forward(p, ws.get(), ws_bytes, nullptr)
                                      : ::ga::cuda::flash_forward_with_schedule(p, sched, ws.get(), ws_bytes, nullptr);
    ASSERT_EQ(err, cudaSuccess) << cname;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cname;
    const std::vector<float> got_lse = dlse.download();
    const auto o = unpack_rows(dout.download(), ref, size_t(s.batch) * s.seqlen_q, size_t(s.n_head) * s.hd,
                               size_t(o_seq_stride), out_dtype);
    if (o.touched_padding > 0) parity.fail(cname + ": wrote into the padding of O's rows");
    if (!(o.rel_l2 <= 5e-2)) parity.fail(cname + ": relative L2 error " + std::to_string(o.rel_l2) + " > 5e-2");
    if (std::getenv("GA_FLASH_TEST_PRINT_ERRORS") != nullptr) {  // a diagnostic: each case's errors, pass or fail
      double lse_err = 0.0;
      for (size_t i = 0; i < ref_lse.size(); ++i)
        if (std::isfinite(ref_lse[i])) lse_err = std::max(lse_err, std::fabs(got_lse[i] - ref_lse[i]));
      std::printf("errors %s: O rel L2 %.4f, LSE max abs %.5f\n", cname.c_str(), o.rel_l2, lse_err);
    }
    // Per element: 25% of O's RMS plus 2^-4 of |O|: P is rounded to e4m3 (3 mantissa bits) for the PV product,
    // so a row that sees only a few keys (causal, seqlen_q > seqlen_k) is a short convex combination of V rows
    // whose error scales with that row's |O|, not with the RMS of the whole tensor (first run on an H200: 2 of
    // 512000 elements of a q1000/k129 causal case at 1.16x the RMS-only bar, rel L2 2.1e-2).
    parity.compare(cname + " O", o.got.data(), ref.data(), ref.size(), 0.0625, 0.25 * std::max(o.ref_rms, 1e-3));
    check_lse(parity, cname, got_lse, ref_lse);  // S is exact e4m3 products in f32: the 16-bit bar
  }
}

TEST(CudaFlashAttention, Fp8ForwardMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward fp8");
  std::mt19937 rng(8);
  const int lengths[][2] = {{1, 1}, {7, 7}, {129, 129}, {1000, 1000}, {7, 1000}, {1000, 129}};
  const int gqa[][2] = {{2, 2}, {4, 1}};
  int case_index = 0;
  for (int hd : {128, 256})
    for (bool causal : {false, true})
      for (const auto& g : gqa)
        for (const auto& len : lengths) {
          const bool padded = (case_index % 2) == 0;
          const FlashDtype out = (case_index++ % 3) == 2 ? FlashDtype::kF16 : FlashDtype::kBf16;
          const Shape s{FlashDtype::kFp8E4m3, hd, g[0], g[1], len[0] > 200 ? 1 : 2, len[0], len[1], causal, padded};
          run_and_check_fp8(parity, alloc, s, out, rng);
          if (testing::Test::HasFatalFailure()) return;
        }
  parity.finish();
}

// The FP8 default at head dim 128 (29; the window lives in the consumers it shares with 16-bit) under sliding
// windows: causal, bands and left-only windows. Head dim 256 (39) refuses windows, and soft-capping is 16-bit only:
// refused (Fp8UnsupportedParamsAreRejectedWithAReason).
TEST(CudaFlashAttention, Fp8WindowsMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward fp8 windows");
  std::mt19937 rng(88);
  int case_index = 0;
  for (int hd : {128})
    for (bool causal : {true, false})
      for (int w : {7, 64, 1000}) {
        const int ci = case_index++;
        Shape s{FlashDtype::kFp8E4m3, hd, 4, ci % 2 ? 1 : 2, 1, ci % 2 ? 1000 : 700, 1000, causal, ci % 2 == 0};
        s.window_left = w - 1;
        if (!causal && ci % 3 == 0) s.window_right = w - 1;
        run_and_check_fp8(parity, alloc, s, ci % 2 ? FlashDtype::kF16 : FlashDtype::kBf16, rng);
        if (testing::Test::HasFatalFailure()) return;
      }
  parity.finish();
}

TEST(CudaFlashAttention, Fp8LongSequences4097) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward fp8 4097");
  std::mt19937 rng(84097);
  for (bool causal : {false, true}) {
    run_and_check_fp8(parity, alloc, Shape{FlashDtype::kFp8E4m3, 128, 2, 1, 1, 4097, 4097, causal, false},
                      FlashDtype::kBf16, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
  run_and_check_fp8(parity, alloc, Shape{FlashDtype::kFp8E4m3, 256, 2, 2, 1, 4097, 4097, true, true},
                    FlashDtype::kBf16, rng);
  parity.finish();
}

// Scores that jump from one key tile to the next: the online softmax's rescale when the running max moves by ~2^12
// and by ~2^145 between tiles (exp2 arguments far outside what random inputs reach; a stale-max softmax candidate,
// which took such jumps down a recompute path, was checked on these). q rows are positive and k row n is gain(n)
// times one positive vector, so every score of key n is gain(n) times its row's: base keys at gains 0.9-1.0 (scores
// ~12 log2 units), a spike at gain 2 (+~12 units: the rest of its tile then weighs ~5%, so a wrong rescale shows), a
// second one at a 224-key tile's first key, and in the "far" cases a spike at gain 14 (+~145 units). Causal and not.
TEST(CudaFlashAttention, Fp8ScoresThatJumpBetweenKeyTiles) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward fp8 score jumps");
  std::mt19937 rng(1036);
  auto maker = [](std::vector<std::pair<int, float>> spikes) -> Fp8QkMaker {
    return [spikes](const Shape& s, std::mt19937& r, std::vector<float>* q, std::vector<float>* k) {
      std::uniform_real_distribution<float> unit(0.0f, 1.0f);
      q->resize(size_t(s.batch) * s.seqlen_q * s.n_head * s.hd);
      for (float& x : *q) x = 0.5f + unit(r);
      std::vector<float> w(s.hd);
      for (float& x : w) x = 0.5f + 0.5f * unit(r);
      k->resize(size_t(s.batch) * s.seqlen_k * s.n_head_kv * s.hd);
      for (int b = 0; b < s.batch; ++b)
        for (int n = 0; n < s.seqlen_k; ++n) {
          float gain = 0.9f + 0.1f * unit(r);
          for (const auto& [key, g] : spikes)
            if (key == n) gain = g;
          for (int h = 0; h < s.n_head_kv; ++h) {
            float* row = k->data() + ((size_t(b) * s.seqlen_k + n) * s.n_head_kv + h) * s.hd;
            for (int d = 0; d < s.hd; ++d) row[d] = gain * w[d];
          }
        }
    };
  };
  for (bool causal : {false, true}) {
    const Shape s{FlashDtype::kFp8E4m3, 128, 2, 1, 1, 1000, 1000, causal, false};
    run_and_check_fp8(parity, alloc, s, FlashDtype::kBf16, rng, maker({{300, 2.0f}, {448, 2.1f}}), "moderate ");
    if (testing::Test::HasFatalFailure()) return;
    run_and_check_fp8(parity, alloc, s, FlashDtype::kBf16, rng, maker({{300, 2.0f}, {700, 14.0f}}), "far ");
    if (testing::Test::HasFatalFailure()) return;
  }
  parity.finish();
}

// Small FP8 shapes for compute-sanitizer (the device script runs memcheck on these), including more tiles
// than SMs (persistent CTAs loop) and a key count that is not a multiple of 16 (V^T padding).
TEST(CudaFlashAttention, Fp8SmallShapesForSanitizer) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash forward fp8 small");
  std::mt19937 rng(78);
  const Shape shapes[] = {
      {FlashDtype::kFp8E4m3, 128, 2, 1, 1, 129, 129, true, true},
      {FlashDtype::kFp8E4m3, 256, 2, 2, 2, 7, 300, false, false},
      {FlashDtype::kFp8E4m3, 128, 16, 4, 10, 7, 201, true, true},  // 160 tiles
      // the causal tile order's sections (CausalSectionsCoverEveryTileOnce): 160 pairs in sections of 7, and 2 x 4
      // pairs of 4 query blocks in sections of 3 (the last one 2)
      {FlashDtype::kFp8E4m3, 128, 16, 4, 10, 7, 201, true, false, 7},
      {FlashDtype::kFp8E4m3, 256, 4, 2, 2, 400, 500, true, true, 3},
  };
  for (const Shape& s : shapes) {
    run_and_check_fp8(parity, alloc, s, FlashDtype::kBf16, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
  parity.finish();
}

TEST(CudaFlashAttention, Fp8UnsupportedParamsAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  const Shape s{FlashDtype::kFp8E4m3, 128, 4, 2, 1, 64, 64, false, false};
  DeviceArray<uint8_t> buf(alloc, 4 * 64 * 128 + 64);
  DeviceArray<uint16_t> out(alloc, 4 * 64 * 128);
  FlashParams good = make_params(s, buf.get(), buf.get(), buf.get(), out.get(), nullptr, 4 * 128);
  auto expect_refused = [&](FlashParams p, const char* what, bool by_reason) {
    expect_refusal_leaves_output_alone(out, what, ::ga::cuda::flash_unsupported_reason(p),
                                       [&] { return ::ga::cuda::flash_forward(p, nullptr, 0, nullptr); }, by_reason);
  };
  FlashParams p = good;
  p.head_dim = 64;
  expect_refused(p, "fp8 head_dim 64", true);
  p = good;
  p.out_dtype = FlashDtype::kFp8E4m3;
  expect_refused(p, "fp8 output", true);
  p = good;
  p.descale_v = 0.0f;
  expect_refused(p, "descale 0", true);
  p = good;
  p.softcap = 30.0f;  // soft-capping: 16-bit only
  expect_refused(p, "fp8 softcap", true);
  p = good;
  p.head_dim = 256;
  p.window_left = 63;  // FP8 head dim 256: no window
  expect_refused(p, "fp8 hd 256 window", true);
  p = good;
  p.head_dim = 96;
  expect_refused(p, "fp8 head_dim 96", true);
  p = good;
  p.k_seq_stride += 8;  // 8 bytes: a multiple of 8 elements but not of 16 bytes
  expect_refused(p, "fp8 stride of 8 bytes", true);
  // The mma.sync forward is 16-bit only: asked for FP8 it says so and touches nothing.
  const char* mma_sync_fp8 = ::ga::cuda::flash_variant_unsupported_reason(good, ::ga::cuda::kFlashSm80Variant);
  ASSERT_NE(mma_sync_fp8, nullptr);
  EXPECT_NE(std::string(mma_sync_fp8).find("16-bit only"), std::string::npos) << mma_sync_fp8;
  expect_refusal_leaves_output_alone(
      out, "fp8 on the mma.sync variant",
      ::ga::cuda::flash_variant_unsupported_reason(good, ::ga::cuda::kFlashSm80Variant),
      [&] { return ::ga::cuda::flash_forward_with_schedule(good, ::ga::cuda::kFlashSm80Variant, nullptr); });
  if (testing::Test::HasFatalFailure()) return;
  if (const char* device = ::ga::cuda::flash_unsupported_reason(good)) {
    GTEST_SKIP() << device;
  }
  EXPECT_GT(::ga::cuda::flash_plan(good).workspace_bytes, 0u);
  expect_refused(good, "fp8 without the V^T workspace", false);
  ::ga::cuda::FlashBwdParams bwd;
  bwd.fwd = good;
  ASSERT_NE(::ga::cuda::flash_backward_unsupported_reason(bwd), nullptr);
}

}  // namespace
