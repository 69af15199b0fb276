// Parity of the Hopper flash forward's variable-length and paged-KV forms (flash_attention.h: cu_seqlens_q/k,
// seqused_q/k, block_table, o_f32) with a float64 reference computed here from the same 16-bit inputs.
//
// Cases: several sequences of awkward lengths (1, 7, 129, 1000 queries; keys equal to, fewer or more than the
// queries, so causal rows start mid-cache or see nothing) packed into one call; GQA 2/2, 4/2, 4/1; head dims
// 64/128/256; causal and full; bf16/fp16; every compiled kernel variant. Paged: page sizes 16 and 64 (several
// pages per key tile) and 128/256 (a tile inside one page), pages shuffled over a pool whose unused slots hold
// NaN, so a key past a sequence's end that leaked into P V (the kernel zeroes the last V tile's tail) turns
// the output NaN; seqused_q shorter than a sequence (its other rows must stay unwritten) and f32 o (the engine's
// form). Outputs are NaN-poisoned before each run; O rows carry 64 elements of padding that must keep the
// poison. Bars as the dense test: relative L2 of O <= 1e-2, every element within 5% of the output RMS, LSE
// within 2e-3 + 1e-3 |lse|, -inf exactly for rows that see no key.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
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
using ::ga::test::cuda::from_bits;
using ::ga::test::cuda::Parity;
using ::ga::test::cuda::random_tensor;

struct Seq {
  int n_q, n_k;
  int used_q = -1;  // < 0: all n_q queries (seqused_q not passed unless some sequence sets it)
};

struct VarCase {
  FlashDtype dtype;
  int hd, n_head, n_head_kv;
  bool causal;
  std::vector<Seq> seqs;
  int page_size = 0;  // 0: packed keys (cu_seqlens_k)
  bool o_f32 = false;
  int window_left = -1;  // FlashParams::window_left (causal: the right side is the diagonal)
  float softcap = 0.0f;
};

std::string name_of(const VarCase& c) {
  // snprintf, not std::string operator+ chains: g++ 12 -O3 warns falsely (-Wrestrict) on those
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf), "%s hd%d h%d/%d %s %s%d%s seqs",
                        c.dtype == FlashDtype::kBf16 ? "bf16" : "f16",
                        c.hd, c.n_head, c.n_head_kv, c.causal ? "causal" : "full", c.page_size > 0 ? "paged" : "packed",
                        c.page_size, c.o_f32 ? " o_f32" : "");
  if (n >= 0 && n < static_cast<int>(sizeof(buf)) && (c.window_left >= 0 || c.softcap > 0.0f)) {
    n += std::snprintf(buf + n, sizeof(buf) - size_t(n), " window_left %d softcap %g", c.window_left, c.softcap);
  }
  for (const Seq& q : c.seqs) {
    if (n < 0 || n >= static_cast<int>(sizeof(buf))) break;
    n += std::snprintf(buf + n, sizeof(buf) - size_t(n), " %d/%d(%d)", q.n_q, q.n_k, q.used_q);
  }
  return buf;
}

