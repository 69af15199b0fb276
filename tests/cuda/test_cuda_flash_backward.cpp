// Parity of the FlashAttention backward (backends/cuda/kernels/flash/flash_attention.h: flash_backward) with
// float64 gradients computed here from the same 16-bit inputs. Every case runs each backward kernel this GPU and
// build can run (flash_backward_with_kernel: mma.sync everywhere on sm_80+, the Hopper kernel for head dim 128 on
// sm_90a), each checked on its own against the same reference.
//
// The kernel's inputs O and LSE come from the float64 forward computed here (O rounded to the dtype, LSE to
// f32), so this test does not depend on the Hopper forward and runs on any sm_80+ GPU. Grid: dtype (bf16,
// fp16) x head dim (64, 128, 256) x causal x GQA ratio (1, 2, 4 = MQA) x lengths 1, 7, 129, 1000, including
// seqlen_q != seqlen_k both ways (causal is bottom-right aligned: (129, 7) has query rows that see no key,
// whose dq must be exactly 0). dq, dk, dv are NaN-poisoned before each run and written with a padded row
// stride on every other case: the padding must keep its poison. Bars per gradient: relative L2 <= 1e-2,
// every element within 2% + 25% of that gradient's RMS, no NaN. Without a GPU the tests SKIP. The shape,
// the random inputs, the forward softmax of the reference and the gradient unpacking are flash_check.h
// (shared with test_cuda_flash_attention.cpp).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/flash/flash_attention.h"
#include "backends/cuda/kernels/flash/flash_bwd_variants.h"
#include "cuda_harness.h"
#include "flash_check.h"

namespace {

using ::ga::cuda::CachingAllocator;
using ::ga::cuda::FlashBwdKernel;
using ::ga::cuda::FlashBwdParams;
using ::ga::cuda::FlashDtype;
using ::ga::test::cuda::DeviceArray;
using ::ga::test::cuda::Parity;

using Shape = ::ga::test::cuda::FlashShape;
using ::ga::test::cuda::first_visible_key;
using ::ga::test::cuda::last_visible_key;
using ::ga::test::cuda::name_of;
using ::ga::test::cuda::random_tensor;
using ::ga::test::cuda::softmax_row;
using ::ga::test::cuda::to_bits;
using ::ga::test::cuda::unpack_rows;

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;  // o, dq: [b][sq][h][d]; dk, dv: [b][sk][hkv][d]; lse [b][h][sq]
};

// float64 forward and backward for contiguous [b][s][h][d] tensors.
Reference reference(const Shape& s, double scale, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout) {
  const int d = s.hd, group = s.n_head / s.n_head_kv;
  Reference r;
  r.o.assign(q.size(), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(k.size(), 0.0);
  r.lse.assign(size_t(s.batch) * s.n_head * s.seqlen_q, -INFINITY);
  std::vector<double> p(s.seqlen_k), dp(s.seqlen_k);
  auto qrow = [&](int b, int i, int h) { return ((size_t(b) * s.seqlen_q + i) * s.n_head + h) * d; };
  auto krow = [&](int b, int j, int hk) { return ((size_t(b) * s.seqlen_k + j) * s.n_head_kv + hk) * d; };
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.n_head; ++h) {
      const int hk = h / group;
      for (int i = 0; i < s.seqlen_q; ++i) {
        const int first = first_visible_key(s, i), last = last_visible_key(s, i);
        if (last < first) continue;  // sees no key: o = 0, dq = 0, lse = -inf
        const double* qi = &q[qrow(b, i, h)];
        const double* doi = &dout[qrow(b, i, h)];
        r.lse[(size_t(b) * s.n_head + h) * s.seqlen_q + i] =
            softmax_row(s, scale, qi, k, b, hk, last, p, first, s.softcap);
        double* oi = &r.o[qrow(b, i, h)];
        for (int j = first; j <= last; ++j) {
          const double* vj = &v[krow(b, j, hk)];
          double dot = 0.0;
          for (int c = 0; c < d; ++c) {
            oi[c] += p[j] * vj[c];
            dot += doi[c] * vj[c];
          }
          dp[j] = dot;
        }
        double dsum = 0.0;
        for (int c = 0; c < d; ++c) dsum += doi[c] * oi[c];
        double* dqi = &r.dq[qrow(b, i, h)];
        for (int j = first; j <= last; ++j) {
          const double* kj = &k[krow(b, j, hk)];
          // soft-capping: the score is c tanh(x / c) of x = scale q.k, whose derivative is 1 - tanh^2(x / c)
          double dcap = 1.0;
          if (s.softcap > 0.0f) {
            double x = 0.0;
            for (int c = 0; c < d; ++c) x += qi[c] * kj[c];
            const double t = std::tanh(x * scale / s.softcap);
            dcap = 1.0 - t * t;
          }
          const double ds = p[j] * (dp[j] - dsum) * dcap * scale;
          double* dkj = &r.dk[krow(b, j, hk)];
          double* dvj = &r.dv[krow(b, j, hk)];
          for (int c = 0; c < d; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
            dvj[c] += p[j] * doi[c];
          }
        }
      }
    }
  return r;
}

