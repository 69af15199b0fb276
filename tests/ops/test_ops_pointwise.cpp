// Elementwise ops (with broadcasting and strided views), reductions along each axis, and the fused norms,
// against float64 references, in every float type; and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "activation_reference.h"
#include "backends/cpu/ops.h"
#include "core/thread_pool.h"
#include "gpu_accel/device.h"
#include "ops_test_util.h"

namespace ga::ops::testing {
namespace {

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

TEST(OpsElementwise, EveryActivationInEveryType) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  Exec exec;
  exec.pool = &pool;
  for (const DType t : kTypes) {
    for (const Activation a : {Activation::Relu, Activation::Gelu, Activation::GeluTanh, Activation::Silu,
                               Activation::Sigmoid, Activation::Tanh}) {
      Buffer x = random_buffer(t, 3 * 127, rng, 3.0f);
      Buffer out = empty_buffer(t, x.size());
      std::vector<double> ref(x.size());
      for (size_t i = 0; i < ref.size(); ++i) ref[i] = activate64(a, x.exact[i]);
      expect_ok(unary(a, view(x, {3, 127}), view(out, {3, 127}), exec));
      expect_near_all(out, ref, tolerance(t), activation_name(a));
    }
  }
}

TEST(OpsElementwise, AddAndMulBroadcast) {
  ThreadPool pool(2);
  std::mt19937 rng(8);
  Exec exec;
  exec.pool = &pool;
  for (const DType t : kTypes) {
    Buffer a = random_buffer(t, 2 * 1 * 5, rng);       // [2, 1, 5]
    Buffer b = random_buffer(DType::F32, 3 * 1, rng);  // [3, 1]: a mix of types
    Buffer out = empty_buffer(t, 2 * 3 * 5);
    for (const BinaryOp op : {BinaryOp::Add, BinaryOp::Mul}) {
      std::vector<double> ref(out.size());
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 5; ++k) {
            const double x = a.exact[static_cast<size_t>(i * 5 + k)], y = b.exact[static_cast<size_t>(j)];
            ref[static_cast<size_t>((i * 3 + j) * 5 + k)] = op == BinaryOp::Add ? x + y : x * y;
          }
      expect_ok(binary(op, view(a, {2, 1, 5}), view(b, {3, 1}), view(out, {2, 3, 5}), exec));
      expect_near_all(out, ref, tolerance(t), op == BinaryOp::Add ? "add" : "mul");
    }
  }
  Buffer a = random_buffer(DType::F32, 6, rng), b = random_buffer(DType::F32, 4, rng),
         out = empty_buffer(DType::F32, 6);
  expect_error(binary(BinaryOp::Add, view(a, {2, 3}), view(b, {4}), view(out, {2, 3}), exec),
               ErrorKind::InvalidArgument, "does not broadcast");
}

TEST(OpsElementwise, StridedViewsAndScalars) {
  std::mt19937 rng(9);
  Buffer x = random_buffer(DType::F32, 4 * 6, rng);
  TensorView xv = view(x, {4, 3});  // every other column of a [4][6] array
  xv.strides[0] = 6;
  xv.strides[1] = 2;
  Buffer out = empty_buffer(DType::F32, 12);
  expect_ok(unary(Activation::Tanh, xv, view(out, {4, 3}), Exec{}));
  std::vector<double> ref(12);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      ref[static_cast<size_t>(i * 3 + j)] = std::tanh(x.exact[static_cast<size_t>(i * 6 + 2 * j)]);
  expect_near_all(out, ref, tolerance(DType::F32), "strided tanh");
  Buffer s = random_buffer(DType::F32, 1, rng), o = empty_buffer(DType::F32, 1);
  expect_ok(binary(BinaryOp::Mul, view(s, {}), view(s, {}), view(o, {}), Exec{}));  // 0-d
  EXPECT_FLOAT_EQ(static_cast<float>(o.get(0)), static_cast<float>(s.exact[0] * s.exact[0]));
}

