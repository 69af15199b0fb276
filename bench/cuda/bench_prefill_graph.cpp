// How launch-bound a prefill is, and what the prefill graphs (cuda_llama_prefill_graph.cpp) change: the same
// prompt's prefill through the engine's two faces, the contiguous one (`gpu-accel run`'s Session) and the paged one
// (the Scheduler's lone request), with the prefill graphs on and off, in one process.
//
//   ga_bench_prefill_graph -m MODEL [--tokens 20,128,512] [--repeats 21] [--idle-repeats 9] [--idle-ms 20]
//
// Per (face, prompt length, graphs): the wall time of one prefill call (metadata copy, the step, the sync; the
// logits stay on the device: eval_device / forward_device) back to back and after an idle gap of the host and the
// GPU (a lone request's case), and the GPU time of the same calls between two events recorded on the forward's
// stream around it (for the eager step this includes the GPU's waits for launches; for a replayed graph it is
// close to the kernels' own time). Medians. Each forward is warmed up as the engine does (warm_up_matmuls: the GEMM
// algorithms and the graphs' captures), then every measured length is run 3 times before timing.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_forward.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"
#include "model/arch/forward.h"
#include "bench_util.cuh"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Figures {
  double wall_ms = 0, gpu_ms = 0, idle_wall_ms = 0, idle_gpu_ms = 0;
};

// One prefill call of the face under test; returns the stream it ran on.
using PrefillCall = std::function<void*()>;

Figures measure(const PrefillCall& call, int repeats, int idle_repeats, int idle_ms) {
  cudaEvent_t start = nullptr, stop = nullptr;
  GA_CUDA_CHECK(cudaEventCreate(&start));
  GA_CUDA_CHECK(cudaEventCreate(&stop));
  auto* stream = static_cast<cudaStream_t>(call());  // the stream (and a warm call)
  for (int i = 0; i < 2; ++i) call();
  const auto timed = [&](std::vector<double>& wall, std::vector<double>& gpu) {
    GA_CUDA_CHECK(cudaEventRecord(start, stream));
    const auto t0 = Clock::now();
    call();
    const double w = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    GA_CUDA_CHECK(cudaEventRecord(stop, stream));
    GA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    GA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    wall.push_back(w);
    gpu.push_back(ms);
  };
  std::vector<double> wall, gpu, idle_wall, idle_gpu;
  for (int i = 0; i < repeats; ++i) timed(wall, gpu);
  for (int i = 0; i < idle_repeats; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    timed(idle_wall, idle_gpu);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return {median(wall), median(gpu), median(idle_wall), median(idle_gpu)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, tokens_arg = "20,128,512";
  int repeats = 21, idle_repeats = 9, idle_ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "-m") model_path = v;
    else if (k == "--tokens") tokens_arg = v;
    else if (k == "--repeats") repeats = std::stoi(v);
    else if (k == "--idle-repeats") idle_repeats = std::stoi(v);
    else if (k == "--idle-ms") idle_ms = std::stoi(v);
  }
  if (model_path.empty()) {
    std::fprintf(stderr, "usage: ga_bench_prefill_graph -m MODEL [--tokens 20,128,512] [--repeats 21] "
                         "[--idle-repeats 9] [--idle-ms 20]\n");
    return 2;
  }
  try {
    const ga::LoadedModel model = ga::load_model(model_path);
    const std::vector<int64_t> lengths = ga::bench::parse_int_list(tokens_arg);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    const int64_t n_ctx = longest + 128, block = 16;
    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model.config.n_vocab - 1));

    std::printf("| face | prompt tokens | prefill graphs | wall ms (back to back) | GPU ms (events) | wall ms after "
                "%d ms idle | GPU ms after idle |\n|---|---:|---|---:|---:|---:|---:|\n",
                idle_ms);
    std::vector<std::string> notes;
    for (const bool paged : {false, true}) {
      std::unique_ptr<ga::cuda::CudaForward> seq[2];
      std::unique_ptr<ga::cuda::CudaBatchForward> batch[2];
      for (int graphs = 0; graphs < 2; ++graphs) {
        const int64_t max_tokens = graphs ? ga::cuda::kPrefillGraphMaxTokens : 0;
        if (!paged) {
          ga::cuda::CudaForwardParams p;
          p.n_ctx = n_ctx;
          p.prefill_graph_max_tokens = max_tokens;
          seq[graphs] = ga::cuda::make_cuda_forward(model, *ga::arch::make_program_factory(model), p);
          seq[graphs]->warm_up_matmuls();
          if (graphs) notes.push_back("contiguous: " + seq[graphs]->description());
        } else {
          ga::cuda::CudaBatchForwardParams p;  // the server's shape (tools/device/serve.sh): 64 sequences
          p.block_size = block;
          p.n_blocks = 2048;
          p.max_seqs = 64;
          p.max_seq_positions = n_ctx;
          p.prefill_graph_max_tokens = max_tokens;
          batch[graphs] = ga::cuda::make_cuda_batch_forward(model, *ga::arch::make_program_factory(model), p);
          batch[graphs]->warm_up_matmuls();
          if (graphs) notes.push_back("paged: " + batch[graphs]->description());
        }
      }
      std::vector<int32_t> table;
      for (int64_t b = 0; b < (n_ctx + block - 1) / block; ++b) table.push_back(static_cast<int32_t>(b));
      const std::vector<std::span<const int32_t>> tables{table};
      for (const int64_t n : lengths) {
        std::vector<int32_t> prompt(static_cast<size_t>(n));
        for (int32_t& t : prompt) t = id(rng);
        std::vector<ga::cuda::BatchEntry> entries;
        for (int64_t t = 0; t < n; ++t) entries.push_back({prompt[static_cast<size_t>(t)], t, 0, t == n - 1});
        for (int graphs = 0; graphs < 2; ++graphs) {
          const PrefillCall call = [&]() -> void* {
            if (paged) return batch[graphs]->forward_device(entries, tables).stream;
            return seq[graphs]->eval_device(prompt, 0).stream;
          };
          const Figures f = measure(call, repeats, idle_repeats, idle_ms);
          std::printf("| %s | %lld | %s | %.3f | %.3f | %.3f | %.3f |\n",
                      paged ? "paged (Scheduler)" : "contiguous (run)", static_cast<long long>(n), graphs ? "on" : "off",
                      f.wall_ms, f.gpu_ms, f.idle_wall_ms, f.idle_gpu_ms);
          std::fflush(stdout);
        }
      }
      const ga::cuda::PrefillGraphStats s = paged ? batch[1]->prefill_graph_stats() : seq[1]->prefill_graph_stats();
      notes.push_back(std::string(paged ? "paged" : "contiguous") + " graphs: " + std::to_string(s.replays) +
                      " replays, " + std::to_string(s.padded_rows) + " pad rows");
    }
    std::printf("\n");
    for (const std::string& n : notes) std::printf("%s\n", n.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
