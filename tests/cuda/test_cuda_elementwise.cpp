// The small kernels of the families beyond Llama (kernels/elementwise.h, and swiglu's GELU-tanh) against the
// CPU reference: per-head RMSNorm of one or two segments (q and k), soft-capping, row scaling and addition,
// the sigmoid gate of a row, and GeGLU; the fused RWKV row ops (several mixes in one pass, bias + unary) against
// the separate kernels they replace. Awkward sizes (7, 19, 37, 733), several rows with padded strides,
// outputs poisoned with NaN and the padding checked untouched. GPU only: SKIPPED without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops.h"
#include "backends/cuda/kernels/elementwise.h"
#include "backends/cuda/kernels/ops.h"
#include "cuda/cuda_harness.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;

std::vector<float> random_floats(size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(CudaElementwise, HeadRmsNormOfOneAndTwoSegmentsMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("head_rms_norm");
  std::mt19937 rng(3);
  for (const int64_t head_dim : {8, 19, 64, 128, 256}) {
    for (const int64_t n_rows : {1, 7}) {
      for (const bool two : {false, true}) {
        const int64_t h1 = 4, h2 = two ? 2 : 0;
        const int64_t ld = (h1 + h2) * head_dim + 5;  // q and k slices of one row, padded
        const std::string name = str("hd ", head_dim, " rows ", n_rows, two ? " q+k" : " q");
        std::vector<float> x = random_floats(static_cast<size_t>(ld * n_rows), 3.0f, rng);
        const std::vector<float> w1 = random_floats(static_cast<size_t>(head_dim), 1.0f, rng);
        const std::vector<float> w2 = random_floats(static_cast<size_t>(head_dim), 1.0f, rng);
        DeviceArray<float> dx(alloc, x.size()), dw1(alloc, w1.size()), dw2(alloc, w2.size());
        dx.upload(x);
        dw1.upload(w1);
        dw2.upload(w2);
        ::ga::cuda::HeadRmsNormParams p;
        p.x = dx.get();
        p.ldx = ld;
        p.n_heads = h1;
        p.weight = dw1.get();
        if (two) {
          p.x2 = dx.get() + h1 * head_dim;
          p.ldx2 = ld;
          p.n_heads2 = h2;
          p.weight2 = dw2.get();
        }
        p.n_rows = n_rows;
        p.head_dim = head_dim;
        p.eps = 1e-6f;
        ASSERT_EQ(::ga::cuda::head_rms_norm_unsupported_reason(p), nullptr) << name;
        GA_CUDA_CHECK(::ga::cuda::head_rms_norm(p, nullptr));
        GA_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = dx.download();
        std::vector<double> ref;
        std::vector<float> got_rows;
        std::vector<float> tmp(static_cast<size_t>(head_dim));
        for (int64_t r = 0; r < n_rows; ++r) {
          for (int64_t h = 0; h < h1 + h2; ++h) {
            const float* src = x.data() + r * ld + h * head_dim;
            ::ga::cpu::rms_norm(src, (h < h1 ? w1 : w2).data(), tmp.data(), head_dim, 1e-6f);
            ref.insert(ref.end(), tmp.begin(), tmp.end());
            got_rows.insert(got_rows.end(), got.begin() + r * ld + h * head_dim,
                            got.begin() + r * ld + (h + 1) * head_dim);
          }
          for (int64_t i = (h1 + h2) * head_dim; i < ld; ++i) {  // the padding is not a head: unchanged
            if (got[static_cast<size_t>(r * ld + i)] != x[static_cast<size_t>(r * ld + i)]) {
              parity.fail(name + ": wrote the row's padding");
            }
          }
        }
        parity.compare(name, got_rows.data(), ref.data(), ref.size(), 1e-5, 1e-6);
      }
    }
  }
  parity.finish();
}

TEST(CudaElementwise, SoftcapScaleAddAndSigmoidGateMatchCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("row ops");
  std::mt19937 rng(7);
  for (const int64_t n : {7, 19, 37, 733}) {
    for (const int64_t n_rows : {1, 3}) {
      const int64_t ld = n + 3;
      const std::string name = str("n ", n, " rows ", n_rows);
      const std::vector<float> x = random_floats(static_cast<size_t>(ld * n_rows), 40.0f, rng);
      const std::vector<float> y = random_floats(static_cast<size_t>(ld * n_rows), 1.0f, rng);
      DeviceArray<float> dx(alloc, x.size()), dy(alloc, y.size());
      std::vector<double> ref;
      std::vector<float> got_rows;
      const auto collect = [&](const std::vector<float>& got, const std::vector<float>& want) {
        ref.clear();
        got_rows.clear();
        for (int64_t r = 0; r < n_rows; ++r) {
          for (int64_t i = 0; i < n; ++i) {
            ref.push_back(want[static_cast<size_t>(r * ld + i)]);
            got_rows.push_back(got[static_cast<size_t>(r * ld + i)]);
          }
          for (int64_t i = n; i < ld; ++i) {
            if (got[static_cast<size_t>(r * ld + i)] != x[static_cast<size_t>(r * ld + i)]) {
              parity.fail(name + ": wrote past n");
            }
          }
        }
      };
      // soft-cap at 30 (Gemma 2's final cap): scores of std 40 go through the saturating part too
      dx.upload(x);
      GA_CUDA_CHECK(::ga::cuda::softcap_rows(dx.get(), ld, n_rows, n, 30.0f, nullptr));
      std::vector<float> want = x;
      for (int64_t r = 0; r < n_rows; ++r) ::ga::cpu::softcap(want.data() + r * ld, n, 30.0f);
      collect(dx.download(), want);
      parity.compare(name + " softcap", got_rows.data(), ref.data(), ref.size(), 1e-6, 1e-5);
      // scale by sqrt(n_embd) (Gemma's embedding)
      dx.upload(x);
      GA_CUDA_CHECK(::ga::cuda::scale_rows(dx.get(), ld, n_rows, n, 45.25f, nullptr));
      want = x;
      for (int64_t r = 0; r < n_rows; ++r) {
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(r * ld + i)] *= 45.25f;
      }
      collect(dx.download(), want);
      parity.compare(name + " scale", got_rows.data(), ref.data(), ref.size(), 0, 0);
      // x += y
      dx.upload(x);
      dy.upload(y);
      GA_CUDA_CHECK(::ga::cuda::add_rows(dx.get(), ld, dy.get(), ld, n_rows, n, nullptr));
      want = x;
      for (int64_t r = 0; r < n_rows; ++r) ::ga::cpu::add_inplace(want.data() + r * ld, y.data() + r * ld, n);
      collect(dx.download(), want);
      parity.compare(name + " add", got_rows.data(), ref.data(), ref.size(), 0, 0);
      // y *= sigmoid(g . x): x and g of n values, y of n values (the shared expert's output)
      const std::vector<float> g = random_floats(static_cast<size_t>(n), 1.0f / std::sqrt(static_cast<float>(n)), rng);
      const std::vector<float> small_x = random_floats(static_cast<size_t>(ld * n_rows), 1.0f, rng);
      DeviceArray<float> dg(alloc, g.size()), dsx(alloc, small_x.size());
      dg.upload(g);
      dsx.upload(small_x);
      dx.upload(x);
      GA_CUDA_CHECK(::ga::cuda::sigmoid_gate_rows(dx.get(), ld, n, dg.get(), dsx.get(), ld, n, n_rows, nullptr));
      want = x;
      for (int64_t r = 0; r < n_rows; ++r) {
        double dot = 0;
        for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(g[static_cast<size_t>(i)]) * small_x[static_cast<size_t>(r * ld + i)];
        const float s = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(r * ld + i)] *= s;
      }
      collect(dx.download(), want);
      parity.compare(name + " sigmoid gate", got_rows.data(), ref.data(), ref.size(), 1e-5, 1e-6);
    }
  }
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  parity.finish();
}

