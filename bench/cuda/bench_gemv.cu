// Decode GEMV benchmark on the GPU: y = W x for the Llama-7B matrix shapes and every weight type,
// reported as GB/s and as a fraction of the device-to-device copy bandwidth measured in the same
// run (the practical ceiling for a kernel that streams W once). cuBLAS fp16 GEMV is timed on the
// same shapes as the peer for F16.
//
// Method: each configuration rotates over enough weight buffers (>= 4x the L2 size in total) that
// no launch finds its weights in L2; the launches over all buffers are captured in one CUDA graph
// (so launch gaps are those of the decode graph the engine will use), warmed up, and timed with
// CUDA events; the reported time per GEMV is the median over 60 graph launches divided by the
// buffers per graph. Weights are random bytes (timing does not depend on the values; a NaN scale
// is harmless here); correctness is the parity tests' job.
//
// --sweep (n_tokens 1) also times alternative kernel configurations (rows per CTA, chunks per lane,
// pipeline stages; gemv_impl.cuh) for a few types, each checked against the default kernel's output
// on the same weights, so the defaults can be chosen from measurements.
//
// Shapes whose GEMV reads a pre-quantized x (GemvParams::x_int8: Q8_0 split rows, GGUF Q4_0 / Q4_K) are also
// timed with it, with and without the pre-pass.
// Usage: ga_bench_gemv [n_tokens] [--sweep] [--type Q8_0 ...] [--shape 4096x14336]   (n_tokens default 1; 2..8
// times the small-batch variant; --type, repeatable, times only the named weight types; --shape one matrix shape)
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/gemv.h"
#include "backends/cuda/kernels/gemv_impl.cuh"
#include "backends/cuda/kernels/weight_layout.h"
#include "backends/cuda/kernels/x_fp8.h"
#include "backends/cuda/stream.h"
#include "backends/cuda/cuda_forward.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"
#include "bench_util.cuh"

namespace {

using namespace ga;
using ga::cuda::CachingAllocator;
using ga::cuda::DeviceBuffer;
using ga::bench::capture;
using ga::bench::median;

constexpr int kSamples = 60;
constexpr int kWarmup = 3;
constexpr double kGB = 1e9;

// Median milliseconds of one launch of `graph`.
double time_graph(cudaGraphExec_t graph, cudaStream_t stream) {
  return ga::bench::time_graph(graph, stream, kWarmup, kSamples);
}

#define CUBLAS_CHECK(call)                                                                 \
  do {                                                                                     \
    const cublasStatus_t status_ = (call);                                                 \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                \
      GA_THROW(Internal, "cuBLAS call `", #call, "` failed with status ", int(status_));   \
    }                                                                                      \
  } while (0)

// Small finite floats for x, and their fp16 copy for cuBLAS.
__global__ void fill_activations(float* x, __half* xh, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = static_cast<float>(static_cast<int>(i % 97) - 48) / 64.0f;
    x[i] = v;
    xh[i] = __float2half(v);
  }
}

// Median milliseconds of `launch(0..n-1)` issued on the stream (when capture is not possible).
template <class F>
double time_stream(cudaStream_t stream, int n, F&& launch) {
  ga::cuda::Event start, stop;
  for (int i = 0; i < n; ++i) launch(i);
  std::vector<double> ms;
  for (int s = 0; s < kSamples; ++s) {
    start.record(stream);
    for (int i = 0; i < n; ++i) launch(i);
    stop.record(stream);
    stop.synchronize();
    ms.push_back(ga::cuda::Event::elapsed_ms(start, stop));
  }
  return median(ms);
}

// Captures `launch(i)` for i < n into a graph (the launches must be capturable).
struct Row {
  std::string shape, type;
  double mbytes, us, gbs;
};

using Launch = std::function<cudaError_t(const ga::cuda::GemvParams&, cudaStream_t)>;
struct Variant {
  DType type;
  std::string name;
  Launch launch;
};

template <class D, class Cfg>
Variant staged(const char* name) {
  return {D::kType, name, [](const ga::cuda::GemvParams& p, cudaStream_t s) {
            return ga::cuda::detail::launch_gemv_staged<D, 1, Cfg>(ga::cuda::detail::make_gemv_args<D>(p), s);
          }};
}
template <class D, class Cfg>
Variant direct(const char* name) {
  return {D::kType, name, [](const ga::cuda::GemvParams& p, cudaStream_t s) {
            return ga::cuda::detail::launch_gemv_direct<D, 1, Cfg>(ga::cuda::detail::make_gemv_args<D>(p), s);
          }};
}

