// precision_target (gpu_accel/precision.h): the compute capability of the GPU a device string names, through the
// CUDA-free device query (gpu_accel/device.h), so that `--precision auto` decides before the weights are uploaded.
// "auto" names cuda:0 when a GPU exists, as the Session and the Scheduler pick it.
#include "gpu_accel/device.h"
#include "gpu_accel/precision.h"
#include "runtime/engine/batch_backend.h"

namespace ga {

PrecisionTarget precision_target(const std::string& device) {
  const int index = device == "auto" ? 0 : engine::cuda_device_index(device);
  PrecisionTarget t;
  if (index < 0) return t;
  for (const CudaDeviceInfo& d : cuda_devices()) {
    if (d.index != index) continue;
    t.gpu = true;
    t.cc_major = d.cc_major;
    t.cc_minor = d.cc_minor;
  }
  return t;
}

}  // namespace ga