double g_worst_rel_l2 = 0.0, g_worst_elem_over_rms = 0.0;  // over all checks, printed by each test
// flash_bwd_variants.h: the schedules that compute gradients (6, 8, 9, 10 time the preprocess/convert kernels only;
// 0, 2, 3, 4, 7 are compiled only with -DGA_FLASH_BWD_OLD_SCHEDULES=1; 1, 12, 16, 17, 20, 21, 25 with the variants
// build; the ones a build lacks are skipped; the default, 26, runs as [hopper]; 19, 22, 23, 24 are in every build).
constexpr int kHopperScheduleIds[] = {0, 1, 2, 3, 4, 7, 12, 16, 17, 19, 20, 21, 22, 23, 24, 25};
constexpr int kHopperSchedules = sizeof(kHopperScheduleIds) / sizeof(kHopperScheduleIds[0]);
int g_runs[3] = {0, 0, 0};  // cases run per kernel (mma.sync, Hopper, Hopper's other schedules), printed by each test

// One gradient: poisoned padding untouched, relative L2, per-element bar. got_bits has rows of `pitch`
// elements (`width` of them data), ref is dense.
void check_gradient(Parity& parity, const std::string& name, const std::vector<uint16_t>& got_bits,
                    const std::vector<double>& ref, size_t rows, size_t width, size_t pitch, FlashDtype dt) {
  const auto u = unpack_rows(got_bits, ref, rows, width, pitch, dt);
  const std::vector<float>& got = u.got;
  const double rel_l2 = u.rel_l2, rms = u.ref_rms;
  if (u.touched_padding > 0) parity.fail(name + ": wrote into the padding of its rows");
  if (!(rel_l2 <= 1e-2)) parity.fail(name + ": relative L2 error " + std::to_string(rel_l2) + " > 1e-2");
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - ref[i]));
  g_worst_rel_l2 = std::max(g_worst_rel_l2, rel_l2);
  g_worst_elem_over_rms = std::max(g_worst_elem_over_rms, worst / std::max(rms, 1e-3));
  // Gross-error bar per element (a wrong index or an unwritten element is off by ~ the RMS or NaN): 2% of
  // the value plus 25% of the RMS. The tails of honest 16-bit rounding (P and dS rounded to the dtype, as in
  // FA2) reached 14% of the RMS on short GQA rows in the first H200 run, so 10% was too tight a bar there.
  parity.compare(name, got.data(), ref.data(), ref.size(), 0.02, 0.25 * std::max(rms, 1e-3));
}

void print_worst(const char* what) {
  std::printf("%s: worst relative L2 %.3e, worst element error %.3f x its gradient's RMS; cases run: %d mma.sync, "
              "%d Hopper, %d Hopper other schedules\n",
              what, g_worst_rel_l2, g_worst_elem_over_rms, g_runs[0], g_runs[1], g_runs[2]);
}

