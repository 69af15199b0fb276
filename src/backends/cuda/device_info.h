// Device queries for the CUDA backend (internal: may use CUDA types), plus a scoped device switch.
//
// The public, CUDA-free view of the same facts is include/gpu_accel/device.h; device_info.cpp
// implements both so there is one source of truth for what a device is.
#pragma once

#include <cuda_runtime_api.h>

#include "gpu_accel/device.h"

namespace ga::cuda {

// Number of devices; 0 when the driver or the device is missing (never throws for that).
// `reason` (optional) receives the runtime's explanation when the answer is 0.
int device_count(std::string* reason = nullptr);

// Properties of device `index` (throws ga::Error for a bad index or a runtime failure).
CudaDeviceInfo device_info(int index);

// Makes `device` current for the guard's lifetime and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace ga::cuda
