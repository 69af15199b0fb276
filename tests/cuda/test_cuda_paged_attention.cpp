// Parity of the multi-sequence paged form of the CUDA attention (backends/cuda/kernels/attention.h,
// block_table != nullptr) with a float64 reference computed here from the same f16 pool, and with
// the project's CPU reference ga::cpu::paged_attention.
//
// A case is a batch of runs (query tokens of one sequence, continuing its cache at pos0) over one
// pool of KV slots. Block tables are random: each sequence draws its blocks from a shuffled pool,
// so neighbouring positions of a sequence live in unrelated places. Traps: every pool slot no
// sequence owns holds f16 NaN (a wrong slot, or a key read past a sequence's end, poisons the
// output), table entries past a sequence's blocks hold an id far outside the pool, outputs (and the
// padding of padded q/out strides) are NaN-poisoned before each launch. The grid covers pure decode
// batches (64 one-token runs: the Scheduler's steady state), multi-token decode runs (<= 8 tokens),
// mixed batches of decode runs and prompt chunks (two launches of one call), a single long prompt
// chunk, block sizes 1, 7, 16, 32, GQA 32/8, 8/8 and 8/1, head dims 64/128/256 and the awkward
// lengths 1, 7, 17, 129, 1000, 4097, and both split merges (workspace, cluster; decode_merge). One
// workspace sized for the largest batch serves every smaller call (the zero-filled-counter contract)
// and a captured graph replays with new device-side positions.
// Sliding windows (W = 1, 2, 7, 64, 255, 1000: window_left W - 1) and soft-caps run over the same kinds of
// batches; positions more than 256 below each run's first window hold f16 NaN (no kernel reads a key tile
// that far below a window: the mma.sync kernels start exactly at it, the Hopper prefill at its key tile), and
// the Hopper prefill (prefill_staging: the flash kernel's paged varlen form) runs the same cases as the
// mma.sync prefill, head dim 96 included.
// Tolerance: as test_cuda_attention.cpp (relative L2 1e-3 per case, 2e-2 of the row RMS per element;
// the check, the f16 helpers and the float64 softmax are attention_check.h, shared with it).
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_check.h"
#include "backends/cpu/ops.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/stream.h"
#include "cuda_harness.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;

constexpr int32_t kFarBlock = 1 << 29;  // table padding: far outside every pool of these tests

struct QueryRun {
  int n_q;
  int64_t pos0;
};

struct Case {
  int head_dim, n_head, n_head_kv, block_size;
  std::vector<QueryRun> runs;
  bool padded;  // q/out/kv strides with padding
  int decode_splits = 0;
  int decode_stages = 0;  // 0: the default; 3: the 3-stage decode kernel (hd 128, when built)
  ::ga::cuda::AttentionParams::DecodeMerge merge = ::ga::cuda::AttentionParams::DecodeMerge::kAuto;
  int window_left = -1;     // AttentionParams::window_left
  float softcap = 0.0f;     // AttentionParams::softcap
  float scale_mul = 1.0f;   // times 1 / sqrt(head_dim)
  bool hopper_prefill = false;  // pass prefill_staging: the prefill part on the Hopper flash kernel where it applies
};

// Positions of a run at pos0 that no kernel may read under the case's window: more than 256 below its first
// query's window (a key tile of the Hopper prefill starts at most 255 keys below a row's window).
int64_t unread_below(const Case& c, int64_t pos0) {
  return c.window_left >= 0 ? std::max<int64_t>(0, pos0 - c.window_left - 256) : 0;
}

double scale_of(const Case& c) { return c.scale_mul / std::sqrt(static_cast<double>(c.head_dim)); }

using DecodeMerge = ::ga::cuda::AttentionParams::DecodeMerge;

std::string name_of(const Case& c) {
  std::string runs;
  for (size_t i = 0; i < c.runs.size() && i < 6; ++i) runs += str(" ", c.runs[i].n_q, "@", c.runs[i].pos0);
  if (c.runs.size() > 6) runs += str(" ... (", c.runs.size(), " runs)");
  return str("hd ", c.head_dim, " heads ", c.n_head, "/", c.n_head_kv, " bs ", c.block_size, runs,
             c.padded ? " padded" : "", c.decode_splits > 0 ? str(" splits ", c.decode_splits) : std::string(),
             c.decode_stages > 0 ? str(" stages ", c.decode_stages) : std::string(),
             c.merge == DecodeMerge::kCluster     ? " cluster merge"
             : c.merge == DecodeMerge::kWorkspace ? " workspace merge"
                                                  : "",
             c.window_left >= 0 ? str(" window_left ", c.window_left) : std::string(),
             c.softcap > 0.0f ? str(" softcap ", c.softcap, " scale x", c.scale_mul) : std::string(),
             c.hopper_prefill ? " hopper prefill" : "");
}

// Host copies of one batch: q as floats, the pool as f16 bits, the run and table arrays.
struct Problem {
  Case c;
  int n_tokens = 0, max_seq_tokens = 0;
  int64_t max_kv = 0, table_stride = 0, n_blocks = 0;
  int64_t q_stride = 0, out_stride = 0, kv_stride = 0;
  std::vector<float> q;
  std::vector<uint16_t> k, v;  // [n_blocks * block_size][kv_stride]
  std::vector<int32_t> q_start, pos0, table;
};

