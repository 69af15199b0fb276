// The prefill GEMM's first call at a new token count vs the same call warm (the first prefill of each new
// prompt length used to pay one-time costs; docs/results/2026-11-22-h200-first-prefill.md).
//
//   ga_bench_gemm_first_call [--shapes 1b|7b] [--prewarm] [--first N,N,...] [--sweep N,N,...]
//
// The four projection shapes of a Llama layer (fused q|k|v, o, fused gate|up, down) of the 1B or 7B
// preset, f16 operands, f32 output, as the forward calls them. The GEMM path is the library's
// (backends/cuda/gemm.h); GA_GEMM=gemmex selects cublasGemmEx, CUDA_MODULE_LOADING=EAGER|LAZY the
// loading mode, both read by the libraries: run one process per configuration.
//   1. the process's very first GEMM (library start-up), on an unrelated small shape;
//   2. --prewarm: the warm-up the engine does (one call per GEMM bucket: gemm_bucket_warm_up_tokens);
//   3. --first: for each n in order, each shape's first call (host clock around call + sync) and the
//      median of 10 warm calls (events), so first - warm is the one-time cost of that (shape, n);
//   4. --sweep: warm median per n, summed over the four shapes (a layer's GEMM time), to compare the
//      algorithms of two configurations at many n.
// Inputs are random normal f16 (never zeros: METHOD.md).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/stream.h"
#include "gpu_accel/dtype.h"
#include "bench_util.cuh"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t rows, k;
};

