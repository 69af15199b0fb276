// Stream and Event (see stream.h).
#include "backends/cuda/stream.h"

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"

namespace ga::cuda {

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  GA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_ != nullptr) {
    (void)cudaStreamDestroy(stream_);  // destructors do not throw; the handle is gone either way
    (void)cudaGetLastError();
  }
}

Stream::Stream(Stream&& other) noexcept : stream_(other.stream_), device_(other.device_) { other.stream_ = nullptr; }

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = other.stream_;
    device_ = other.device_;
    other.stream_ = nullptr;
  }
  return *this;
}

void Stream::synchronize() const { GA_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event(bool timing) {
  GA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) {
    (void)cudaEventDestroy(event_);
    (void)cudaGetLastError();
  }
}

void Event::record(cudaStream_t stream) { GA_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { GA_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.0f;
  GA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, stop.event_));
  return ms;
}

}  // namespace ga::cuda
