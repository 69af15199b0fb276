// matmul: y[t][r] = W[r] . x[t] for a weight matrix in its stored type, threaded over rows.
//
// Two paths, chosen by the number of tokens:
// - decode (one token): each row is dotted with x straight from its stored bytes (dot_row). The
//   weights are read once and never expanded, which is what a memory-bound GEMV wants.
// - prefill (several tokens): a tile of kTileRows rows x kc columns is decoded to float32 once into
//   a thread-local buffer (F32 weights are used in place) and multiplied with every token by a
//   4-row x 2-token register-blocked kernel (8 accumulators, x loads shared by 4 rows, weight loads
//   shared by 2 tokens). Weights are read from memory once per call; the column chunk kc keeps the
//   decoded tile (16 x 2048 floats = 128 KiB) in L2 and the two token chunks in L1.
//
// Rows are split into contiguous ranges over the pool's threads (multiples of kTileRows), so each
// thread writes its own rows of y and no synchronisation is needed.
#include <algorithm>
#include <functional>
#include <vector>

#include "backends/cpu/quant.h"
#include "backends/cpu/quant_kernels.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::cpu {
namespace {

constexpr int64_t kTileRows = 16;        // decoded rows per tile (multiple of the 4-row kernel)
constexpr int64_t kChunkCols = 2048;     // decoded columns per tile (multiple of every block size)
constexpr int64_t kDecodeRowGrain = 8;   // rows per scheduling unit on the decode path

// out[r * 2 + t] = w[r] . x[t] over k columns, for 4 rows and 2 tokens.
void kernel_4x2(const float* const w[4], const float* const x[2], int64_t k, float out[8]) {
#if GA_CPU_AVX2
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x[0] + i);
    const __m256 x1 = _mm256_loadu_ps(x[1] + i);
    for (int r = 0; r < 4; ++r) {
      const __m256 wv = _mm256_loadu_ps(w[r] + i);
      acc[2 * r] = _mm256_fmadd_ps(wv, x0, acc[2 * r]);
      acc[2 * r + 1] = _mm256_fmadd_ps(wv, x1, acc[2 * r + 1]);
    }
  }
  for (int j = 0; j < 8; ++j) out[j] = simd::hsum(acc[j]);
  for (; i < k; ++i) {
    for (int r = 0; r < 4; ++r) {
      out[2 * r] += w[r][i] * x[0][i];
      out[2 * r + 1] += w[r][i] * x[1][i];
    }
  }
#else
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 2; ++t) out[2 * r + t] = detail::dot_f32(w[r], x[t], k);
  }
#endif
}

struct PrefillArgs {
  const MatrixRef* w;
  const float* x;
  int64_t n_tokens;
  int64_t ldx;
  float* y;
  int64_t ldy;
};

// Rows [row_begin, row_end) of y for every token, tile by tile.
void prefill_rows(const PrefillArgs& a, int64_t row_begin, int64_t row_end) {
  const MatrixRef& w = *a.w;
  const int64_t chunk = std::min(w.cols, kChunkCols);
  const bool in_place = w.type == DType::F32;
  thread_local std::vector<float> tile;  // [kTileRows][chunk] decoded weights
  if (!in_place) tile.resize(static_cast<size_t>(kTileRows * chunk));

  for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int64_t nr = std::min(kTileRows, row_end - r0);
    for (int64_t k0 = 0; k0 < w.cols; k0 += chunk) {
      const int64_t kc = std::min(chunk, w.cols - k0);
      const float* rows[kTileRows];
      const uint64_t byte_offset = row_bytes(w.type, static_cast<uint64_t>(k0));
      for (int64_t r = 0; r < nr; ++r) {
        const uint8_t* src = w.data + static_cast<uint64_t>(r0 + r) * w.row_stride + byte_offset;
        if (in_place) {
          rows[r] = reinterpret_cast<const float*>(src);
        } else {
          float* dst = tile.data() + r * chunk;
          dequantize_row(w.type, src, dst, kc);
          rows[r] = dst;
        }
      }
      const bool first = k0 == 0;
      auto store = [&](int64_t t, int64_t r, float v) {
        float& out = a.y[t * a.ldy + r0 + r];
        out = first ? v : out + v;
      };
      int64_t t = 0;
      for (; t + 2 <= a.n_tokens; t += 2) {
        const float* xs[2] = {a.x + t * a.ldx + k0, a.x + (t + 1) * a.ldx + k0};
        int64_t r = 0;
        for (; r + 4 <= nr; r += 4) {
          float out[8];
          kernel_4x2(rows + r, xs, kc, out);
          for (int j = 0; j < 4; ++j) {
            store(t, r + j, out[2 * j]);
            store(t + 1, r + j, out[2 * j + 1]);
          }
        }
        for (; r < nr; ++r) {
          store(t, r, detail::dot_f32(rows[r], xs[0], kc));
          store(t + 1, r, detail::dot_f32(rows[r], xs[1], kc));
        }
      }
      for (; t < a.n_tokens; ++t) {
        for (int64_t r = 0; r < nr; ++r) store(t, r, detail::dot_f32(rows[r], a.x + t * a.ldx + k0, kc));
      }
    }
  }
}

}  // namespace

void matmul(const MatrixRef& w, const float* x, int64_t n_tokens, int64_t ldx, float* y, int64_t ldy,
            ThreadPool* pool) {
  const auto& tr = traits(w.type);
  GA_CHECK(tr.supported, Unsupported, "matmul: weight type ", tr.name, " is not supported on the CPU backend");
  GA_CHECK(w.rows >= 0 && w.cols >= 0 && n_tokens >= 0, InvalidArgument, "matmul: negative size (rows ", w.rows,
           ", cols ", w.cols, ", n_tokens ", n_tokens, ")");
  if (w.rows == 0 || n_tokens == 0) return;
  const uint64_t row_size = row_bytes(w.type, static_cast<uint64_t>(w.cols));  // checks the block multiple
  GA_CHECK(w.data != nullptr && x != nullptr && y != nullptr, InvalidArgument, "matmul: null pointer");
  GA_CHECK(w.row_stride >= row_size, InvalidArgument, "matmul: row stride ", w.row_stride, " bytes is smaller than a ",
           tr.name, " row of ", w.cols, " elements (", row_size, " bytes)");
  GA_CHECK(ldx >= w.cols && ldy >= w.rows, InvalidArgument, "matmul: ldx ", ldx, " < cols ", w.cols, " or ldy ", ldy,
           " < rows ", w.rows);

  if (n_tokens == 1) {
    parallel_for(
        pool, w.rows,
        [&](int64_t begin, int64_t end, int) {
          for (int64_t r = begin; r < end; ++r) {
            y[r] = dot_row(w.type, w.data + static_cast<uint64_t>(r) * w.row_stride, x, w.cols);
          }
        },
        kDecodeRowGrain);
    return;
  }
  const PrefillArgs args{&w, x, n_tokens, ldx, y, ldy};
  parallel_for(
      pool, w.rows, [&](int64_t begin, int64_t end, int) { prefill_rows(args, begin, end); }, kTileRows);
}

}  // namespace ga::cpu