// Fills `bytes` of device memory with random normal f16 (a 1 MiB random block, repeated).
void fill_random_f16(void* dst, size_t bytes, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> block(size_t{1} << 19);
  for (uint16_t& b : block) b = ga::f32_to_fp16(dist(rng));
  const size_t block_bytes = block.size() * 2;
  for (size_t off = 0; off < bytes; off += block_bytes) {
    GA_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, block.data(), std::min(block_bytes, bytes - off),
                             cudaMemcpyHostToDevice));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes_name = "1b";
  bool prewarm = false;
  std::vector<int64_t> first = {99, 129, 407, 1000, 2000, 13};
  std::vector<int64_t> sweep;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shapes" && i + 1 < argc) shapes_name = argv[++i];
    else if (a == "--prewarm") prewarm = true;
    else if (a == "--first" && i + 1 < argc) first = ga::bench::parse_int_list(argv[++i]);
    else if (a == "--sweep" && i + 1 < argc) sweep = ga::bench::parse_int_list(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--shapes 1b|7b] [--prewarm] [--first LIST] [--sweep LIST]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<Shape> shapes =
      shapes_name == "7b"
          ? std::vector<Shape>{{"qkv", 12288, 4096}, {"o", 4096, 4096}, {"gate_up", 22016, 4096}, {"down", 4096, 11008}}
          : std::vector<Shape>{{"qkv", 3072, 2048}, {"o", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}};
  const char* gemm_env = std::getenv("GA_GEMM");
  const char* load_env = std::getenv("CUDA_MODULE_LOADING");
  const char* rep_env = std::getenv("GA_GEMM_BUCKET_REP");
  const std::string config = std::string(gemm_env != nullptr ? gemm_env : "lt-bucket") +
                             (gemm_env == nullptr && rep_env != nullptr ? std::string("-") + rep_env : "") + "/" +
                             (load_env != nullptr ? load_env : "default") + (prewarm ? "/prewarm" : "");
  try {
    int64_t max_n = 64;
    for (const int64_t n : first) max_n = std::max(max_n, n);
    for (const int64_t n : sweep) max_n = std::max(max_n, n);
    int64_t max_w = 0, max_k = 0, max_rows = 0;
    for (const Shape& s : shapes) {
      max_w = std::max(max_w, s.rows * s.k);
      max_k = std::max(max_k, s.k);
      max_rows = std::max(max_rows, s.rows);
    }
    const auto t_ctx = Clock::now();
    GA_CUDA_CHECK(cudaSetDevice(0));
    GA_CUDA_CHECK(cudaFree(nullptr));  // the context
    const double ctx_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_ctx).count();
    ga::cuda::CachingAllocator alloc(0);
    ga::cuda::Stream stream(0);
    ga::cuda::DeviceBuffer w(alloc, static_cast<size_t>(max_w) * 2), x(alloc, static_cast<size_t>(max_n * max_k) * 2),
        y(alloc, static_cast<size_t>(max_n * max_rows) * 4);
    std::mt19937 rng(1);
    fill_random_f16(w.data(), w.size(), rng);
    fill_random_f16(x.data(), x.size(), rng);
    const auto params = [&](const Shape& s, int64_t n) {
      ga::cuda::GemmParams p;
      p.type = ga::DType::F16;
      p.w = w.data();
      p.ldw = s.k;
      p.x = x.data();
      p.ldx = s.k;
      p.y = y.as<float>();
      p.ldy = s.rows;
      p.rows = s.rows;
      p.k = s.k;
      p.n = n;
      return p;
    };
    const auto host_ms = [&](auto&& body) {
      GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      const auto t0 = Clock::now();
      body();
      GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    };
    cudaEvent_t e0, e1;
    GA_CUDA_CHECK(cudaEventCreate(&e0));
    GA_CUDA_CHECK(cudaEventCreate(&e1));


    const auto t_handle = Clock::now();
    ga::cuda::Gemm gemm(alloc, stream.get());
    const double handle_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_handle).count();
    const auto warm = [&](const ga::cuda::GemmParams& p) {
      std::vector<float> t;
      for (int r = 0; r < 12; ++r) {
        GA_CUDA_CHECK(cudaEventRecord(e0, stream.get()));
        gemm.run(p);
        GA_CUDA_CHECK(cudaEventRecord(e1, stream.get()));
        GA_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        GA_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 2) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      return static_cast<double>(t[t.size() / 2]);
    };
    const Shape small{"small", 256, 256};
    const double lib_first_ms = host_ms([&] { gemm.run(params(small, 64)); });
    std::printf("config %s: context %.1f ms, GEMM handle %.1f ms, first GEMM ever (256x256, n 64) %.2f ms\n",
                config.c_str(), ctx_ms, handle_ms, lib_first_ms);
    if (prewarm) {
      int calls = 0;
      const double ms = host_ms([&] {
        for (const Shape& s : shapes) {
          for (const int64_t n : ga::cuda::gemm_bucket_warm_up_tokens(9, 512)) {
            gemm.run(params(s, n));
            ++calls;
          }
        }
      });
      std::printf("config %s: prewarm %d calls (one per shape and bucket up to 512) %.2f ms\n", config.c_str(), calls,
                  ms);
    }
    if (!first.empty()) {
      std::printf("\n| config | n | shape | first ms | warm ms | first - warm ms | heuristic queries so far |\n"
                  "|---|---:|---|---:|---:|---:|---:|\n");
      for (const int64_t n : first) {
        double sum_first = 0, sum_warm = 0;
        for (const Shape& s : shapes) {
          const ga::cuda::GemmParams p = params(s, n);
          const double f = host_ms([&] { gemm.run(p); });
          const double wm = warm(p);
          sum_first += f;
          sum_warm += wm;
          std::printf("| %s | %lld | %s %lldx%lld | %.3f | %.3f | %.3f | %lld |\n", config.c_str(),
                      static_cast<long long>(n), s.name, static_cast<long long>(s.rows), static_cast<long long>(s.k), f,
                      wm, f - wm, static_cast<long long>(gemm.stats().heuristic_queries));
        }
        std::printf("| %s | %lld | all 4 | %.3f | %.3f | %.3f | |\n", config.c_str(), static_cast<long long>(n),
                    sum_first, sum_warm, sum_first - sum_warm);
      }
      std::printf("config %s: heuristic queries %lld, %.2f ms in them\n", config.c_str(),
                  static_cast<long long>(gemm.stats().heuristic_queries), gemm.stats().heuristic_seconds * 1e3);
    }
    if (!sweep.empty()) {
      std::printf("\nSWEEP %s n:", config.c_str());
      for (const int64_t n : sweep) std::printf(" %lld", static_cast<long long>(n));
      std::printf("\n");
      std::vector<std::vector<double>> ms(shapes.size());
      for (const int64_t n : sweep) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          const ga::cuda::GemmParams p = params(shapes[i], n);
          gemm.run(p);
          ms[i].push_back(warm(p));
        }
      }
      for (size_t i = 0; i < shapes.size(); ++i) {
        std::printf("SWEEP %s %s_ms:", config.c_str(), shapes[i].name);
        for (const double v : ms[i]) std::printf(" %.4f", v);
        std::printf("\n");
      }
      std::printf("SWEEP %s layer_ms:", config.c_str());
      for (size_t j = 0; j < sweep.size(); ++j) {
        double sum = 0;
        for (size_t i = 0; i < shapes.size(); ++i) sum += ms[i][j];
        std::printf(" %.4f", sum);
      }
      std::printf("\n");
    }
    GA_CUDA_CHECK(cudaEventDestroy(e0));
    GA_CUDA_CHECK(cudaEventDestroy(e1));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