int64_t slot_of(const Problem& pr, int s, int64_t pos) {
  const int bs = pr.c.block_size;
  return int64_t{pr.table[static_cast<size_t>(s * pr.table_stride + pos / bs)]} * bs + pos % bs;
}

Problem make_problem(const Case& c, std::mt19937& rng) {
  Problem pr;
  pr.c = c;
  const int bs = c.block_size;
  pr.q_start.push_back(0);
  int64_t used_blocks = 0;
  for (const QueryRun& r : c.runs) {
    pr.n_tokens += r.n_q;
    pr.q_start.push_back(pr.n_tokens);
    pr.pos0.push_back(static_cast<int32_t>(r.pos0));
    pr.max_seq_tokens = std::max(pr.max_seq_tokens, r.n_q);
    pr.max_kv = std::max(pr.max_kv, r.pos0 + r.n_q);
    used_blocks += (r.pos0 + r.n_q + bs - 1) / bs;
  }
  pr.max_kv += 5;  // a bound, not the exact maximum
  pr.table_stride = (pr.max_kv + bs - 1) / bs + 1;
  pr.n_blocks = used_blocks + used_blocks / 3 + 3;  // spare blocks stay NaN
  std::vector<int32_t> free_blocks(static_cast<size_t>(pr.n_blocks));
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  pr.table.assign(static_cast<size_t>(c.runs.size() * pr.table_stride), kFarBlock);
  size_t next = 0;
  for (size_t s = 0; s < c.runs.size(); ++s) {
    const int64_t blocks = (c.runs[s].pos0 + c.runs[s].n_q + bs - 1) / bs;
    for (int64_t b = 0; b < blocks; ++b) {
      pr.table[static_cast<size_t>(int64_t(s) * pr.table_stride + b)] = free_blocks[next++];
    }
  }

  const int64_t q_row = int64_t{c.n_head} * c.head_dim;
  const int64_t kv_row = int64_t{c.n_head_kv} * c.head_dim;
  pr.q_stride = q_row + (c.padded ? 6 : 0);
  pr.out_stride = q_row + (c.padded ? 10 : 0);
  pr.kv_stride = kv_row + (c.padded ? 8 : 0);
  pr.q = random_query_rows(rng, pr.n_tokens, q_row, pr.q_stride);
  std::normal_distribution<float> kv_dist(0.0f, 1.0f);
  pr.k.assign(static_cast<size_t>(pr.n_blocks * bs * pr.kv_stride), kHalfNaN);
  pr.v.assign(pr.k.size(), kHalfNaN);
  for (size_t s = 0; s < c.runs.size(); ++s) {
    for (int64_t j = unread_below(c, c.runs[s].pos0); j < c.runs[s].pos0 + c.runs[s].n_q; ++j) {
      const int64_t row = slot_of(pr, static_cast<int>(s), j) * pr.kv_stride;
      random_kv_row(kv_dist, rng, pr.k.data() + row, pr.v.data() + row, kv_row);
    }
  }
  return pr;
}