// Alternatives to the defaults for n_tokens 1 (names: staged R rows / C chunks per lane / P stages,
// direct R rows / U loads per lane and row).
std::vector<Variant> sweep_variants() {
  namespace d = ga::cuda::detail;
  std::vector<Variant> v;
  v.push_back(staged<d::DecodeQ4_0, d::StagedConfig<4, 1, 4>>("staged R4 C1 P4"));
  v.push_back(staged<d::DecodeQ4_0, d::StagedConfig<8, 2, 2>>("staged R8 C2 P2"));
  v.push_back(staged<d::DecodeQ4_K, d::StagedConfig<8, 1, 3>>("staged R8 C1 P3"));
  v.push_back(staged<d::DecodeQ8_0, d::StagedConfig<4, 1, 4>>("staged R4 C1 P4"));
  v.push_back(direct<d::DecodeF16, d::DirectConfig<4, 4>>("direct R4 U4"));
  // Q6_K (default staged R4 C1 P4): Q4_K_M's output, attn_v and part of ffn_down
  v.push_back(staged<d::DecodeQ6_K, d::StagedConfig<8, 1, 3>>("staged R8 C1 P3"));
  v.push_back(staged<d::DecodeQ6_K, d::StagedConfig<4, 2, 3>>("staged R4 C2 P3"));
  v.push_back(staged<d::DecodeQ6_K, d::StagedConfig<2, 2, 4>>("staged R2 C2 P4"));
  v.push_back(staged<d::DecodeQ6_K, d::StagedConfig<8, 2, 2>>("staged R8 C2 P2"));
  return v;
}

// Largest |a - b| / max(|b|, 1e-3 * max|b|) over y (NaN where exactly one side is NaN).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0.0, worst = 0.0;
  for (float v : b) {
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) continue;
    const double den = std::max(std::fabs(static_cast<double>(b[i])), 1e-3 * scale);
    if (den > 0) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / den);
  }
  return worst;
}

