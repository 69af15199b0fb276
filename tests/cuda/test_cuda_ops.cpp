// Parity of the element-wise and per-row CUDA kernels (RMSNorm + residual, RoPE, SwiGLU, argmax)
// with the CPU reference ops of backends/cpu/ops.h, over awkward sizes (7, 19, 37, 733) and the
// Llama sizes, with padded strides whose padding must stay poisoned.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/ops.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/ops.h"
#include "cuda_harness.h"
#include "gemv_reference.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;

std::vector<float> random_floats(size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<double> to_double(const float* v, size_t n) { return std::vector<double>(v, v + n); }

TEST(CudaOps, RmsNormWithAndWithoutResidualMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("rms_norm");
  std::mt19937 rng(7);
  for (int64_t n : {7, 19, 37, 733, 4096}) {
    for (int64_t n_rows : {1, 3}) {
      for (bool with_residual : {false, true}) {
        const std::string name = str("n ", n, " rows ", n_rows, with_residual ? " +residual" : "");
        const int64_t ld = n + 3;  // every matrix padded; padding of out must stay poisoned
        const size_t total = static_cast<size_t>(ld * n_rows);
        const std::vector<float> x_host = random_floats(total, 2.0f, rng);
        const std::vector<float> res_host = random_floats(total, 1.0f, rng);
        const std::vector<float> w_host = random_floats(static_cast<size_t>(n), 1.0f, rng);
        DeviceArray<float> x(alloc, total), res(alloc, total), w(alloc, static_cast<size_t>(n)), out(alloc, total);
        x.upload(x_host);
        res.upload(res_host);
        w.upload(w_host);
        out.poison();
        ::ga::cuda::RmsNormParams p;
        p.x = x.get();
        p.residual = with_residual ? res.get() : nullptr;
        p.weight = w.get();
        p.out = out.get();
        p.n_rows = n_rows;
        p.n = n;
        p.ldx = p.ld_residual = p.ld_out = ld;
        p.eps = 1e-5f;
        GA_CUDA_CHECK(::ga::cuda::rms_norm(p, nullptr));
        GA_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = out.download();
        const std::vector<float> got_res = res.download();
        for (int64_t r = 0; r < n_rows; ++r) {
          const size_t off = static_cast<size_t>(r * ld);
          std::vector<float> v(x_host.begin() + static_cast<ptrdiff_t>(off), x_host.begin() + static_cast<ptrdiff_t>(off + n));
          if (with_residual) {
            ::ga::cpu::add_inplace(v.data(), res_host.data() + off, n);
            parity.compare_bits(name + " residual", got_res.data() + off, v.data(), static_cast<size_t>(n));
          }
          std::vector<float> ref(static_cast<size_t>(n));
          ::ga::cpu::rms_norm(v.data(), w_host.data(), ref.data(), n, p.eps);
          const std::vector<double> ref_d = to_double(ref.data(), ref.size());
          // float vs double sum of squares: a few float ulps on inv_rms
          parity.compare(name, got.data() + off, ref_d.data(), ref_d.size(), 4e-6, 1e-7);
          parity.expect_untouched(name, got.data() + off + n, static_cast<size_t>(ld - n));
        }
      }
    }
  }
  parity.finish();
}

// How many of the n_rows rows (n floats, ld apart) differ in any bit between a and b (the padding between rows, which
// may hold poison, is not compared).
int rows_differing(const std::vector<float>& a, const std::vector<float>& b, int64_t n_rows, int64_t ld, int64_t n) {
  int rows = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    rows += std::memcmp(a.data() + r * ld, b.data() + r * ld, 4 * static_cast<size_t>(n)) != 0 ? 1 : 0;
  }
  return rows;
}