void run_and_check(Parity& parity, CachingAllocator& alloc, const Shape& s, std::mt19937& rng) {
  const std::string name = name_of(s);
  const size_t nq = size_t(s.batch) * s.seqlen_q * s.n_head * s.hd;
  const size_t nk = size_t(s.batch) * s.seqlen_k * s.n_head_kv * s.hd;
  std::vector<uint16_t> qb, kb, vb, dob;
  std::vector<double> qf, kf, vf, dof;
  random_tensor(rng, nq, 1.5f, s.dtype, &qb, &qf);  // amplitude > 1: peaked softmax rows
  random_tensor(rng, nk, 1.5f, s.dtype, &kb, &kf);
  random_tensor(rng, nk, 1.0f, s.dtype, &vb, &vf);
  random_tensor(rng, nq, 1.0f, s.dtype, &dob, &dof);
  const double scale = double(float(s.scale_mul / std::sqrt(double(s.hd))));  // the kernel's f32 scale
  const Reference ref = reference(s, scale, qf, kf, vf, dof);
  std::vector<uint16_t> ob(nq);
  for (size_t i = 0; i < nq; ++i) ob[i] = to_bits(ref.o[i], s.dtype);
  std::vector<float> lse(ref.lse.begin(), ref.lse.end());

  const int pad = s.padded ? 64 : 0;
  const int64_t q_pitch = int64_t{s.n_head} * s.hd, k_pitch = int64_t{s.n_head_kv} * s.hd;
  const size_t q_rows = size_t(s.batch) * s.seqlen_q, k_rows = size_t(s.batch) * s.seqlen_k;
  DeviceArray<uint16_t> dq_in(alloc, nq), dk_in(alloc, nk), dv_in(alloc, nk), d_o(alloc, nq), d_do(alloc, nq);
  DeviceArray<float> d_lse(alloc, lse.size());
  DeviceArray<uint16_t> d_dq(alloc, q_rows * (q_pitch + pad)), d_dk(alloc, k_rows * (k_pitch + pad)),
      d_dv(alloc, k_rows * (k_pitch + pad));
  dq_in.upload(qb);
  dk_in.upload(kb);
  dv_in.upload(vb);
  d_o.upload(ob);
  d_do.upload(dob);
  d_lse.upload(lse);

  FlashBwdParams p;
  auto& f = p.fwd;
  f.q = dq_in.get();
  f.k = dk_in.get();
  f.v = dv_in.get();
  f.o = d_o.get();
  f.lse = d_lse.get();
  f.q_head_stride = f.o_head_stride = s.hd;
  f.q_seq_stride = f.o_seq_stride = q_pitch;
  f.q_batch_stride = f.o_batch_stride = q_pitch * s.seqlen_q;
  f.k_head_stride = f.v_head_stride = s.hd;
  f.k_seq_stride = f.v_seq_stride = k_pitch;
  f.k_batch_stride = f.v_batch_stride = k_pitch * s.seqlen_k;
  f.dtype = s.dtype;
  f.head_dim = s.hd;
  f.n_head = s.n_head;
  f.n_head_kv = s.n_head_kv;
  f.batch = s.batch;
  f.seqlen_q = s.seqlen_q;
  f.seqlen_k = s.seqlen_k;
  f.causal = s.causal;
  f.softmax_scale = float(scale);
  f.window_left = s.window_left;
  f.window_right = s.window_right;
  f.softcap = s.softcap;
  p.dout = d_do.get();
  p.do_head_stride = s.hd;
  p.do_seq_stride = q_pitch;
  p.do_batch_stride = q_pitch * s.seqlen_q;
  p.dq = d_dq.get();
  p.dq_head_stride = s.hd;
  p.dq_seq_stride = q_pitch + pad;
  p.dq_batch_stride = (q_pitch + pad) * s.seqlen_q;
  p.dk = d_dk.get();
  p.dv = d_dv.get();
  p.dk_head_stride = p.dv_head_stride = s.hd;
  p.dk_seq_stride = p.dv_seq_stride = k_pitch + pad;
  p.dk_batch_stride = p.dv_batch_stride = (k_pitch + pad) * s.seqlen_k;
  const size_t ws_bytes = ::ga::cuda::flash_backward_plan(p).workspace_bytes;
  // Runs 0, 1: mma.sync and the Hopper kernel (flash_backward_with_kernel); 2..: every other Hopper schedule the
  // build compiled (flash_bwd_variants.h; -DGA_FLASH_ALL_VARIANTS=ON), so a benchmark's candidates are checked too.
  const FlashBwdKernel kernels[] = {FlashBwdKernel::kMmaSync, FlashBwdKernel::kHopper};
  const char* const kernel_names[] = {" [mma.sync]", " [hopper]"};
  for (int ki = 0; ki < 2 + kHopperSchedules; ++ki) {
    const bool variant = ki >= 2;
    const FlashBwdKernel kernel = kernels[variant ? 1 : ki];
    const int sched = variant ? kHopperScheduleIds[ki - 2] : -1;
    const std::string kname = name + (variant ? " [hopper schedule " + std::to_string(sched) + "]" : kernel_names[ki]);
    if (const char* reason = ::ga::cuda::flash_backward_unsupported_reason(p, kernel)) {
      if (!variant) parity.skip(kname, reason);
      continue;
    }
    ASSERT_GT(ws_bytes, 0u) << kname;
    DeviceArray<unsigned char> ws(alloc, ws_bytes);
    ws.poison();  // the kernels must initialise their own workspace
    d_dq.poison();
    d_dk.poison();
    d_dv.poison();
    if (variant) {
      const cudaError_t e = ::ga::cuda::flash_backward_hopper_variant(p, sched, ws.get(), ws_bytes, nullptr);
      if (e == cudaErrorNotSupported) continue;  // this schedule is not compiled into this build
      ASSERT_EQ(e, cudaSuccess) << kname;
    } else {
      ASSERT_EQ(::ga::cuda::flash_backward_with_kernel(p, kernel, ws.get(), ws_bytes, nullptr), cudaSuccess) << kname;
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << kname;
    ++g_runs[variant ? 2 : ki];
    check_gradient(parity, kname + " dq", d_dq.download(), ref.dq, q_rows, q_pitch, q_pitch + pad, s.dtype);
    check_gradient(parity, kname + " dk", d_dk.download(), ref.dk, k_rows, k_pitch, k_pitch + pad, s.dtype);
    check_gradient(parity, kname + " dv", d_dv.download(), ref.dv, k_rows, k_pitch, k_pitch + pad, s.dtype);
  }
}

TEST(CudaFlashBackward, GradientsMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash backward");
  g_worst_rel_l2 = g_worst_elem_over_rms = 0.0;
  g_runs[0] = g_runs[1] = g_runs[2] = 0;
  std::mt19937 rng(20261123);
  const int lengths[][2] = {{1, 1}, {7, 7}, {129, 129}, {7, 129}, {129, 7}, {1000, 1000}};
  const int gqa[][2] = {{2, 2}, {4, 2}, {4, 1}};
  int case_index = 0, long_index = 0;
  for (FlashDtype dt : {FlashDtype::kBf16, FlashDtype::kF16})
    for (int hd : {64, 128, 256})
      for (bool causal : {false, true})
        for (const auto& g : gqa)
          for (const auto& len : lengths) {
            // The float64 reference of a 1000 x 1000 case costs seconds: one GQA ratio per (dtype, hd, mask).
            if (len[0] == 1000 && (long_index++ % 3) != 0) continue;
            const bool padded = (case_index++ % 2) == 0;
            const Shape s{dt, hd, g[0], g[1], len[0] > 200 ? 1 : 2, len[0], len[1], causal, padded};
            run_and_check(parity, alloc, s, rng);
            if (testing::Test::HasFatalFailure()) return;
          }
  print_worst("flash backward");
  parity.finish();
}

// Runs and checks a list of shapes as one parity table (name, seed), printing the worst errors and the cases run.
void check_shape_list(const char* name, unsigned seed, std::initializer_list<Shape> shapes) {
  CachingAllocator alloc(0);
  Parity parity(name);
  g_worst_rel_l2 = g_worst_elem_over_rms = 0.0;
  g_runs[0] = g_runs[1] = g_runs[2] = 0;
  std::mt19937 rng(seed);
  for (const Shape& s : shapes) {
    run_and_check(parity, alloc, s, rng);
    if (testing::Test::HasFatalFailure()) return;
  }
  print_worst(name);
  parity.finish();
}

// 4097 tokens (65 query blocks, 33 key blocks of the Hopper kernel, the last of one row / key) at head dim 128, the
// Hopper kernel's shape, causal with GQA 2:1 (so two query heads add into each dk / dv row): one case, since its
// float64 reference costs ~1e10 multiply-adds on one CPU thread.
TEST(CudaFlashBackward, LongSequence4097) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_list("flash backward 4097", 4097, {Shape{FlashDtype::kBf16, 128, 2, 1, 1, 4097, 4097, true, true}});
}