// The FP8 tensor-core kernels' tile shapes (--sweep): direct with G groups of 8 rows per CTA, staged with G groups
// and S stages, each checked against the default launch's output on the same weights and x digits.
template <int G>
cudaError_t launch_f8x(const ga::cuda::GemvParams& p, cudaStream_t s) {
  namespace d = ga::cuda::detail;
  return d::launch_gemv_split_f8x<G, 1>(d::make_gemv_args<d::DecodeF8B128>(p), s);
}
template <int G, int S>
cudaError_t launch_f8s(const ga::cuda::GemvParams& p, cudaStream_t s) {
  namespace d = ga::cuda::detail;
  return d::launch_gemv_split_f8s<G, S, 1>(d::make_gemv_args<d::DecodeF8B128>(p), s);
}
template <int R, int U, int kMinCtas>
cudaError_t launch_f8d(const ga::cuda::GemvParams& p, cudaStream_t s) {
  namespace d = ga::cuda::detail;
  return d::launch_gemv_split_f8_diag<R, U, 1, kMinCtas>(d::make_gemv_args<d::DecodeF8B128>(p), s);
}
void time_f8x_variants(ga::cuda::GemvParams p, const std::vector<DeviceBuffer>& weights, int n_buf, DeviceBuffer& y,
                       cudaStream_t stream, std::vector<Row>& rows_out, uint64_t w_bytes, double moved) {
  const std::pair<const char*, Launch> variants[] = {{"G1", launch_f8x<1>},               {"G2", launch_f8x<2>},
                                                     {"staged G1 S2", launch_f8s<1, 2>}, {"staged G1 S3", launch_f8s<1, 3>},
                                                     {"staged G1 S4", launch_f8s<1, 4>}, {"staged G2 S2", launch_f8s<2, 2>},
                                                     {"staged G2 S3", launch_f8s<2, 3>},
                                                     {"diag R4 U2", launch_f8d<4, 2, 1>},
                                                     {"diag R4 U2 min6", launch_f8d<4, 2, 6>},
                                                     {"diag R4 U1 min8", launch_f8d<4, 1, 8>},
                                                     {"diag R8 U1 min6", launch_f8d<8, 1, 6>},
                                                     {"diag R8 U1", launch_f8d<8, 1, 1>},
                                                     {"diag R2 U4", launch_f8d<2, 4, 1>},
                                                     {"diag R2 U2 min8", launch_f8d<2, 2, 8>},
                                                     {"diag R8 U2", launch_f8d<8, 2, 1>}};
  std::vector<float> y_ref(static_cast<size_t>(p.rows)), y_var(y_ref.size());
  p.w = weights[0].data();
  GA_CUDA_CHECK(ga::cuda::gemv(p, stream));
  GA_CUDA_CHECK(cudaMemcpyAsync(y_ref.data(), y.data(), y_ref.size() * 4, cudaMemcpyDeviceToHost, stream));
  for (const auto& [name, launch] : variants) {
    p.w = weights[0].data();
    GA_CUDA_CHECK(cudaMemsetAsync(y.data(), 0xFF, y_var.size() * 4, stream));
    GA_CUDA_CHECK(launch(p, stream));
    GA_CUDA_CHECK(cudaMemcpyAsync(y_var.data(), y.data(), y_var.size() * 4, cudaMemcpyDeviceToHost, stream));
    GA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double diff = max_rel_diff(y_var, y_ref);
    cudaGraphExec_t g = capture(stream, n_buf, [&](int i) {
      p.w = weights[static_cast<size_t>(i)].data();
      GA_CUDA_CHECK(launch(p, stream));
    });
    const double us = time_graph(g, stream) * 1e3 / n_buf;
    GA_CUDA_CHECK(cudaGraphExecDestroy(g));
    rows_out.push_back({rows_out.back().shape,
                        std::string("F8_B128 split rows, x e4m3x2 given, ") + name +
                            (diff <= 1e-4 ? "" : " MISMATCH " + std::to_string(diff)),
                        static_cast<double>(w_bytes) / 1e6, us, moved / (us * 1e-6) / kGB});
  }
}

}  // namespace