// RMSNorm with out_int8 (the q/k/v, gate/up and classifier GEMVs' input, rounded in the same kernel): the
// float output (and the residual) must be the plain kernel's bit for bit, also in place over x, and the int8
// bytes the CPU's rounding of that output (reference_x_int8) bit for bit; widths it cannot round are refused.
// The same with out_e4m3x2 (the FP8 GEMV's two E4M3 digits) against the host's rounding (reference_x_e4m3x2).
TEST(CudaOps, RmsNormRoundedOutputsMatchPlainNormAndCpuRounding) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("rms_norm int8");
  std::mt19937 rng(23);
  for (int64_t n : {32, 256, 2048, 4096, 5120, 8192}) {
    for (int n_rows : {1, 3, 8}) {
      for (bool in_place : {false, true}) {
        const std::string name = str("n ", n, " rows ", n_rows, in_place ? " in place" : "");
        const int64_t ld = n + 4;  // 16-byte aligned rows
        const size_t total = static_cast<size_t>(ld * n_rows);
        const std::vector<float> x_host = random_floats(total, 2.0f, rng);
        const std::vector<float> res_host = random_floats(total, 1.0f, rng);
        const std::vector<float> w_host = random_floats(static_cast<size_t>(n), 1.0f, rng);
        DeviceArray<float> x(alloc, total), res(alloc, total), w(alloc, static_cast<size_t>(n));
        DeviceArray<float> plain(alloc, total), fused(alloc, total);
        DeviceArray<uint8_t> xq(alloc, static_cast<size_t>(::ga::cuda::gemv_x_int8_bytes(n, n_rows)));
        DeviceArray<uint8_t> x8(alloc, static_cast<size_t>(::ga::cuda::gemv_x_e4m3x2_bytes(n, n_rows)));
        x.upload(x_host);
        res.upload(res_host);
        w.upload(w_host);
        plain.poison();
        ::ga::cuda::RmsNormParams p;
        p.x = x.get();
        p.residual = res.get();
        p.weight = w.get();
        p.out = plain.get();
        p.n_rows = n_rows;
        p.n = n;
        p.ldx = p.ld_residual = p.ld_out = ld;
        GA_CUDA_CHECK(::ga::cuda::rms_norm(p, nullptr));
        GA_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> want = plain.download(), want_res = res.download();
        res.upload(res_host);
        if (in_place) {
          fused.upload(x_host);
          p.x = fused.get();
        } else {
          fused.poison();
        }
        p.out = fused.get();
        p.out_int8 = xq.get();
        xq.poison();
        ASSERT_EQ(::ga::cuda::rms_norm_unsupported_reason(p), nullptr) << name;
        GA_CUDA_CHECK(::ga::cuda::rms_norm(p, nullptr));
        GA_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = fused.download(), got_res = res.download();
        std::vector<float> out_rows(static_cast<size_t>(n * n_rows));  // the fused output, packed [n_rows][n]
        size_t float_mismatches = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
          for (int64_t i = 0; i < n; ++i) {
            const auto at = static_cast<size_t>(r * ld + i);
            float_mismatches += std::memcmp(&got[at], &want[at], 4) != 0 ? 1 : 0;
            float_mismatches += std::memcmp(&got_res[at], &want_res[at], 4) != 0 ? 1 : 0;
            out_rows[static_cast<size_t>(r * n + i)] = got[at];
          }
          std::vector<float> v(x_host.begin() + r * ld, x_host.begin() + r * ld + n), ref(static_cast<size_t>(n));
          ::ga::cpu::add_inplace(v.data(), res_host.data() + r * ld, n);
          ::ga::cpu::rms_norm(v.data(), w_host.data(), ref.data(), n, p.eps);
          const std::vector<double> ref_d = to_double(ref.data(), ref.size());
          parity.compare(name, got.data() + r * ld, ref_d.data(), ref_d.size(), 4e-6, 1e-7);
        }
        EXPECT_EQ(float_mismatches, 0u) << name << ": the fused kernel's float output differs from rms_norm's";
        expect_int8_copy_matches(name, xq.download(), out_rows, n, static_cast<int>(n_rows));
        if (n % 128 == 0) {  // the FP8 GEMV's two E4M3 digits instead: the same float output, quantize_x_e4m3x2's bytes
          res.upload(res_host);
          if (in_place) fused.upload(x_host);
          p.out_int8 = nullptr;
          p.out_e4m3x2 = x8.get();
          x8.poison();
          ASSERT_EQ(::ga::cuda::rms_norm_unsupported_reason(p), nullptr) << name;
          GA_CUDA_CHECK(::ga::cuda::rms_norm(p, nullptr));
          GA_CUDA_CHECK(cudaDeviceSynchronize());
          EXPECT_EQ(rows_differing(fused.download(), got, n_rows, ld, n), 0)
              << name << ": out_e4m3x2 changed the float output";
          EXPECT_EQ(x8.download(), reference_x_e4m3x2(out_rows, n, n, n_rows)) << name << ": e4m3x2 bytes";
          p.out_e4m3x2 = nullptr;
        }
      }
    }
  }
  parity.finish();
  ::ga::cuda::RmsNormParams bad;
  bad.x = bad.weight = bad.out = reinterpret_cast<float*>(uintptr_t{256});
  bad.n_rows = 1;
  bad.n = bad.ldx = bad.ld_out = 64;
  bad.out_int8 = reinterpret_cast<void*>(uintptr_t{512});
  EXPECT_EQ(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);
  bad.n = bad.ldx = bad.ld_out = 48;  // not whole blocks of 32
  EXPECT_NE(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);
  bad.n = bad.ldx = bad.ld_out = 8192 + 32;  // beyond the register path
  EXPECT_NE(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);
  bad.n = bad.ldx = bad.ld_out = 64;
  bad.out_int8 = reinterpret_cast<void*>(uintptr_t{520});  // misaligned
  EXPECT_NE(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);
  bad.out_int8 = reinterpret_cast<void*>(uintptr_t{512});
  bad.ldx = 66;  // x rows not 16-byte aligned
  EXPECT_NE(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);
  bad.out_int8 = nullptr;
  bad.ldx = 64;
  bad.out_e4m3x2 = reinterpret_cast<void*>(uintptr_t{512});
  EXPECT_NE(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);  // 64 is not whole blocks of 128
  bad.n = bad.ldx = bad.ld_out = 256;
  EXPECT_EQ(::ga::cuda::rms_norm_unsupported_reason(bad), nullptr);
}

