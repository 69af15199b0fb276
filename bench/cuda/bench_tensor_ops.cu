// Tensor-ops benchmark (include/gpu_accel/tensor_ops.h on Device::Cuda): the bandwidth-bound ops on tensors of
// 64 MiB and 256 MiB (the input x; F32 and BF16), against the device-to-device copy bandwidth measured in the
// same process (ga::cuda::measure_cuda_ceilings, the ceiling `gpu-accel bench` reports).
//
// Columns:
//  * us: median over 7 samples of (20 back-to-back calls of the public API between two events) / 20, after a
//    warm-up; each call is the whole host call (checks, pointer queries, launch), as a user pays it;
//  * GB/s: the bytes the op must move (every input read once, every output written once; a broadcast operand
//    counted at its own size) per second;
//  * % copy: that against the copy ceiling (bytes read + written per second of a 1 GiB cudaMemcpy D2D).
// Shapes: [rows][4096] for the row ops and the inner-axis reductions, the same tensor reduced along axis 0 (the
// strided "columns" case), add of two such tensors and add of a broadcast [4096] row. Values are pseudo-random
// in [-4, 4): timing does not depend on them; correctness is tests/cuda/test_cuda_tensor_ops.cpp's job.
//
// Usage: ga_bench_tensor_ops [--sizes-mib 64,256] [--width 4096]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_forward.h"
#include "bench_util.cuh"
#include "gpu_accel/tensor_ops.h"

namespace {

using namespace ga;
using namespace ga::ops;

constexpr int kCallsPerSample = 20;
constexpr int kSamples = 7;
constexpr int kWarmupCalls = 10;

__global__ void fill_values(void* p, int64_t n, bool bf16, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA77u;
    h ^= h >> 13;
    const float v = (static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f) * 8.0f;
    if (bf16) {
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
    } else {
      static_cast<float*>(p)[i] = v;
    }
  }
}

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { GA_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceMem() { (void)cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

TensorView view(DType t, void* p, std::vector<int64_t> shape) {
  TensorView v;
  v.type = t;
  v.data = p;
  v.ndim = static_cast<int>(shape.size());
  int64_t s = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = shape[static_cast<size_t>(d)];
    v.strides[d] = s;
    s *= v.shape[d];
  }
  return v;
}

// Median microseconds of one call.
double time_us(cudaStream_t stream, const std::function<Status()>& call) {
  for (int i = 0; i < kWarmupCalls; ++i) call().throw_if_error();
  GA_CUDA_CHECK(cudaStreamSynchronize(stream));
  ga::cuda::Event start, stop;
  std::vector<double> us;
  for (int s = 0; s < kSamples; ++s) {
    start.record(stream);
    for (int i = 0; i < kCallsPerSample; ++i) call().throw_if_error();
    stop.record(stream);
    stop.synchronize();
    us.push_back(ga::cuda::Event::elapsed_ms(start, stop) * 1e3 / kCallsPerSample);
  }
  return ga::bench::median(us);
}

}  // namespace

