// Parity of the CUDA MoE kernels (backends/cuda/kernels/moe.h, moe_prefill.h) with the CPU reference
// (backends/cpu/moe.h, itself tested against float64 in tests/cpu/test_moe.cpp).
//
//  * routing: ids identical to cpu::moe_route, weights within 1e-6; logits on a grid of 1/4 (many exact ties)
//    with -inf entries; E 8..256, k 1..16, 1..513 tokens (the fused one-CTA kernel and the two-kernel path),
//    normalize on and off; the plan (counts, offsets, sorted pairs, positions, work items) equal to a CPU
//    grouping written here from the plan's contract, also from given ids with unused slots.
//  * grouped GEMV: every weight type, random stored bytes, rows whose experts start at padded strides,
//    gate + up in one launch and the single-stack form, each valid pair against the GEMV harness's rule
//    (gemv_reference.h: 1e-5 of sum |w x|, and the int8 bound where moe_gemv_uses_int8_activations), every
//    kernel family forced as well as the routing's choice; NaN-poisoned y whose unused rows and padding must
//    stay poisoned; experts without tokens, every token on one expert, unused slots; 1..64 tokens.
//  * activation (4e-6 of |gate * up| from the CPU's float expression) and combine (bit-identical to
//    cpu::moe_combine).
//  * the grouped GEMM of the prefill against float64 (f16 inputs exact in f16), 1e-5 of sum |w x|.
//  * the whole FFN, decode path (moe_route + moe_ffn_gemv) and both prefills (moe_prefill_host_sync,
//    moe_prefill_graph), against cpu::moe_ffn per token in relative L2: 1e-4 (float weights, float x), 1e-3
//    (int8 activations), 5e-3 (prefill: x, weights and activation rounded to f16); the decode step and the
//    graph prefill captured in a CUDA graph, replayed with new logits.
// Without a GPU every test is SKIPPED.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cpu/moe.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/quant.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/stream.h"
#include "common/quant_weights.h"
#include "core/thread_pool.h"
#include "cuda_harness.h"
#include "gemv_reference.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;
namespace gc = ::ga::cuda;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,  DType::Q5_0,
                        DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K,  DType::Q5_K,
                        DType::Q6_K, DType::MXFP4, DType::NVFP4};

int64_t round_up16(int64_t n) { return (n + 15) / 16 * 16; }

// ---- routing ----

// Logits on a grid of 1/4 in [-4, 4] (many exact ties) with an occasional -inf, expert 0 finite.
std::vector<float> tied_logits(int64_t n_tokens, int n_expert, int64_t ld, std::mt19937& rng) {
  std::vector<float> l(static_cast<size_t>(n_tokens * ld), NAN);
  std::uniform_int_distribution<int> grid(-16, 16);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int e = 0; e < n_expert; ++e) {
      l[static_cast<size_t>(t * ld + e)] = e > 0 && rng() % 13 == 0 ? -INFINITY : static_cast<float>(grid(rng)) / 4.0f;
    }
  }
  return l;
}

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routing cpu_route(const std::vector<float>& logits, int64_t ld, int64_t n_tokens, int n_expert, int k, bool normalize) {
  Routing r;
  r.ids.resize(static_cast<size_t>(n_tokens * k));
  r.weights.resize(r.ids.size());
  ::ga::cpu::MoeRouteParams p;
  p.logits = logits.data();
  p.ld = ld;
  p.n_tokens = n_tokens;
  p.n_expert = n_expert;
  p.top_k = k;
  p.normalize_top_k = normalize;
  p.ids = r.ids.data();
  p.weights = r.weights.data();
  ::ga::cpu::moe_route(p);
  return r;
}

// The plan's contract (moe.h), computed on the host: a stable grouping of the valid pairs by expert and the
// work items of moe_plan_item_pairs pairs.
struct HostPlan {
  int32_t n_items = 0;
  std::vector<int32_t> counts, offsets, sorted, positions;
  std::vector<int32_t> items;  // 4 per item
};

HostPlan host_plan(const gc::MoeShape& s, const std::vector<int32_t>& ids) {
  HostPlan h;
  const int64_t n_pairs = s.n_pairs();
  h.counts.assign(static_cast<size_t>(s.n_expert), 0);
  h.offsets.assign(static_cast<size_t>(s.n_expert) + 1, 0);
  h.positions.assign(static_cast<size_t>(n_pairs), -1);
  for (int64_t q = 0; q < n_pairs; ++q) {
    if (ids[q] >= 0 && ids[q] < s.n_expert) ++h.counts[static_cast<size_t>(ids[q])];
  }
  for (int e = 0; e < s.n_expert; ++e) h.offsets[static_cast<size_t>(e) + 1] = h.offsets[e] + h.counts[e];
  const int w = gc::moe_plan_item_pairs(s);
  for (int e = 0; e < s.n_expert; ++e) {
    for (int64_t q = 0; q < n_pairs; ++q) {
      if (ids[q] != e) continue;
      h.positions[static_cast<size_t>(q)] = static_cast<int32_t>(h.sorted.size());
      h.sorted.push_back(static_cast<int32_t>(q));
    }
    for (int first = 0; first < h.counts[e]; first += w) {
      h.items.insert(h.items.end(), {e, h.offsets[e] + first, std::min(w, h.counts[e] - first), 0});
      ++h.n_items;
    }
  }
  return h;
}

// The device plan equals the host one (only the defined entries: the first offsets[E] sorted pairs, n_items items).
void expect_plan(const std::string& name, const gc::MoeShape& s, const DeviceArray<uint8_t>& plan_buf,
                 const std::vector<int32_t>& ids) {
  const HostPlan want = host_plan(s, ids);
  const std::vector<uint8_t> bytes = plan_buf.download();
  std::vector<uint8_t> copy = bytes;
  const gc::MoePlanView v = gc::moe_plan_view(s, copy.data());
  EXPECT_LE(want.n_items, v.max_items) << name << ": the item bound";
  ASSERT_EQ(*v.n_items, want.n_items) << name << ": n_items";
  for (int e = 0; e < s.n_expert; ++e) {
    ASSERT_EQ(v.counts[e], want.counts[e]) << name << ": count of expert " << e;
    ASSERT_EQ(v.offsets[e], want.offsets[e]) << name << ": offset of expert " << e;
  }
  ASSERT_EQ(v.offsets[s.n_expert], want.offsets[s.n_expert]) << name;
  for (size_t i = 0; i < want.sorted.size(); ++i) ASSERT_EQ(v.sorted_pairs[i], want.sorted[i]) << name << " sorted " << i;
  for (int64_t q = 0; q < s.n_pairs(); ++q) ASSERT_EQ(v.positions[q], want.positions[q]) << name << " position " << q;
  for (int32_t i = 0; i < want.n_items; ++i) {
    const int4 it = v.items[i];
    const int32_t* w = want.items.data() + 4 * i;
    ASSERT_TRUE(it.x == w[0] && it.y == w[1] && it.z == w[2]) << name << ": item " << i;
  }
}

