// CPU micro-benchmark of ga::cpu::matmul for every weight type: decode (1 token, GB/s of weight
// bytes) and prefill (n tokens, GFLOP/s). Not built by default (the CI has 2 cores); build with
//   g++ -O3 -march=native -std=c++20 -Iinclude -Isrc bench/quant_bench.cpp
//     build/src/libga_cpu.a build/src/libga_core.a -lpthread -o quant_bench
// and run `quant_bench [rows] [cols] [prefill_tokens] [threads]`.
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/quant.h"
#include "core/thread_pool.h"

using namespace ga;

namespace {

double seconds_per_call(const std::function<void()>& fn, double min_seconds = 0.3) {
  fn();  // warm up
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0.0;
  do {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (elapsed < min_seconds);
  return elapsed / calls;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t cols = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int64_t tokens = argc > 3 ? std::atoll(argv[3]) : 64;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> source(static_cast<size_t>(rows * cols));
  for (auto& v : source) v = normal(rng) * 0.02f;
  std::vector<float> x(static_cast<size_t>(tokens * cols));
  for (auto& v : x) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(tokens * rows));

  std::printf("matmul %lld x %lld, %d thread(s); decode = 1 token, prefill = %lld tokens\n",
              static_cast<long long>(rows), static_cast<long long>(cols), threads, static_cast<long long>(tokens));
  std::printf("%-6s %12s %10s %14s %12s\n", "type", "decode us", "GB/s", "prefill ms", "GFLOP/s");
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q6_K, DType::Q5_K, DType::Q5_1,
                         DType::Q5_0, DType::Q4_K, DType::Q4_1, DType::Q4_0, DType::Q3_K, DType::Q2_K};
  for (const DType type : types) {
    const uint64_t row_size = row_bytes(type, static_cast<uint64_t>(cols));
    std::vector<uint8_t> w(row_size * static_cast<uint64_t>(rows));
    for (int64_t r = 0; r < rows; ++r) cpu::quantize_row(type, source.data() + r * cols, w.data() + r * row_size, cols);
    const cpu::MatrixRef m{type, w.data(), rows, cols, row_size};
    const double t_decode = seconds_per_call([&] { cpu::matmul(m, x.data(), 1, cols, y.data(), rows, &pool); });
    const double t_prefill = seconds_per_call([&] { cpu::matmul(m, x.data(), tokens, cols, y.data(), rows, &pool); });
    std::printf("%-6s %12.1f %10.2f %14.2f %12.2f\n", dtype_name(type), t_decode * 1e6,
                static_cast<double>(w.size()) / t_decode * 1e-9, t_prefill * 1e3,
                2.0 * static_cast<double>(rows * cols * tokens) / t_prefill * 1e-9);
  }
  return 0;
}
