// The engine's prefill attention (attention.h: f32 q and out, f16 KV cache, causal, GQA) on its two kernels in
// one run: the mma.sync prefill (attention_prefill.cu) and the Hopper flash kernel behind the same call
// (attention_hopper.cu: f16 staging of q + the varlen/paged flash forward writing f32), for the Llama-3-8B
// heads (32 query / 8 KV heads, head_dim 128) at 512, 2048 and 8192 tokens from position 0, contiguous and
// paged (block_size 16, shuffled block table: the Scheduler's layout). Also the flash kernel alone on f16 q/o
// (what the staging pass costs on top). Reported as TFLOP/s (4 * head_dim FLOPs per visible (query head, key)
// pair) and as a fraction of the cuBLAS f16 GEMM measured in the same run (a practical mma ceiling); PyTorch's
// SDPA on the same shapes comes from bench/attention_torch/prefill_sdpa.py in the same device script.
// Each call is captured in a CUDA graph; median of 20 launches. Both kernels' outputs are compared (max
// |difference|) as a sanity check; correctness is the parity tests' job.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/flash/flash_attention.h"
#include "backends/cuda/stream.h"
#include "bench_util.cuh"
#include "gpu_accel/error.h"

namespace {

using ga::cuda::AttentionParams;
using ga::cuda::CachingAllocator;
using ga::cuda::DeviceBuffer;

constexpr int kHd = 128, kHeads = 32, kKvHeads = 8, kBlock = 16;

__global__ void fill(float* f, __half* h, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    x ^= x >> 15;
    x *= 0x85EBCA77u;
    x ^= x >> 13;
    const float v = static_cast<float>(x & 0xFFFF) / 32768.0f - 1.0f;
    if (f != nullptr) f[i] = v;
    if (h != nullptr) h[i] = __float2half(v);
  }
}

double time_call(cudaStream_t stream, const std::function<cudaError_t()>& call) {
  cudaGraphExec_t graph = ga::bench::capture(stream, 1, [&](int) { return call(); });
  const double ms = ga::bench::time_graph(graph, stream, 3, 20);
  GA_CUDA_CHECK(cudaGraphExecDestroy(graph));
  return ms * 1e3;
}

float max_abs_diff(const DeviceBuffer& a, const DeviceBuffer& b, size_t n) {
  std::vector<float> ha(n), hb(n);
  GA_CUDA_CHECK(cudaMemcpy(ha.data(), a.data(), n * 4, cudaMemcpyDeviceToHost));
  GA_CUDA_CHECK(cudaMemcpy(hb.data(), b.data(), n * 4, cudaMemcpyDeviceToHost));
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::isfinite(ha[i] - hb[i]) ? std::fabs(ha[i] - hb[i]) : INFINITY);
  return m;
}

}  // namespace