void run_case(Parity& parity, CachingAllocator& alloc, const VarCase& c, std::mt19937& rng) {
  const std::string name = name_of(c);
  const int d = c.hd, nb = static_cast<int>(c.seqs.size()), group = c.n_head / c.n_head_kv;
  const bool paged = c.page_size > 0;
  const bool any_used_q = std::any_of(c.seqs.begin(), c.seqs.end(), [](const Seq& s) { return s.used_q >= 0; });
  // Query rows, and each sequence's key rows in the k/v buffer (packed: consecutive; paged: through pages).
  std::vector<int32_t> cu_q{0}, cu_k{0}, used_q, used_k;
  for (const Seq& s : c.seqs) {
    cu_q.push_back(cu_q.back() + s.n_q);
    cu_k.push_back(cu_k.back() + s.n_k);
    used_q.push_back(s.used_q >= 0 ? s.used_q : s.n_q);
    used_k.push_back(s.n_k);
  }
  const int total_q = cu_q.back();
  int max_q = 0, max_k = 0;
  for (const Seq& s : c.seqs) max_q = std::max(max_q, s.n_q), max_k = std::max(max_k, s.n_k);
  std::vector<std::vector<int>> key_rows(nb);
  std::vector<int32_t> table;
  int64_t table_stride = 0, n_pages = 0, kv_rows = cu_k.back();
  if (paged) {
    table_stride = (max_k + c.page_size - 1) / c.page_size;
    for (const Seq& s : c.seqs) n_pages += (s.n_k + c.page_size - 1) / c.page_size;
    n_pages += 3;  // pages no sequence uses (NaN)
    std::vector<int32_t> ids(static_cast<size_t>(n_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    table.assign(static_cast<size_t>(nb * table_stride), 0);
    size_t next = 0;
    for (int b = 0; b < nb; ++b) {
      const int pages = (c.seqs[b].n_k + c.page_size - 1) / c.page_size;
      for (int i = 0; i < pages; ++i) table[size_t(b * table_stride + i)] = ids[next++];
      for (int j = 0; j < c.seqs[b].n_k; ++j) {
        key_rows[b].push_back(table[size_t(b * table_stride + j / c.page_size)] * c.page_size + j % c.page_size);
      }
    }
    kv_rows = n_pages * c.page_size;
  } else {
    for (int b = 0; b < nb; ++b)
      for (int j = 0; j < c.seqs[b].n_k; ++j) key_rows[b].push_back(cu_k[b] + j);
  }

  std::vector<uint16_t> qb, kb, vb;
  std::vector<float> qf, kf, vf;
  const size_t kv_elems = size_t(kv_rows) * c.n_head_kv * d;
  random_tensor(rng, size_t(total_q) * c.n_head * d, 1.5f, c.dtype, &qb, &qf);
  random_tensor(rng, kv_elems, 1.5f, c.dtype, &kb, &kf);
  random_tensor(rng, kv_elems, 1.0f, c.dtype, &vb, &vf);
  if (paged) {  // slots no sequence owns: NaN (0xFFFF is a NaN in both 16-bit types)
    std::vector<char> owned(size_t(kv_rows), 0);
    for (const auto& rows : key_rows)
      for (int r : rows) owned[size_t(r)] = 1;
    for (int64_t r = 0; r < kv_rows; ++r) {
      if (owned[size_t(r)]) continue;
      std::fill_n(kb.begin() + r * c.n_head_kv * d, c.n_head_kv * d, uint16_t{0xFFFF});
      std::fill_n(vb.begin() + r * c.n_head_kv * d, c.n_head_kv * d, uint16_t{0xFFFF});
    }
  }

  // float64 reference: out [total_q][n_head][d], lse [n_head][total_q]; rows past used_q are not computed.
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<double> ref(size_t(total_q) * c.n_head * d, 0.0), ref_lse(size_t(c.n_head) * total_q, -INFINITY);
  std::vector<char> computed(size_t(total_q), 0);
  std::vector<double> p(size_t(max_k) + 1);
  for (int b = 0; b < nb; ++b) {
    const int sq = used_q[size_t(b)], sk = c.seqs[b].n_k;
    for (int i = 0; i < sq; ++i) {
      const int row = cu_q[b] + i;
      computed[size_t(row)] = 1;
      const int last = c.causal ? std::min(sk - 1, i + sk - sq) : sk - 1;
      const int first = c.window_left >= 0 ? std::max(0, i + sk - sq - c.window_left) : 0;
      if (last < first) continue;
      for (int h = 0; h < c.n_head; ++h) {
        const int hk = h / group;
        const float* qi = &qf[(size_t(row) * c.n_head + h) * d];
        double mx = -INFINITY;
        for (int j = first; j <= last; ++j) {
          const float* kj = &kf[(size_t(key_rows[b][j]) * c.n_head_kv + hk) * d];
          double dot = 0.0;
          for (int e = 0; e < d; ++e) dot += double(qi[e]) * double(kj[e]);
          p[j] = dot * scale;
          if (c.softcap > 0.0f) p[j] = c.softcap * std::tanh(p[j] / c.softcap);
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (int j = first; j <= last; ++j) sum += (p[j] = std::exp(p[j] - mx));
        double* o = &ref[(size_t(row) * c.n_head + h) * d];
        for (int j = first; j <= last; ++j) {
          const float* vj = &vf[(size_t(key_rows[b][j]) * c.n_head_kv + hk) * d];
          for (int e = 0; e < d; ++e) o[e] += p[j] / sum * vj[e];
        }
        ref_lse[size_t(h) * total_q + row] = mx + std::log(sum);
      }
    }
  }

  const int64_t o_pitch = int64_t{c.n_head} * d + 64;
  const size_t o_elems = size_t(total_q) * o_pitch;
  DeviceArray<uint16_t> dq(alloc, qb.size()), dk(alloc, kb.size()), dv(alloc, vb.size());
  DeviceArray<uint16_t> dout16(alloc, c.o_f32 ? 1 : o_elems);
  DeviceArray<float> dout32(alloc, c.o_f32 ? o_elems : 1), dlse(alloc, ref_lse.size());
  DeviceArray<int32_t> dcu_q(alloc, cu_q.size()), dcu_k(alloc, cu_k.size()), dused_q(alloc, used_q.size()),
      dused_k(alloc, used_k.size()), dtable(alloc, std::max<size_t>(table.size(), 1));
  dq.upload(qb);
  dk.upload(kb);
  dv.upload(vb);
  dcu_q.upload(cu_q);
  dcu_k.upload(cu_k);
  dused_q.upload(used_q);
  dused_k.upload(used_k);
  if (paged) dtable.upload(table);

  FlashParams fp;
  fp.q = dq.get();
  fp.k = dk.get();
  fp.v = dv.get();
  fp.o = c.o_f32 ? static_cast<void*>(dout32.get()) : static_cast<void*>(dout16.get());
  fp.o_f32 = c.o_f32;
  fp.lse = dlse.get();
  fp.q_head_stride = fp.k_head_stride = fp.v_head_stride = fp.o_head_stride = d;
  fp.q_seq_stride = int64_t{c.n_head} * d;
  fp.k_seq_stride = fp.v_seq_stride = int64_t{c.n_head_kv} * d;
  fp.o_seq_stride = o_pitch;
  fp.dtype = c.dtype;
  fp.head_dim = d;
  fp.n_head = c.n_head;
  fp.n_head_kv = c.n_head_kv;
  fp.batch = nb;
  fp.seqlen_q = max_q;
  fp.seqlen_k = max_k;
  fp.causal = c.causal;
  fp.softmax_scale = scale;
  fp.window_left = c.window_left;
  fp.softcap = c.softcap;
  fp.cu_seqlens_q = dcu_q.get();
  fp.total_q = total_q;
  if (any_used_q) fp.seqused_q = dused_q.get();
  if (paged) {
    fp.seqused_k = dused_k.get();
    fp.block_table = dtable.get();
    fp.block_table_stride = table_stride;
    fp.page_size = c.page_size;
    fp.n_pages = n_pages;
  } else {
    fp.cu_seqlens_k = dcu_k.get();
    fp.total_k = kv_rows;
  }
  if (const char* reason = ::ga::cuda::flash_unsupported_reason(fp)) {
    parity.skip(name, reason);
    return;
  }
  for (int sched = 0; sched < ::ga::cuda::flash_variant_count(); ++sched) {
    if (!::ga::cuda::flash_variant_compiled(sched)) continue;
    const std::string cname = name + " sched" + std::to_string(sched);
    // the mma.sync forward (and its sm_75 build) has no varlen / paged form: refused
    if (sched == ::ga::cuda::kFlashSm80Variant || sched == ::ga::cuda::kFlashSm75Variant) {
      if (::ga::cuda::flash_variant_unsupported_reason(fp, sched) == nullptr ||
          ::ga::cuda::flash_forward_with_schedule(fp, sched, nullptr) != cudaErrorNotSupported) {
        parity.fail(cname + ": the mma.sync variant accepted variable-length / paged parameters");
      }
      continue;
    }
    dout16.poison();
    dout32.poison();
    dlse.poison();
    ASSERT_EQ(::ga::cuda::flash_forward_with_schedule(fp, sched, nullptr), cudaSuccess) << cname;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cname;
    std::vector<float> got(ref.size());
    std::vector<double> want;
    std::vector<float> have;
    size_t bad_untouched = 0;
    const std::vector<uint16_t> o16 = c.o_f32 ? std::vector<uint16_t>{} : dout16.download();
    const std::vector<float> o32 = c.o_f32 ? dout32.download() : std::vector<float>{};
    for (int row = 0; row < total_q; ++row) {
      for (int64_t e = 0; e < o_pitch; ++e) {
        const size_t i = size_t(row) * o_pitch + e;
        const bool data = e < int64_t{c.n_head} * d && computed[size_t(row)];
        const bool poisoned = c.o_f32 ? std::isnan(o32[i]) : o16[i] == 0xFFFF;
        if (!data) {
          bad_untouched += !poisoned;  // padding, and rows past seqused_q: never written
          continue;
        }
        have.push_back(c.o_f32 ? o32[i] : from_bits(o16[i], c.dtype));
        want.push_back(ref[size_t(row) * c.n_head * d + e]);
      }
    }
    if (bad_untouched > 0) parity.fail(cname + ": wrote " + std::to_string(bad_untouched) + " padding/unused elements");
    double err = 0.0, norm = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (double(have[i]) - want[i]) * (double(have[i]) - want[i]);
      norm += want[i] * want[i];
    }
    const double rel = norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
    const double rms = std::sqrt(norm / double(std::max<size_t>(want.size(), 1)));
    if (!(rel <= 1e-2)) parity.fail(cname + ": relative L2 error " + std::to_string(rel) + " > 1e-2");
    parity.compare(cname + " O", have.data(), want.data(), want.size(), 0.0, 0.05 * std::max(rms, 1e-3));
    const std::vector<float> got_lse = dlse.download();
    std::vector<double> lse_want;
    std::vector<float> lse_have;
    for (int h = 0; h < c.n_head; ++h)
      for (int row = 0; row < total_q; ++row) {
        if (!computed[size_t(row)]) continue;
        const size_t i = size_t(h) * total_q + row;
        if (std::isinf(ref_lse[i])) {
          if (!(std::isinf(got_lse[i]) && got_lse[i] < 0)) parity.fail(cname + ": lse of a row with no key not -inf");
        } else {
          lse_want.push_back(ref_lse[i]);
          lse_have.push_back(got_lse[i]);
        }
      }
    if (!lse_want.empty()) {
      parity.compare(cname + " lse", lse_have.data(), lse_want.data(), lse_want.size(), 1e-3, 2e-3);
    }
  }
}

TEST(CudaFlashVarlen, PackedSequencesMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash varlen");
  std::mt19937 rng(411);
  const std::vector<Seq> self{{1, 1}, {7, 7}, {129, 129}, {1000, 1000}};
  const std::vector<Seq> cross{{7, 300}, {1000, 129}, {1, 1000}, {129, 7}};  // keys >, < queries
  const int gqa[][2] = {{2, 2}, {4, 2}, {4, 1}};
  int i = 0;
  for (int hd : {64, 128, 256})
    for (bool causal : {false, true}) {
      const FlashDtype dt = (i % 2) ? FlashDtype::kF16 : FlashDtype::kBf16;
      const auto& g = gqa[i++ % 3];
      run_case(parity, alloc, VarCase{dt, hd, g[0], g[1], causal, self}, rng);
      if (testing::Test::HasFatalFailure()) return;
      run_case(parity, alloc, VarCase{dt, hd, g[0], g[1], causal, cross}, rng);
      if (testing::Test::HasFatalFailure()) return;
    }
  parity.finish();
}

TEST(CudaFlashVarlen, PagedKvMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash paged");
  std::mt19937 rng(412);
  // the engine's shape of a step: prompt chunks continuing a cache (keys > queries), one run cut by seqused_q
  const std::vector<Seq> runs{{129, 129}, {7, 1000}, {300, 557, 200}, {1, 70}, {1000, 1000}};
  for (int page : {16, 64, 128, 256})
    for (bool causal : {true, false}) {
      const bool f32 = page == 16 || !causal;
      run_case(parity, alloc, VarCase{FlashDtype::kF16, 128, 4, 1, causal, runs, page, f32}, rng);
      if (testing::Test::HasFatalFailure()) return;
    }
  run_case(parity, alloc, VarCase{FlashDtype::kBf16, 64, 4, 2, true, runs, 16, false}, rng);
  run_case(parity, alloc, VarCase{FlashDtype::kF16, 256, 2, 2, true, runs, 16, true}, rng);
  run_case(parity, alloc, VarCase{FlashDtype::kF16, 256, 2, 1, false, runs, 64, false}, rng);
  parity.finish();
}

// Sliding windows (W = 1, 7, 64, 255 keys: window_left W - 1) and soft-caps (2, 30) over packed and paged sequences
// of awkward lengths, causal and full, head dims 64 / 96 / 128 / 256: every query tile's key range starts at its
// window (pages shuffled, unowned slots NaN: a key tile outside a sequence that leaked in turns the output NaN).
TEST(CudaFlashVarlen, WindowsAndSoftcapMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash varlen windows");
  std::mt19937 rng(414);
  const std::vector<Seq> self{{1, 1}, {7, 7}, {129, 129}, {1000, 1000}};
  const std::vector<Seq> runs{{129, 129}, {7, 1000}, {300, 557, 200}, {1, 70}, {1000, 1000}};
  int i = 0;
  for (int hd : {64, 96, 128, 256})
    for (int w : {1, 7, 64, 255}) {
      const FlashDtype dt = (i % 2) ? FlashDtype::kF16 : FlashDtype::kBf16;
      const bool causal = i % 3 != 2;
      const float cap = i % 4 == 1 ? 2.0f : i % 4 == 3 ? 30.0f : 0.0f;
      ++i;
      VarCase packed{dt, hd, 4, 2, causal, self};
      packed.window_left = w - 1;
      packed.softcap = cap;
      run_case(parity, alloc, packed, rng);
      if (testing::Test::HasFatalFailure()) return;
      VarCase paged{dt, hd, 4, 1, causal, runs, hd == 256 ? 64 : 16, i % 2 == 0};
      paged.window_left = w - 1;
      paged.softcap = cap;
      run_case(parity, alloc, paged, rng);
      if (testing::Test::HasFatalFailure()) return;
    }
  // head dim 96 without a window (the 128 tiles with 32 zero columns), packed and paged, f32 O
  run_case(parity, alloc, VarCase{FlashDtype::kF16, 96, 4, 2, true, self}, rng);
  run_case(parity, alloc, VarCase{FlashDtype::kBf16, 96, 4, 1, false, runs, 64, true}, rng);
  parity.finish();
}

// Few tiles, for compute-sanitizer (memcheck, racecheck) in the device script.
TEST(CudaFlashVarlen, SmallShapesForSanitizer) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("flash varlen small");
  std::mt19937 rng(413);
  const std::vector<Seq> runs{{7, 7}, {130, 140}, {1, 20, 0}};
  run_case(parity, alloc, VarCase{FlashDtype::kF16, 128, 2, 1, true, runs}, rng);
  run_case(parity, alloc, VarCase{FlashDtype::kF16, 128, 2, 1, true, runs, 16, true}, rng);
  parity.finish();
}

TEST(CudaFlashVarlen, UnsupportedLayoutsAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  FlashParams p;
  alignas(16) static uint16_t buf[64];
  static int32_t offsets[2] = {0, 1};
  p.q = p.k = p.v = p.o = buf;
  p.dtype = FlashDtype::kF16;
  p.head_dim = 128;
  p.n_head = p.n_head_kv = p.batch = p.seqlen_q = p.seqlen_k = 1;
  p.softmax_scale = 1.0f;
  p.cu_seqlens_q = offsets;
  p.total_q = 1;
  p.seqused_k = offsets;
  p.block_table = offsets;
  p.block_table_stride = 1;
  p.n_pages = 1;
  for (int page : {12, 24, 96}) {  // not a multiple of 8, or neither divides nor is a multiple of the key tile
    p.page_size = page;
    const char* why = ::ga::cuda::flash_unsupported_reason(p);
    ASSERT_NE(why, nullptr) << "page_size " << page;
    std::printf("refused (page_size %d): %s\n", page, why);
  }
  p.page_size = 16;
  p.cu_seqlens_k = offsets;  // both key forms at once
  EXPECT_NE(::ga::cuda::flash_unsupported_reason(p), nullptr);
  p.cu_seqlens_k = nullptr;
  p.seqused_k = nullptr;  // paged needs the key counts
  EXPECT_NE(::ga::cuda::flash_unsupported_reason(p), nullptr);
  p.seqused_k = offsets;
  p.dtype = FlashDtype::kFp8E4m3;
  EXPECT_NE(::ga::cuda::flash_unsupported_reason(p), nullptr);
  p.dtype = FlashDtype::kF16;
  ::ga::cuda::FlashBwdParams bwd;
  bwd.fwd = p;
  EXPECT_NE(::ga::cuda::flash_backward_unsupported_reason(bwd), nullptr);
  if (const char* device = ::ga::cuda::flash_unsupported_reason(p)) GTEST_SKIP() << device;
}

}  // namespace
