// MoE feed-forward benchmark on the GPU (kernels/moe.h, moe_prefill.h): the grouped expert GEMV at the
// Mixtral 8x7B (n_embd 4096, n_ff 14336, 8 experts, top-2) and Qwen3-30B-A3B (2048, 768, 128, top-8)
// shapes, decode batches 1 / 4 / 16, and the prefill of 512 tokens.
//
// Decode rows: the gate+up GEMV (one launch, both stacks), the down GEMV, and the whole routed step
// (moe_route + moe_ffn_gemv: route, gate+up, activation, down, combine), each for the routing's default
// kernel and, where they differ, the float and int8 kernel families forced (MoeGemvKernel). Bytes are the
// routed experts' weights read by the call: each distinct expert of the call once ("distinct", the ideal
// traffic: GB/s and % of the device-to-device copy bandwidth measured in the same run) and once per pair
// ("pairs": what a kernel without grouping would read). Method as bench_gemv: 16 routings drawn from
// normal logits and enough copies of the stacks (>= 10x the L2 in all) that a call rarely finds its
// experts in L2; the calls over (copy, routing) are captured in one CUDA graph, the time per call is the
// median over the graph's launches divided by its calls. Weights are random bytes (timing only).
// Prefill rows: moe_route + moe_prefill_host_sync on 512 tokens, CUDA events around the call (it holds one
// host sync), route + moe_prefill_graph (the grouped GEMM) and route + moe_ffn_gemv, each in one graph; TFLOP/s on
// 2 * 3 * n_embd * n_ff per routed pair against the cuBLAS f16 GEMM ceiling of the same run.
// Usage: ga_bench_moe [--type Q4_K ...] [--batch 1,4,16] [--prefill 512] [--no-variants]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/moe_prefill.h"
#include "backends/cuda/stream.h"
#include "bench_util.cuh"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"

