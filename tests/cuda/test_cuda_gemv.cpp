// Parity of the weight-reading CUDA kernels (quantized GEMV, embedding gather) with the CPU
// reference, for every weight type the GPU reads.
//
// Weights are random stored bytes with finite fp16 scales (every bit pattern of the quants occurs),
// placed at row strides that are and are not multiples of 16 bytes, because the GEMV reads rows
// as raw 16-byte chunks and must handle any misalignment. The reference is the CPU's own
// dequantize_row followed by a float64 dot product; the tolerance is relative to sum |w x| (the
// dot's condition), so it holds for any float accumulation order but not for a wrong weight.
// Where gemv() rounds x to two int8 digits per block of 32 (gemv_uses_int8_activations: classic
// quant types and Q4_K, aligned rows), the tight reference quantizes x the same way on the CPU (float rounding
// steps as in gemv.h, the dot in float64), and a second, looser check against the float reference
// bounds the rounding itself (see int8_reference).
// The embedding must be bit-identical to ga::cpu::dequantize_row, and the prefill's f16 dequantizer
// must equal that row rounded to f16.
// Split rows (weight_layout.h: Q4_0 / Q8_0 / F8_B128 rows reordered on the device at upload): the same random
// GGUF bytes are uploaded, repacked by split_rows_in_place, and every reader (GEMV, embedding,
// dequantizer) is checked against the CPU's reading of the ORIGINAL blocks.
// Pre-quantized x (GemvParams::x_int8): quantize_x_int8() runs first; its bytes must equal the CPU's
// rounding of x bit for bit (reference_x_int8), and the GEMV that reads them is checked like any int8 run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_blocks.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/ops.h"
#include "backends/cuda/kernels/weight_layout.h"
#include "backends/cuda/kernels/x_fp8.h"
#include "backends/cuda/engine/engine_kernels.h"
#include "common/quant_weights.h"
#include "cuda_harness.h"
#include "gemv_reference.h"
#include "gpu_accel/dtype.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::str;
using ::ga::cuda::CachingAllocator;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,    DType::Q4_1,  DType::Q5_0,
                        DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,    DType::Q4_K,  DType::Q5_K,
                        DType::Q6_K, DType::F8_B128, DType::MXFP4, DType::NVFP4};
const DType kSplitTypes[] = {DType::Q4_0, DType::Q8_0, DType::F8_B128};

struct GemvCase {
  int64_t rows;
  int64_t cols;
  int64_t pad;  // extra bytes per row: 0 (dense) or 6 (rows at 2-byte but not 16-byte alignment)
  int n_tokens;
  bool split = false;  // repack on the device into split rows first (weight_layout.h)
  bool x_int8 = false;  // round x first with quantize_x_int8() and pass it as GemvParams::x_int8
  bool x_e4m3x2 = false;  // round x first with quantize_x_e4m3x2() and pass it as GemvParams::x_e4m3x2
};

std::string case_name(DType type, const GemvCase& c) {
  return str(dtype_name(type), c.split ? " split" : "", c.x_int8 ? " x int8" : "", c.x_e4m3x2 ? " x e4m3x2" : "", " ",
             c.rows, "x", c.cols, " pad ",
             c.pad, " tokens ", c.n_tokens);
}

// Repacks the uploaded GGUF rows at w into split rows; false (with the reason skipped) when refused.
bool split_on_device(Parity& parity, const std::string& name, DType type, void* w, int64_t rows, int64_t cols,
                     uint64_t stride) {
  const auto st = static_cast<int64_t>(stride);
  if (const char* reason = ::ga::cuda::split_rows_unsupported_reason(type, rows, cols, st, w)) {
    parity.skip(name, reason);
    return false;
  }
  GA_CUDA_CHECK(::ga::cuda::split_rows_in_place(type, w, rows, cols, st, nullptr));
  return true;
}