// Routes on the GPU (with the plan) and checks ids, weights and plan against the CPU.
void run_route_case(CachingAllocator& alloc, int n_expert, int k, int64_t n_tokens, bool normalize, std::mt19937& rng) {
  const std::string name = str("route E", n_expert, " k", k, " n", n_tokens, normalize ? " normalized" : "");
  const int64_t ld = n_expert + 5;
  const std::vector<float> logits = tied_logits(n_tokens, n_expert, ld, rng);
  const Routing want = cpu_route(logits, ld, n_tokens, n_expert, k, normalize);
  const gc::MoeShape shape{n_tokens, n_expert, k};
  DeviceArray<float> d_logits(alloc, logits.size());
  DeviceArray<int32_t> d_ids(alloc, want.ids.size());
  DeviceArray<float> d_w(alloc, want.ids.size());
  DeviceArray<uint8_t> d_plan(alloc, static_cast<size_t>(gc::moe_plan_bytes(shape)));
  d_logits.upload(logits);
  d_ids.poison();
  d_w.poison();
  d_plan.poison();
  gc::MoeRouteParams p;
  p.shape = shape;
  p.logits = d_logits.get();
  p.ld_logits = ld;
  p.normalize = normalize;
  p.ids = d_ids.get();
  p.weights = d_w.get();
  p.plan = d_plan.get();
  ASSERT_EQ(gc::moe_route_unsupported_reason(p), nullptr) << name;
  GA_CUDA_CHECK(gc::moe_route(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> ids = d_ids.download();
  const std::vector<float> w = d_w.download();
  for (size_t i = 0; i < want.ids.size(); ++i) {
    ASSERT_EQ(ids[i], want.ids[i]) << name << " pair " << i;
    ASSERT_NEAR(w[i], want.weights[i], 1e-6) << name << " pair " << i;
  }
  expect_plan(name, shape, d_plan, ids);
}

TEST(CudaMoeRoute, MatchesCpuReference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  std::mt19937 rng(11);
  int cases = 0;
  for (int n_expert : {8, 60, 128, 256}) {
    for (int k : {1, 2, 4, 8, 16}) {
      if (k > n_expert) continue;
      for (int64_t n_tokens : {1, 7, 64, 100, 513}) {
        for (bool normalize : {false, true}) {
          run_route_case(alloc, n_expert, k, n_tokens, normalize, rng);
          ++cases;
        }
      }
    }
  }
  run_route_case(alloc, 3, 3, 19, true, rng);  // k = E: every expert
  EXPECT_GT(cases, 100);
}

// moe_plan from given ids: unused slots (-1 and n_expert), every token on the same experts.
TEST(CudaMoePlan, GroupsGivenIdsStably) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  std::mt19937 rng(12);
  const std::tuple<int, int, int64_t> cases[] = {{8, 2, 37}, {128, 8, 64}, {60, 4, 700}, {8, 8, 3000}};
  for (const auto& [n_expert, k, n_tokens] : cases) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      const gc::MoeShape shape{n_tokens, n_expert, k};
      std::vector<int32_t> ids(static_cast<size_t>(shape.n_pairs()));
      for (size_t i = 0; i < ids.size(); ++i) {
        const int j = static_cast<int>(i % k);
        ids[i] = pattern == 0 ? static_cast<int32_t>(rng() % n_expert)
                 : pattern == 1 ? (j + 3) % n_expert
                                : (i % 5 == 0 ? (i % 2 ? -1 : n_expert) : static_cast<int32_t>(rng() % n_expert));
      }
      DeviceArray<int32_t> d_ids(alloc, ids.size());
      DeviceArray<uint8_t> d_plan(alloc, static_cast<size_t>(gc::moe_plan_bytes(shape)));
      d_ids.upload(ids);
      d_plan.poison();
      gc::MoePlanParams p{shape, d_ids.get(), d_plan.get()};
      ASSERT_EQ(gc::moe_plan_unsupported_reason(p), nullptr);
      GA_CUDA_CHECK(gc::moe_plan(p, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      expect_plan(str("plan E", n_expert, " k", k, " n", n_tokens, " pattern ", pattern), shape, d_plan, ids);
    }
  }
}

// ---- expert stacks ----

// n_expert matrices of rows x cols, each expert's rows at a 16-byte aligned expert stride (rows of some
// types are not 16-byte multiples: the stride is then padded), 16 bytes of tail.
struct Stack {
  DType type;
  int n_expert;
  int64_t rows, cols;
  uint64_t row_stride;
  int64_t expert_stride;
  std::vector<uint8_t> bytes;
  ::ga::cpu::ExpertStack cpu() const {
    return {type, bytes.data(), rows, cols, row_stride, static_cast<uint64_t>(expert_stride)};
  }
};

Stack make_stack(DType type, int n_expert, int64_t rows, int64_t cols, std::mt19937& rng) {
  Stack s{type, n_expert, rows, cols, row_bytes(type, static_cast<uint64_t>(cols)), 0, {}};
  s.expert_stride = round_up16(static_cast<int64_t>(s.row_stride) * rows);
  s.bytes.resize(static_cast<size_t>(s.expert_stride * n_expert + 16));
  for (auto& b : s.bytes) b = static_cast<uint8_t>(rng());
  for (int e = 0; e < n_expert; ++e) {
    const std::vector<uint8_t> m = random_weight_rows(type, rows, cols, s.row_stride, rng);
    std::copy(m.begin(), m.end(), s.bytes.begin() + e * s.expert_stride);
  }
  return s;
}

struct DeviceStack {
  DeviceArray<uint8_t> buf;
  gc::MoeExperts view;
  DeviceStack(CachingAllocator& alloc, const Stack& s) : buf(alloc, s.bytes.size()) {
    buf.upload(s.bytes);
    view = {s.type, buf.get(), s.rows, s.cols, static_cast<int64_t>(s.row_stride), s.expert_stride};
  }
};

// Random routing of n_tokens: the CPU router on normal logits, or every token on experts 3.. (pattern 1), or
// with unused slots (pattern 2).
Routing random_routing(int64_t n_tokens, int n_expert, int k, int pattern, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(n_tokens * n_expert));
  for (auto& v : logits) v = normal(rng);
  Routing r = cpu_route(logits, n_expert, n_tokens, n_expert, k, true);
  for (size_t i = 0; i < r.ids.size(); ++i) {
    if (pattern == 1) r.ids[i] = static_cast<int32_t>((3 + i % k) % n_expert);
    if (pattern == 2 && i % 3 == 1) r.ids[i] = i % 2 ? -1 : n_expert;
  }
  return r;
}

