// measure_cpu_ceilings: see cpu_ceilings.h. Buffers are touched once before timing so page faults
// are not measured; every thread copies its own contiguous slice, as a bandwidth test should.
#include "model/tools/cpu_ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backends/cpu/quant.h"
#include "core/thread_pool.h"
#include "gpu_accel/error.h"

namespace ga::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int64_t kCopyGrain = 4096;  // bytes: whole pages per thread

}  // namespace

CpuCeilings measure_cpu_ceilings(ThreadPool& pool, const CeilingOptions& options) {
  GA_CHECK(options.copy_bytes > 0 && options.copy_reps > 0 && options.matmul_reps > 0 && options.matmul_tokens > 0 &&
               options.matmul_size > 0,
           InvalidArgument, "measure_cpu_ceilings: sizes and repetitions must be positive");
  CpuCeilings c;
  c.n_threads = pool.size();

  // ---- copy bandwidth ----
  const int64_t n_bytes = static_cast<int64_t>(options.copy_bytes);
  std::vector<uint8_t> src(static_cast<size_t>(n_bytes), uint8_t{1});
  std::vector<uint8_t> dst(static_cast<size_t>(n_bytes), uint8_t{0});
  auto copy_slice = [&](int64_t begin, int64_t end, int) {
    std::memcpy(dst.data() + begin, src.data() + begin, static_cast<size_t>(end - begin));
  };
  pool.parallel_for(n_bytes, copy_slice, kCopyGrain);  // warm-up: page faults, caches
  double best = 0.0;
  for (int r = 0; r < options.copy_reps; ++r) {
    const auto t0 = Clock::now();
    pool.parallel_for(n_bytes, copy_slice, kCopyGrain);
    const double s = seconds_since(t0);
    best = std::max(best, 2.0 * static_cast<double>(n_bytes) / s);
  }
  c.copy_bytes_per_s = best;
  c.copy_buffer_bytes = options.copy_bytes;

  // ---- dense float32 matmul ----
  const int64_t m = options.matmul_tokens, n = options.matmul_size, k = options.matmul_size;
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;  // any finite values
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.02f - 0.12f;
  cpu::MatrixRef ref;
  ref.type = DType::F32;
  ref.data = reinterpret_cast<const uint8_t*>(w.data());
  ref.rows = n;
  ref.cols = k;
  ref.row_stride = static_cast<uint64_t>(k) * sizeof(float);
  cpu::matmul(ref, x.data(), m, k, y.data(), n, &pool);  // warm-up
  best = 0.0;
  for (int r = 0; r < options.matmul_reps; ++r) {
    const auto t0 = Clock::now();
    cpu::matmul(ref, x.data(), m, k, y.data(), n, &pool);
    const double s = seconds_since(t0);
    best = std::max(best, 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / s);
  }
  c.matmul_flops_per_s = best;
  c.matmul_m = m;
  c.matmul_n = n;
  c.matmul_k = k;
  return c;
}

}  // namespace ga::tools
