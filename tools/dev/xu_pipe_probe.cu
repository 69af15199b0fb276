// Do MUFU.EX2 (the softmax's exp2) and F2FP (its f32 -> e4m3 pack) share one pipe on this GPU? (session 12, issue 4)
// The FP8 hd 128 consumer issues one exp2 per score and one pack per two; if the pack runs on the same unit as the
// exp2 (the XU), that unit needs 1.5x the tensor cores' time per tile instead of 1x. Three kernels time loops of
// independent exp2s, of independent packs, and of both at the softmax's 2:1 ratio; per SM and clock:
//   shared pipe:    t(both) ~ t(exp2 part) + t(pack part);   separate pipes: t(both) ~ max of the two.
// Build and run on the device: nvcc -O3 -arch=sm_90a -o /tmp/xu tools/dev/xu_pipe_probe.cu && /tmp/xu
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

constexpr int kIters = 4096;
constexpr int kLanes = 8;  // independent chains per thread

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack(float a, float b) {
  uint16_t r;
  asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(a), "f"(b));
  return r;
}

// mode 0: 8 exp2 per iteration; 1: 4 packs per iteration; 2: 8 exp2 + 4 packs (the softmax's ratio).
template <int kMode>
__global__ void probe(float seed, uint32_t* out) {
  float x[kLanes];
#pragma unroll
  for (int i = 0; i < kLanes; ++i) x[i] = seed * (threadIdx.x + i);
  uint32_t acc = 0;
  for (int it = 0; it < kIters; ++it) {
    if (kMode != 1) {
#pragma unroll
      for (int i = 0; i < kLanes; ++i) x[i] = ex2(x[i]) - 1.0f;  // stays in (-1, 0]: no overflow
    }
    if (kMode != 0) {
#pragma unroll
      for (int i = 0; i < kLanes; i += 2) acc += pack(x[i] + it, x[i + 1]);
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kLanes; ++i) s += x[i];
  if (s == 12345.0f || acc == 0xdeadbeefu) out[0] = acc;  // keeps the work
}

template <int kMode>
double time_ms(int blocks, int threads, uint32_t* out) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  probe<kMode><<<blocks, threads>>>(0.001f, out);  // warm-up
  cudaEventRecord(a);
  for (int r = 0; r < 5; ++r) probe<kMode><<<blocks, threads>>>(0.001f, out);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, a, b);
  return ms / 5.0;
}

int main() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 1;
  }
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  uint32_t* out = nullptr;
  cudaMalloc(&out, 4);
  const int threads = 512, blocks = prop.multiProcessorCount * 4;  // 64 warps per SM
  const double warp_iters = double(blocks) * threads / 32 * kIters;
  const double t_exp = time_ms<0>(blocks, threads, out);
  const double t_pack = time_ms<1>(blocks, threads, out);
  const double t_both = time_ms<2>(blocks, threads, out);
  const double ghz = clock_khz / 1e6;
  auto per_sm_clk = [&](double ms, double ops_per_warp_iter) {
    return warp_iters * ops_per_warp_iter * 32 / (ms * 1e-3 * ghz * 1e9 * prop.multiProcessorCount);
  };
  std::printf("%s, %d SMs, max clock %.2f GHz (the rates below assume it)\n", prop.name, prop.multiProcessorCount, ghz);
  std::printf("exp2 alone:  %.3f ms, %.1f exp2 per SM per clock\n", t_exp, per_sm_clk(t_exp, kLanes));
  std::printf("pack alone:  %.3f ms, %.1f packs (2 values) per SM per clock\n", t_pack, per_sm_clk(t_pack, kLanes / 2));
  std::printf("both (2:1):  %.3f ms; sum of the parts %.3f ms, max %.3f ms -> %s\n", t_both, t_exp + t_pack,
              t_exp > t_pack ? t_exp : t_pack,
              t_both > 0.85 * (t_exp + t_pack) ? "one shared pipe" : "separate pipes (or partly overlapped)");
  cudaFree(out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