// ---- grouped GEMV ----

struct GemvCase {
  int n_expert, k;
  int64_t n_tokens, rows, cols;
  bool two_stacks;  // gate + up in one launch (x: token rows); else one stack on pair rows (down)
  gc::MoeGemvKernel kernel = gc::MoeGemvKernel::kAuto;
  int pattern = 0;  // random_routing
};

void run_gemv_case(CachingAllocator& alloc, Parity& parity, DType type, const GemvCase& c, std::mt19937& rng) {
  const char* kernel_name[] = {"auto", "float", "int8"};
  const std::string name = str(dtype_name(type), " E", c.n_expert, " k", c.k, " n", c.n_tokens, " ", c.rows, "x",
                               c.cols, c.two_stacks ? " gate+up" : " down", " ",
                               kernel_name[static_cast<int>(c.kernel)], c.pattern ? str(" pattern ", c.pattern) : "");
  if (c.cols % traits(type).block_size != 0) {
    parity.skip(name, "cols is not a multiple of the block size");
    return;
  }
  const gc::MoeShape shape{c.n_tokens, c.n_expert, c.k};
  const Stack w = make_stack(type, c.n_expert, c.rows, c.cols, rng);
  const Stack w2 = c.two_stacks ? make_stack(type, c.n_expert, c.rows, c.cols, rng) : Stack{};
  const Routing routing = random_routing(c.n_tokens, c.n_expert, c.k, c.pattern, rng);
  const int64_t n_pairs = shape.n_pairs();
  const int64_t x_rows = c.two_stacks ? c.n_tokens : n_pairs;
  const int64_t ldx = c.cols + 4;
  const int64_t out_cols = (c.two_stacks ? 2 : 1) * c.rows;
  const int64_t ldy = out_cols + 3;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(x_rows * ldx));
  for (auto& v : x) v = normal(rng);

  DeviceStack dw(alloc, w);
  std::unique_ptr<DeviceStack> dw2 = c.two_stacks ? std::make_unique<DeviceStack>(alloc, w2) : nullptr;
  DeviceArray<int32_t> d_ids(alloc, routing.ids.size());
  DeviceArray<uint8_t> d_plan(alloc, static_cast<size_t>(gc::moe_plan_bytes(shape)));
  DeviceArray<float> d_x(alloc, x.size());
  DeviceArray<float> d_y(alloc, static_cast<size_t>(n_pairs * ldy));
  d_ids.upload(routing.ids);
  d_x.upload(x);
  d_y.poison();
  GA_CUDA_CHECK(gc::moe_plan({shape, d_ids.get(), d_plan.get()}, nullptr));

  gc::MoeGemvParams p;
  p.shape = shape;
  p.plan = d_plan.get();
  p.w = dw.view;
  p.w2 = c.two_stacks ? dw2->view.data : nullptr;
  p.x = d_x.get();
  p.ldx = ldx;
  p.input = c.two_stacks ? gc::MoeGemvInput::kTokenRows : gc::MoeGemvInput::kPairRows;
  p.y = d_y.get();
  p.ldy = ldy;
  p.kernel = c.kernel;
  if (const char* why = gc::moe_gemv_unsupported_reason(p)) {
    parity.skip(name, why);
    return;
  }
  GA_CUDA_CHECK(gc::moe_gemv(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = d_y.download();
  const bool int8 = gc::moe_gemv_uses_int8_activations(p);
  if (c.kernel == gc::MoeGemvKernel::kInt8) {
    EXPECT_TRUE(int8) << name;
  } else if (c.kernel == gc::MoeGemvKernel::kFloat) {
    EXPECT_FALSE(int8) << name;
  }

  std::vector<float> row(static_cast<size_t>(c.cols));
  std::vector<GemvRowRef> refs(static_cast<size_t>(c.rows));
  for (int64_t q = 0; q < n_pairs; ++q) {
    const float* yq = y.data() + q * ldy;
    const int32_t e = routing.ids[static_cast<size_t>(q)];
    if (e < 0 || e >= c.n_expert) {  // unused slot: its row stays poisoned
      parity.expect_untouched(name + str(" unused pair ", q), yq, static_cast<size_t>(ldy));
      continue;
    }
    const float* xq = x.data() + (c.two_stacks ? q / c.k : q) * ldx;
    for (int s = 0; s < (c.two_stacks ? 2 : 1); ++s) {
      const Stack& m = s == 0 ? w : w2;
      for (int64_t r = 0; r < c.rows; ++r) {
        const uint8_t* bytes = m.bytes.data() + e * m.expert_stride + r * static_cast<int64_t>(m.row_stride);
        ::ga::cpu::dequantize_row(type, bytes, row.data(), c.cols);
        refs[static_cast<size_t>(r)] = gemv_row_reference(type, bytes, row.data(), xq, c.cols, int8);
      }
      compare_gemv(parity, name + str(" pair ", q, s == 0 ? "" : " up"), yq + s * c.rows, refs.data(),
                   static_cast<size_t>(c.rows), int8);
    }
    parity.expect_untouched(name + str(" pair ", q), yq + out_cols, static_cast<size_t>(ldy - out_cols));
  }
}

TEST(CudaMoeGemv, MatchesCpuReferenceForEveryType) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("moe gemv");
  std::mt19937 rng(77);
  using K = gc::MoeGemvKernel;
  for (DType type : kTypes) {
    for (bool two : {true, false}) {
      // one token (items of one pair), small batches (items of several pairs), experts without tokens
      run_gemv_case(alloc, parity, type, {8, 2, 1, 37, 256, two}, rng);
      run_gemv_case(alloc, parity, type, {8, 2, 7, 19, 2816, two}, rng);
      run_gemv_case(alloc, parity, type, {60, 4, 16, 37, 256, two}, rng);
      run_gemv_case(alloc, parity, type, {128, 8, 2, 96, 512, two}, rng);
      run_gemv_case(alloc, parity, type, {128, 8, 64, 19, 256, two}, rng);
      run_gemv_case(alloc, parity, type, {8, 1, 64, 19, 256, two}, rng);  // 8 pairs per item
      run_gemv_case(alloc, parity, type, {8, 2, 16, 37, 256, two, K::kAuto, 1}, rng);  // every token on 2 experts
      run_gemv_case(alloc, parity, type, {8, 2, 19, 37, 256, two, K::kAuto, 2}, rng);  // unused slots
      // the kernel families forced (int8: the types that have it; others print SKIPPED)
      for (K kernel : {K::kFloat, K::kInt8}) {
        run_gemv_case(alloc, parity, type, {8, 2, 1, 37, 2816, two, kernel}, rng);
        run_gemv_case(alloc, parity, type, {60, 4, 7, 19, 256, two, kernel}, rng);
        run_gemv_case(alloc, parity, type, {8, 2, 64, 37, 512, two, kernel}, rng);
      }
    }
  }
  parity.finish();
}