namespace {

using namespace ga;
using ga::cuda::CachingAllocator;
using ga::cuda::DeviceBuffer;
namespace gc = ga::cuda;

constexpr int kRoutings = 16;
constexpr int kSamples = 30;
constexpr int kWarmup = 2;

struct Shape {
  const char* name;
  int64_t n_embd, n_ff;
  int n_expert, top_k;
};

struct Row {
  std::string shape, type, what, kernel;
  int64_t batch;
  double us, distinct_mb, pair_mb;
};

struct PrefillRow {
  std::string shape, type, path;
  int64_t tokens;
  double us, tflops;
};

// One copy of the three stacks of a layer.
struct Stacks {
  DeviceBuffer gate, up, down;
  gc::MoeExperts g, u, d;
};

gc::MoeExperts experts(DType type, const DeviceBuffer& b, int64_t rows, int64_t cols) {
  const auto rb = static_cast<int64_t>(row_bytes(type, static_cast<uint64_t>(cols)));
  return {type, b.data(), rows, cols, rb, rb * rows};
}

// One routing of `batch` tokens on the device: logits, ids, weights, the plan; and its distinct experts.
struct Routing {
  DeviceBuffer logits, ids, weights, plan;
  int distinct = 0;
  int64_t valid_pairs = 0;
};

gc::MoeRouteParams route_params(const gc::MoeShape& shape, const DeviceBuffer& logits, const DeviceBuffer& ids,
                                const DeviceBuffer& weights, const DeviceBuffer& plan) {
  gc::MoeRouteParams rp;
  rp.shape = shape;
  rp.logits = logits.as<float>();
  rp.ld_logits = shape.n_expert;
  rp.normalize = true;
  rp.ids = ids.as<int32_t>();
  rp.weights = weights.as<float>();
  rp.plan = plan.data();
  return rp;
}

// The routed FFN of route_params' routing on one copy of the stacks, x and out [n_tokens][n_embd]: the fields
// MoeFfnGemvParams and MoePrefillParams share, and the workspace.
template <class P = gc::MoeFfnGemvParams>
P ffn_params(const gc::MoeShape& shape, const DeviceBuffer& ids, const DeviceBuffer& weights, const DeviceBuffer& plan,
             const Stacks& st, const DeviceBuffer& x, DeviceBuffer& out, DeviceBuffer& ws) {
  P f;
  f.shape = shape;
  f.plan = plan.data();
  f.ids = ids.as<int32_t>();
  f.weights = weights.as<float>();
  f.gate = st.g;
  f.up = st.u;
  f.down = st.d;
  f.x = x.as<float>();
  f.ldx = st.g.cols;
  f.out = out.as<float>();
  f.ld_out = st.g.cols;
  f.workspace = ws.data();
  return f;
}

const char* kernel_name(gc::MoeGemvKernel k) {
  return k == gc::MoeGemvKernel::kAuto ? "auto" : (k == gc::MoeGemvKernel::kFloat ? "float" : "int8");
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<std::string> only_types;
  std::vector<int64_t> batches = {1, 4, 16};
  int64_t prefill_tokens = 512;
  bool variants = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
      only_types.emplace_back(argv[++i]);
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batches = ga::bench::parse_int_list(argv[++i]);
    } else if (std::strcmp(argv[i], "--prefill") == 0 && i + 1 < argc) {
      prefill_tokens = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--no-variants") == 0) {
      variants = false;
    } else {
      GA_THROW(InvalidArgument, "unknown argument ", argv[i]);
    }
  }
  if (!ga::bench::open_bench_device()) return 0;
  const CudaDeviceInfo dev = gc::device_info(0);
  const gc::CudaCeilings ceilings = gc::measure_cuda_ceilings(0);
  CachingAllocator alloc(0);
  gc::Stream stream(0);
  const Shape shapes[] = {{"Mixtral 8x7B", 4096, 14336, 8, 2}, {"Qwen3-30B-A3B", 2048, 768, 128, 8}};
  const DType types[] = {DType::F16, DType::Q8_0, DType::Q4_K, DType::Q4_0, DType::Q6_K, DType::MXFP4, DType::NVFP4};
  std::vector<Row> rows;
  std::vector<PrefillRow> prefill_rows;
  std::mt19937 rng(2026);

  for (const Shape& s : shapes) {
    for (DType type : types) {
      if (!only_types.empty() &&
          std::find(only_types.begin(), only_types.end(), std::string(dtype_name(type))) == only_types.end()) {
        continue;
      }
      const uint64_t up_bytes = row_bytes(type, static_cast<uint64_t>(s.n_embd)) * static_cast<uint64_t>(s.n_ff);
      const uint64_t down_bytes = row_bytes(type, static_cast<uint64_t>(s.n_ff)) * static_cast<uint64_t>(s.n_embd);
      const uint64_t layer_bytes = static_cast<uint64_t>(s.n_expert) * (2 * up_bytes + down_bytes);
      const int n_copies =
          static_cast<int>(std::clamp<uint64_t>((10 * dev.l2_bytes + layer_bytes - 1) / layer_bytes, 1, 16));
      std::vector<Stacks> copies(static_cast<size_t>(n_copies));
      for (int c = 0; c < n_copies; ++c) {
        Stacks& st = copies[static_cast<size_t>(c)];
        st.gate = DeviceBuffer(alloc, s.n_expert * up_bytes + 16);
        st.up = DeviceBuffer(alloc, s.n_expert * up_bytes + 16);
        st.down = DeviceBuffer(alloc, s.n_expert * down_bytes + 16);
        uint32_t seed = 1000u * c;
        for (DeviceBuffer* b : {&st.gate, &st.up, &st.down}) {
          ga::bench::fill_bytes<<<2048, 256, 0, stream.get()>>>(b->as<uint8_t>(), b->size(), ++seed);
          GA_CUDA_CHECK_LAUNCH();
        }
        st.g = experts(type, st.gate, s.n_ff, s.n_embd);
        st.u = experts(type, st.up, s.n_ff, s.n_embd);
        st.d = experts(type, st.down, s.n_embd, s.n_ff);
      }

      for (int64_t batch : batches) {
        const gc::MoeShape shape{batch, s.n_expert, s.top_k};
        const int64_t n_pairs = shape.n_pairs();
        // routings (the plans stay valid: nothing else writes them)
        std::vector<Routing> routings(kRoutings);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (Routing& r : routings) {
          std::vector<float> logits(static_cast<size_t>(batch * s.n_expert));
          for (auto& v : logits) v = normal(rng);
          r.logits = DeviceBuffer(alloc, logits.size() * 4);
          r.ids = DeviceBuffer(alloc, static_cast<size_t>(n_pairs) * 4);
          r.weights = DeviceBuffer(alloc, static_cast<size_t>(n_pairs) * 4);
          r.plan = DeviceBuffer(alloc, static_cast<size_t>(gc::moe_plan_bytes(shape)));
          GA_CUDA_CHECK(cudaMemcpyAsync(r.logits.data(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice,
                                        stream.get()));
          GA_CUDA_CHECK(gc::moe_route(route_params(shape, r.logits, r.ids, r.weights, r.plan), stream.get()));
          std::vector<int32_t> ids(static_cast<size_t>(n_pairs));
          GA_CUDA_CHECK(cudaMemcpyAsync(ids.data(), r.ids.data(), ids.size() * 4, cudaMemcpyDeviceToHost, stream.get()));
          stream.synchronize();
          r.distinct = static_cast<int>(std::set<int32_t>(ids.begin(), ids.end()).size());
          r.valid_pairs = n_pairs;
        }
        double distinct_mean = 0.0;
        for (const Routing& r : routings) distinct_mean += r.distinct;
        distinct_mean /= kRoutings;

        const int64_t ld_up = 2 * s.n_ff;
        DeviceBuffer x(alloc, static_cast<size_t>(batch * s.n_embd) * 4);
        DeviceBuffer gate_up(alloc, static_cast<size_t>(n_pairs * ld_up) * 4);
        DeviceBuffer y_down(alloc, static_cast<size_t>(n_pairs * s.n_embd) * 4);
        DeviceBuffer out(alloc, static_cast<size_t>(batch * s.n_embd) * 4);
        DeviceBuffer ws(alloc, static_cast<size_t>(gc::moe_ffn_gemv_workspace_bytes(shape, s.n_embd, s.n_ff)));
        GA_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.size(), stream.get()));
        GA_CUDA_CHECK(cudaMemsetAsync(gate_up.data(), 0, gate_up.size(), stream.get()));
        const int n_calls = kRoutings * n_copies;

        auto gemv_params = [&](int i, bool up_stage, gc::MoeGemvKernel kernel) {
          const Stacks& st = copies[static_cast<size_t>(i % n_copies)];
          const Routing& r = routings[static_cast<size_t>(i % kRoutings)];
          gc::MoeGemvParams p;
          p.shape = shape;
          p.plan = r.plan.data();
          p.kernel = kernel;
          if (up_stage) {
            p.w = st.g;
            p.w2 = st.u.data;
            p.x = x.as<float>();
            p.ldx = s.n_embd;
            p.input = gc::MoeGemvInput::kTokenRows;
            p.y = gate_up.as<float>();
            p.ldy = ld_up;
          } else {
            p.w = st.d;
            p.x = gate_up.as<float>();
            p.ldx = ld_up;
            p.input = gc::MoeGemvInput::kPairRows;
            p.y = y_down.as<float>();
            p.ldy = s.n_embd;
          }
          return p;
        };
        auto time_calls = [&](auto&& launch) {
          cudaGraphExec_t g = ga::bench::capture(stream.get(), n_calls, launch);
          const double us = ga::bench::time_graph(g, stream.get(), kWarmup, kSamples) * 1e3 / n_calls;
          GA_CUDA_CHECK(cudaGraphExecDestroy(g));
          return us;
        };
        const std::string shape_name = s.name;
        for (const bool up_stage : {true, false}) {
          const double bytes = static_cast<double>(up_stage ? 2 * up_bytes : down_bytes);
          std::vector<gc::MoeGemvKernel> kernels = {gc::MoeGemvKernel::kAuto};
          if (variants) {
            const bool auto_int8 = gc::moe_gemv_uses_int8_activations(gemv_params(0, up_stage, gc::MoeGemvKernel::kAuto));
            kernels.push_back(auto_int8 ? gc::MoeGemvKernel::kFloat : gc::MoeGemvKernel::kInt8);
          }
          for (gc::MoeGemvKernel kernel : kernels) {
            const gc::MoeGemvParams p0 = gemv_params(0, up_stage, kernel);
            if (gc::moe_gemv_unsupported_reason(p0) != nullptr) continue;
            const bool int8 = gc::moe_gemv_uses_int8_activations(p0);
            const double us = time_calls([&](int i) { return gc::moe_gemv(gemv_params(i, up_stage, kernel), stream.get()); });
            rows.push_back({shape_name, dtype_name(type), up_stage ? "gate+up" : "down",
                            std::string(kernel_name(kernel)) + (int8 ? " (int8)" : " (float)"), batch, us,
                            distinct_mean * bytes / 1e6, static_cast<double>(n_pairs) * bytes / 1e6});
          }
        }
        // the whole routed step: route (+ plan) and the FFN
        const double step_us = time_calls([&](int i) {
          const Stacks& st = copies[static_cast<size_t>(i % n_copies)];
          Routing& r = routings[static_cast<size_t>(i % kRoutings)];
          GA_CUDA_CHECK(gc::moe_route(route_params(shape, r.logits, r.ids, r.weights, r.plan), stream.get()));
          return gc::moe_ffn_gemv(ffn_params(shape, r.ids, r.weights, r.plan, st, x, out, ws), stream.get());
        });
        const double step_bytes = static_cast<double>(2 * up_bytes + down_bytes);
        rows.push_back({shape_name, dtype_name(type), "step: route+gate/up+act+down+combine", "auto", batch, step_us,
                        distinct_mean * step_bytes / 1e6, static_cast<double>(n_pairs) * step_bytes / 1e6});
      }

      // prefill: route + moe_prefill_host_sync (one copy of the stacks; expert weights far exceed L2 anyway)
      if (prefill_tokens > 0) {
        const gc::MoeShape shape{prefill_tokens, s.n_expert, s.top_k};
        const Stacks& st = copies[0];
        std::vector<float> logits(static_cast<size_t>(prefill_tokens * s.n_expert));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& v : logits) v = normal(rng);
        DeviceBuffer d_logits(alloc, logits.size() * 4), ids(alloc, static_cast<size_t>(shape.n_pairs()) * 4),
            weights(alloc, static_cast<size_t>(shape.n_pairs()) * 4),
            plan(alloc, static_cast<size_t>(gc::moe_plan_bytes(shape))),
            x(alloc, static_cast<size_t>(prefill_tokens * s.n_embd) * 4),
            out(alloc, static_cast<size_t>(prefill_tokens * s.n_embd) * 4);
        const int64_t ws_bytes = gc::moe_prefill_workspace_bytes(shape, s.n_embd, s.n_ff);
        DeviceBuffer ws(alloc, static_cast<size_t>(ws_bytes));
        GA_CUDA_CHECK(cudaMemcpyAsync(d_logits.data(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice,
                                      stream.get()));
        GA_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.size(), stream.get()));
        gc::Gemm gemm(alloc, stream.get());
        const gc::MoeRouteParams rp = route_params(shape, d_logits, ids, weights, plan);
        gc::MoePrefillParams p = ffn_params<gc::MoePrefillParams>(shape, ids, weights, plan, st, x, out, ws);
        p.workspace_bytes = ws_bytes;
        if (const char* why = gc::moe_prefill_unsupported_reason(p)) GA_THROW(Internal, "prefill refused: ", why);
        std::vector<double> ms;
        gc::Event start, stop;
        for (int rep = 0; rep < 6; ++rep) {  // the first (algorithm choice, module loads) is not counted
          start.record(stream.get());
          GA_CUDA_CHECK(gc::moe_route(rp, stream.get()));
          gc::moe_prefill_host_sync(gemm, p);
          stop.record(stream.get());
          stop.synchronize();
          if (rep > 0) ms.push_back(gc::Event::elapsed_ms(start, stop));
        }
        const double us = ga::bench::median(ms) * 1e3;
        const double flops = 2.0 * 3.0 * static_cast<double>(s.n_embd * s.n_ff) * static_cast<double>(shape.n_pairs());
        prefill_rows.push_back({s.name, dtype_name(type), "dequantize + cuBLAS per expert (host sync)", prefill_tokens,
                                us, flops / (us * 1e-6) / 1e12});
        // path (a): route + moe_prefill_graph in one graph (the grouped GEMM; quantized stacks dequantized whole
        // to f16 inside it each call)
        {
          gc::MoePrefillParams q = p;
          const int64_t gbytes = gc::moe_prefill_graph_workspace_bytes(q);
          DeviceBuffer gws(alloc, static_cast<size_t>(gbytes));
          q.workspace = gws.data();
          q.workspace_bytes = gbytes;
          if (const char* why = gc::moe_prefill_graph_unsupported_reason(q)) GA_THROW(Internal, "graph prefill refused: ", why);
          cudaGraphExec_t g = ga::bench::capture(stream.get(), 1, [&](int) {
            GA_CUDA_CHECK(gc::moe_route(rp, stream.get()));
            return gc::moe_prefill_graph(q, stream.get());
          });
          const double gus = ga::bench::time_graph(g, stream.get(), 1, 5) * 1e3;
          GA_CUDA_CHECK(cudaGraphExecDestroy(g));
          prefill_rows.push_back({s.name, dtype_name(type), "grouped GEMM (moe_prefill_graph, one graph)", prefill_tokens,
                                  gus, flops / (gus * 1e-6) / 1e12});
        }
        // the same tokens through the grouped GEMV (route + moe_ffn_gemv in one graph, no host sync): items of 8
        // pairs re-read an expert's weights once per item, so it only pays where experts get few pairs each
        DeviceBuffer gws(alloc, static_cast<size_t>(gc::moe_ffn_gemv_workspace_bytes(shape, s.n_embd, s.n_ff)));
        const gc::MoeFfnGemvParams f = ffn_params(shape, ids, weights, plan, st, x, out, gws);
        cudaGraphExec_t g = ga::bench::capture(stream.get(), 1, [&](int) {
          GA_CUDA_CHECK(gc::moe_route(rp, stream.get()));
          return gc::moe_ffn_gemv(f, stream.get());
        });
        const double gemv_us = ga::bench::time_graph(g, stream.get(), 1, 3) * 1e3;
        GA_CUDA_CHECK(cudaGraphExecDestroy(g));
        prefill_rows.push_back({s.name, dtype_name(type), "grouped GEMV (moe_ffn_gemv, one graph)", prefill_tokens,
                                gemv_us, flops / (gemv_us * 1e-6) / 1e12});
      }
      copies.clear();
      alloc.release_cached();
    }
  }

  std::printf("\nMoE expert GEMV; device-to-device copy (read + write) %.0f GB/s; cuBLAS f16 GEMM %.1f TFLOP/s (%lld^3)\n\n",
              ceilings.copy_gbps, ceilings.gemm_tflops, static_cast<long long>(ceilings.gemm_size));
  std::printf("| shape | type | batch | call | kernel | time us | distinct MB | GB/s | %% of copy | pairs MB | GB/s |\n");
  std::printf("|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double gbs = r.distinct_mb * 1e6 / (r.us * 1e-6) / 1e9;
    std::printf("| %s | %s | %lld | %s | %s | %.2f | %.1f | %.0f | %.0f%% | %.1f | %.0f |\n", r.shape.c_str(),
                r.type.c_str(), static_cast<long long>(r.batch), r.what.c_str(), r.kernel.c_str(), r.us, r.distinct_mb,
                gbs, 100.0 * gbs / ceilings.copy_gbps, r.pair_mb, r.pair_mb * 1e6 / (r.us * 1e-6) / 1e9);
  }
  if (!prefill_rows.empty()) {
    std::printf("\nMoE prefill (route included)\n\n");
    std::printf("| shape | type | tokens | path | time us | TFLOP/s | %% of cuBLAS |\n|---|---|---:|---|---:|---:|---:|\n");
    for (const PrefillRow& r : prefill_rows) {
      std::printf("| %s | %s | %lld | %s | %.0f | %.1f | %.1f%% |\n", r.shape.c_str(), r.type.c_str(),
                  static_cast<long long>(r.tokens), r.path.c_str(), r.us, r.tflops, 100.0 * r.tflops / ceilings.gemm_tflops);
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ga_bench_moe: %s\n", e.what());
  return 1;
}