// float64 causal GQA attention of every run through its block table: [n_tokens][n_head][head_dim].
std::vector<double> reference(const Problem& pr) {
  const Case& c = pr.c;
  const int hd = c.head_dim, group = c.n_head / c.n_head_kv;
  const double scale = scale_of(c);
  std::vector<double> out(static_cast<size_t>(pr.n_tokens) * c.n_head * hd, 0.0);
  std::vector<int> seq_of(static_cast<size_t>(pr.n_tokens));
  for (size_t s = 0; s < c.runs.size(); ++s) {
    for (int t = pr.q_start[s]; t < pr.q_start[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = static_cast<int>(s);
  }
  for_tokens_in_parallel([&](int t_begin, int t_step) {
    std::vector<double> p(static_cast<size_t>(pr.max_kv));
    std::vector<int64_t> rows(static_cast<size_t>(pr.max_kv));
    for (int t = t_begin; t < pr.n_tokens; t += t_step) {
      const int s = seq_of[static_cast<size_t>(t)];
      const int64_t last = pr.pos0[static_cast<size_t>(s)] + (t - pr.q_start[static_cast<size_t>(s)]);
      const int64_t first = window_first(last, c.window_left);
      for (int64_t j = first; j <= last; ++j) rows[static_cast<size_t>(j)] = slot_of(pr, s, j) * pr.kv_stride;
      for (int h = 0; h < c.n_head; ++h) {
        attend_one_head(pr.q.data() + t * pr.q_stride + int64_t{h} * hd, hd, scale, last, rows.data(), pr.k.data(),
                        pr.v.data(), int64_t{h / group} * hd, p.data(),
                        out.data() + (static_cast<size_t>(t) * c.n_head + h) * hd, first, c.softcap);
      }
    }
  });
  return out;
}

// Params for a problem (pointers set by DeviceProblem).
::ga::cuda::AttentionParams params_for(const Problem& pr) {
  ::ga::cuda::AttentionParams p;
  p.q_token_stride = pr.q_stride;
  p.kv_pos_stride = pr.kv_stride;
  p.out_token_stride = pr.out_stride;
  p.n_tokens = pr.n_tokens;
  p.n_head = pr.c.n_head;
  p.n_head_kv = pr.c.n_head_kv;
  p.head_dim = pr.c.head_dim;
  p.max_kv_positions = pr.max_kv;
  p.scale = static_cast<float>(scale_of(pr.c));
  p.window_left = pr.c.window_left;
  p.softcap = pr.c.softcap;
  p.n_seqs = static_cast<int>(pr.c.runs.size());
  p.block_table_stride = pr.table_stride;
  p.block_size = pr.c.block_size;
  p.n_kv_blocks = pr.n_blocks;
  p.max_seq_tokens = pr.max_seq_tokens;
  p.decode_splits = pr.c.decode_splits;
  p.decode_stages = pr.c.decode_stages;
  p.decode_merge = pr.c.merge;
  p.block_table = reinterpret_cast<const int32_t*>(16);  // only its presence matters until uploaded
  return p;
}

// The problem on the device. The workspace is the caller's (shared between calls) or its own.
struct DeviceProblem {
  CachingAllocator* alloc;  // the case's (the Hopper prefill's staging comes from it too)
  DeviceArray<float> q, out;
  DeviceArray<uint16_t> k, v;
  DeviceArray<int32_t> q_start, pos0, table;
  ::ga::cuda::AttentionParams p;

  DeviceProblem(CachingAllocator& a, const Problem& pr)
      : alloc(&a),
        q(a, pr.q.size()),
        out(a, static_cast<size_t>(pr.out_stride * pr.n_tokens)),
        k(a, pr.k.size()),
        v(a, pr.v.size()),
        q_start(a, pr.q_start.size()),
        pos0(a, pr.pos0.size()),
        table(a, pr.table.size()) {
    q.upload(pr.q);
    k.upload(pr.k);
    v.upload(pr.v);
    q_start.upload(pr.q_start);
    pos0.upload(pr.pos0);
    table.upload(pr.table);
    p = params_for(pr);
    p.q = q.get();
    p.k = reinterpret_cast<const __half*>(k.get());
    p.v = reinterpret_cast<const __half*>(v.get());
    p.out = out.get();
    p.seq_q_start = q_start.get();
    p.seq_pos0 = pos0.get();
    p.block_table = table.get();
  }
};

// Checks a downloaded output against the reference (every token of every run), padding untouched.
void check_output(Parity& parity, const std::string& name, const Problem& pr, const std::vector<float>& got,
                  const std::vector<double>& ref) {
  check_attention_output(parity, name, pr.n_tokens, pr.c.n_head, pr.c.head_dim, pr.out_stride, got, ref);
}

// One launch on a poisoned output with `workspace` (zero-filled by the caller), compared with the
// float64 reference. A rejected case is a failure: every case the tests name is meant to run.
void launch_and_check(Parity& parity, DeviceProblem& dev, const Problem& pr, DeviceArray<uint8_t>& workspace,
                      const std::string& name) {
  dev.p.workspace = workspace.get();
  dev.p.workspace_bytes = workspace.size();
  if (const char* why = ::ga::cuda::attention_unsupported_reason(dev.p)) {
    parity.fail(name + ": rejected: " + why);
    return;
  }
  // The Hopper prefill: staging for it (256-byte aligned: the allocator's blocks are), and it must take the call
  // where the device and the layout allow (else the case runs the mma.sync prefill and says why).
  DeviceArray<uint8_t> staging(*dev.alloc, std::max<size_t>(::ga::cuda::attention_prefill_staging_bytes(dev.p), 1));
  if (pr.c.hopper_prefill) {
    dev.p.prefill_staging = staging.get();
    dev.p.prefill_staging_bytes = staging.size();
    if (const char* why = ::ga::cuda::attention_hopper_prefill_reason(dev.p)) parity.skip(name + " (hopper)", why);
  }
  dev.out.poison();
  GA_CUDA_CHECK(::ga::cuda::attention(dev.p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  check_output(parity, name, pr, dev.out.download(), reference(pr));
}

void run_case(Parity& parity, CachingAllocator& alloc, const Case& c, std::mt19937& rng) {
  const Problem pr = make_problem(c, rng);
  DeviceProblem dev(alloc, pr);
  DeviceArray<uint8_t> workspace(alloc, ::ga::cuda::attention_workspace_bytes(dev.p) + 1);
  GA_CUDA_CHECK(cudaMemset(workspace.get(), 0, workspace.size()));
  launch_and_check(parity, dev, pr, workspace, name_of(c));
}

// n one-token decode runs over caches drawn from `lens`.
std::vector<QueryRun> decode_runs(int n, const std::vector<int64_t>& lens, std::mt19937& rng) {
  std::vector<QueryRun> runs;
  for (int i = 0; i < n; ++i) runs.push_back({1, lens[rng() % lens.size()] - 1});
  return runs;
}

// Small shapes for compute-sanitizer (gtest filter *Small*): every path once, little work.
TEST(CudaPagedAttention, SmallShapesMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention small");
  std::mt19937 rng(7);
  run_case(parity, alloc, Case{64, 8, 2, 7, {{1, 0}, {1, 6}, {3, 128}, {1, 40}}, true}, rng);
  run_case(parity, alloc, Case{64, 4, 4, 16, {{1, 20}, {19, 3}, {8, 0}}, false}, rng);
  run_case(parity, alloc, Case{128, 8, 1, 1, {{37, 92}}, true}, rng);
  run_case(parity, alloc, Case{64, 8, 2, 32, {{2, 300}, {1, 0}}, false, 5}, rng);
  parity.finish();
}

TEST(CudaPagedAttention, DecodeBatchesMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention decode");
  std::mt19937 rng(2026);
  const std::vector<int64_t> lens = {1, 7, 129, 1000};
  // the Scheduler's steady state: many one-token runs, GQA 32/8, head_dim 128, block_size 16
  run_case(parity, alloc, Case{128, 32, 8, 16, decode_runs(64, lens, rng), false}, rng);
  run_case(parity, alloc, Case{128, 32, 8, 16, decode_runs(3, {4097, 1000}, rng), true}, rng);
  for (int hd : {64, 128, 256}) {
    for (int bs : {1, 7, 16, 32}) {
      const int heads_kv = (bs % 2 == 0) ? 8 : 2;
      run_case(parity, alloc, Case{hd, 8, heads_kv, bs, decode_runs(hd == 256 ? 5 : 11, lens, rng), bs == 7}, rng);
    }
  }
  // multi-token decode runs (speculative / short chunks), up to the decode kernel's 8
  run_case(parity, alloc, Case{128, 32, 8, 16, {{2, 999}, {8, 121}, {7, 0}, {1, 4096}, {5, 40}}, false}, rng);
  run_case(parity, alloc, Case{64, 8, 8, 7, {{8, 1000}, {3, 4}, {1, 128}}, true}, rng);
  // forced split counts: one split (no workspace) and many (the merge)
  run_case(parity, alloc, Case{128, 32, 8, 16, decode_runs(6, lens, rng), false, 1}, rng);
  run_case(parity, alloc, Case{128, 8, 2, 16, decode_runs(6, {1000, 4097}, rng), false, 64}, rng);
  parity.finish();
}

// Both stage counts of the hd 128 paged decode kernel (the default one and the other, when this build
// has the 3-stage kernel: the default there, or GA_ATTN_DECODE_VARIANTS): caches of 1..2 tiles (the
// pipeline's prologue with fewer tiles than stages), many tiles, blocks straddling tiles (bs 7),
// multi-token runs, one split, the policy's split count and many splits (the merge).
TEST(CudaPagedAttention, DecodeStageCountsMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention decode stages");
  std::mt19937 rng(99);
  for (int stages : {2, 3}) {
    {  // is this stage count built? (a one-run probe; the reason names decode_stages otherwise)
      const Problem probe = make_problem(Case{128, 8, 2, 16, {{1, 40}}, false, 0, stages}, rng);
      DeviceProblem dev(alloc, probe);
      dev.p.workspace_bytes = 0;
      dev.p.decode_splits = 1;
      const char* why = ::ga::cuda::attention_unsupported_reason(dev.p);
      if (why != nullptr) {
        ASSERT_EQ(stages, 3) << why;
        ASSERT_NE(std::string(why).find("decode_stages"), std::string::npos) << why;
        std::printf("decode_stages 3: not in this build (%s)\n", why);
        continue;
      }
    }
    const std::vector<int64_t> lens = {1, 7, 64, 65, 129, 1000, 4097};
    for (int splits : {0, 1, 3, 64}) {
      run_case(parity, alloc, Case{128, 32, 8, 16, decode_runs(16, lens, rng), splits == 3, splits, stages}, rng);
    }
    run_case(parity, alloc, Case{128, 8, 2, 7, decode_runs(9, lens, rng), true, 0, stages}, rng);
    run_case(parity, alloc, Case{128, 32, 8, 16, {{2, 999}, {8, 121}, {7, 0}, {1, 4096}, {5, 40}}, false, 2, stages},
             rng);
  }
  parity.finish();
}

// Whether this device runs the cluster merge (AttentionParams::decode_merge = kCluster): an sm_90
// device must (this build has sm_90a code); elsewhere the refusal must name decode_merge.
bool cluster_merge_runs(CachingAllocator& alloc, std::mt19937& rng) {
  const Problem probe = make_problem(Case{128, 8, 2, 16, {{1, 600}}, false, 2, 0, DecodeMerge::kCluster}, rng);
  DeviceProblem dev(alloc, probe);
  DeviceArray<uint8_t> workspace(alloc, ::ga::cuda::attention_workspace_bytes(dev.p) + 1);
  dev.p.workspace = workspace.get();
  dev.p.workspace_bytes = workspace.size();
  const char* why = ::ga::cuda::attention_unsupported_reason(dev.p);
  int device = 0, major = 0;
  GA_CUDA_CHECK(cudaGetDevice(&device));
  GA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major >= 9) {
    EXPECT_EQ(why, nullptr) << "an sm_90 device runs the cluster merge: " << why;
    EXPECT_TRUE(::ga::cuda::attention_decode_merges_in_cluster(dev.p));
  } else if (why != nullptr) {
    EXPECT_NE(std::string(why).find("decode_merge"), std::string::npos) << why;
    std::printf("decode_merge kCluster refused here (%s): the cluster cases are left out\n", why);
  }
  return why == nullptr;
}

// The two split merges (AttentionParams::decode_merge: workspace counters + last CTA, or a cluster of
// the splits merging in distributed shared memory) on small shapes for compute-sanitizer
// (filter *Small*): empty trailing splits, 2..8 splits, multi-token runs, both kernels of hd 128.
TEST(CudaPagedAttention, SmallMergeShapesMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention merges small");
  std::mt19937 rng(17);
  const bool cluster = cluster_merge_runs(alloc, rng);
  for (DecodeMerge merge : {DecodeMerge::kWorkspace, DecodeMerge::kCluster}) {
    if (merge == DecodeMerge::kCluster && !cluster) continue;
    // 8 splits need >= 7 * 256 + 1 positions of bound (decode_splits_for); the 17-position run leaves 6 empty
    run_case(parity, alloc, Case{128, 8, 2, 16, {{1, 16}, {1, 2000}, {3, 0}}, false, 8, 0, merge}, rng);
    run_case(parity, alloc, Case{64, 8, 8, 7, {{2, 700}, {1, 0}}, true, 3, 0, merge}, rng);
    run_case(parity, alloc, Case{128, 8, 1, 16, {{8, 300}}, false, 2, 2, merge}, rng);
  }
  parity.finish();
}

// Both merges over the grid the cluster merge was tuned on: split counts 2..8 incl. uneven ones (3, 5, 7) and the
// policy's, scattered block tables (every case's), GQA ratios 1, 4 and 8, 1..8 query tokens per run,
// caches of 1, 17 (most of 8 splits empty) and 4097 positions, head dims 64/128/256, both stage counts
// at hd 128; and the default (kAuto) picks the cluster merge on sm_90 for 2..8 splits in one wave only.
TEST(CudaPagedAttention, DecodeMergesMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention decode merges");
  std::mt19937 rng(4242);
  const bool cluster = cluster_merge_runs(alloc, rng);
  const std::vector<int64_t> lens = {1, 17, 4097};
  for (DecodeMerge merge : {DecodeMerge::kWorkspace, DecodeMerge::kCluster}) {
    if (merge == DecodeMerge::kCluster && !cluster) continue;
    // (split count, GQA ratio) pairs: every split count once, every ratio twice (the float64 reference of
    // 4097-position caches is the test's cost)
    const int pairs[][2] = {{0, 4}, {2, 1}, {3, 8}, {5, 4}, {7, 1}, {8, 8}};
    for (const auto& pair : pairs) {
      const int splits = pair[0], ratio = pair[1];
      const int heads_kv = ratio == 8 ? 2 : 4;
      std::vector<QueryRun> runs;
      for (int i = 0; i < 3; ++i) {
        const int n_q = 1 + static_cast<int>(rng() % 8);  // 1..8 query tokens
        runs.push_back({n_q, std::max<int64_t>(0, lens[rng() % lens.size()] - n_q)});
      }
      runs.push_back({1, 0});     // a cache of exactly 1
      runs.push_back({1, 16});    // 17
      runs.push_back({1, 4096});  // 4097
      run_case(parity, alloc, Case{128, heads_kv * ratio, heads_kv, 16, runs, splits == 5, splits, 0, merge}, rng);
    }
    for (int hd : {64, 256}) {
      run_case(parity, alloc, Case{hd, 8, 2, 7, {{1, 4096}, {4, 16}, {8, 1000}, {1, 0}}, hd == 64, 4, 0, merge}, rng);
    }
    run_case(parity, alloc, Case{128, 8, 2, 16, decode_runs(6, {17, 4097}, rng), false, 6, 2, merge}, rng);
  }
  // kAuto: the cluster merge exactly where it runs and the split count is 2..8
  if (cluster) {
    for (int splits : {1, 2, 8, 9, 64}) {
      const Problem pr = make_problem(Case{128, 32, 8, 16, decode_runs(3, {4097}, rng), false, splits}, rng);
      DeviceProblem dev(alloc, pr);
      DeviceArray<uint8_t> workspace(alloc, ::ga::cuda::attention_workspace_bytes(dev.p) + 1);
      dev.p.workspace = workspace.get();
      dev.p.workspace_bytes = workspace.size();
      EXPECT_EQ(::ga::cuda::attention_decode_merges_in_cluster(dev.p), splits >= 2 && splits <= 8) << splits;
    }
    // ... and only when the grid fits in one wave (48 runs x 8 KV heads x 2 splits = 768 CTAs: two waves or
    // more on any GPU of this decade), while kCluster still forces it
    const Problem pr = make_problem(Case{64, 8, 8, 16, decode_runs(48, {300}, rng), false, 2}, rng);
    DeviceProblem dev(alloc, pr);
    DeviceArray<uint8_t> workspace(alloc, ::ga::cuda::attention_workspace_bytes(dev.p) + 1);
    dev.p.workspace = workspace.get();
    dev.p.workspace_bytes = workspace.size();
    ASSERT_EQ(::ga::cuda::attention_decode_splits(dev.p), 2);
    EXPECT_FALSE(::ga::cuda::attention_decode_merges_in_cluster(dev.p));
    dev.p.decode_merge = DecodeMerge::kCluster;
    EXPECT_TRUE(::ga::cuda::attention_decode_merges_in_cluster(dev.p));
  }
  parity.finish();
}

TEST(CudaPagedAttention, MixedBatchesAndPromptChunksMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention mixed");
  std::mt19937 rng(99);
  for (int hd : {64, 128, 256}) {
    for (int bs : {1, 16, 32, 7}) {
      // decode runs over awkward lengths + prompt chunks from 0 and continuing a cache + a short run
      std::vector<QueryRun> runs = {{1, 0}, {1, 6}, {133, 0}, {1, 128}, {37, 92}, {1, 999}, {3, 50}, {19, 1000}};
      if (hd == 128) runs.push_back({1, 4096});
      run_case(parity, alloc, Case{hd, hd == 256 ? 8 : 32, 8, bs, runs, bs == 16}, rng);
    }
  }
  run_case(parity, alloc, Case{128, 8, 8, 16, {{1000, 0}}, false}, rng);        // one long prompt, from 0
  run_case(parity, alloc, Case{128, 32, 8, 16, {{129, 3968}}, true}, rng);      // one chunk continuing 4k
  run_case(parity, alloc, Case{64, 8, 1, 32, {{9, 7}, {200, 1}, {64, 64}}, false}, rng);  // chunks only
  // 63 decode runs + one 512-token chunk: the Scheduler's mixed step
  std::vector<QueryRun> runs = decode_runs(63, {7, 129, 1000}, rng);
  runs.insert(runs.begin() + 20, QueryRun{512, 100});
  run_case(parity, alloc, Case{128, 32, 8, 16, runs, false}, rng);
  parity.finish();
}

// One workspace sized for the largest batch, zero-filled once, serves calls of every smaller shape
// in any order (the counters each call leaves at zero), and a captured decode graph replays for new
// device-side positions and block tables.
TEST(CudaPagedAttention, SharedWorkspaceAndGraphReplay) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention workspace/graph");
  std::mt19937 rng(31);
  std::vector<Case> cases;
  cases.push_back(Case{128, 32, 8, 16, decode_runs(1, {4097}, rng), false});
  cases.push_back(Case{128, 32, 8, 16, decode_runs(24, {1000, 4097}, rng), false});
  cases.push_back(Case{128, 32, 8, 16, decode_runs(2, {3000}, rng), false});
  cases.push_back(Case{128, 32, 8, 16, {{8, 2000}, {2, 30}, {1, 4000}}, false});
  cases.push_back(Case{128, 32, 8, 16, decode_runs(5, {129, 4097}, rng), false});
  // the bounds of all of them: 24 runs, 32 tokens, 8 tokens per run, 4200 positions
  ::ga::cuda::AttentionParams bound = params_for(make_problem(cases[1], rng));
  bound.n_tokens = 32;
  bound.max_seq_tokens = 8;
  bound.max_kv_positions = 4200;
  bound.block_table_stride = 4200 / 16 + 1;
  const size_t ws_bytes = ::ga::cuda::attention_workspace_bytes(bound);
  ASSERT_GT(ws_bytes, 0u) << "a decode batch of one 4k sequence splits its cache";
  DeviceArray<uint8_t> workspace(alloc, ws_bytes);
  GA_CUDA_CHECK(cudaMemset(workspace.get(), 0, workspace.size()));
  for (int round = 0; round < 2; ++round) {
    for (const Case& c : cases) {
      const Problem pr = make_problem(c, rng);
      DeviceProblem dev(alloc, pr);
      launch_and_check(parity, dev, pr, workspace, str(name_of(c), " shared workspace, round ", round));
    }
  }

  // graph: 4 decode runs, captured once; the replays change seq_pos0 and the tables on the device
  ::ga::cuda::Stream stream(0);
  Problem pr = make_problem(Case{128, 32, 8, 16, decode_runs(4, {4097}, rng), false}, rng);
  DeviceProblem dev(alloc, pr);
  dev.p.workspace = workspace.get();
  dev.p.workspace_bytes = workspace.size();
  ASSERT_EQ(::ga::cuda::attention_unsupported_reason(dev.p), nullptr);
  cudaGraphExec_t exec = capture_attention_graph(dev.p, stream.get());
  for (int replay = 0; replay < 3; ++replay) {
    for (size_t s = 0; s < pr.pos0.size(); ++s) pr.pos0[s] = static_cast<int32_t>(rng() % 4097);  // shorter prefixes
    if (replay == 2) {  // move sequence 0 to other blocks: swap two of its blocks' ids and contents
      std::swap(pr.table[0], pr.table[1]);
      const int64_t row_halves = int64_t{pr.c.block_size} * pr.kv_stride;
      std::swap_ranges(pr.k.begin() + pr.table[0] * row_halves, pr.k.begin() + (pr.table[0] + 1) * row_halves,
                       pr.k.begin() + pr.table[1] * row_halves);
      std::swap_ranges(pr.v.begin() + pr.table[0] * row_halves, pr.v.begin() + (pr.table[0] + 1) * row_halves,
                       pr.v.begin() + pr.table[1] * row_halves);
      dev.k.upload(pr.k);
      dev.v.upload(pr.v);
      dev.table.upload(pr.table);
    }
    dev.pos0.upload(pr.pos0);
    dev.out.poison();
    GA_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    check_output(parity, str("graph replay ", replay), pr, dev.out.download(), reference(pr));
  }
  GA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  parity.finish();
}

// Sliding windows over paged batches: shuffled block tables, block sizes 1 / 7 / 16, pure decode batches (split-KV:
// each column's range starts at its run's window), multi-token decode runs, and mixed batches of decode runs and
// prompt chunks (both launches of one call), windows of 1, 2, 7, 64, 255 and 1000 keys, head dims 64 / 96 / 128 / 256.
TEST(CudaPagedAttention, SlidingWindowsMatchFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention windows");
  std::mt19937 rng(1234);
  int case_index = 0;
  for (int w : {1, 2, 7, 64, 255, 1000}) {
    for (int bs : {1, 7, 16}) {
      const int ci = case_index++;
      const int hd = ci % 4 == 0 ? 64 : ci % 4 == 1 ? 96 : ci % 4 == 2 ? 128 : 256;
      Case decode{hd, hd == 256 ? 8 : 32, 8, bs, decode_runs(hd == 256 ? 5 : 12, {1, 7, 129, 1000, 4097}, rng),
                  ci % 2 == 0};
      decode.window_left = w - 1;
      run_case(parity, alloc, decode, rng);
      Case mixed{hd, 8, ci % 2 ? 2 : 8, bs,
                 {{1, 0}, {1, 6}, {133, 0}, {1, 128}, {37, 92}, {1, 999}, {3, 50}, {19, 1000}, {8, 4089}}, bs == 7};
      mixed.window_left = w - 1;
      run_case(parity, alloc, mixed, rng);
    }
  }
  // forced split counts over a window (many splits of a short range: empty trailing splits), the cluster merge
  Case many{128, 32, 8, 16, decode_runs(4, {4097}, rng), false, 64};
  many.window_left = 300;
  run_case(parity, alloc, many, rng);
  Case one{128, 32, 8, 16, decode_runs(4, {4097, 1000}, rng), false, 1};
  one.window_left = 63;
  run_case(parity, alloc, one, rng);
  parity.finish();
}

// Soft-caps (1, 2; 30 and 50 with the scale 6x) over mixed paged batches, with and without a window.
TEST(CudaPagedAttention, SoftcapMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention softcap");
  std::mt19937 rng(4321);
  const float caps[][2] = {{1.0f, 1.0f}, {2.0f, 1.0f}, {30.0f, 6.0f}, {50.0f, 6.0f}};
  int case_index = 0;
  for (const auto& cap : caps) {
    for (int bs : {7, 16}) {
      const int ci = case_index++;
      Case c{ci % 3 == 0 ? 64 : ci % 3 == 1 ? 96 : 128, 16, 4, bs,
             {{1, 0}, {1, 300}, {133, 0}, {5, 1000}, {37, 92}, {1, 2000}}, ci % 2 == 1};
      c.softcap = cap[0];
      c.scale_mul = cap[1];
      if (ci % 2 == 1) c.window_left = 127;
      run_case(parity, alloc, c, rng);
    }
  }
  parity.finish();
}

// The prefill part on the Hopper flash kernel (prefill_staging; block sizes it can assemble its key tiles from:
// 16 here): the mixed batches of the mma.sync tests with and without windows and soft-caps, head dims 64 / 96 / 128 /
// 256; a block size the flash kernel refuses (7) falls back to the mma.sync prefill (the reason is printed) and must
// give the same results. On another GPU every case runs the mma.sync prefill (SKIPPED lines name why).
TEST(CudaPagedAttention, HopperPrefillMatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention hopper prefill");
  std::mt19937 rng(90);
  const std::vector<QueryRun> runs = {{1, 0}, {133, 0}, {1, 128}, {37, 92}, {1, 999}, {19, 1000}, {300, 3900}};
  int case_index = 0;
  for (int hd : {64, 96, 128, 256}) {
    for (int variant = 0; variant < 4; ++variant) {
      const int ci = case_index++;
      Case c{hd, hd == 256 ? 8 : 32, 8, ci == 5 ? 7 : 16, runs, ci % 2 == 0};
      c.hopper_prefill = true;
      if (variant == 1 || variant == 3) c.window_left = variant == 1 ? 63 : 999;
      if (variant >= 2) {
        c.softcap = variant == 2 ? 2.0f : 30.0f;
        c.scale_mul = variant == 2 ? 1.0f : 6.0f;
      }
      run_case(parity, alloc, c, rng);
    }
  }
  parity.finish();
}

// The same batch through ga::cpu::paged_attention (F16 blocks, per-token tables).
TEST(CudaPagedAttention, AgreesWithCpuPagedAttention) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("paged attention vs cpu::paged_attention");
  std::mt19937 rng(5);
  Case windowed{96, 8, 2, 16, {{1, 300}, {1, 4}, {40, 100}, {1, 1000}, {2, 17}}, false};
  windowed.window_left = 63;
  windowed.softcap = 2.0f;
  for (const Case& c : {Case{128, 32, 8, 16, {{1, 300}, {1, 4}, {40, 100}, {1, 1000}, {2, 17}}, false},
                        Case{64, 6, 3, 7, {{1, 0}, {23, 9}, {5, 200}}, false}, windowed}) {
    const Problem pr = make_problem(c, rng);
    DeviceProblem dev(alloc, pr);
    DeviceArray<uint8_t> workspace(alloc, ::ga::cuda::attention_workspace_bytes(dev.p) + 1);
    GA_CUDA_CHECK(cudaMemset(workspace.get(), 0, workspace.size()));
    dev.p.workspace = workspace.get();
    dev.p.workspace_bytes = workspace.size();
    dev.out.poison();
    GA_CUDA_CHECK(::ga::cuda::attention(dev.p, nullptr));
    GA_CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<int64_t> positions;
    std::vector<const int32_t*> tables;
    for (size_t s = 0; s < c.runs.size(); ++s) {
      for (int i = 0; i < c.runs[s].n_q; ++i) {
        positions.push_back(c.runs[s].pos0 + i);
        tables.push_back(pr.table.data() + s * pr.table_stride);
      }
    }
    ::ga::cpu::PagedAttentionParams cp;
    cp.n_tokens = pr.n_tokens;
    cp.n_head = c.n_head;
    cp.n_head_kv = c.n_head_kv;
    cp.head_dim = c.head_dim;
    cp.scale = dev.p.scale;
    cp.q = pr.q.data();
    cp.q_stride = pr.q_stride;
    cp.positions = positions.data();
    cp.block_tables = tables.data();
    cp.block_size = c.block_size;
    cp.kv_type = DType::F16;
    cp.window_left = c.window_left;
    cp.softcap = c.softcap;
    cp.k_blocks = pr.k.data();
    cp.v_blocks = pr.v.data();
    std::vector<float> cpu_out(static_cast<size_t>(pr.n_tokens) * c.n_head * c.head_dim);
    cp.out = cpu_out.data();
    cp.out_stride = int64_t{c.n_head} * c.head_dim;
    std::vector<float> work(static_cast<size_t>(pr.max_kv + c.head_dim));
    cp.work = work.data();
    cp.work_stride = static_cast<int64_t>(work.size());
    ::ga::cpu::paged_attention(cp, nullptr);
    check_output(parity, name_of(c) + " vs cpu", pr, dev.out.download(),
                 std::vector<double>(cpu_out.begin(), cpu_out.end()));
  }
  parity.finish();
}

TEST(CudaPagedAttention, UnsupportedParamsAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  std::mt19937 rng(3);
  const Problem pr = make_problem(Case{128, 8, 2, 16, {{1, 40}, {12, 3}}, false}, rng);
  DeviceProblem dev(alloc, pr);
  DeviceArray<uint8_t> workspace(alloc, ::ga::cuda::attention_workspace_bytes(dev.p) + 1);
  dev.p.workspace = workspace.get();
  dev.p.workspace_bytes = workspace.size();
  ASSERT_EQ(::ga::cuda::attention_unsupported_reason(dev.p), nullptr);
  auto expect_rejected = [&](const ::ga::cuda::AttentionParams& p, const std::string& word) {
    expect_attention_rejected(dev.out, p, word);
  };
  ::ga::cuda::AttentionParams p = dev.p;
  p.seq_pos0 = nullptr;
  expect_rejected(p, "seq_pos0");
  p = dev.p;
  p.block_size = 0;
  expect_rejected(p, "block_size");
  p = dev.p;
  p.block_table_stride = 1;
  expect_rejected(p, "block_table_stride");
  p = dev.p;
  p.max_seq_tokens = p.n_tokens + 1;
  expect_rejected(p, "max_seq_tokens");
  p = dev.p;
  p.n_kv_blocks = 0;
  expect_rejected(p, "n_kv_blocks");
  p = dev.p;
  p.n_seqs = 0;
  expect_rejected(p, "n_seqs");
  p = dev.p;
  p.decode_stages = 4;
  expect_rejected(p, "decode_stages");
  // the cluster merge: at most 8 splits (a portable cluster), and on sm_90 only (a cache long enough for 9)
  const Problem long_pr = make_problem(Case{128, 8, 2, 16, {{1, 4000}}, false, 9, 0, DecodeMerge::kCluster}, rng);
  DeviceProblem long_dev(alloc, long_pr);
  DeviceArray<uint8_t> long_ws(alloc, ::ga::cuda::attention_workspace_bytes(long_dev.p) + 1);
  long_dev.p.workspace = long_ws.get();
  long_dev.p.workspace_bytes = long_ws.size();
  ASSERT_EQ(::ga::cuda::attention_decode_splits(long_dev.p), 1) << "a refused call reports 1 split";
  expect_attention_rejected(long_dev.out, long_dev.p, "decode_merge");
  long_dev.p.decode_merge = DecodeMerge::kWorkspace;
  EXPECT_EQ(::ga::cuda::attention_decode_splits(long_dev.p), 9);
}

}  // namespace
}  // namespace ga::test::cuda