void run_gemv_case(CachingAllocator& alloc, Parity& parity, DType type, const GemvCase& c, std::mt19937& rng) {
  const std::string name = case_name(type, c);
  const auto& tr = traits(type);
  if (c.cols % tr.block_size != 0) {  // not even a valid matrix of this type
    parity.skip(name, str("cols is not a multiple of the ", tr.name, " block size ", tr.block_size));
    return;
  }
  const uint64_t stride = row_bytes(type, static_cast<uint64_t>(c.cols)) + static_cast<uint64_t>(c.pad);
  const std::vector<uint8_t> w_host = ::ga::test::random_weight_rows(type, c.rows, c.cols, stride, rng);
  const int64_t ldx = c.cols + 4;   // padded activations
  const int64_t ldy = c.rows + 3;   // padded outputs: the padding must stay poisoned
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x_host(static_cast<size_t>(ldx * c.n_tokens));
  for (auto& v : x_host) v = normal(rng);

  DeviceArray<uint8_t> w(alloc, w_host.size());
  DeviceArray<float> x(alloc, x_host.size());
  DeviceArray<float> y(alloc, static_cast<size_t>(ldy * c.n_tokens));
  w.upload(w_host);
  x.upload(x_host);
  y.poison();
  if (c.split && !split_on_device(parity, name, type, w.get(), c.rows, c.cols, stride)) return;
  DeviceArray<uint8_t> xq(alloc, c.x_int8 ? static_cast<size_t>(::ga::cuda::gemv_x_int8_bytes(c.cols, c.n_tokens)) : 0);
  if (c.x_int8) {
    xq.poison();
    ::ga::cuda::QuantizeXInt8Params q;
    q.x = x.get();
    q.ldx = ldx;
    q.cols = c.cols;
    q.n_tokens = c.n_tokens;
    q.out = xq.get();
    ASSERT_EQ(::ga::cuda::quantize_x_int8_unsupported_reason(q), nullptr) << name;
    GA_CUDA_CHECK(::ga::cuda::quantize_x_int8(q, nullptr));
    const std::vector<uint8_t> got = xq.download();
    const std::vector<uint8_t> want = reference_x_int8(x_host, ldx, c.cols, c.n_tokens);
    ASSERT_EQ(got.size(), want.size()) << name;
    size_t mismatches = 0;
    for (size_t i = 0; i < want.size(); ++i) mismatches += got[i] != want[i] ? 1 : 0;
    EXPECT_EQ(mismatches, 0u) << name << ": quantize_x_int8 bytes differ from the CPU's rounding";
  }

  // x rounded to two E4M3 digits (the F8_B128 FP8 tensor-core kernel's input): the bytes must be the host's rounding
  DeviceArray<uint8_t> x8(alloc, c.x_e4m3x2 ? static_cast<size_t>(::ga::cuda::gemv_x_e4m3x2_bytes(c.cols, c.n_tokens)) : 0);
  if (c.x_e4m3x2) {
    x8.poison();
    ::ga::cuda::QuantizeXE4m3x2Params q;
    q.x = x.get();
    q.ldx = ldx;
    q.n = c.n_tokens;
    q.k = c.cols;
    q.out = x8.get();
    ASSERT_EQ(::ga::cuda::quantize_x_e4m3x2_unsupported_reason(q), nullptr) << name;
    GA_CUDA_CHECK(::ga::cuda::quantize_x_e4m3x2(q, nullptr));
    const std::vector<uint8_t> got = x8.download();
    EXPECT_EQ(got, reference_x_e4m3x2(x_host, ldx, c.cols, c.n_tokens)) << name << ": x digits differ from the host's";
  }

  ::ga::cuda::GemvParams p;
  p.type = type;
  p.w = w.get();
  p.rows = c.rows;
  p.cols = c.cols;
  p.row_stride = static_cast<int64_t>(stride);
  p.x = x.get();
  p.ldx = ldx;
  p.y = y.get();
  p.ldy = ldy;
  p.n_tokens = c.n_tokens;
  p.layout = c.split ? ::ga::cuda::WeightLayout::kSplitRows : ::ga::cuda::WeightLayout::kGguf;
  p.x_int8 = c.x_int8 ? xq.get() : nullptr;
  p.x_e4m3x2 = c.x_e4m3x2 ? x8.get() : nullptr;
  if (const char* reason = ::ga::cuda::gemv_unsupported_reason(p)) {
    parity.skip(name, reason);
    return;
  }
  GA_CUDA_CHECK(::ga::cuda::gemv(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y_host = y.download();
  if (c.x_int8) {
    // a kernel that reads x_int8 must give the bits of the same call that rounds x itself (where that call
    // rounds x at all: Q8_0 split rows longer than 8192 weights keep x in float without it)
    ::ga::cuda::GemvParams own = p;
    own.x_int8 = nullptr;
    if (::ga::cuda::gemv_reads_x_int8(p) && ::ga::cuda::gemv_uses_int8_activations(own)) {
      DeviceArray<float> y_own(alloc, static_cast<size_t>(ldy * c.n_tokens));
      y_own.poison();
      own.y = y_own.get();
      GA_CUDA_CHECK(::ga::cuda::gemv(own, nullptr));
      GA_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> want_bits = y_own.download();
      size_t differ = 0;
      for (int t = 0; t < c.n_tokens; ++t) {
        for (int64_t r = 0; r < c.rows; ++r) {
          const auto at = static_cast<size_t>(t * ldy + r);
          differ += std::memcmp(&y_host[at], &want_bits[at], sizeof(float)) != 0 ? 1 : 0;
        }
      }
      EXPECT_EQ(differ, 0u) << name << ": x_int8 given differs from the kernel's own rounding";
    }
    // Q4_0 / Q4_K GGUF rows that the int8 kernel takes read it (gemv.h)
    const bool expect_read = (c.split && type == DType::Q8_0) ||
                             (!c.split && (type == DType::Q4_0 || type == DType::Q4_K) &&
                              ::ga::cuda::gemv_uses_int8_activations(p));
    EXPECT_EQ(::ga::cuda::gemv_reads_x_int8(p), expect_read) << name;
  }

  // reference: the CPU's dequantization, float64 dot products (and the int8 variant, see int8_reference)
  // (F8_B128 split rows round x to two E4M3 digits or to f16 instead: gemv_rounds_x_to_e4m3x2 / _f16)
  const bool int8 = ::ga::cuda::gemv_uses_int8_activations(p);
  const bool half_x = ::ga::cuda::gemv_rounds_x_to_f16(p);
  const bool e4m3x2 = ::ga::cuda::gemv_rounds_x_to_e4m3x2(p);
  EXPECT_EQ(half_x || e4m3x2, c.split && type == DType::F8_B128) << name;
  EXPECT_FALSE(half_x && e4m3x2) << name;
  std::vector<float> row(static_cast<size_t>(c.cols));
  std::vector<GemvRowRef> refs(static_cast<size_t>(c.rows * c.n_tokens));  // [token][row]
  for (int64_t r = 0; r < c.rows; ++r) {
    ::ga::cpu::dequantize_row(type, w_host.data() + static_cast<uint64_t>(r) * stride, row.data(), c.cols);
    for (int t = 0; t < c.n_tokens; ++t) {
      GemvRowRef& ref = refs[static_cast<size_t>(t * c.rows + r)];
      ref = gemv_row_reference(type, w_host.data() + static_cast<uint64_t>(r) * stride, row.data(),
                               x_host.data() + t * ldx, c.cols, int8);
      if (half_x) half_x_reference(ref, row.data(), x_host.data() + t * ldx, c.cols);
      if (e4m3x2) e4m3x2_x_reference(ref, row.data(), x_host.data() + t * ldx, c.cols);
    }
  }
  for (int t = 0; t < c.n_tokens; ++t) {
    const float* yt = y_host.data() + t * ldy;
    compare_gemv(parity, name + str(" token ", t), yt, refs.data() + t * c.rows, static_cast<size_t>(c.rows),
                 int8 || half_x || e4m3x2, half_x ? "f16 x" : e4m3x2 ? "e4m3x2 x" : "int8",
                 e4m3x2 ? kE4m3x2Accumulation : 1e-5);
    parity.expect_untouched(name + str(" token ", t), yt + c.rows, static_cast<size_t>(ldy - c.rows));
  }
}

TEST(CudaGemv, MatchesCpuReferenceForEveryTypeAndShape) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("gemv");
  std::mt19937 rng(1234);
  for (DType type : kTypes) {
    // awkward row counts; 96 cols (3 classic blocks, not a K-quant row: SKIPPED), 256, 2816 (11
    // super-blocks: Q6_K rows of 2310 bytes are not 16-byte aligned); decode and small batches
    for (int64_t rows : {7, 19, 37, 733}) {
      for (int64_t cols : {96, 256, 2816}) {
        for (int64_t pad : {0, 6}) run_gemv_case(alloc, parity, type, {rows, cols, pad, 1}, rng);
      }
    }
    for (int n_tokens : {2, 3, 5, 8}) run_gemv_case(alloc, parity, type, {37, 2816, 6, n_tokens}, rng);
    for (int n_tokens : {2, 5, 8}) run_gemv_case(alloc, parity, type, {37, 2816, 0, n_tokens}, rng);  // int8 path
    run_gemv_case(alloc, parity, type, {17000, 256, 0, 1}, rng);  // more row tiles than the int8 path's persistent grid
    run_gemv_case(alloc, parity, type, {4104, 256, 0, 3}, rng);  // Q8_0 takes the int8 path from 4097 rows on
    run_gemv_case(alloc, parity, type, {733, 768, 0, 4}, rng);
    run_gemv_case(alloc, parity, type, {256, 4096, 0, 1}, rng);  // a Llama-width row
    // long rows: each of a CTA's warps walks several segments, so the cp.async ring wraps (staged
    // kernel) and the direct kernel's lanes take several chunk groups; aligned and unaligned rows
    run_gemv_case(alloc, parity, type, {19, 22528, 6, 1}, rng);
    run_gemv_case(alloc, parity, type, {21, 22528, 0, 1}, rng);
    run_gemv_case(alloc, parity, type, {9, 22528, 0, 3}, rng);
    // x pre-quantized (GemvParams::x_int8): the GGUF int8 kernel of Q4_0 / Q4_K reads it (no prologue, rows of
    // any length: 22528 columns at 8 tokens would not fit its shared memory otherwise); every other type must
    // ignore it. The 7B widths, awkward rows, every token-count instantiation, unaligned rows (float path).
    for (int64_t rows : {7, 733, 4099}) {
      for (int64_t cols : {256, 4096, 11008}) run_gemv_case(alloc, parity, type, {rows, cols, 0, 1, false, true}, rng);
    }
    for (int n_tokens : {2, 3, 5, 8}) run_gemv_case(alloc, parity, type, {37, 11008, 0, n_tokens, false, true}, rng);
    run_gemv_case(alloc, parity, type, {17000, 256, 0, 1, false, true}, rng);
    run_gemv_case(alloc, parity, type, {19, 22528, 0, 8, false, true}, rng);
    run_gemv_case(alloc, parity, type, {19, 2816, 6, 1, false, true}, rng);
  }
  parity.finish();
}

// Split rows: the Llama widths, awkward row counts (a last CTA with 1..3 rows), rows of one chunk
// group and of several (22528 cols), padded strides that stay 16-byte aligned, 1..8 tokens; widths
// that are not whole 16-byte chunks (96, 2848) must be refused with a reason.
TEST(CudaGemv, SplitRowsMatchCpuReference) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("gemv split rows");
  std::mt19937 rng(4321);
  for (DType type : kSplitTypes) {
    for (int64_t rows : {1, 7, 37, 733, 4099}) {
      for (int64_t cols : {96, 256, 2816, 4096}) run_gemv_case(alloc, parity, type, {rows, cols, 0, 1, true}, rng);
    }
    for (int n_tokens : {2, 3, 4, 5, 8}) {
      run_gemv_case(alloc, parity, type, {37, 4096, 16, n_tokens, true}, rng);
      run_gemv_case(alloc, parity, type, {19, 11008, 0, n_tokens, true}, rng);
    }
    run_gemv_case(alloc, parity, type, {21, 22528, 0, 1, true}, rng);
    run_gemv_case(alloc, parity, type, {9, 22528, 32, 3, true}, rng);
    // F8_B128 rows are whole chunks from 512 columns (4 blocks of 132 bytes): the narrowest row (one chunk group per
    // warp, three warps idle), one group per warp, the 8B-class widths (14336: 14 groups over 4 warps), 1..8 tokens;
    // each with x in float (the f16 kernel) and rounded to two E4M3 digits (the FP8 kernel, sm_89+)
    for (const bool x8 : {false, true}) {
      for (int64_t cols : {512, 1024, 14336}) run_gemv_case(alloc, parity, type, {37, cols, 0, 1, true, false, x8}, rng);
      for (int n_tokens : {2, 7, 8}) {
        run_gemv_case(alloc, parity, type, {1030, 14336, 16, n_tokens, true, false, x8}, rng);
      }
      run_gemv_case(alloc, parity, type, {3, 1536, 0, 1, true, false, x8}, rng);  // one CTA, 13 of its 16 rows clamped
      run_gemv_case(alloc, parity, type, {4099, 4096, 0, 1, true, false, x8}, rng);  // 16-row tiles (G = 2)
      // 16K rows and more: the staged FP8 kernel (its ring wraps: 4 chunk groups of 512 columns per warp at 8192)
      run_gemv_case(alloc, parity, type, {16387, 1024, 0, 1, true, false, x8}, rng);
      run_gemv_case(alloc, parity, type, {16390, 8192, 16, 3, true, false, x8}, rng);
    }
    // the widest int8-eligible Q8_0 rows: each warp walks two chunk groups per tile, several tiles per CTA
    run_gemv_case(alloc, parity, type, {4099, 8192, 0, 1, true}, rng);
    run_gemv_case(alloc, parity, type, {37, 8192, 16, 2, true}, rng);
    run_gemv_case(alloc, parity, type, {5, 2848, 0, 1, true}, rng);  // 89 blocks: refused (SKIPPED line)
    // x pre-quantized (Q8_0: the int8 kernel without its prologue, at any row length; Q4_0 ignores it and
    // reads x in float): 7B attn_o / ffn_down widths, awkward rows, every token-count instantiation
    for (int64_t rows : {7, 733, 4099}) {
      for (int64_t cols : {256, 4096, 11008}) run_gemv_case(alloc, parity, type, {rows, cols, 0, 1, true, true}, rng);
    }
    for (int n_tokens : {2, 3, 5, 8}) run_gemv_case(alloc, parity, type, {37, 11008, 16, n_tokens, true, true}, rng);
    run_gemv_case(alloc, parity, type, {21, 22528, 0, 1, true, true}, rng);
  }
  parity.finish();
}

