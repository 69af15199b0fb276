// measure_cuda_ceilings (cuda_forward.h): the two numbers a GPU benchmark is judged against, taken in
// the same process right before the model runs (DESIGN.md: fraction of the ceiling measured in the
// same run).
//   * copy: cudaMemcpyAsync device-to-device of 1 GiB, counted as bytes read + bytes written per
//     second: the bandwidth a weight-streaming decode step can at best reach.
//   * GEMM: the forward's own prefill GEMM configuration (Gemm: f16 x f16, f32 accumulate, f32 out)
//     at M = N = K = 8192, the throughput a prefill can at best reach.
// Each is warmed up once, then timed with CUDA events over several repetitions; the best of three
// rounds is kept (clock ramp-up and the first cuBLAS heuristics call only slow a run down).
#include <algorithm>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_forward.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/stream.h"
#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

constexpr size_t kCopyBytes = size_t{1} << 30;
constexpr int kCopyReps = 10;
constexpr int64_t kGemmSize = 8192;
constexpr int kGemmReps = 10;
constexpr int kRounds = 3;

template <class F>
double best_ms(const Stream& stream, int reps, F&& body) {
  Event start, stop;
  body();  // warm-up
  stream.synchronize();
  double best = 0.0;
  for (int round = 0; round < kRounds; ++round) {
    start.record(stream.get());
    for (int r = 0; r < reps; ++r) body();
    stop.record(stream.get());
    stop.synchronize();
    const double ms = Event::elapsed_ms(start, stop) / reps;
    best = round == 0 ? ms : std::min(best, ms);
  }
  return best;
}

}  // namespace

CudaCeilings measure_cuda_ceilings(int device) {
  std::string reason;
  GA_CHECK(device_count(&reason) > device, Unsupported, "no CUDA device ", device, " (", reason, ")");
  DeviceGuard guard(device);
  CudaCeilings out;
  out.device_name = device_info(device).name;
  CachingAllocator allocator(device);
  Stream stream(device);
  {
    DeviceBuffer a(allocator, kCopyBytes), b(allocator, kCopyBytes);
    GA_CUDA_CHECK(cudaMemsetAsync(a.data(), 1, kCopyBytes, stream.get()));
    const double ms = best_ms(stream, kCopyReps, [&] {
      GA_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), kCopyBytes, cudaMemcpyDeviceToDevice, stream.get()));
    });
    out.copy_gbps = 2.0 * static_cast<double>(kCopyBytes) / (ms * 1e-3) / 1e9;
  }
  allocator.release_cached();
  {
    const size_t elems = static_cast<size_t>(kGemmSize * kGemmSize);
    DeviceBuffer w(allocator, elems * 2), x(allocator, elems * 2), y(allocator, elems * 4);
    GA_CUDA_CHECK(cudaMemsetAsync(w.data(), 0x3c, elems * 2, stream.get()));  // 0x3c3c: a normal f16 (~1.06)
    GA_CUDA_CHECK(cudaMemsetAsync(x.data(), 0x3c, elems * 2, stream.get()));
    Gemm gemm(allocator, stream.get());
    GemmParams p;
    p.type = DType::F16;
    p.w = w.data();
    p.x = x.data();
    p.y = y.as<float>();
    p.rows = p.k = p.n = kGemmSize;
    p.ldw = p.ldx = p.ldy = kGemmSize;
    const double ms = best_ms(stream, kGemmReps, [&] { gemm.run(p); });
    out.gemm_tflops = 2.0 * static_cast<double>(kGemmSize) * kGemmSize * kGemmSize / (ms * 1e-3) / 1e12;
    out.gemm_size = kGemmSize;
  }
  return out;
}

}  // namespace ga::cuda