TEST(CudaMoeGemv, RejectsWhatItCannotDoWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  DeviceArray<float> buf(alloc, 1 << 16);
  gc::MoeGemvParams p;
  p.shape = {1, 8, 2};
  p.plan = buf.get();
  p.w = {DType::Q4_0, buf.get(), 16, 64, static_cast<int64_t>(row_bytes(DType::Q4_0, 64)), 16 * 36};
  p.x = buf.get();
  p.ldx = 64;
  p.y = buf.get();
  p.ldy = 16;
  EXPECT_EQ(gc::moe_gemv_unsupported_reason(p), nullptr);
  auto rejected = [&](auto mutate) {
    gc::MoeGemvParams q = p;
    mutate(q);
    const char* why = gc::moe_gemv_unsupported_reason(q);
    EXPECT_NE(why, nullptr);
    if (why != nullptr) {
      EXPECT_EQ(gc::moe_gemv(q, nullptr), cudaErrorInvalidValue) << why;
    }
  };
  rejected([](gc::MoeGemvParams& q) { q.shape.n_expert = 257; });
  rejected([](gc::MoeGemvParams& q) { q.shape.top_k = 9; });
  rejected([](gc::MoeGemvParams& q) { q.w.type = DType::Q8_1; });
  rejected([](gc::MoeGemvParams& q) { q.w.cols = 48; });
  rejected([](gc::MoeGemvParams& q) { q.w.expert_stride = 16 * 36 - 8; });
  rejected([](gc::MoeGemvParams& q) { q.w2 = q.w.data; });  // ldy < 2 rows
  rejected([](gc::MoeGemvParams& q) { q.ldx = 62; });
  rejected([](gc::MoeGemvParams& q) { q.plan = nullptr; });
  rejected([](gc::MoeGemvParams& q) {
    q.w.type = DType::Q6_K;
    q.w.cols = 256;
    q.w.row_stride = 210;
    q.w.expert_stride = 16 * 210;
    q.ldx = 256;
    q.kernel = gc::MoeGemvKernel::kInt8;  // no int8 kernel for Q6_K
  });
  gc::MoeRouteParams r;
  r.shape = {1, 300, 2};
  EXPECT_NE(gc::moe_route_unsupported_reason(r), nullptr);
}

// ---- activation, combine ----