// GA_CUDA_WEIGHT_TYPES (the messages' list) names exactly the types the dispatch has a decoder for, and every
// reader takes them (host code only: runs without a GPU).
TEST(CudaGemv, TypeListNamesEveryDecoder) {
  std::vector<DType> listed;
  const std::string names = GA_CUDA_WEIGHT_TYPES;
  for (size_t at = 0; at < names.size();) {
    const size_t end = std::min(names.find(' ', at), names.size());
    const std::optional<DType> t = dtype_from_name(names.substr(at, end - at));
    ASSERT_TRUE(t.has_value()) << names.substr(at, end - at);
    listed.push_back(*t);
    at = end + 1;
  }
  EXPECT_EQ(listed, std::vector<DType>(std::begin(kTypes), std::end(kTypes))) << "the parity grid covers the list";
  std::vector<DType> decoded;
  for (uint32_t id = 0; id <= kFirstInternalDTypeId; ++id) {  // every GGUF id and the first internal one (F8_B128)
    const std::optional<DTypeTraits> tr = dtype_traits(id);
    if (tr.has_value() && ::ga::cuda::gemv_supports(tr->type)) {
      decoded.push_back(tr->type);
      EXPECT_TRUE(::ga::cuda::engine::dequantize_f16_supports(tr->type)) << tr->name;
    }
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(decoded, listed);
}

TEST(CudaGemv, RejectsWhatItCannotDoWithAReason) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  DeviceArray<float> buf(alloc, 4096);
  ::ga::cuda::GemvParams p;
  p.type = DType::Q4_0;
  p.w = buf.get();
  p.rows = 4;
  p.cols = 64;
  p.row_stride = static_cast<int64_t>(row_bytes(DType::Q4_0, 64));
  p.x = buf.get();
  p.ldx = 64;
  p.y = buf.get();
  p.ldy = 4;
  EXPECT_EQ(::ga::cuda::gemv_unsupported_reason(p), nullptr);
  auto rejected = [&](auto mutate) {
    ::ga::cuda::GemvParams q = p;
    mutate(q);
    return ::ga::cuda::gemv_unsupported_reason(q) != nullptr && ::ga::cuda::gemv(q, nullptr) == cudaErrorInvalidValue;
  };
  EXPECT_TRUE(rejected([](auto& q) { q.type = DType::IQ4_NL; }));
  EXPECT_TRUE(rejected([](auto& q) {  // split rows: Q4_0 / Q8_0 / F8_B128 rows of whole 16-byte chunks only
    q.layout = ::ga::cuda::WeightLayout::kSplitRows;  // 64 Q4_0 weights = 36 bytes
  }));
  EXPECT_TRUE(rejected([](auto& q) { q.cols = 48; }));
  EXPECT_TRUE(rejected([](auto& q) { q.n_tokens = 9; }));
  EXPECT_TRUE(rejected([](auto& q) { q.row_stride = 10; }));
  EXPECT_TRUE(rejected([&](auto& q) { q.x = buf.get() + 1; }));
  EXPECT_TRUE(rejected([&](auto& q) { q.w = reinterpret_cast<const uint8_t*>(buf.get()) + 2; }));
  EXPECT_TRUE(::ga::cuda::gemv_supports(DType::Q2_K));
  EXPECT_TRUE(::ga::cuda::gemv_supports(DType::Q3_K));
  EXPECT_FALSE(::ga::cuda::gemv_supports(DType::IQ4_NL));
  // the int8 path: classic types with 16-byte aligned rows of whole units (8 blocks for Q4_0)
  ::ga::cuda::GemvParams aligned = p;
  aligned.cols = 256;
  aligned.ldx = 256;
  aligned.row_stride = static_cast<int64_t>(row_bytes(DType::Q4_0, 256));
  EXPECT_TRUE(::ga::cuda::gemv_uses_int8_activations(aligned));
  aligned.layout = ::ga::cuda::WeightLayout::kSplitRows;  // the split kernel keeps x in float
  EXPECT_EQ(::ga::cuda::gemv_unsupported_reason(aligned), nullptr);
  EXPECT_FALSE(::ga::cuda::gemv_uses_int8_activations(aligned));
  aligned.layout = ::ga::cuda::WeightLayout::kGguf;
  aligned.row_stride += 6;
  EXPECT_FALSE(::ga::cuda::gemv_uses_int8_activations(aligned));
  aligned.type = DType::Q6_K;
  aligned.row_stride = static_cast<int64_t>(row_bytes(DType::Q6_K, 256));
  EXPECT_FALSE(::ga::cuda::gemv_uses_int8_activations(aligned));
  EXPECT_TRUE(::ga::cuda::gemv_supports(DType::Q6_K));
  // a pre-quantized x: 16-byte aligned; it brings Q8_0 split rows longer than 8192 weights to the int8 kernel
  EXPECT_TRUE(rejected([&](auto& q) { q.x_int8 = reinterpret_cast<const uint8_t*>(buf.get()) + 8; }));
  ::ga::cuda::GemvParams down = p;
  down.type = DType::Q8_0;
  down.cols = 11008;
  down.ldx = 11008;
  down.row_stride = static_cast<int64_t>(row_bytes(DType::Q8_0, 11008));
  down.layout = ::ga::cuda::WeightLayout::kSplitRows;
  EXPECT_EQ(::ga::cuda::gemv_unsupported_reason(down), nullptr);
  EXPECT_FALSE(::ga::cuda::gemv_uses_int8_activations(down));
  down.x_int8 = buf.get();
  EXPECT_TRUE(::ga::cuda::gemv_uses_int8_activations(down));
  down.type = DType::Q4_0;  // no int8 split kernel: x_int8 is ignored
  down.row_stride = static_cast<int64_t>(row_bytes(DType::Q4_0, 11008));
  EXPECT_FALSE(::ga::cuda::gemv_uses_int8_activations(down));
  ::ga::cuda::QuantizeXInt8Params q;
  q.x = buf.get();
  q.ldx = 64;
  q.cols = 64;
  q.n_tokens = 1;
  q.out = buf.get() + 64;
  EXPECT_EQ(::ga::cuda::quantize_x_int8_unsupported_reason(q), nullptr);
  q.cols = 48;
  EXPECT_NE(::ga::cuda::quantize_x_int8_unsupported_reason(q), nullptr);
  EXPECT_EQ(::ga::cuda::quantize_x_int8(q, nullptr), cudaErrorInvalidValue);
}