int main(int argc, char** argv) {
  if (!ga::bench::open_bench_device()) return 0;
  std::vector<int64_t> sizes_mib = {64, 256};
  int64_t width = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--sizes-mib") == 0) {
      sizes_mib = ga::bench::parse_int_list(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--width") == 0) {
      width = std::stoll(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--sizes-mib 64,256] [--width 4096]\n", argv[0]);
      return 2;
    }
  }
  try {
    const ga::cuda::CudaCeilings ceil = ga::cuda::measure_cuda_ceilings(0);
    std::printf("copy ceiling: %.0f GB/s (cudaMemcpy D2D of 1 GiB, read + write)\n\n", ceil.copy_gbps);
    ga::cuda::Stream stream_owner(0);
    cudaStream_t stream = stream_owner.get();
    Exec exec;
    exec.device = Device::Cuda;
    exec.stream = stream;
    std::printf("| op | type | shape | MiB moved | us | GB/s | %% copy |\n|---|---|---|---:|---:|---:|---:|\n");
    for (const int64_t mib : sizes_mib) {
      for (const DType t : {DType::F32, DType::BF16}) {
        const int64_t eb = t == DType::F32 ? 4 : 2;
        const int64_t bytes = mib << 20;
        const int64_t rows = bytes / eb / width;
        const int64_t n = rows * width;
        DeviceMem x(static_cast<size_t>(bytes)), y(static_cast<size_t>(bytes)), out(static_cast<size_t>(bytes));
        DeviceMem small(static_cast<size_t>(std::max<int64_t>(rows, width) * 8));
        DeviceMem w(static_cast<size_t>(width * eb)), b(static_cast<size_t>(width * eb));
        fill_values<<<1024, 256, 0, stream>>>(x.p, n, t == DType::BF16, 1);
        fill_values<<<1024, 256, 0, stream>>>(y.p, n, t == DType::BF16, 2);
        fill_values<<<64, 256, 0, stream>>>(w.p, width, t == DType::BF16, 3);
        fill_values<<<64, 256, 0, stream>>>(b.p, width, t == DType::BF16, 4);
        GA_CUDA_CHECK_LAUNCH();
        // A device-to-device copy of this very tensor, for the same-size reference line.
        const double copy_us = time_us(stream, [&] {
          GA_CUDA_CHECK(cudaMemcpyAsync(out.p, x.p, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream));
          return Status();
        });
        const TensorView xv = view(t, x.p, {rows, width}), yv = view(t, y.p, {rows, width});
        const TensorView ov = view(t, out.p, {rows, width});
        const TensorView wv = view(t, w.p, {width}), bv = view(t, b.p, {width});
        const TensorView row_out = view(t, small.p, {rows}), col_out = view(t, small.p, {width});
        const TensorView row_idx = view(DType::I64, small.p, {rows});
        const std::string shape = "[" + std::to_string(rows) + "][" + std::to_string(width) + "]";
        struct Case {
          const char* name;
          int64_t moved;
          std::function<Status()> call;
        };
        const std::vector<Case> cases = {
            {"copy (cudaMemcpy)", 2 * bytes, nullptr},
            {"relu", 2 * bytes, [&] { return unary(Activation::Relu, xv, ov, exec); }},
            {"silu", 2 * bytes, [&] { return unary(Activation::Silu, xv, ov, exec); }},
            {"gelu", 2 * bytes, [&] { return unary(Activation::Gelu, xv, ov, exec); }},
            {"add", 3 * bytes, [&] { return binary(BinaryOp::Add, xv, yv, ov, exec); }},
            {"add, [width] broadcast", 2 * bytes + width * eb, [&] { return binary(BinaryOp::Add, xv, wv, ov, exec); }},
            {"sum, last axis", bytes + rows * eb, [&] { return reduce(ReduceOp::Sum, xv, 1, row_out, exec); }},
            {"max, last axis", bytes + rows * eb, [&] { return reduce(ReduceOp::Max, xv, 1, row_out, exec); }},
            {"argmax, last axis", bytes + rows * 8, [&] { return reduce(ReduceOp::ArgMax, xv, 1, row_idx, exec); }},
            {"logsumexp, last axis", bytes + rows * eb,
             [&] { return reduce(ReduceOp::LogSumExp, xv, 1, row_out, exec); }},
            {"sum, axis 0 (strided)", bytes + width * eb, [&] { return reduce(ReduceOp::Sum, xv, 0, col_out, exec); }},
            {"mean, axis 0 (strided)", bytes + width * eb,
             [&] { return reduce(ReduceOp::Mean, xv, 0, col_out, exec); }},
            {"rms_norm", 2 * bytes + width * eb, [&] { return rms_norm(xv, wv, 1e-6f, ov, exec); }},
            {"layer_norm", 2 * bytes + 2 * width * eb, [&] { return layer_norm(xv, wv, bv, 1e-5f, ov, exec); }},
            {"softmax", 2 * bytes, [&] { return softmax(xv, ov, exec); }},
        };
        for (const Case& c : cases) {
          const double us = c.call ? time_us(stream, c.call) : copy_us;
          const double gbps = static_cast<double>(c.moved) / (us * 1e-6) / 1e9;
          std::printf("| %s | %s | %s | %.0f | %.1f | %.0f | %.0f%% |\n", c.name, dtype_name(t), shape.c_str(),
                      static_cast<double>(c.moved) / (1 << 20), us, gbps, 100.0 * gbps / ceil.copy_gbps);
        }
      }
    }
  } catch (const ga::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