TEST(CudaOps, RopeNormalAndNeoxMatchCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("rope");
  std::mt19937 rng(11);
  const std::vector<int32_t> positions = {0, 1, 19, 733, 8191, 131071};  // up to a 128k context
  struct Shape {
    int64_t n_heads, head_dim, n_rot;
  };
  for (const Shape s : {Shape{1, 64, 64}, Shape{7, 128, 128}, Shape{3, 128, 64}, Shape{2, 96, 32}}) {
    for (auto style : {::ga::cuda::RopeStyle::Normal, ::ga::cuda::RopeStyle::NeoX}) {
      for (bool factors : {false, true}) {
        for (float freq_scale : {1.0f, 0.25f}) {
          const bool normal = style == ::ga::cuda::RopeStyle::Normal;
          const std::string name = str(s.n_heads, "x", s.head_dim, " rot ", s.n_rot, normal ? " normal" : " neox",
                                       factors ? " +factors" : "", " scale ", freq_scale);
          const int64_t half = s.n_rot / 2;
          const int64_t head_stride = s.head_dim + 2;  // padded heads
          const int64_t token_stride = s.n_heads * head_stride + 1;
          const int64_t n_tokens = static_cast<int64_t>(positions.size());
          const std::vector<float> x_host = random_floats(static_cast<size_t>(token_stride * n_tokens), 1.0f, rng);
          std::vector<float> ff_host(static_cast<size_t>(half));
          for (int64_t i = 0; i < half; ++i) ff_host[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i % 5) * 1.75f;
          DeviceArray<float> x(alloc, x_host.size()), ff(alloc, ff_host.size());
          DeviceArray<int32_t> pos(alloc, positions.size());
          x.upload(x_host);
          ff.upload(ff_host);
          pos.upload(positions);
          const float base = 500000.0f;
          ::ga::cuda::RopeParams p;
          p.x = x.get();
          p.n_tokens = n_tokens;
          p.n_heads = s.n_heads;
          p.head_dim = s.head_dim;
          p.n_rot = s.n_rot;
          p.token_stride = token_stride;
          p.head_stride = head_stride;
          p.positions = pos.get();
          p.style = style;
          p.freq_base = base;
          p.freq_scale = freq_scale;
          p.freq_factors = factors ? ff.get() : nullptr;
          GA_CUDA_CHECK(::ga::cuda::rope(p, nullptr));
          GA_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> got = x.download();

          // reference: inv_freq in double as the model layer builds it, then the CPU op per token
          std::vector<double> inv_freq(static_cast<size_t>(half));
          for (int64_t i = 0; i < half; ++i) {
            double f = std::pow(static_cast<double>(base), -2.0 * static_cast<double>(i) / static_cast<double>(s.n_rot));
            f *= static_cast<double>(freq_scale);
            if (factors) f /= static_cast<double>(ff_host[static_cast<size_t>(i)]);
            inv_freq[static_cast<size_t>(i)] = f;
          }
          std::vector<float> ref = x_host;
          std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
          std::vector<float> head(static_cast<size_t>(s.head_dim));
          for (int64_t t = 0; t < n_tokens; ++t) {
            ::ga::cpu::rope_angles(inv_freq.data(), half, positions[static_cast<size_t>(t)], cos_v.data(), sin_v.data());
            for (int64_t h = 0; h < s.n_heads; ++h) {
              float* v = ref.data() + t * token_stride + h * head_stride;
              ::ga::cpu::rope(v, 1, s.head_dim, s.n_rot, cos_v.data(), sin_v.data(),
                              normal ? ::ga::cpu::RopeLayout::AdjacentPairs : ::ga::cpu::RopeLayout::Halves);
            }
          }
          // padding untouched in place: the reference copies it unchanged, so the whole buffer compares
          const std::vector<double> ref_d = to_double(ref.data(), ref.size());
          parity.compare(name, got.data(), ref_d.data(), ref_d.size(), 1e-6, 2e-6);
        }
      }
    }
  }
  parity.finish();
}