void run_embedding_case(CachingAllocator& alloc, Parity& parity, DType type, int64_t cols, int64_t pad, bool split,
                        std::mt19937& rng) {
  const int64_t n_rows_w = 37;
  const std::string name = str(dtype_name(type), split ? " split" : "", " cols ", cols, " pad ", pad);
  const uint64_t stride = row_bytes(type, static_cast<uint64_t>(cols)) + static_cast<uint64_t>(pad);
  const std::vector<uint8_t> w_host = ::ga::test::random_weight_rows(type, n_rows_w, cols, stride, rng);
  const std::vector<int32_t> ids_host = {0, 36, 5, 5, 19, 1, 35};  // first, last, repeated
  const int64_t ld_out = cols + 5;
  DeviceArray<uint8_t> w(alloc, w_host.size());
  DeviceArray<int32_t> ids(alloc, ids_host.size());
  DeviceArray<float> out(alloc, ids_host.size() * static_cast<size_t>(ld_out));
  w.upload(w_host);
  ids.upload(ids_host);
  out.poison();
  if (split && !split_on_device(parity, name, type, w.get(), n_rows_w, cols, stride)) return;
  ::ga::cuda::EmbeddingParams p;
  p.type = type;
  p.w = w.get();
  p.n_rows_w = n_rows_w;
  p.n_cols = cols;
  p.row_stride = static_cast<int64_t>(stride);
  p.ids = ids.get();
  p.n_ids = static_cast<int64_t>(ids_host.size());
  p.out = out.get();
  p.ld_out = ld_out;
  p.layout = split ? ::ga::cuda::WeightLayout::kSplitRows : ::ga::cuda::WeightLayout::kGguf;
  if (const char* reason = ::ga::cuda::embedding_unsupported_reason(p)) {
    parity.skip(name, reason);
    return;
  }
  GA_CUDA_CHECK(::ga::cuda::embedding(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = out.download();
  std::vector<float> ref(static_cast<size_t>(cols));
  for (size_t i = 0; i < ids_host.size(); ++i) {
    ::ga::cpu::dequantize_row(type, w_host.data() + static_cast<uint64_t>(ids_host[i]) * stride, ref.data(), cols);
    const float* g = got.data() + i * static_cast<size_t>(ld_out);
    parity.compare_bits(name + str(" id ", ids_host[i]), g, ref.data(), static_cast<size_t>(cols));
    parity.expect_untouched(name, g + cols, static_cast<size_t>(ld_out - cols));
  }
}

TEST(CudaEmbedding, BitExactWithCpuDequantizationForEveryType) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("embedding");
  std::mt19937 rng(99);
  for (DType type : kTypes) {
    for (int64_t cols : {256, 2816, 4096}) {
      for (int64_t pad : {0, 6}) run_embedding_case(alloc, parity, type, cols, pad, false, rng);
    }
  }
  for (DType type : kSplitTypes) {
    for (int64_t cols : {256, 2816, 4096, 1536}) {  // 1536: F8_B128 (12 blocks), a classic split row too
      for (int64_t pad : {0, 16}) run_embedding_case(alloc, parity, type, cols, pad, true, rng);
    }
  }
  parity.finish();
}

// The prefill's dequantizer (dense rows, GGUF or split): the CPU's dequantize_row rounded to f16
// (round to nearest even on both sides), bit for bit.
TEST(CudaDequantizeF16, BitExactWithCpuDequantizationRoundedToF16) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  Parity parity("dequantize_to_f16");
  std::mt19937 rng(77);
  for (DType type : kTypes) {
    for (bool split : {false, true}) {
      if (split && std::find(std::begin(kSplitTypes), std::end(kSplitTypes), type) == std::end(kSplitTypes)) continue;
      for (int64_t cols : {256, 2816, 1536}) {  // 1536: F8_B128 split rows (cols % 512 == 0)
        const int64_t rows = 13;
        const std::string name = str(dtype_name(type), split ? " split" : "", " ", rows, "x", cols);
        const uint64_t stride = row_bytes(type, static_cast<uint64_t>(cols));
        const std::vector<uint8_t> w_host = ::ga::test::random_weight_rows(type, rows, cols, stride, rng);
        DeviceArray<uint8_t> w(alloc, w_host.size());
        DeviceArray<uint16_t> out(alloc, static_cast<size_t>(rows * cols));
        w.upload(w_host);
        GA_CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.size() * 2));  // f16 NaN: unwritten values fail
        if (split && !split_on_device(parity, name, type, w.get(), rows, cols, stride)) continue;
        GA_CUDA_CHECK(::ga::cuda::engine::dequantize_to_f16(
            type, w.get(), rows, cols, reinterpret_cast<__half*>(out.get()), nullptr,
            split ? ::ga::cuda::WeightLayout::kSplitRows : ::ga::cuda::WeightLayout::kGguf));
        GA_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> got = out.download();
        std::vector<float> ref(static_cast<size_t>(cols)), got_f(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          ::ga::cpu::dequantize_row(type, w_host.data() + static_cast<uint64_t>(r) * stride, ref.data(), cols);
          for (int64_t k = 0; k < cols; ++k) {
            const auto at = static_cast<size_t>(k);
            ref[at] = fp16_to_f32(f32_to_fp16(ref[at]));
            got_f[at] = fp16_to_f32(got[static_cast<size_t>(r * cols + k)]);
          }
          parity.compare_bits(name + str(" row ", r), got_f.data(), ref.data(), static_cast<size_t>(cols));
        }
      }
    }
  }
  parity.finish();
}

