// gemm / batched gemm against a float64 reference: every input type, both transposes, odd shapes (1, 3, 127),
// strided and broadcast batches, alpha/beta, the bias + activation epilogue, with and without threads; and the
// errors plan_gemm and run_gemm give.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "activation_reference.h"
#include "core/thread_pool.h"
#include "ops_test_util.h"

namespace ga::ops::testing {
namespace {

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  DType ab, c;
  int64_t batch = 1;
  bool broadcast_b = false;  // stride_b 0: every batch reads one B
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  Activation act = Activation::None;
};

void run_case(const Case& t, ThreadPool* pool) {
  SCOPED_TRACE(::testing::Message() << "m " << t.m << " n " << t.n << " k " << t.k << " ta " << t.ta << " tb " << t.tb
                                    << " ab " << dtype_name(t.ab) << " c " << dtype_name(t.c) << " batch " << t.batch
                                    << " act " << activation_name(t.act));
  std::mt19937 rng(static_cast<uint32_t>(t.m * 131 + t.n * 17 + t.k));
  GemmDesc d;
  d.m = t.m;
  d.n = t.n;
  d.k = t.k;
  d.trans_a = t.ta;
  d.trans_b = t.tb;
  d.a_type = d.b_type = t.ab;
  d.c_type = t.c;
  // Padded leading dimensions, so strides are exercised too.
  d.lda = (t.ta ? t.m : t.k) + 3;
  d.ldb = (t.tb ? t.k : t.n) + 1;
  d.ldc = t.n + 2;
  d.batch = t.batch;
  d.stride_a = (t.ta ? t.k : t.m) * d.lda;
  d.stride_b = t.broadcast_b ? 0 : (t.tb ? t.n : t.k) * d.ldb;
  d.stride_c = t.m * d.ldc;
  d.has_bias = t.bias;
  d.bias_type = t.c;
  d.activation = t.act;
  Buffer a = random_buffer(t.ab, static_cast<size_t>(d.stride_a * t.batch), rng);
  Buffer b =
      random_buffer(t.ab, static_cast<size_t>(t.broadcast_b ? (t.tb ? t.n : t.k) * d.ldb : d.stride_b * t.batch), rng);
  Buffer c = t.beta != 0.0f ? random_buffer(t.c, static_cast<size_t>(d.stride_c * t.batch), rng)
                            : empty_buffer(t.c, static_cast<size_t>(d.stride_c * t.batch));
  Buffer bias = random_buffer(t.c, static_cast<size_t>(t.n), rng);
  std::vector<double> ref(c.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = c.exact[i];
  for (int64_t bi = 0; bi < t.batch; ++bi) {
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        double s = 0.0;
        for (int64_t p = 0; p < t.k; ++p) {
          const double av = a.exact[bi * d.stride_a + (t.ta ? p * d.lda + i : i * d.lda + p)];
          const double bv = b.exact[bi * d.stride_b + (t.tb ? j * d.ldb + p : p * d.ldb + j)];
          s += av * bv;
        }
        const size_t ci = static_cast<size_t>(bi * d.stride_c + i * d.ldc + j);
        double v = t.alpha * s + (t.beta != 0.0f ? t.beta * c.exact[ci] : 0.0) + (t.bias ? bias.exact[j] : 0.0);
        ref[ci] = activate64(t.act, v);
      }
    }
  }
  // The padding columns of C are not written: keep them out of the comparison.
  std::vector<size_t> valid;
  for (int64_t bi = 0; bi < t.batch; ++bi)
    for (int64_t i = 0; i < t.m; ++i)
      for (int64_t j = 0; j < t.n; ++j) valid.push_back(static_cast<size_t>(bi * d.stride_c + i * d.ldc + j));
  Exec exec;
  exec.pool = pool;
  GemmPlan plan;
  expect_ok(plan_gemm(d, exec, &plan));
  std::vector<float> ws(plan.workspace_bytes / sizeof(float) + 1);
  GemmArgs args;
  args.a = a.data();
  args.b = b.data();
  args.c = c.data();
  args.bias = t.bias ? bias.data() : nullptr;
  args.alpha = t.alpha;
  args.beta = t.beta;
  expect_ok(run_gemm(plan, args, ws.data(), exec));
  Buffer got = empty_buffer(t.c, valid.size());
  std::vector<double> want(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    want[i] = ref[valid[i]];
    if (t.c == DType::F32)
      got.f32[i] = c.f32[valid[i]];
    else
      got.half[i] = c.half[valid[i]];
  }
  // Inputs of 16 bits are exact in the reference; what remains is float32 accumulation and C's rounding.
  expect_near_all(got, want, tolerance(t.c), "gemm");
}