TEST(CudaOps, SwigluMatchesCpu) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("swiglu");
  std::mt19937 rng(13);
  for (int64_t n : {7, 19, 37, 733, 11008}) {
    for (int64_t n_rows : {1, 3}) {
      const std::string name = str("n ", n, " rows ", n_rows);
      // gate and up interleaved in one [n_rows][2n + 1] buffer, as a fused gate_up projection gives them
      const int64_t ld_in = 2 * n + 1;
      const int64_t ld_out = n + 2;
      const std::vector<float> in_host = random_floats(static_cast<size_t>(ld_in * n_rows), 4.0f, rng);
      DeviceArray<float> in(alloc, in_host.size()), out(alloc, static_cast<size_t>(ld_out * n_rows));
      in.upload(in_host);
      out.poison();
      ::ga::cuda::SwigluParams p;
      p.gate = in.get();
      p.up = in.get() + n;
      p.out = out.get();
      p.n_rows = n_rows;
      p.n = n;
      p.ld_gate = p.ld_up = ld_in;
      p.ld_out = ld_out;
      GA_CUDA_CHECK(::ga::cuda::swiglu(p, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = out.download();
      std::vector<float> ref(static_cast<size_t>(n));
      for (int64_t r = 0; r < n_rows; ++r) {
        const float* row = in_host.data() + r * ld_in;
        ::ga::cpu::swiglu(row, row + n, ref.data(), n);
        const std::vector<double> ref_d = to_double(ref.data(), ref.size());
        const float* g = got.data() + r * ld_out;
        parity.compare(name, g, ref_d.data(), ref_d.size(), 2e-6, 1e-30);  // expf vs std::exp: a few ulp
        parity.expect_untouched(name, g + n, static_cast<size_t>(ld_out - n));
      }
    }
  }
  parity.finish();
}

// SwiGLU with out_int8 (the Q8_0 down projection's input, rounded in the same kernel): the float output must
// be the plain kernel's bit for bit (also in place over gate, as the forward runs it), and the int8 bytes the
// CPU's rounding of that output (reference_x_int8) bit for bit; the same with out_e4m3x2 (reference_x_e4m3x2).
TEST(CudaOps, SwigluRoundedOutputsMatchPlainSwigluAndCpuRounding) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("swiglu int8");
  std::mt19937 rng(17);
  for (int64_t n : {32, 256, 4096, 11008}) {
    for (int n_rows : {1, 3, 8}) {
      for (bool in_place : {false, true}) {
        const std::string name = str("n ", n, " rows ", n_rows, in_place ? " in place" : "");
        const int64_t ld_in = 2 * n + 4;  // [gate | up | pad], 16-byte aligned rows
        const std::vector<float> in_host = random_floats(static_cast<size_t>(ld_in * n_rows), 4.0f, rng);
        DeviceArray<float> in(alloc, in_host.size()), plain(alloc, static_cast<size_t>(ld_in * n_rows));
        DeviceArray<float> fused(alloc, static_cast<size_t>(ld_in * n_rows));
        DeviceArray<uint8_t> xq(alloc, static_cast<size_t>(::ga::cuda::gemv_x_int8_bytes(n, n_rows)));
        DeviceArray<uint8_t> x8(alloc, static_cast<size_t>(::ga::cuda::gemv_x_e4m3x2_bytes(n, n_rows)));
        ::ga::cuda::SwigluParams p;
        p.n_rows = n_rows;
        p.n = n;
        p.ld_gate = p.ld_up = p.ld_out = ld_in;
        in.upload(in_host);
        plain.poison();
        p.gate = in.get();
        p.up = in.get() + n;
        p.out = plain.get();
        GA_CUDA_CHECK(::ga::cuda::swiglu(p, nullptr));
        if (in_place) {
          fused.upload(in_host);
          p.gate = fused.get();
          p.up = fused.get() + n;
        } else {
          fused.poison();
        }
        p.out = fused.get();
        p.out_int8 = xq.get();
        xq.poison();
        ASSERT_EQ(::ga::cuda::swiglu_unsupported_reason(p), nullptr) << name;
        GA_CUDA_CHECK(::ga::cuda::swiglu(p, nullptr));
        GA_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> want = plain.download(), got = fused.download();
        std::vector<float> out_rows(static_cast<size_t>(n * n_rows));  // the fused output, packed [n_rows][n]
        size_t float_mismatches = 0;
        for (int64_t r = 0; r < n_rows; ++r) {
          for (int64_t i = 0; i < n; ++i) {
            const float a = got[static_cast<size_t>(r * ld_in + i)], b = want[static_cast<size_t>(r * ld_in + i)];
            float_mismatches += std::memcmp(&a, &b, 4) != 0 ? 1 : 0;
            out_rows[static_cast<size_t>(r * n + i)] = a;
          }
          std::vector<float> ref(static_cast<size_t>(n));
          ::ga::cpu::swiglu(in_host.data() + r * ld_in, in_host.data() + r * ld_in + n, ref.data(), n);
          const std::vector<double> ref_d = to_double(ref.data(), ref.size());
          parity.compare(name, got.data() + r * ld_in, ref_d.data(), ref_d.size(), 2e-6, 1e-30);
        }
        EXPECT_EQ(float_mismatches, 0u) << name << ": the fused kernel's float output differs from swiglu's";
        expect_int8_copy_matches(name, xq.download(), out_rows, n, static_cast<int>(n_rows));
        if (n % 128 == 0) {  // the FP8 GEMV's two E4M3 digits instead: the same float output, quantize_x_e4m3x2's bytes
          if (in_place) fused.upload(in_host);
          p.out_int8 = nullptr;
          p.out_e4m3x2 = x8.get();
          x8.poison();
          ASSERT_EQ(::ga::cuda::swiglu_unsupported_reason(p), nullptr) << name;
          GA_CUDA_CHECK(::ga::cuda::swiglu(p, nullptr));
          GA_CUDA_CHECK(cudaDeviceSynchronize());
          EXPECT_EQ(rows_differing(fused.download(), got, n_rows, ld_in, n), 0)
              << name << ": out_e4m3x2 changed the float output";
          EXPECT_EQ(x8.download(), reference_x_e4m3x2(out_rows, n, n, n_rows)) << name << ": e4m3x2 bytes";
        }
      }
    }
  }
  parity.finish();
  ::ga::cuda::SwigluParams bad;
  bad.gate = bad.up = bad.out = reinterpret_cast<float*>(uintptr_t{256});
  bad.n_rows = 1;
  bad.n = bad.ld_gate = bad.ld_up = bad.ld_out = 48;
  bad.out_int8 = reinterpret_cast<void*>(uintptr_t{512});
  EXPECT_NE(::ga::cuda::swiglu_unsupported_reason(bad), nullptr);  // 48 is not whole blocks of 32
  bad.n = bad.ld_gate = bad.ld_up = bad.ld_out = 64;
  EXPECT_EQ(::ga::cuda::swiglu_unsupported_reason(bad), nullptr);
  bad.out_int8 = reinterpret_cast<void*>(uintptr_t{520});
  EXPECT_NE(::ga::cuda::swiglu_unsupported_reason(bad), nullptr);  // misaligned
  bad.out_int8 = nullptr;
  bad.out_e4m3x2 = reinterpret_cast<void*>(uintptr_t{512});
  EXPECT_NE(::ga::cuda::swiglu_unsupported_reason(bad), nullptr);  // 64 is not whole blocks of 128
  bad.n = bad.ld_gate = bad.ld_up = bad.ld_out = 256;
  EXPECT_EQ(::ga::cuda::swiglu_unsupported_reason(bad), nullptr);
  bad.out_int8 = reinterpret_cast<void*>(uintptr_t{512});
  EXPECT_NE(::ga::cuda::swiglu_unsupported_reason(bad), nullptr);  // not both roundings
}