TEST(CudaMoeOps, ActivateAndCombineMatchCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("moe activate/combine");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const auto act : {gc::MoeActivation::kSilu, gc::MoeActivation::kGeluTanh}) {
    const std::pair<int64_t, int64_t> shapes[] = {{1, 4}, {37, 96}, {512, 768}};
    for (const auto& [n_rows, n] : shapes) {
      for (bool in_place : {false, true}) {
        const int64_t ld_in = 2 * n + 4, ld_out = in_place ? ld_in : n + 8;
        std::vector<float> gu(static_cast<size_t>(n_rows * ld_in));
        for (auto& v : gu) v = normal(rng);
        DeviceArray<float> d_gu(alloc, gu.size());
        DeviceArray<float> d_out(alloc, static_cast<size_t>(n_rows * ld_out));
        d_gu.upload(gu);
        d_out.poison();
        gc::MoeActivateParams p{d_gu.get(), ld_in, in_place ? d_gu.get() : d_out.get(), ld_out, n_rows, n, act};
        ASSERT_EQ(gc::moe_activate_unsupported_reason(p), nullptr);
        GA_CUDA_CHECK(gc::moe_activate(p, nullptr));
        const std::vector<float> got = in_place ? d_gu.download() : d_out.download();
        const std::string name = str(act == gc::MoeActivation::kSilu ? "silu " : "gelu ", n_rows, "x", n,
                                     in_place ? " in place" : "");
        for (int64_t r = 0; r < n_rows; ++r) {
          std::vector<float> want(static_cast<size_t>(n));
          if (act == gc::MoeActivation::kSilu) {
            ::ga::cpu::swiglu(gu.data() + r * ld_in, gu.data() + r * ld_in + n, want.data(), n);
          } else {
            ::ga::cpu::geglu_tanh(gu.data() + r * ld_in, gu.data() + r * ld_in + n, want.data(), n);
          }
          // relative to |g u|: GELU's 1 + tanh cancels for negative g, where tanhf's few ulp of 1 are large
          // against the result (measured: 3e-5 of the value near g = -2.5); SiLU's exp carries no cancellation
          std::vector<double> ref(want.begin(), want.end()), scale(want.size());
          for (int64_t i = 0; i < n; ++i) {
            scale[static_cast<size_t>(i)] = std::fabs(static_cast<double>(gu[static_cast<size_t>(r * ld_in + i)]) *
                                                      gu[static_cast<size_t>(r * ld_in + n + i)]);
          }
          parity.compare(name + str(" row ", r), got.data() + r * ld_out, ref.data(), static_cast<size_t>(n), 4e-6,
                         1e-30, scale.data());
          if (!in_place) parity.expect_untouched(name, got.data() + r * ld_out + n, static_cast<size_t>(ld_out - n));
        }
      }
    }
  }
  // combine: random y in a permuted row order, unused slots, both modes; bit-identical to the CPU
  const std::tuple<int64_t, int, int64_t> combine_shapes[] = {{1, 2, 4}, {7, 8, 96}, {100, 4, 2048}};
  for (const auto& [n_tokens, k, n] : combine_shapes) {
    for (bool accumulate : {false, true}) {
      const int n_expert = 8;
      const int64_t n_pairs = n_tokens * k, ldy = n + 4, ld_out = n + 8;
      std::vector<int32_t> ids(static_cast<size_t>(n_pairs)), rows(ids.size());
      std::vector<float> w(ids.size()), y(static_cast<size_t>(n_pairs * ldy)), out(static_cast<size_t>(n_tokens * ld_out));
      for (size_t i = 0; i < ids.size(); ++i) {
        ids[i] = i % 7 == 3 ? -1 : static_cast<int32_t>(rng() % n_expert);
        w[i] = std::fabs(normal(rng));
        rows[i] = static_cast<int32_t>(i);
      }
      std::shuffle(rows.begin(), rows.end(), rng);
      for (auto& v : y) v = normal(rng);
      for (auto& v : out) v = normal(rng);
      DeviceArray<int32_t> d_ids(alloc, ids.size()), d_rows(alloc, rows.size());
      DeviceArray<float> d_w(alloc, w.size()), d_y(alloc, y.size()), d_out(alloc, out.size());
      d_ids.upload(ids);
      d_rows.upload(rows);
      d_w.upload(w);
      d_y.upload(y);
      if (accumulate) {
        d_out.upload(out);
      } else {
        d_out.poison();
      }
      gc::MoeCombineParams p;
      p.n_tokens = n_tokens;
      p.top_k = k;
      p.n_expert = n_expert;
      p.ids = d_ids.get();
      p.weights = d_w.get();
      p.y = d_y.get();
      p.ldy = ldy;
      p.y_rows = d_rows.get();
      p.n = n;
      p.out = d_out.get();
      p.ld_out = ld_out;
      p.accumulate = accumulate;
      ASSERT_EQ(gc::moe_combine_unsupported_reason(p), nullptr);
      GA_CUDA_CHECK(gc::moe_combine(p, nullptr));
      const std::vector<float> got = d_out.download();
      ::ga::cpu::MoeCombineParams c{n_tokens, k, n_expert, ids.data(), w.data(), y.data(), ldy, rows.data(), n,
                                    out.data(), ld_out, accumulate};
      ::ga::cpu::moe_combine(c);
      const std::string name = str("combine n", n_tokens, " k", k, " ", n, accumulate ? " +=" : "");
      for (int64_t t = 0; t < n_tokens; ++t) {
        parity.compare_bits(name + str(" token ", t), got.data() + t * ld_out, out.data() + t * ld_out,
                            static_cast<size_t>(n));
        if (!accumulate) parity.expect_untouched(name, got.data() + t * ld_out + n, static_cast<size_t>(ld_out - n));
      }
    }
  }
  parity.finish();
}

// ---- the whole FFN ----

struct FfnCase {
  DType type;
  int n_expert, k;
  int64_t n_tokens;
  int64_t n_embd = 512, n_ff = 256;
  bool accumulate = false;
  gc::MoeActivation act = gc::MoeActivation::kSilu;
  int pattern = 0;  // random_routing's pattern, used when the routing is given (not routed on the GPU)
  // x ~ N(0, x_scale^2). The prefill rounds the activation to f16: with the random-byte K-quant weights (up to
  // ~50 for Q4_K, ~200 for Q6_K) and x ~ N(0, 1) it reaches 1.3e5 / 5e6, past f16's 65504 (measured on the CPU);
  // real models' activations fit, so the prefill cases scale x by 1/32 (max |act| ~130 / ~5e3).
  float x_scale = 1.0f;
};

struct FfnData {
  Stack gate, up, down;
  std::vector<float> x, logits, out0;
  int64_t ldx, ld_out;
};

FfnData make_ffn(const FfnCase& c, std::mt19937& rng) {
  FfnData d{make_stack(c.type, c.n_expert, c.n_ff, c.n_embd, rng), make_stack(c.type, c.n_expert, c.n_ff, c.n_embd, rng),
            make_stack(c.type, c.n_expert, c.n_embd, c.n_ff, rng), {}, {}, {}, c.n_embd + 4, c.n_embd + 8};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  d.x.resize(static_cast<size_t>(c.n_tokens * d.ldx));
  for (auto& v : d.x) v = normal(rng) * c.x_scale;
  d.logits.resize(static_cast<size_t>(c.n_tokens * c.n_expert));
  for (auto& v : d.logits) v = normal(rng);
  d.out0.resize(static_cast<size_t>(c.n_tokens * d.ld_out));
  for (auto& v : d.out0) v = normal(rng);
  return d;
}

std::vector<float> cpu_ffn(const FfnCase& c, const FfnData& d, const Routing& r, ThreadPool& pool) {
  std::vector<float> out = d.out0;
  ::ga::cpu::MoeRoutedFfnParams p;
  p.gate = d.gate.cpu();
  p.up = d.up.cpu();
  p.down = d.down.cpu();
  p.n_expert = c.n_expert;
  p.n_tokens = c.n_tokens;
  p.top_k = c.k;
  p.ids = r.ids.data();
  p.weights = r.weights.data();
  p.x = d.x.data();
  p.ldx = d.ldx;
  p.out = out.data();
  p.ld_out = d.ld_out;
  p.accumulate = c.accumulate;
  p.activation = static_cast<::ga::cpu::MoeActivation>(c.act);
  ::ga::cpu::MoeScratch scratch;
  ::ga::cpu::moe_routed_ffn(p, scratch, &pool);
  return out;
}

// Per-token relative L2 of got against want over n_embd columns; padding untouched when not accumulating.
void expect_close(const std::string& name, const FfnCase& c, const FfnData& d, const std::vector<float>& got,
                  const std::vector<float>& want, double tol) {
  double worst = 0.0;
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < c.n_embd; ++i) {
      const double g = got[static_cast<size_t>(t * d.ld_out + i)], w = want[static_cast<size_t>(t * d.ld_out + i)];
      ASSERT_FALSE(std::isnan(g)) << name << " token " << t << " [" << i << "]";
      err += (g - w) * (g - w);
      norm += w * w;
    }
    worst = std::max(worst, norm > 0 ? std::sqrt(err / norm) : std::sqrt(err));
    if (!c.accumulate) {
      for (int64_t i = c.n_embd; i < d.ld_out; ++i) {
        ASSERT_TRUE(is_poison(got[static_cast<size_t>(t * d.ld_out + i)])) << name << ": padding written";
      }
    }
  }
  EXPECT_LE(worst, tol) << name;
  std::printf("%s: worst rel L2 %.3g (limit %.0e)\n", name.c_str(), worst, tol);
}