TEST(OpsGemm, EveryTypeAndTransposeOnOddShapes) {
  ThreadPool pool(2);
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 127, 5}, {127, 3, 64}, {17, 33, 1}, {64, 64, 127}};
  for (const DType ab : {DType::F32, DType::F16, DType::BF16}) {
    for (const auto& s : shapes) {
      for (int tr = 0; tr < 4; ++tr) {
        Case c{s[0], s[1], s[2], (tr & 1) != 0, (tr & 2) != 0, ab, ab == DType::F32 ? DType::F32 : ab};
        run_case(c, &pool);
        c.c = DType::F32;  // 16-bit inputs, float32 output
        run_case(c, nullptr);
      }
    }
  }
}

TEST(OpsGemm, BatchesAlphaBetaAndEpilogues) {
  ThreadPool pool(2);
  for (const Activation act :
       {Activation::None, Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu}) {
    Case c{19, 7, 37, false, true, DType::F16, DType::F32, 3, false, 0.5f, -1.25f, true, act};
    run_case(c, &pool);
    c.broadcast_b = true;
    c.ta = true;
    c.ab = DType::BF16;
    c.c = DType::BF16;
    run_case(c, &pool);
  }
  run_case({5, 9, 0, false, false, DType::F32, DType::F32, 2, false, 1.0f, 0.5f, true}, &pool);  // k = 0
}

TEST(OpsGemm, PlanChoosesTheLargerSideForThreads) {
  GemmDesc d;
  d.m = 1000;
  d.n = 1;
  d.k = 8;
  d.lda = 8;
  d.ldb = 1;
  d.ldc = 1;
  GemmPlan plan;
  expect_ok(plan_gemm(d, Exec{}, &plan));
  EXPECT_TRUE(plan.cpu.rows_are_m);
  EXPECT_FALSE(plan.cpu.pack_w);  // A [m][k] is matmul's W as stored
  d.m = 1;
  d.n = 1000;
  d.lda = 8;
  d.ldb = 1000;
  d.ldc = 1000;
  expect_ok(plan_gemm(d, Exec{}, &plan));
  EXPECT_FALSE(plan.cpu.rows_are_m);
  EXPECT_TRUE(plan.cpu.pack_w);  // B [k][n] is not along k: packed
}

TEST(OpsGemm, ErrorsNameTheProblem) {
  GemmDesc d;
  d.m = 4;
  d.n = 4;
  d.k = 8;
  d.lda = 7;  // below k
  d.ldb = 4;
  d.ldc = 4;
  GemmPlan plan;
  expect_error(plan_gemm(d, Exec{}, &plan), ErrorKind::InvalidArgument, "lda 7");
  d.lda = 8;
  d.a_type = DType::Q4_0;
  expect_error(plan_gemm(d, Exec{}, &plan), ErrorKind::InvalidArgument, "A must be F32, F16 or BF16");
  d.a_type = DType::F32;
  Exec cuda;
  cuda.device = Device::Cuda;
  expect_error(plan_gemm(d, cuda, &plan), ErrorKind::Unsupported, "no CUDA implementation");
  d.has_bias = true;
  expect_ok(plan_gemm(d, Exec{}, &plan));
  std::vector<float> a(32), b(32), c(16), ws(plan.workspace_bytes / 4);
  GemmArgs args;
  args.a = a.data();
  args.b = b.data();
  args.c = c.data();
  expect_error(run_gemm(plan, args, ws.data(), Exec{}), ErrorKind::InvalidArgument, "bias");
  EXPECT_THROW(run_gemm(plan, args, ws.data(), Exec{}).throw_if_error(), Error);
}

}  // namespace
}  // namespace ga::ops::testing
