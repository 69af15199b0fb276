// conv2d (NHWC, KRSC filters) against a direct float64 loop: strides, padding, dilation, groups (depthwise
// too), odd sizes, every input type, the bias + activation epilogue, with and without threads; and its errors.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "activation_reference.h"
#include "core/thread_pool.h"
#include "ops_test_util.h"

namespace ga::ops::testing {
namespace {

void run_case(Conv2dDesc d, ThreadPool* pool) {
  SCOPED_TRACE(::testing::Message() << "n " << d.batch << " h " << d.h << " w " << d.w << " c " << d.c << " k " << d.k
                                    << " r " << d.r << " s " << d.s << " stride " << d.stride_h << "x" << d.stride_w
                                    << " pad " << d.pad_h << "x" << d.pad_w << " dil " << d.dil_h << "x" << d.dil_w
                                    << " groups " << d.groups << " x " << dtype_name(d.x_type));
  std::mt19937 rng(static_cast<uint32_t>(d.h * 7 + d.c * 3 + d.k));
  Exec exec;
  exec.pool = pool;
  Conv2dPlan plan;
  expect_ok(plan_conv2d(d, exec, &plan));
  const int64_t cg = d.c / d.groups, kg = d.k / d.groups;
  Buffer x = random_buffer(d.x_type, static_cast<size_t>(d.batch * d.h * d.w * d.c), rng);
  Buffer f = random_buffer(d.filter_type, static_cast<size_t>(d.k * d.r * d.s * cg), rng);
  Buffer bias = random_buffer(d.bias_type, static_cast<size_t>(d.k), rng);
  Buffer out = empty_buffer(d.out_type, static_cast<size_t>(d.batch * plan.p * plan.q * d.k));
  std::vector<double> ref(out.size());
  for (int64_t nb = 0; nb < d.batch; ++nb)
    for (int64_t oy = 0; oy < plan.p; ++oy)
      for (int64_t ox = 0; ox < plan.q; ++ox)
        for (int64_t o = 0; o < d.k; ++o) {
          const int64_t g = o / kg;
          double s = d.has_bias ? bias.exact[static_cast<size_t>(o)] : 0.0;
          for (int64_t rr = 0; rr < d.r; ++rr)
            for (int64_t ss = 0; ss < d.s; ++ss) {
              const int64_t iy = oy * d.stride_h - d.pad_h + rr * d.dil_h;
              const int64_t ix = ox * d.stride_w - d.pad_w + ss * d.dil_w;
              if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
              for (int64_t ci = 0; ci < cg; ++ci) {
                s += x.exact[static_cast<size_t>(((nb * d.h + iy) * d.w + ix) * d.c + g * cg + ci)] *
                     f.exact[static_cast<size_t>(((o * d.r + rr) * d.s + ss) * cg + ci)];
              }
            }
          ref[static_cast<size_t>(((nb * plan.p + oy) * plan.q + ox) * d.k + o)] = activate64(d.activation, s);
        }
  std::vector<float> ws(plan.workspace_bytes / sizeof(float) + 1);
  Conv2dArgs args;
  args.x = x.data();
  args.filter = f.data();
  args.out = out.data();
  args.bias = d.has_bias ? bias.data() : nullptr;
  expect_ok(run_conv2d(plan, args, ws.data(), exec));
  expect_near_all(out, ref, tolerance(d.out_type), "conv2d");
}

Conv2dDesc desc(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t s) {
  Conv2dDesc d;
  d.batch = n;
  d.h = h;
  d.w = w;
  d.c = c;
  d.k = k;
  d.r = r;
  d.s = s;
  return d;
}

TEST(OpsConv2d, StridesPaddingDilationGroups) {
  ThreadPool pool(2);
  Conv2dDesc d = desc(2, 9, 7, 6, 8, 3, 3);
  run_case(d, &pool);  // plain 3x3, no padding
  d.pad_h = d.pad_w = 1;
  d.stride_h = 2;
  run_case(d, &pool);  // padded, strided in h
  d.dil_h = 2;
  d.dil_w = 3;
  d.stride_w = 3;
  run_case(d, nullptr);  // dilated
  d.groups = 2;
  run_case(d, &pool);  // grouped
  Conv2dDesc dw = desc(1, 5, 6, 4, 4, 3, 1);
  dw.groups = 4;  // depthwise
  dw.pad_h = 2;
  run_case(dw, &pool);
  Conv2dDesc pw = desc(3, 1, 127, 3, 5, 1, 1);  // 1x1, odd sizes
  run_case(pw, &pool);
}

TEST(OpsConv2d, HalfTypesAndEpilogue) {
  ThreadPool pool(2);
  for (const DType t : {DType::F16, DType::BF16}) {
    Conv2dDesc d = desc(2, 8, 8, 16, 12, 3, 3);
    d.pad_h = d.pad_w = 1;
    d.groups = 4;
    d.x_type = d.filter_type = d.out_type = d.bias_type = t;
    d.has_bias = true;
    d.activation = Activation::Relu;
    run_case(d, &pool);
    d.out_type = DType::F32;
    d.activation = Activation::Silu;
    run_case(d, &pool);
  }
}

TEST(OpsConv2d, Errors) {
  Conv2dDesc d = desc(1, 4, 4, 6, 4, 3, 3);
  d.groups = 4;
  Conv2dPlan plan;
  expect_error(plan_conv2d(d, Exec{}, &plan), ErrorKind::InvalidArgument, "groups 4 must divide");
  d.groups = 1;
  d.stride_h = 0;
  expect_error(plan_conv2d(d, Exec{}, &plan), ErrorKind::InvalidArgument, "stride");
  d.stride_h = 1;
  Exec cuda;
  cuda.device = Device::Cuda;
  expect_error(plan_conv2d(d, cuda, &plan), ErrorKind::Unsupported, "no CUDA implementation");
  // A window larger than the padded input gives an empty output, not an error.
  Conv2dDesc big = desc(1, 2, 2, 1, 1, 5, 5);
  expect_ok(plan_conv2d(big, Exec{}, &plan));
  EXPECT_EQ(plan.p, 0);
  // The workspace is per thread: a pool larger than the plan's is refused.
  expect_ok(plan_conv2d(d, Exec{}, &plan));
  ThreadPool pool(2);
  Exec threaded;
  threaded.pool = &pool;
  std::vector<float> x(96), f(216), out(16), ws(plan.workspace_bytes / 4);
  Conv2dArgs args{x.data(), f.data(), out.data(), nullptr};
  expect_error(run_conv2d(plan, args, ws.data(), threaded), ErrorKind::InvalidArgument, "threads");
}

}  // namespace
}  // namespace ga::ops::testing