// Device buffers of one FFN case, with the routing done on the GPU (or given ids planned with moe_plan).
struct DeviceFfn {
  DeviceStack gate, up, down;
  DeviceArray<float> x, logits, weights, out;
  DeviceArray<int32_t> ids;
  DeviceArray<uint8_t> plan;
  gc::MoeShape shape;
  DeviceFfn(CachingAllocator& alloc, const FfnCase& c, const FfnData& d)
      : gate(alloc, d.gate), up(alloc, d.up), down(alloc, d.down), x(alloc, d.x.size()), logits(alloc, d.logits.size()),
        weights(alloc, static_cast<size_t>(c.n_tokens * c.k)), out(alloc, d.out0.size()),
        ids(alloc, static_cast<size_t>(c.n_tokens * c.k)),
        plan(alloc, static_cast<size_t>(gc::moe_plan_bytes({c.n_tokens, c.n_expert, c.k}))),
        shape{c.n_tokens, c.n_expert, c.k} {
    x.upload(d.x);
    logits.upload(d.logits);
    if (c.accumulate) {
      out.upload(d.out0);
    } else {
      out.poison();
    }
  }
  gc::MoeRouteParams route_params() {
    gc::MoeRouteParams r;
    r.shape = shape;
    r.logits = logits.get();
    r.ld_logits = shape.n_expert;
    r.normalize = true;
    r.ids = ids.get();
    r.weights = weights.get();
    r.plan = plan.get();
    return r;
  }
};

// The fields the decode and the prefill parameters share (the same names in both structs).
template <class P>
P ffn_fields(const FfnCase& c, const FfnData& d, DeviceFfn& dev) {
  P p;
  p.shape = dev.shape;
  p.plan = dev.plan.get();
  p.ids = dev.ids.get();
  p.weights = dev.weights.get();
  p.gate = dev.gate.view;
  p.up = dev.up.view;
  p.down = dev.down.view;
  p.x = dev.x.get();
  p.ldx = d.ldx;
  p.out = dev.out.get();
  p.ld_out = d.ld_out;
  p.accumulate = c.accumulate;
  p.act = c.act;
  return p;
}

gc::MoeFfnGemvParams ffn_gemv_params(const FfnCase& c, const FfnData& d, DeviceFfn& dev, void* workspace) {
  auto p = ffn_fields<gc::MoeFfnGemvParams>(c, d, dev);
  p.workspace = workspace;
  return p;
}

gc::MoePrefillParams prefill_params(const FfnCase& c, const FfnData& d, DeviceFfn& dev) {
  return ffn_fields<gc::MoePrefillParams>(c, d, dev);
}

std::string ffn_name(const char* path, const FfnCase& c) {
  return str(path, " ", dtype_name(c.type), " E", c.n_expert, " k", c.k, " n", c.n_tokens, " ", c.n_embd, "/", c.n_ff,
             c.accumulate ? " +=" : "", c.act == gc::MoeActivation::kGeluTanh ? " gelu" : "",
             c.pattern ? str(" pattern ", c.pattern) : "");
}