TEST(CudaEmbedding, OutOfRangeIdGivesNanRow) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  std::mt19937 rng(5);
  const int64_t cols = 256;
  const std::vector<uint8_t> w_host = ::ga::test::random_weight_rows(DType::Q4_K, 4, cols, row_bytes(DType::Q4_K, cols), rng);
  DeviceArray<uint8_t> w(alloc, w_host.size());
  DeviceArray<int32_t> ids(alloc, 2);
  DeviceArray<float> out(alloc, 2 * cols);
  w.upload(w_host);
  ids.upload({1, 4});
  GA_CUDA_CHECK(cudaMemset(out.get(), 0, 2 * cols * sizeof(float)));
  ::ga::cuda::EmbeddingParams p;
  p.type = DType::Q4_K;
  p.w = w.get();
  p.n_rows_w = 4;
  p.n_cols = cols;
  p.row_stride = static_cast<int64_t>(row_bytes(DType::Q4_K, cols));
  p.ids = ids.get();
  p.n_ids = 2;
  p.out = out.get();
  p.ld_out = cols;
  GA_CUDA_CHECK(::ga::cuda::embedding(p, nullptr));
  GA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = out.download();
  for (int64_t i = 0; i < cols; ++i) {
    ASSERT_FALSE(std::isnan(got[static_cast<size_t>(i)])) << i;
    ASSERT_TRUE(std::isnan(got[static_cast<size_t>(cols + i)])) << i;
  }
}

}  // namespace
}  // namespace ga::test::cuda