// Equal but for the rounding of a contraction the compiler may place differently in two kernels.
void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-6f * (1.0f + std::fabs(want[i]))) << what << " at " << i;
  }
}

// mix_rows_many and add_vector_unary_rows do in one launch what mix_rows and add_vector_rows + unary_rows do in
// several, with the same float operations. Mismatched mixes are refused.
TEST(CudaElementwise, FusedMixesAndBiasUnaryEqualTheirParts) {
  GA_REQUIRE_CUDA_DEVICE();
  using ::ga::cuda::MixParams;
  CachingAllocator alloc(0);
  std::mt19937 rng(11);
  for (const int64_t n : {19, 733}) {
    for (const int64_t n_rows : {1, 3}) {
      const int64_t ld = n + 5;
      const size_t size = static_cast<size_t>(ld * n_rows);
      const std::vector<float> x = random_floats(size, 1.0f, rng), prev = random_floats(size, 1.0f, rng);
      DeviceArray<float> dx(alloc, size), dprev(alloc, size);
      dx.upload(x);
      dprev.upload(prev);
      for (const bool complement : {false, true}) {
        SCOPED_TRACE(str("n ", n, " rows ", n_rows, complement ? " complement" : " delta"));
        std::vector<DeviceArray<float>> mixv, dyn, fused, single;
        for (auto* v : {&mixv, &dyn, &fused, &single}) v->reserve(::ga::cuda::kMaxMixes);
        ::ga::cuda::MixManyParams many;
        many.count = ::ga::cuda::kMaxMixes;
        for (int m = 0; m < many.count; ++m) {
          mixv.emplace_back(alloc, static_cast<size_t>(n));
          mixv.back().upload(random_floats(static_cast<size_t>(n), 0.5f, rng));
          dyn.emplace_back(alloc, size);
          dyn.back().upload(random_floats(size, 0.3f, rng));
          fused.emplace_back(alloc, size);
          single.emplace_back(alloc, size);
          fused.back().upload(std::vector<float>(size, -7.0f));
          single.back().upload(std::vector<float>(size, -7.0f));
        }
        for (int m = 0; m < many.count; ++m) {
          MixParams p;
          p.x = dx.get();
          p.ldx = ld;
          p.prev = dprev.get();
          p.ld_prev = ld;
          p.mix = mixv[static_cast<size_t>(m)].get();
          if (!complement && m % 2 == 1) {  // v6's data-dependent part on some of them
            p.dyn = dyn[static_cast<size_t>(m)].get();
            p.ld_dyn = ld;
          }
          p.out = single[static_cast<size_t>(m)].get();
          p.ld_out = ld;
          p.n_rows = n_rows;
          p.n = n;
          p.complement = complement;
          GA_CUDA_CHECK(::ga::cuda::mix_rows(p, nullptr));
          p.out = fused[static_cast<size_t>(m)].get();
          many.mix[m] = p;
        }
        GA_CUDA_CHECK(::ga::cuda::mix_rows_many(many, nullptr));
        for (int m = 0; m < many.count; ++m) {
          expect_same_floats(fused[static_cast<size_t>(m)].download(), single[static_cast<size_t>(m)].download(),
                             str("mix ", m));
        }
        ::ga::cuda::MixManyParams bad = many;
        bad.mix[2].prev = dx.get();  // another predecessor
        EXPECT_EQ(::ga::cuda::mix_rows_many(bad, nullptr), cudaErrorInvalidValue);
        bad = many;
        bad.count = ::ga::cuda::kMaxMixes + 1;
        EXPECT_EQ(::ga::cuda::mix_rows_many(bad, nullptr), cudaErrorInvalidValue);
      }
      const std::vector<float> b = random_floats(static_cast<size_t>(n), 1.0f, rng);
      DeviceArray<float> db(alloc, b.size()), a1(alloc, size), a2(alloc, size);
      db.upload(b);
      for (const auto fn : {::ga::cuda::RowUnary::kSigmoid, ::ga::cuda::RowUnary::kV7Decay,
                            ::ga::cuda::RowUnary::kExpNegExp}) {
        a1.upload(x);
        a2.upload(x);
        GA_CUDA_CHECK(::ga::cuda::add_vector_rows(a1.get(), ld, db.get(), n_rows, n, nullptr));
        GA_CUDA_CHECK(::ga::cuda::unary_rows(a1.get(), ld, n_rows, n, fn, nullptr));
        GA_CUDA_CHECK(::ga::cuda::add_vector_unary_rows(a2.get(), ld, db.get(), n_rows, n, fn, nullptr));
        expect_same_floats(a2.download(), a1.download(), str("bias + unary ", static_cast<int>(fn)));
      }
    }
  }
  GA_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CudaElementwise, GegluMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("geglu");
  std::mt19937 rng(11);
  for (const int64_t n : {7, 19, 37, 733, 14336}) {
    for (const int64_t n_rows : {1, 3}) {
      const std::string name = str("n ", n, " rows ", n_rows);
      const int64_t ld_in = 2 * n + 1, ld_out = n + 2;
      const std::vector<float> in = random_floats(static_cast<size_t>(ld_in * n_rows), 4.0f, rng);
      DeviceArray<float> din(alloc, in.size()), out(alloc, static_cast<size_t>(ld_out * n_rows));
      din.upload(in);
      out.poison();
      ::ga::cuda::SwigluParams p;
      p.gate = din.get();
      p.up = din.get() + n;
      p.out = out.get();
      p.n_rows = n_rows;
      p.n = n;
      p.ld_gate = p.ld_up = ld_in;
      p.ld_out = ld_out;
      p.act = ::ga::cuda::GluActivation::kGeluTanh;
      GA_CUDA_CHECK(::ga::cuda::swiglu(p, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = out.download();
      std::vector<float> ref(static_cast<size_t>(n));
      for (int64_t r = 0; r < n_rows; ++r) {
        const float* row = in.data() + r * ld_in;
        ::ga::cpu::geglu_tanh(row, row + n, ref.data(), n);
        const std::vector<double> ref_d(ref.begin(), ref.end());
        // tanhf vs std::tanh differ by a few ulp of tanh, and 1 + tanh cancels for negative gates: the error is
        // relative to |gate * up|, not to the (possibly tiny) output
        std::vector<double> scale(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) scale[static_cast<size_t>(i)] = std::fabs(static_cast<double>(row[i]) * row[n + i]);
        const float* g = got.data() + r * ld_out;
        parity.compare(name, g, ref_d.data(), ref_d.size(), 1e-6, 1e-30, scale.data());
        parity.expect_untouched(name, g + n, static_cast<size_t>(ld_out - n));
      }
    }
  }
  parity.finish();
}

}  // namespace
}  // namespace ga::test::cuda
