// GA_CUDA_CHECK's slow path: builds the message and picks the error kind (see cuda_check.h).
#include "backends/cuda/cuda_check.h"

#include "gpu_accel/error.h"

namespace ga::cuda {

int error_kind_of(cudaError_t status) {
  switch (status) {
    case cudaErrorMemoryAllocation:
      return static_cast<int>(ErrorKind::OutOfMemory);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidDevice:
    case cudaErrorMisalignedAddress:
      return static_cast<int>(ErrorKind::InvalidArgument);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorNotSupported:
      return static_cast<int>(ErrorKind::Unsupported);
    default:
      return static_cast<int>(ErrorKind::Internal);
  }
}

void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // reset the non-sticky error so it is reported once
  int device = -1;
  const bool know_device = cudaGetDevice(&device) == cudaSuccess;
  (void)cudaGetLastError();
  throw Error(static_cast<ErrorKind>(error_kind_of(status)),
              str("CUDA call `", call, "` failed on device ", know_device ? std::to_string(device) : std::string("?"),
                  ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"),
              file, line);
}

}  // namespace ga::cuda