TEST(OpsReduce, EveryOpAlongEveryAxis) {
  ThreadPool pool(2);
  Exec exec;
  exec.pool = &pool;
  std::mt19937 rng(10);
  const int64_t shape[3] = {3, 127, 5};
  for (const DType t : kTypes) {
    Buffer x = random_buffer(t, 3 * 127 * 5, rng, 2.0f);
    for (int axis = 0; axis < 3; ++axis) {
      int64_t os[2];
      int no = 0;
      for (int d = 0; d < 3; ++d)
        if (d != axis) os[no++] = shape[d];
      for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::ArgMax, ReduceOp::LogSumExp}) {
        SCOPED_TRACE(::testing::Message() << reduce_name(op) << " axis " << axis << " " << dtype_name(t));
        const DType ot = op == ReduceOp::ArgMax ? DType::I64 : t;
        std::vector<double> ref(static_cast<size_t>(os[0] * os[1]));
        std::vector<int64_t> ref_idx(ref.size());
        for (int64_t i = 0; i < os[0]; ++i)
          for (int64_t j = 0; j < os[1]; ++j) {
            double sum = 0, mx = -INFINITY;
            int64_t arg = 0;
            for (int64_t r = 0; r < shape[axis]; ++r) {
              int64_t idx[3];
              int q = 0;
              for (int d = 0; d < 3; ++d) idx[d] = d == axis ? r : (q++ == 0 ? i : j);
              const double v = x.exact[static_cast<size_t>((idx[0] * 127 + idx[1]) * 5 + idx[2])];
              sum += v;
              if (v > mx) {
                mx = v;
                arg = r;
              }
            }
            double lse = 0;
            for (int64_t r = 0; r < shape[axis]; ++r) {
              int64_t idx[3];
              int q = 0;
              for (int d = 0; d < 3; ++d) idx[d] = d == axis ? r : (q++ == 0 ? i : j);
              lse += std::exp(x.exact[static_cast<size_t>((idx[0] * 127 + idx[1]) * 5 + idx[2])] - mx);
            }
            const size_t o = static_cast<size_t>(i * os[1] + j);
            ref_idx[o] = arg;
            ref[o] = op == ReduceOp::Sum    ? sum
                     : op == ReduceOp::Mean ? sum / static_cast<double>(shape[axis])
                     : op == ReduceOp::Max  ? mx
                                            : mx + std::log(lse);
          }
        TensorView xv = view(x, {3, 127, 5});
        if (op == ReduceOp::ArgMax) {
          std::vector<int64_t> got(ref.size(), -1);
          TensorView ov;
          ov.type = DType::I64;
          ov.data = got.data();
          ov.ndim = 2;
          ov.shape[0] = os[0];
          ov.shape[1] = os[1];
          ov.strides[0] = os[1];
          ov.strides[1] = 1;
          expect_ok(reduce(op, xv, axis, ov, exec));
          EXPECT_EQ(got, ref_idx);
        } else {
          Buffer out = empty_buffer(ot, ref.size());
          expect_ok(reduce(op, xv, axis, view(out, {os[0], os[1]}), exec));
          expect_near_all(out, ref, tolerance(t), reduce_name(op));
        }
      }
    }
  }
}

TEST(OpsReduce, NaNInfinityAndErrors) {
  std::vector<float> v = {1.0f, NAN, 3.0f, -INFINITY, -INFINITY, -INFINITY};
  TensorView x;
  x.data = v.data();
  x.ndim = 2;
  x.shape[0] = 2;
  x.shape[1] = 3;
  x.strides[0] = 3;
  x.strides[1] = 1;
  std::vector<float> out(2);
  TensorView o;
  o.data = out.data();
  o.ndim = 1;
  o.shape[0] = 2;
  o.strides[0] = 1;
  expect_ok(reduce(ReduceOp::Max, x, 1, o, Exec{}));
  EXPECT_TRUE(std::isnan(out[0]));
  expect_ok(reduce(ReduceOp::LogSumExp, x, 1, o, Exec{}));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], -INFINITY);
  std::vector<int64_t> idx(2);
  TensorView oi = o;
  oi.type = DType::I64;
  oi.data = idx.data();
  expect_ok(reduce(ReduceOp::ArgMax, x, 1, oi, Exec{}));
  EXPECT_EQ(idx[0], 1);  // the first NaN, as numpy
  EXPECT_EQ(idx[1], 0);
  expect_error(reduce(ReduceOp::Sum, x, 2, o, Exec{}), ErrorKind::InvalidArgument, "axis 2");
  expect_error(reduce(ReduceOp::ArgMax, x, 1, o, Exec{}), ErrorKind::InvalidArgument, "I64");
  Exec cuda;
  cuda.device = Device::Cuda;
  // Device::Cuda with host pointers: Unsupported without CUDA (build or device), else refused as host memory.
  if (ga::cuda_device_count() == 0) {
    expect_error(reduce(ReduceOp::Sum, x, 1, o, cuda), ErrorKind::Unsupported, "no CUDA");
  } else {
    expect_error(reduce(ReduceOp::Sum, x, 1, o, cuda), ErrorKind::InvalidArgument, "not device memory");
  }
}