TEST(CudaOps, ArgmaxFindsTheFirstMaximum) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("argmax");
  std::mt19937 rng(17);
  // ldx n + 1 (scalar reads) and n rounded up to 4 (float4 reads when the base is 16-byte aligned, which the
  // allocator's blocks are); the float4 path's scalar tail is exercised by n % 4 != 0.
  for (int64_t n : {1, 7, 19, 37, 733, 32000, 32003, 128256}) {
    for (const int64_t ldx : {n + 1, (n + 3) / 4 * 4}) {
      const int64_t n_rows = 5;
      std::vector<float> x_host = random_floats(static_cast<size_t>(ldx * n_rows), 3.0f, rng);
      // row 1: a tie between two positions (the first must win); row 2: all equal; row 3: all -inf but one;
      // row 4: NaNs around the maximum (NaN never wins; the row says it holds one)
      if (n > 1) {
        float* r1 = x_host.data() + ldx;
        const int64_t a = n / 3, b = n - 1;
        r1[a] = r1[b] = 100.0f;
        float* r3 = x_host.data() + 3 * ldx;
        for (int64_t i = 0; i < n; ++i) r3[i] = -INFINITY;
        r3[n / 2] = -1e30f;
        float* r4 = x_host.data() + 4 * ldx;
        r4[n / 2] = 50.0f;
        r4[0] = r4[n - 1] = std::nanf("");
        if (n / 2 + 1 < n - 1) r4[n / 2 + 1] = std::nanf("");
      }
      float* r2 = x_host.data() + 2 * ldx;
      for (int64_t i = 0; i < n; ++i) r2[i] = 0.5f;
      DeviceArray<float> x(alloc, x_host.size());
      DeviceArray<int32_t> out(alloc, static_cast<size_t>(n_rows));
      DeviceArray<float> out_max(alloc, static_cast<size_t>(n_rows));
      DeviceArray<int32_t> out_nan(alloc, static_cast<size_t>(n_rows));
      x.upload(x_host);
      GA_CUDA_CHECK(cudaMemset(out.get(), 0xFF, static_cast<size_t>(n_rows) * sizeof(int32_t)));
      GA_CUDA_CHECK(cudaMemset(out_max.get(), 0xFF, static_cast<size_t>(n_rows) * sizeof(float)));  // NaN
      GA_CUDA_CHECK(cudaMemset(out_nan.get(), 0xFF, static_cast<size_t>(n_rows) * sizeof(int32_t)));
      ::ga::cuda::ArgmaxParams p;
      p.x = x.get();
      p.n_rows = n_rows;
      p.n = n;
      p.ldx = ldx;
      p.out = out.get();
      p.out_max = out_max.get();
      p.out_nan = out_nan.get();
      GA_CUDA_CHECK(::ga::cuda::argmax(p, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<int32_t> got = out.download();
      const std::vector<float> got_max = out_max.download();
      const std::vector<int32_t> got_nan = out_nan.download();
      std::vector<int32_t> ref(static_cast<size_t>(n_rows)), ref_nan(static_cast<size_t>(n_rows));
      std::vector<float> ref_max(static_cast<size_t>(n_rows));
      for (int64_t r = 0; r < n_rows; ++r) {  // independent reference: a plain scan, first maximum wins, NaN skipped
        const float* row = x_host.data() + r * ldx;
        int64_t best = -1;
        bool nan = false;
        for (int64_t i = 0; i < n; ++i) {
          if (std::isnan(row[i])) {
            nan = true;
          } else if (best < 0 || row[i] > row[best]) {
            best = i;
          }
        }
        ref[static_cast<size_t>(r)] = static_cast<int32_t>(best < 0 ? 0 : best);
        ref_max[static_cast<size_t>(r)] = best < 0 ? -INFINITY : row[best];
        ref_nan[static_cast<size_t>(r)] = nan ? 1 : 0;
      }
      const std::string what = str("n ", n, " ldx ", ldx);
      parity.compare_ints(what, got.data(), ref.data(), ref.size());
      parity.compare_ints(what + " nan", got_nan.data(), ref_nan.data(), ref_nan.size());
      for (size_t r = 0; r < ref_max.size(); ++r) {
        EXPECT_EQ(got_max[r], ref_max[r]) << what << " row " << r;
      }
    }
  }
  parity.finish();
}

TEST(CudaOps, InvalidParametersAreRejectedWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  ::ga::cuda::RopeParams rope;
  rope.n_rot = 3;  // odd
  EXPECT_NE(::ga::cuda::rope_unsupported_reason(rope), nullptr);
  EXPECT_EQ(::ga::cuda::rope(rope, nullptr), cudaErrorInvalidValue);
  ::ga::cuda::RmsNormParams norm;
  EXPECT_NE(::ga::cuda::rms_norm_unsupported_reason(norm), nullptr);
  EXPECT_EQ(::ga::cuda::rms_norm(norm, nullptr), cudaErrorInvalidValue);
  ::ga::cuda::SwigluParams sw;
  EXPECT_EQ(::ga::cuda::swiglu(sw, nullptr), cudaErrorInvalidValue);
  ::ga::cuda::ArgmaxParams am;
  EXPECT_EQ(::ga::cuda::argmax(am, nullptr), cudaErrorInvalidValue);
  ::ga::cuda::EmbeddingParams emb;
  emb.type = DType::Q2_K;
  EXPECT_NE(::ga::cuda::embedding_unsupported_reason(emb), nullptr);
}

}  // namespace
}  // namespace ga::test::cuda