// Many work tiles: the causal work order (schedules 22, 24, 25: Work in flash_bwd_sm90.cuh) reads the grid as groups
// of ~2 waves of (batch, KV head) pairs (2 key blocks -> 132 pairs a group on a 132-SM GPU, so 17 x 8 = 136 pairs
// make a full group and a partial one), and the persistent CTAs of schedule 25 take 2-3 of the 272 tiles each (their
// Q/dO ring and K/V barriers running on across tiles); full and causal, GQA 2:1.
TEST(CudaFlashBackward, ManyWorkTiles) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_list("flash backward many tiles", 136,
                   {Shape{FlashDtype::kBf16, 128, 16, 8, 17, 129, 129, true, false},
                    Shape{FlashDtype::kF16, 128, 16, 8, 17, 129, 129, false, true}});
}

// A few small shapes: what the device script runs under compute-sanitizer memcheck (partial key and query
// blocks, GQA, causal rows that see no key, several key blocks adding into one dq row).
TEST(CudaFlashBackward, SmallShapesForSanitizer) {
  GA_REQUIRE_CUDA_DEVICE();
  check_shape_list("flash backward small", 8,
                   {
                       Shape{FlashDtype::kBf16, 128, 2, 1, 1, 129, 200, true, true},
                       Shape{FlashDtype::kF16, 64, 4, 2, 2, 7, 300, false, false},
                       Shape{FlashDtype::kBf16, 256, 2, 1, 1, 150, 7, true, true},
                       Shape{FlashDtype::kF16, 256, 2, 2, 1, 70, 130, false, false},
                       // Hopper: 3 key blocks, GQA, partial query block
                       Shape{FlashDtype::kF16, 128, 4, 2, 2, 70, 300, false, false},
                       Shape{FlashDtype::kBf16, 128, 2, 2, 1, 200, 129, true, false},  // Hopper: causal, q > k
                   });
}