TEST(OpsNorm, RmsNormLayerNormSoftmax) {
  ThreadPool pool(2);
  Exec exec;
  exec.pool = &pool;
  std::mt19937 rng(11);
  for (const DType t : kTypes) {
    for (const int64_t n : {1, 3, 127}) {
      const int64_t rows = 5;
      Buffer x = random_buffer(t, static_cast<size_t>(rows * n), rng, 2.0f);
      Buffer w = random_buffer(t, static_cast<size_t>(n), rng);
      Buffer b = random_buffer(t, static_cast<size_t>(n), rng);
      std::vector<double> rms(x.size()), ln(x.size()), sm(x.size());
      for (int64_t r = 0; r < rows; ++r) {
        double s = 0, sq = 0, mx = -INFINITY;
        for (int64_t i = 0; i < n; ++i) {
          const double v = x.exact[static_cast<size_t>(r * n + i)];
          s += v;
          sq += v * v;
          mx = std::max(mx, v);
        }
        const double mean = s / static_cast<double>(n);
        double var = 0, es = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double v = x.exact[static_cast<size_t>(r * n + i)];
          var += (v - mean) * (v - mean);
          es += std::exp(v - mx);
        }
        var /= static_cast<double>(n);
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = static_cast<size_t>(r * n + i);
          const double v = x.exact[k];
          rms[k] = v / std::sqrt(sq / static_cast<double>(n) + 1e-6) * w.exact[static_cast<size_t>(i)];
          ln[k] =
              (v - mean) / std::sqrt(var + 1e-5) * w.exact[static_cast<size_t>(i)] + b.exact[static_cast<size_t>(i)];
          sm[k] = std::exp(v - mx) / es;
        }
      }
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n);
      Buffer out = empty_buffer(t, x.size());
      expect_ok(rms_norm(view(x, {rows, n}), view(w, {n}), 1e-6f, view(out, {rows, n}), exec));
      expect_near_all(out, rms, tolerance(t), "rms_norm");
      out = empty_buffer(t, x.size());
      expect_ok(layer_norm(view(x, {rows, n}), view(w, {n}), view(b, {n}), 1e-5f, view(out, {rows, n}), exec));
      // n = 1: x - mean is 0 exactly and the output is the bias, in every type.
      expect_near_all(out, ln, n == 1 ? tolerance(t) : 4 * tolerance(t), "layer_norm");
      out = empty_buffer(t, x.size());
      expect_ok(softmax(view(x, {rows, n}), view(out, {rows, n}), exec));
      expect_near_all(out, sm, tolerance(t), "softmax");
    }
  }
}

TEST(OpsNorm, MatchesTheEngineAndRefusesBadWeights) {
  std::mt19937 rng(12);
  Buffer x = random_buffer(DType::F32, 64, rng), w = random_buffer(DType::F32, 64, rng);
  Buffer out = empty_buffer(DType::F32, 64);
  expect_ok(rms_norm(view(x, {64}), view(w, {64}), 1e-5f, view(out, {64}), Exec{}));
  std::vector<float> engine(64);
  cpu::rms_norm(x.f32.data(), w.f32.data(), engine.data(), 64, 1e-5f);
  EXPECT_EQ(out.f32, engine);  // the backend's kernel, to the bit
  Buffer w7 = random_buffer(DType::F32, 7, rng);
  expect_error(rms_norm(view(x, {64}), view(w7, {7}), 1e-5f, view(out, {64}), Exec{}), ErrorKind::InvalidArgument,
               "weight [7] must have shape [64]");
  expect_error(rms_norm(view(x, {64}), TensorView{}, 1e-5f, view(out, {64}), Exec{}), ErrorKind::InvalidArgument,
               "weight is required");
  expect_error(softmax(view(x, {64}), view(out, {8, 8}), Exec{}), ErrorKind::InvalidArgument, "same shape");
}

TEST(OpsNorm, InPlaceOnTheSameView) {
  std::mt19937 rng(13);
  Buffer x = random_buffer(DType::F16, 3 * 9, rng);
  std::vector<double> ref(x.size());
  for (int r = 0; r < 3; ++r) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < 9; ++i) mx = std::max(mx, x.exact[static_cast<size_t>(r * 9 + i)]);
    for (int i = 0; i < 9; ++i) s += std::exp(x.exact[static_cast<size_t>(r * 9 + i)] - mx);
    for (int i = 0; i < 9; ++i)
      ref[static_cast<size_t>(r * 9 + i)] = std::exp(x.exact[static_cast<size_t>(r * 9 + i)] - mx) / s;
  }
  expect_ok(softmax(view(x, {3, 9}), view(x, {3, 9}), Exec{}));
  expect_near_all(x, ref, tolerance(DType::F16), "in-place softmax");
  expect_ok(unary(Activation::Relu, view(x, {3, 9}), view(x, {3, 9}), Exec{}));  // all > 0: unchanged
  expect_near_all(x, ref, tolerance(DType::F16), "in-place relu");
}

}  // namespace
}  // namespace ga::ops::testing
