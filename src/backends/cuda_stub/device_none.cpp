// The answer of a build without CUDA to include/gpu_accel/device.h: there is no device.
//
// This file is compiled into ga_cuda only when CMake found no CUDA compiler (src/CMakeLists.txt), so
// callers never need an #ifdef to ask whether a GPU can be used.
#include "gpu_accel/device.h"

namespace ga {

int cuda_device_count() { return 0; }

std::vector<CudaDeviceInfo> cuda_devices() { return {}; }

std::string cuda_device_summary() { return "no CUDA"; }

}  // namespace ga