// The decode path: moe_route (ids must equal the CPU's), then moe_ffn_gemv; or given ids (pattern) and moe_plan.
void run_ffn_gemv_case(CachingAllocator& alloc, ThreadPool& pool, const FfnCase& c, std::mt19937& rng) {
  const std::string name = ffn_name("ffn gemv", c);
  const FfnData d = make_ffn(c, rng);
  DeviceFfn dev(alloc, c, d);
  Routing r = cpu_route(d.logits, c.n_expert, c.n_tokens, c.n_expert, c.k, true);
  if (c.pattern == 0) {
    GA_CUDA_CHECK(gc::moe_route(dev.route_params(), nullptr));
    GA_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_EQ(dev.ids.download(), r.ids) << name << ": the GPU routed other experts";
    const std::vector<float> w = dev.weights.download();
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w[i], r.weights[i], 1e-6) << name;
    r.weights = w;  // the CPU FFN on the GPU's weights: only the FFN is compared below
  } else {
    r = random_routing(c.n_tokens, c.n_expert, c.k, c.pattern, rng);
    dev.ids.upload(r.ids);
    dev.weights.upload(r.weights);
    GA_CUDA_CHECK(gc::moe_plan({dev.shape, dev.ids.get(), dev.plan.get()}, nullptr));
  }
  DeviceArray<uint8_t> ws(alloc, static_cast<size_t>(gc::moe_ffn_gemv_workspace_bytes(dev.shape, c.n_embd, c.n_ff)));
  ws.poison();
  const gc::MoeFfnGemvParams p = ffn_gemv_params(c, d, dev, ws.get());
  ASSERT_EQ(gc::moe_ffn_gemv_unsupported_reason(p), nullptr) << name;
  GA_CUDA_CHECK(gc::moe_ffn_gemv(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const double tol = traits(c.type).quantized ? 1e-3 : 1e-4;
  expect_close(name, c, d, dev.out.download(), cpu_ffn(c, d, r, pool), tol);
}

TEST(CudaMoeFfn, GemvPathMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  ThreadPool pool(4);
  std::mt19937 rng(31);
  for (DType type : {DType::F16, DType::Q8_0, DType::Q4_K, DType::Q4_0, DType::Q6_K}) {
    for (int64_t n : {1, 2, 7, 16, 64}) {
      run_ffn_gemv_case(alloc, pool, {type, 8, 2, n}, rng);
      run_ffn_gemv_case(alloc, pool, {type, 128, 8, n}, rng);
    }
    run_ffn_gemv_case(alloc, pool, {type, 60, 4, 7, 512, 256, true}, rng);
    run_ffn_gemv_case(alloc, pool, {type, 8, 1, 16, 256, 512, false, gc::MoeActivation::kGeluTanh}, rng);
    run_ffn_gemv_case(alloc, pool, {type, 8, 2, 16, 512, 256, false, gc::MoeActivation::kSilu, 1}, rng);
    run_ffn_gemv_case(alloc, pool, {type, 8, 2, 9, 512, 256, true, gc::MoeActivation::kSilu, 2}, rng);
  }
  for (DType type : {DType::F32, DType::BF16, DType::Q5_K, DType::Q2_K, DType::MXFP4, DType::NVFP4}) {
    run_ffn_gemv_case(alloc, pool, {type, 60, 4, 7}, rng);
  }
}

// The prefill: moe_route over many tokens (the two-kernel path) and moe_prefill_host_sync.
void run_ffn_prefill_case(CachingAllocator& alloc, ThreadPool& pool, FfnCase c, std::mt19937& rng) {
  c.x_scale = 1.0f / 32;  // the activation in f16's range (FfnCase::x_scale)
  const std::string name = ffn_name("ffn prefill", c);
  const FfnData d = make_ffn(c, rng);
  DeviceFfn dev(alloc, c, d);
  Routing r;
  if (c.pattern == 0) {
    GA_CUDA_CHECK(gc::moe_route(dev.route_params(), nullptr));
    GA_CUDA_CHECK(cudaDeviceSynchronize());
    r.ids = dev.ids.download();
    r.weights = dev.weights.download();
    ASSERT_EQ(r.ids, cpu_route(d.logits, c.n_expert, c.n_tokens, c.n_expert, c.k, true).ids) << name;
  } else {
    r = random_routing(c.n_tokens, c.n_expert, c.k, c.pattern, rng);
    dev.ids.upload(r.ids);
    dev.weights.upload(r.weights);
    GA_CUDA_CHECK(gc::moe_plan({dev.shape, dev.ids.get(), dev.plan.get()}, nullptr));
  }
  gc::Stream stream(0);
  gc::Gemm gemm(alloc, stream.get());
  const int64_t ws_bytes = gc::moe_prefill_workspace_bytes(dev.shape, c.n_embd, c.n_ff);
  DeviceArray<uint8_t> ws(alloc, static_cast<size_t>(ws_bytes));
  ws.poison();
  GA_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy stream's work (uploads, routing) before the Gemm's stream
  gc::MoePrefillParams p = prefill_params(c, d, dev);
  p.workspace = ws.get();
  p.workspace_bytes = ws_bytes;
  ASSERT_EQ(gc::moe_prefill_unsupported_reason(p), nullptr) << name;
  gc::moe_prefill_host_sync(gemm, p);
  stream.synchronize();
  const std::vector<float> want = cpu_ffn(c, d, r, pool);
  expect_close(name, c, d, dev.out.download(), want, 5e-3);

  // path (a): the grouped GEMM, no host sync, on the same routing
  const std::string graph_name = ffn_name("ffn prefill graph", c);
  const int64_t gws_bytes = gc::moe_prefill_graph_workspace_bytes(p);
  DeviceArray<uint8_t> gws(alloc, static_cast<size_t>(gws_bytes));
  gws.poison();
  p.workspace = gws.get();
  p.workspace_bytes = gws_bytes;
  if (c.accumulate) {
    dev.out.upload(d.out0);
  } else {
    dev.out.poison();
  }
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_EQ(gc::moe_prefill_graph_unsupported_reason(p), nullptr) << graph_name;
  GA_CUDA_CHECK(gc::moe_prefill_graph(p, stream.get()));
  stream.synchronize();
  expect_close(graph_name, c, d, dev.out.download(), want, 5e-3);
}

TEST(CudaMoeFfn, PrefillMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  ThreadPool pool(4);
  std::mt19937 rng(41);
  for (DType type : {DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    for (int64_t n : {9, 100, 513}) {
      run_ffn_prefill_case(alloc, pool, {type, 8, 2, n, 512, 256}, rng);
      run_ffn_prefill_case(alloc, pool, {type, 128, 8, n, 256, 256}, rng);
    }
    run_ffn_prefill_case(alloc, pool, {type, 60, 4, 100, 256, 512, true, gc::MoeActivation::kGeluTanh}, rng);  // += gelu
    run_ffn_prefill_case(alloc, pool, {type, 8, 2, 100, 512, 256, false, gc::MoeActivation::kSilu, 1}, rng);
    run_ffn_prefill_case(alloc, pool, {type, 8, 2, 100, 512, 256, true, gc::MoeActivation::kSilu, 2}, rng);
  }
}

// The grouped GEMM alone: f16 inputs (exact in f16), float64 reference per sorted row of the plan.
TEST(CudaMoeGroupedGemm, MatchesFloat64Reference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("moe grouped gemm");
  std::mt19937 rng(61);
  const std::tuple<int, int, int64_t, int64_t, int64_t, bool> cases[] = {
      {8, 2, 9, 128, 96, false}, {8, 2, 100, 64, 256, true}, {8, 2, 513, 192, 64, true},
      {128, 8, 100, 64, 128, false}, {60, 4, 37, 128, 32, true}, {8, 8, 300, 64, 64, false}};
  for (const auto& [n_expert, k, n_tokens, n, kdim, two] : cases) {
    const gc::MoeShape shape{n_tokens, n_expert, k};
    const int64_t n_pairs = shape.n_pairs(), ldw = kdim + 8, ldx = kdim + 16, ldy = (two ? 2 : 1) * n + 4;
    const int64_t stride = n * ldw + 64;  // padded experts
    std::uniform_int_distribution<int> small(-8, 8);
    auto half_of = [&](int v) { return f32_to_fp16(static_cast<float>(v) / 8.0f); };
    std::vector<uint16_t> w(static_cast<size_t>(stride * n_expert)), w2(w.size()), x(static_cast<size_t>(n_pairs * ldx));
    for (auto& v : w) v = half_of(small(rng));
    for (auto& v : w2) v = half_of(small(rng));
    for (auto& v : x) v = half_of(small(rng));
    const Routing routing = random_routing(n_tokens, n_expert, k, n_tokens == 300 ? 2 : 0, rng);  // 300: unused slots
    const HostPlan hp = host_plan(shape, routing.ids);
    DeviceArray<uint16_t> d_w(alloc, w.size()), d_w2(alloc, w2.size()), d_x(alloc, x.size());
    DeviceArray<int32_t> d_ids(alloc, routing.ids.size());
    DeviceArray<uint8_t> d_plan(alloc, static_cast<size_t>(gc::moe_plan_bytes(shape)));
    DeviceArray<float> d_y(alloc, static_cast<size_t>(n_pairs * ldy));
    d_w.upload(w);
    d_w2.upload(w2);
    d_x.upload(x);
    d_ids.upload(routing.ids);
    d_y.poison();
    GA_CUDA_CHECK(gc::moe_plan({shape, d_ids.get(), d_plan.get()}, nullptr));
    gc::MoeGroupedGemmParams p;
    p.shape = shape;
    p.plan = d_plan.get();
    p.w = d_w.get();
    p.w2 = two ? d_w2.get() : nullptr;
    p.n = n;
    p.k = kdim;
    p.ldw = ldw;
    p.expert_stride = stride;
    p.x = d_x.get();
    p.ldx = ldx;
    p.y = d_y.get();
    p.ldy = ldy;
    const std::string name = str("grouped gemm E", n_expert, " k", k, " n", n_tokens, " ", n, "x", kdim, two ? " two" : "");
    ASSERT_EQ(gc::moe_grouped_gemm_unsupported_reason(p), nullptr) << name;
    GA_CUDA_CHECK(gc::moe_grouped_gemm(p, nullptr));
    GA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> y = d_y.download();
    std::vector<double> ref(static_cast<size_t>(n)), mag(ref.size());
    for (int e = 0; e < n_expert; ++e) {
      for (int32_t s = hp.offsets[e]; s < hp.offsets[e] + hp.counts[e]; ++s) {
        for (int z = 0; z < (two ? 2 : 1); ++z) {
          const std::vector<uint16_t>& m = z == 0 ? w : w2;
          for (int64_t r = 0; r < n; ++r) {
            double sum = 0.0, abs_sum = 0.0;
            for (int64_t c = 0; c < kdim; ++c) {
              const double prod = static_cast<double>(fp16_to_f32(m[static_cast<size_t>(e * stride + r * ldw + c)])) *
                                  fp16_to_f32(x[static_cast<size_t>(s * ldx + c)]);
              sum += prod;
              abs_sum += std::fabs(prod);
            }
            ref[static_cast<size_t>(r)] = sum;
            mag[static_cast<size_t>(r)] = abs_sum;
          }
          parity.compare(name + str(" row ", s, " stack ", z), y.data() + s * ldy + z * n, ref.data(),
                         static_cast<size_t>(n), 1e-5, 1e-30, mag.data());
        }
        parity.expect_untouched(name, y.data() + s * ldy + (two ? 2 : 1) * n, 4);
      }
    }
    for (int64_t s = hp.offsets[n_expert]; s < n_pairs; ++s) {  // rows past the valid pairs: untouched
      parity.expect_untouched(name + " unused row", y.data() + s * ldy, static_cast<size_t>(ldy));
    }
  }
  parity.finish();
}

// Captures route + `ffn` (the FFN's enqueue on the stream) once in a CUDA graph, then replays it with new
// logits: the plan is read on the device, so each replay routes its logits; ids identical to the CPU's, the
// FFN within tol of cpu_ffn on the GPU's weights.
void check_graph_replays(const std::string& what, ThreadPool& pool, const FfnCase& c, FfnData& d, DeviceFfn& dev,
                         const std::function<cudaError_t(cudaStream_t)>& ffn, double tol, std::mt19937& rng) {
  gc::Stream stream(0);
  GA_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy stream's uploads before the graph's stream
  cudaGraph_t graph = nullptr;
  GA_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  const cudaError_t route = gc::moe_route(dev.route_params(), stream.get());
  const cudaError_t status = ffn(stream.get());
  GA_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
  ASSERT_EQ(route, cudaSuccess) << what;
  ASSERT_EQ(status, cudaSuccess) << what;
  cudaGraphExec_t exec = nullptr;
  GA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : d.logits) v = normal(rng);
    dev.logits.upload(d.logits);
    dev.out.poison();
    GA_CUDA_CHECK(cudaDeviceSynchronize());
    GA_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
    stream.synchronize();
    Routing r = cpu_route(d.logits, c.n_expert, c.n_tokens, c.n_expert, c.k, true);
    ASSERT_EQ(dev.ids.download(), r.ids) << what << " replay " << replay;
    r.weights = dev.weights.download();
    expect_close(str(what, " replay ", replay), c, d, dev.out.download(), cpu_ffn(c, d, r, pool), tol);
  }
  GA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  GA_CUDA_CHECK(cudaGraphDestroy(graph));
}