int main() try {
  if (!ga::bench::open_bench_device()) return 0;
  CachingAllocator alloc(0);
  ga::cuda::Stream stream(0);
  const ga::cuda::CudaCeilings ceilings = ga::cuda::measure_cuda_ceilings(0);
  alloc.release_cached();
  cudaStream_t s = stream.get();
  std::printf("\n| tokens | layout | mma.sync us | TFLOP/s | hopper us | TFLOP/s | of GEMM | speedup | "
              "flash f16 only us | "
              "max |diff| | hopper reason |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (int T : {512, 2048, 8192}) {
    const size_t q_elems = size_t(T) * kHeads * kHd;
    const size_t kv_cap_blocks = (size_t(T) + kBlock - 1) / kBlock;
    DeviceBuffer q(alloc, q_elems * 4), out_a(alloc, q_elems * 4), out_b(alloc, q_elems * 4);
    const size_t kv_bytes = kv_cap_blocks * kBlock * kKvHeads * kHd * 2;
    DeviceBuffer k(alloc, kv_bytes), v(alloc, kv_bytes);
    DeviceBuffer q16(alloc, q_elems * 2), o16(alloc, q_elems * 2);
    fill<<<1024, 256, 0, s>>>(q.as<float>(), q16.as<__half>(), q_elems, 1);
    fill<<<1024, 256, 0, s>>>(nullptr, k.as<__half>(), kv_cap_blocks * kBlock * kKvHeads * kHd, 2);
    fill<<<1024, 256, 0, s>>>(nullptr, v.as<__half>(), kv_cap_blocks * kBlock * kKvHeads * kHd, 3);
    GA_CUDA_CHECK_LAUNCH();
    // paged metadata: one sequence of T tokens from position 0 over shuffled blocks
    std::vector<int32_t> table(kv_cap_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    const int32_t meta_host[3] = {0, T, 0};
    DeviceBuffer d_table(alloc, table.size() * 4), d_meta(alloc, 16);
    GA_CUDA_CHECK(cudaMemcpy(d_table.data(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    GA_CUDA_CHECK(cudaMemcpy(d_meta.data(), meta_host, 12, cudaMemcpyHostToDevice));
    const double pairs = double(T) * (T + 1) / 2.0;
    const double flops = 4.0 * kHd * kHeads * pairs;
    for (bool paged : {false, true}) {
      AttentionParams p;
      p.q = q.as<float>();
      p.q_token_stride = p.out_token_stride = int64_t{kHeads} * kHd;
      p.k = k.as<__half>();
      p.v = v.as<__half>();
      p.kv_pos_stride = int64_t{kKvHeads} * kHd;
      p.n_tokens = T;
      p.n_head = kHeads;
      p.n_head_kv = kKvHeads;
      p.head_dim = kHd;
      p.scale = 1.0f / std::sqrt(float(kHd));
      p.max_kv_positions = T;
      p.out = out_a.as<float>();
      if (paged) {
        p.n_seqs = 1;
        p.seq_q_start = d_meta.as<int32_t>();
        p.seq_pos0 = d_meta.as<int32_t>() + 2;
        p.block_table = d_table.as<int32_t>();
        p.block_table_stride = static_cast<int64_t>(kv_cap_blocks);
        p.block_size = kBlock;
        p.n_kv_blocks = static_cast<int64_t>(kv_cap_blocks);
        p.max_seq_tokens = T;
      }
      const size_t ws_bytes = ga::cuda::attention_workspace_bytes(p);
      DeviceBuffer ws(alloc, std::max<size_t>(ws_bytes, 16));
      GA_CUDA_CHECK(cudaMemset(ws.data(), 0, ws.size()));
      p.workspace = ws.data();
      p.workspace_bytes = ws_bytes;
      const size_t staging_bytes = ga::cuda::attention_prefill_staging_bytes(p);
      DeviceBuffer staging(alloc, std::max<size_t>(staging_bytes, 256));
      AttentionParams mma = p, hop = p;
      mma.out = out_a.as<float>();
      mma.prefill_kernel = AttentionParams::PrefillKernel::kMmaSync;
      hop.out = out_b.as<float>();
      hop.prefill_staging = staging.data();
      hop.prefill_staging_bytes = staging_bytes;
      if (const char* why = ga::cuda::attention_unsupported_reason(p)) GA_THROW(Internal, "rejected: ", why);
      const char* hop_reason = ga::cuda::attention_hopper_prefill_reason(hop);
      const double mma_us = time_call(s, [&] { return ga::cuda::attention(mma, s); });
      const double hop_us = time_call(s, [&] { return ga::cuda::attention(hop, s); });
      GA_CUDA_CHECK(cudaStreamSynchronize(s));
      const float diff = max_abs_diff(out_a, out_b, q_elems);
      double flash_us = 0.0;
      if (!paged) {  // the kernel alone, dense f16 in and out
        ga::cuda::FlashParams f;
        f.q = q16.data();
        f.k = k.data();
        f.v = v.data();
        f.o = o16.data();
        f.q_head_stride = f.k_head_stride = f.v_head_stride = f.o_head_stride = kHd;
        f.q_seq_stride = f.o_seq_stride = int64_t{kHeads} * kHd;
        f.k_seq_stride = f.v_seq_stride = int64_t{kKvHeads} * kHd;
        f.q_batch_stride = f.o_batch_stride = f.q_seq_stride * T;
        f.k_batch_stride = f.v_batch_stride = f.k_seq_stride * T;
        f.dtype = ga::cuda::FlashDtype::kF16;
        f.head_dim = kHd;
        f.n_head = kHeads;
        f.n_head_kv = kKvHeads;
        f.batch = 1;
        f.seqlen_q = f.seqlen_k = T;
        f.causal = true;
        f.softmax_scale = p.scale;
        if (ga::cuda::flash_unsupported_reason(f) == nullptr) {
          flash_us = time_call(s, [&] { return ga::cuda::flash_forward(f, nullptr, 0, s); });
        }
      }
      const double mma_tf = flops / (mma_us * 1e-6) / 1e12, hop_tf = flops / (hop_us * 1e-6) / 1e12;
      std::printf("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.0f%% | %.2fx | %.1f | %.2e | %s |\n", T,
                  paged ? "paged bs16" : "contiguous", mma_us, mma_tf, hop_us, hop_tf,
                  100.0 * hop_tf / ceilings.gemm_tflops, mma_us / hop_us, flash_us, diff,
                  hop_reason == nullptr ? "(hopper)" : hop_reason);
    }
    alloc.release_cached();
  }
  std::printf("\nGQA 32/8, head_dim 128, causal from position 0, f16 KV; "
              "same-run cuBLAS f16 GEMM ceiling %.0f TFLOP/s\n",
              ceilings.gemm_tflops);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ga_bench_prefill_attention: %s\n", e.what());
  return 1;
}