int main(int argc, char** argv) try {
  int n_tokens = 1;
  bool sweep = false;
  std::vector<std::string> only_types;  // --type NAME (repeatable): time only these weight types
  std::string only_shape;  // --shape ROWSxCOLS: time only this matrix shape (for a profiler run)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
    } else if (std::strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
      only_types.emplace_back(argv[++i]);
    } else if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
      only_shape = argv[++i];
    } else {
      n_tokens = std::atoi(argv[i]);
    }
  }
  GA_CHECK(!sweep || n_tokens == 1, InvalidArgument, "--sweep times n_tokens 1 only");
  const std::vector<Variant> variants = sweep ? sweep_variants() : std::vector<Variant>{};
  GA_CHECK(n_tokens >= 1 && n_tokens <= ga::cuda::kGemvMaxTokens, InvalidArgument, "n_tokens must be 1..8");
  if (!ga::bench::open_bench_device()) return 0;
  const CudaDeviceInfo dev = ga::cuda::device_info(0);
  CachingAllocator alloc(0);
  ga::cuda::Stream stream(0);
  const double copy_gbs = ga::cuda::measure_cuda_ceilings(0).copy_gbps;  // the same function gpu-accel bench uses
  alloc.release_cached();

  cublasHandle_t cublas = nullptr;
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream.get()));
  DeviceBuffer cublas_ws(alloc, 32u << 20);  // a fixed workspace keeps cuBLAS capturable
  CUBLAS_CHECK(cublasSetWorkspace(cublas, cublas_ws.data(), cublas_ws.size()));

  struct Shape {
    int64_t rows, cols;
    const char* what;
  };
  // the 7B decode's matrices as the forward runs them: q/k/v and gate/up fused (cuda_llama_forward.cpp)
  const Shape shapes[] = {{4096, 4096, "attn o"},      {12288, 4096, "attn qkv fused"}, {11008, 4096, "ffn gate/up"},
                          {22016, 4096, "ffn gate+up fused"}, {4096, 11008, "ffn down"}, {32000, 4096, "output"},
                          // Llama-3-8B's (F8_B128 split rows need cols % 512 == 0: 11008 is not)
                          {6144, 4096, "8B attn qkv fused"}, {28672, 4096, "8B ffn gate+up fused"},
                          {4096, 14336, "8B ffn down"}};
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q6_K,  DType::Q5_K,
                         DType::Q5_1, DType::Q5_0, DType::Q4_K, DType::Q4_1, DType::Q4_0,  DType::Q3_K,
                         DType::Q2_K, DType::MXFP4, DType::NVFP4, DType::F8_B128};
  std::vector<Row> rows_out;
  for (const Shape& s : shapes) {
    if (!only_shape.empty() && only_shape != std::to_string(s.rows) + "x" + std::to_string(s.cols)) continue;
    const size_t x_elems = static_cast<size_t>(s.cols) * n_tokens;
    DeviceBuffer x(alloc, x_elems * sizeof(float)), xh(alloc, x_elems * sizeof(__half));
    DeviceBuffer y(alloc, static_cast<size_t>(s.rows) * n_tokens * sizeof(float));
    fill_activations<<<256, 256, 0, stream.get()>>>(x.as<float>(), xh.as<__half>(), x_elems);
    GA_CUDA_CHECK_LAUNCH();
    for (DType type : types) {
      if (!only_types.empty() &&
          std::find(only_types.begin(), only_types.end(), std::string(dtype_name(type))) == only_types.end()) {
        continue;
      }
      const uint64_t w_bytes = row_bytes(type, static_cast<uint64_t>(s.cols)) * static_cast<uint64_t>(s.rows);
      const int n_buf = static_cast<int>(std::clamp<uint64_t>((4 * dev.l2_bytes + w_bytes - 1) / w_bytes, 2, 32));
      std::vector<DeviceBuffer> weights;
      for (int i = 0; i < n_buf; ++i) {
        weights.emplace_back(alloc, w_bytes);
        ga::bench::fill_bytes<<<1024, 256, 0, stream.get()>>>(weights.back().as<uint8_t>(), w_bytes, 77u + i);
        GA_CUDA_CHECK_LAUNCH();
      }
      ga::cuda::GemvParams p;
      p.type = type;
      p.rows = s.rows;
      p.cols = s.cols;
      p.row_stride = static_cast<int64_t>(row_bytes(type, static_cast<uint64_t>(s.cols)));
      p.x = x.as<float>();
      p.ldx = s.cols;
      p.y = y.as<float>();
      p.ldy = s.rows;
      p.n_tokens = n_tokens;
      p.w = weights[0].data();
      if (const char* why = ga::cuda::gemv_unsupported_reason(p)) GA_THROW(Internal, "bench shape rejected: ", why);
      cudaGraphExec_t graph = capture(stream.get(), n_buf, [&](int i) {
        p.w = weights[static_cast<size_t>(i)].data();
        const cudaError_t status = ga::cuda::gemv(p, stream.get());
        GA_CHECK(status == cudaSuccess, Internal, "gemv ", dtype_name(type), " ", s.rows, "x", s.cols, " failed: ",
                 cudaGetErrorString(status));
      });
      const double us = time_graph(graph, stream.get()) * 1e3 / n_buf;
      GA_CUDA_CHECK(cudaGraphExecDestroy(graph));
      const double moved = static_cast<double>(w_bytes) + 4.0 * static_cast<double>(x_elems) +
                           4.0 * static_cast<double>(s.rows) * n_tokens;
      rows_out.push_back({std::to_string(s.rows) + "x" + std::to_string(s.cols) + " " + s.what, dtype_name(type),
                          static_cast<double>(w_bytes) / 1e6, us, moved / (us * 1e-6) / kGB});

      // The GEMV of p with its pre-rounded x given, then with `prepass` rounding x in every iteration: two rows.
      const auto time_given_and_prepass = [&](const std::string& given, const std::string& with_pass,
                                              const std::function<void()>& prepass) {
        for (const bool with_prepass : {false, true}) {
          cudaGraphExec_t qg = capture(stream.get(), n_buf, [&](int i) {
            p.w = weights[static_cast<size_t>(i)].data();
            if (with_prepass) prepass();
            GA_CUDA_CHECK(ga::cuda::gemv(p, stream.get()));
          });
          const double qus = time_graph(qg, stream.get()) * 1e3 / n_buf;
          GA_CUDA_CHECK(cudaGraphExecDestroy(qg));
          rows_out.push_back({rows_out.back().shape, with_prepass ? with_pass : given, static_cast<double>(w_bytes) / 1e6,
                              qus, moved / (qus * 1e-6) / kGB});
        }
      };

      // x rounded once per step (GemvParams::x_int8, as the forward's RMSNorms / SwiGLU / pre-pass write it):
      // the int8 kernel without its per-CTA prologue, alone and with the quantize_x_int8 pre-pass in each
      // iteration (the cost when no producing kernel can absorb it); the row above is the kernel for the shape
      // without it. Q8_0 split rows and GGUF-order Q4_0 / Q4_K read it (gemv_reads_x_int8).
      const auto time_x_int8 = [&](const std::string& label) {
        DeviceBuffer xq(alloc, static_cast<size_t>(ga::cuda::gemv_x_int8_bytes(s.cols, n_tokens)));
        p.x_int8 = xq.data();
        if (!ga::cuda::gemv_reads_x_int8(p)) {
          p.x_int8 = nullptr;
          return;
        }
        ga::cuda::QuantizeXInt8Params q;
        q.x = x.as<float>();
        q.ldx = s.cols;
        q.cols = s.cols;
        q.n_tokens = n_tokens;
        q.out = xq.data();
        GA_CUDA_CHECK(ga::cuda::quantize_x_int8(q, stream.get()));
        time_given_and_prepass(label + ", x int8 given", label + ", x int8 pre-pass + GEMV",
                               [&] { GA_CUDA_CHECK(ga::cuda::quantize_x_int8(q, stream.get())); });
        p.x_int8 = nullptr;
      };
      time_x_int8(dtype_name(type));

      if (ga::cuda::split_rows_supported(type, s.cols)) {  // the same bytes read as split rows (weight_layout.h)
        p.layout = ga::cuda::WeightLayout::kSplitRows;
        cudaGraphExec_t sg = capture(stream.get(), n_buf, [&](int i) {
          p.w = weights[static_cast<size_t>(i)].data();
          GA_CUDA_CHECK(ga::cuda::gemv(p, stream.get()));
        });
        const double sus = time_graph(sg, stream.get()) * 1e3 / n_buf;
        GA_CUDA_CHECK(cudaGraphExecDestroy(sg));
        rows_out.push_back({rows_out.back().shape, std::string(dtype_name(type)) + " split rows",
                            static_cast<double>(w_bytes) / 1e6, sus, moved / (sus * 1e-6) / kGB});
        time_x_int8(std::string(dtype_name(type)) + " split rows");
        if (type == DType::F8_B128) {  // x rounded to two E4M3 digits: the FP8 tensor-core kernel (sm_89+)
          DeviceBuffer x8(alloc, static_cast<size_t>(ga::cuda::gemv_x_e4m3x2_bytes(s.cols, n_tokens)));
          ga::cuda::QuantizeXE4m3x2Params q;
          q.x = x.as<float>();
          q.ldx = s.cols;
          q.n = n_tokens;
          q.k = s.cols;
          q.out = x8.data();
          GA_CUDA_CHECK(ga::cuda::quantize_x_e4m3x2(q, stream.get()));
          p.x_e4m3x2 = x8.data();
          if (ga::cuda::gemv_rounds_x_to_e4m3x2(p)) {
            time_given_and_prepass("F8_B128 split rows, x e4m3x2 given", "F8_B128 split rows, x e4m3x2 pre-pass + GEMV",
                                   [&] { GA_CUDA_CHECK(ga::cuda::quantize_x_e4m3x2(q, stream.get())); });
            if (sweep) time_f8x_variants(p, weights, n_buf, y, stream.get(), rows_out, w_bytes, moved);
          }
          p.x_e4m3x2 = nullptr;
        }
        p.layout = ga::cuda::WeightLayout::kGguf;
      }

      if (sweep) {  // alternatives: same weights, output checked against the default kernel's
        std::vector<float> y_ref(static_cast<size_t>(s.rows));
        p.w = weights[0].data();
        GA_CUDA_CHECK(ga::cuda::gemv(p, stream.get()));
        GA_CUDA_CHECK(cudaMemcpyAsync(y_ref.data(), y.data(), y_ref.size() * 4, cudaMemcpyDeviceToHost, stream.get()));
        for (const Variant& v : variants) {
          if (v.type != type) continue;
          std::vector<float> y_var(y_ref.size());
          p.w = weights[0].data();
          GA_CUDA_CHECK(cudaMemsetAsync(y.data(), 0xFF, y_var.size() * 4, stream.get()));
          GA_CUDA_CHECK(v.launch(p, stream.get()));
          GA_CUDA_CHECK(
              cudaMemcpyAsync(y_var.data(), y.data(), y_var.size() * 4, cudaMemcpyDeviceToHost, stream.get()));
          GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
          const double diff = max_rel_diff(y_var, y_ref);
          cudaGraphExec_t vg = capture(stream.get(), n_buf, [&](int i) {
            p.w = weights[static_cast<size_t>(i)].data();
            GA_CUDA_CHECK(v.launch(p, stream.get()));
          });
          const double vus = time_graph(vg, stream.get()) * 1e3 / n_buf;
          GA_CUDA_CHECK(cudaGraphExecDestroy(vg));
          // the default may round x to int8 (gemv_uses_int8_activations): float variants then differ by
          // that rounding (~2e-3 on these random weights), not by a bug
          const double allowed = ga::cuda::gemv_uses_int8_activations(p) ? 1e-2 : 1e-4;
          const std::string label = std::string(dtype_name(type)) + " " + v.name +
                                    (diff <= allowed ? "" : " MISMATCH " + std::to_string(diff));
          rows_out.push_back(
              {rows_out.back().shape, label, static_cast<double>(w_bytes) / 1e6, vus, moved / (vus * 1e-6) / kGB});
        }
      }

      if (type == DType::F16) {  // the peer: cuBLAS, fp16 W and x, fp32 accumulate and output
        const float alpha = 1.0f, beta = 0.0f;
        auto launch_cublas = [&](int i) {
          // W is row-major [rows][cols] = column-major [cols][rows]: y = W^T(col-major) x
          CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.rows), n_tokens,
                                    static_cast<int>(s.cols), &alpha, weights[static_cast<size_t>(i)].data(), CUDA_R_16F,
                                    static_cast<int>(s.cols), xh.data(), CUDA_R_16F, static_cast<int>(s.cols), &beta,
                                    y.data(), CUDA_R_32F, static_cast<int>(s.rows), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
        };
        std::string how = "cuBLAS f16";
        double cublas_ms = 0.0;
        try {
          cudaGraphExec_t cublas_graph = capture(stream.get(), n_buf, launch_cublas);
          cublas_ms = time_graph(cublas_graph, stream.get());
          GA_CUDA_CHECK(cudaGraphExecDestroy(cublas_graph));
        } catch (const ga::Error& e) {  // not capturable in this cuBLAS version: time plain launches
          std::printf("note: cuBLAS graph capture failed (%s); timing stream launches\n", e.message().c_str());
          cublas_ms = time_stream(stream.get(), n_buf, launch_cublas);
          how += " (stream)";
        }
        const double cublas_us = cublas_ms * 1e3 / n_buf;
        const double moved_h = static_cast<double>(w_bytes) + 2.0 * static_cast<double>(x_elems) +
                               4.0 * static_cast<double>(s.rows) * n_tokens;
        rows_out.push_back({rows_out.back().shape, how, static_cast<double>(w_bytes) / 1e6, cublas_us,
                            moved_h / (cublas_us * 1e-6) / kGB});
      }
      weights.clear();
      alloc.release_cached();
    }
  }
  GA_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  CUBLAS_CHECK(cublasDestroy(cublas));

  std::printf("\nGEMV, n_tokens %d; device-to-device copy (read + write): %.0f GB/s\n\n", n_tokens, copy_gbs);
  std::printf("| matrix | type | weights MB | time us | GB/s | %% of copy |\n|---|---|---:|---:|---:|---:|\n");
  for (const Row& r : rows_out) {
    std::printf("| %s | %s | %.1f | %.2f | %.0f | %.0f%% |\n", r.shape.c_str(), r.type.c_str(), r.mbytes, r.us, r.gbs,
                100.0 * r.gbs / copy_gbs);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ga_bench_gemv: %s\n", e.what());
  return 1;
}
