// The answer of a build without CUDA to backends/cuda/kernels/sampling_device.h: no GPU sampling.
#include "backends/cuda/kernels/sampling_device.h"

#include "gpu_accel/error.h"

namespace ga::cuda {

std::unique_ptr<CudaSampling> make_cuda_sampling(int /*device*/, int64_t /*max_rows*/, int64_t /*n_vocab*/,
                                                 int32_t /*max_k*/, void* /*stream*/) {
  GA_THROW(Unsupported, "the CUDA backend is not available in this build (configure with -DGA_CUDA=ON)");
}

}  // namespace ga::cuda
