// Which CUDA devices this build can use, in plain C++ (no CUDA headers, no #ifdefs).
//
// A build without CUDA answers "no device" through the same functions (src/backends/cuda_stub), so
// the CLI, the server's /metrics and the tests ask one question whatever the build: exactly one of
// the two implementations is compiled into ga_cuda.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ga {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;              // "NVIDIA H100 80GB HBM3"
  int cc_major = 0;              // compute capability, 9.0 for Hopper
  int cc_minor = 0;
  int sm_count = 0;              // streaming multiprocessors
  uint64_t total_memory = 0;     // bytes
  uint64_t free_memory = 0;      // bytes, when queried
  uint64_t l2_bytes = 0;
  int64_t memory_bus_bits = 0;   // 0 when the runtime does not report it
};

// Number of usable CUDA devices: 0 without CUDA support, without a driver or without a GPU.
int cuda_device_count();

// One entry per usable device (empty without CUDA). Never throws for a missing driver/device.
std::vector<CudaDeviceInfo> cuda_devices();

// One line per device, "0: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB (78.5 free), L2 50.0 MiB";
// "no CUDA" for a build without CUDA, "no CUDA device (<reason>)" when the runtime finds none.
std::string cuda_device_summary();

}  // namespace ga