// The decode step: route + moe_ffn_gemv.
TEST(CudaMoeFfn, DecodeStepReplaysFromAGraph) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  ThreadPool pool(4);
  std::mt19937 rng(51);
  const FfnCase c{DType::Q4_K, 128, 8, 4};
  FfnData d = make_ffn(c, rng);
  DeviceFfn dev(alloc, c, d);
  DeviceArray<uint8_t> ws(alloc, static_cast<size_t>(gc::moe_ffn_gemv_workspace_bytes(dev.shape, c.n_embd, c.n_ff)));
  const gc::MoeFfnGemvParams p = ffn_gemv_params(c, d, dev, ws.get());
  check_graph_replays("decode graph", pool, c, d, dev, [&](cudaStream_t s) { return gc::moe_ffn_gemv(p, s); }, 1e-3, rng);
}

// The graph-capturable prefill: route + moe_prefill_graph, the Q8_0 stacks dequantized inside the graph.
TEST(CudaMoeFfn, PrefillReplaysFromAGraph) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  ThreadPool pool(4);
  std::mt19937 rng(71);
  FfnCase c{DType::Q8_0, 60, 4, 100, 256, 128};
  c.x_scale = 1.0f / 32;
  FfnData d = make_ffn(c, rng);
  DeviceFfn dev(alloc, c, d);
  gc::MoePrefillParams p = prefill_params(c, d, dev);
  const int64_t ws_bytes = gc::moe_prefill_graph_workspace_bytes(p);
  DeviceArray<uint8_t> ws(alloc, static_cast<size_t>(ws_bytes));
  p.workspace = ws.get();
  p.workspace_bytes = ws_bytes;
  ASSERT_EQ(gc::moe_prefill_graph_unsupported_reason(p), nullptr);
  check_graph_replays("prefill graph", pool, c, d, dev, [&](cudaStream_t s) { return gc::moe_prefill_graph(p, s); }, 5e-3,
                      rng);
}

}  // namespace
}  // namespace ga::test::cuda