// Sliding windows and soft-capping on the mma.sync backward (the Hopper kernel refuses them: SKIPPED lines with its
// reason): windows of 1, 7, 64 and 255 keys, causal, bands and left-only, soft-caps 1 and 2 (every score bent) and 30
// with the scale 4x (only large scores reach it: dS through the cap's derivative 1 - tanh^2), lengths where q != k.
TEST(CudaFlashBackward, WindowsAndSoftcapMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash backward windows softcap");
  g_worst_rel_l2 = g_worst_elem_over_rms = 0.0;
  g_runs[0] = g_runs[1] = g_runs[2] = 0;
  std::mt19937 rng(2027);
  const int lengths[][2] = {{129, 129}, {129, 300}, {300, 129}, {1000, 1000}};
  int case_index = 0;
  for (int hd : {64, 128, 256})
    for (int w : {1, 7, 64, 255}) {
      const int ci = case_index++;
      const auto& len = lengths[ci % 4];
      Shape s{ci % 2 ? FlashDtype::kF16 : FlashDtype::kBf16, hd, 4, ci % 3 == 0 ? 4 : 2, len[0] > 200 ? 1 : 2,
              len[0], len[1], ci % 3 != 2, ci % 2 == 0};
      s.window_left = w - 1;
      if (!s.causal && ci % 2 == 0) s.window_right = w - 1;
      if (ci % 4 == 1) s.softcap = 2.0f;
      run_and_check(parity, alloc, s, rng);
      if (testing::Test::HasFatalFailure()) return;
    }
  for (const float cap : {1.0f, 2.0f, 30.0f}) {
    for (bool causal : {true, false}) {
      Shape s{causal ? FlashDtype::kBf16 : FlashDtype::kF16, causal ? 128 : 64, 4, 2, 2, 129, causal ? 300 : 129,
              causal, true};
      s.softcap = cap;
      s.scale_mul = cap > 10.0f ? 4.0f : 1.0f;
      run_and_check(parity, alloc, s, rng);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  print_worst("flash backward windows softcap");
  parity.finish();
}

TEST(CudaFlashBackward, UnsupportedParamsAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  const int n = 4 * 64 * 128;
  DeviceArray<uint16_t> buf(alloc, n + 64), grads(alloc, 3 * n);
  DeviceArray<float> lse(alloc, 4 * 64);
  DeviceArray<unsigned char> ws(alloc, 1 << 20);
  FlashBwdParams good;
  auto& f = good.fwd;
  f.q = f.k = f.v = f.o = buf.get();
  f.lse = lse.get();
  f.q_head_stride = f.k_head_stride = f.v_head_stride = f.o_head_stride = 128;
  f.q_seq_stride = f.o_seq_stride = 4 * 128;
  f.k_seq_stride = f.v_seq_stride = 2 * 128;
  f.q_batch_stride = f.k_batch_stride = f.v_batch_stride = f.o_batch_stride = n;
  f.head_dim = 128;
  f.n_head = 4;
  f.n_head_kv = 2;
  f.batch = 1;
  f.seqlen_q = f.seqlen_k = 64;
  f.softmax_scale = 0.125f;
  good.dout = buf.get();
  good.do_head_stride = 128;
  good.do_seq_stride = 4 * 128;
  good.do_batch_stride = n;
  good.dq = grads.get();
  good.dk = grads.get() + n;
  good.dv = grads.get() + 2 * n;
  good.dq_head_stride = good.dk_head_stride = good.dv_head_stride = 128;
  good.dq_seq_stride = 4 * 128;
  good.dk_seq_stride = good.dv_seq_stride = 2 * 128;
  good.dq_batch_stride = good.dk_batch_stride = good.dv_batch_stride = n;
  auto expect_refused = [&](FlashBwdParams p, const char* what) {
    const char* reason = ::ga::cuda::flash_backward_unsupported_reason(p);
    ASSERT_NE(reason, nullptr) << what;
    std::printf("refused (%s): %s\n", what, reason);
    grads.poison();
    EXPECT_NE(::ga::cuda::flash_backward(p, ws.get(), 1 << 20, nullptr), cudaSuccess) << what;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (uint16_t x : grads.download()) {
      if (x != 0xFFFF) {
        ADD_FAILURE() << what << ": output touched although refused";
        break;
      }
    }
  };
  FlashBwdParams p = good;
  p.fwd.head_dim = 96;
  expect_refused(p, "head_dim 96");
  // windows and soft-caps: the mma.sync backward takes them (kAuto goes there), the Hopper one refuses with a reason
  for (int which = 0; which < 3; ++which) {
    p = good;
    if (which == 0) p.fwd.window_left = 63;
    if (which == 1) p.fwd.window_right = 5;
    if (which == 2) p.fwd.softcap = 30.0f;
    const char* hopper = ::ga::cuda::flash_backward_unsupported_reason(p, FlashBwdKernel::kHopper);
    ASSERT_NE(hopper, nullptr) << "the Hopper backward accepted a window or a soft-cap";
    std::printf("refused (forced Hopper kernel, window / softcap): %s\n", hopper);
    EXPECT_EQ(::ga::cuda::flash_backward_unsupported_reason(p, FlashBwdKernel::kMmaSync),
              ::ga::cuda::flash_backward_unsupported_reason(good, FlashBwdKernel::kMmaSync));
  }
  p = good;
  p.fwd.window_left = -2;
  expect_refused(p, "window_left -2");
  p = good;
  p.fwd.lse = nullptr;
  expect_refused(p, "no lse");
  p = good;
  p.dq_seq_stride += 4;
  expect_refused(p, "misaligned dq stride");
  p = good;
  p.dk = grads.get() + n + 1;
  expect_refused(p, "misaligned dk");
  p = good;
  p.dout = nullptr;
  expect_refused(p, "no dout");
  {
    // Forcing the Hopper kernel where it does not apply (head dim 64 here; on other GPUs every head dim) is refused
    // with a reason and touches nothing, although mma.sync could run the same parameters.
    p = good;
    p.fwd.head_dim = 64;
    const char* reason = ::ga::cuda::flash_backward_unsupported_reason(p, FlashBwdKernel::kHopper);
    ASSERT_NE(reason, nullptr);
    std::printf("refused (forced Hopper kernel, head_dim 64): %s\n", reason);
    grads.poison();
    EXPECT_NE(::ga::cuda::flash_backward_with_kernel(p, FlashBwdKernel::kHopper, ws.get(), 1 << 20, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (uint16_t x : grads.download()) {
      if (x != 0xFFFF) {
        ADD_FAILURE() << "forced Hopper kernel: output touched although refused";
        break;
      }
    }
  }
  if (const char* device = ::ga::cuda::flash_backward_unsupported_reason(good)) {
    GTEST_SKIP() << device;  // a pre-sm_80 GPU: the parameter checks above still ran
  }
  // A workspace smaller than the plan is an error, not an overrun.
  grads.poison();
  EXPECT_EQ(::ga::cuda::flash_backward(good, ws.get(), ::ga::cuda::flash_backward_plan(good).workspace_bytes - 4,
                                       nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
