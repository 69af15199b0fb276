// The answer of a build without CUDA to backends/cuda/cuda_forward.h: there is no CUDA forward.
//
// Compiled into ga_cuda only when CMake found no CUDA compiler (src/CMakeLists.txt), so the Session
// picks a device with ordinary control flow: Unsupported here means "use the CPU" for device "auto"
// and a clear error for device "cuda".
#include "backends/cuda/cuda_forward.h"

#include "gpu_accel/error.h"

namespace ga::cuda {

std::unique_ptr<CudaForward> make_cuda_forward(const LoadedModel& /*model*/, const step::ProgramFactory& /*factory*/,
                                               const CudaForwardParams& /*params*/) {
  GA_THROW(Unsupported, "the CUDA backend is not available in this build (configure with -DGA_CUDA=ON)");
}

std::unique_ptr<CudaBatchForward> make_cuda_batch_forward(const LoadedModel& /*model*/,
                                                          const step::ProgramFactory& /*factory*/,
                                                          const CudaBatchForwardParams& /*params*/) {
  GA_THROW(Unsupported, "the CUDA backend is not available in this build (configure with -DGA_CUDA=ON)");
}

std::vector<int64_t> warm_up_step_tokens(int64_t max_step_tokens) {
  if (max_step_tokens < 1) return {};
  return {max_step_tokens};
}

CudaCeilings measure_cuda_ceilings(int /*device*/) {
  GA_THROW(Unsupported, "the CUDA backend is not available in this build (configure with -DGA_CUDA=ON)");
}

}  // namespace ga::cuda
