// RAII owners of a CUDA stream and a CUDA event.
//
// Streams are created non-blocking so they never serialize against the legacy default stream
// (which a library such as cuBLAS or a careless cudaMemcpy may use). Kernels take the raw
// cudaStream_t (DESIGN.md: the stream is the last argument of every launcher); these classes only
// own the handles and check the calls.
#pragma once

#include <cuda_runtime_api.h>

namespace ga::cuda {

class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // Waits for all work queued on the stream; throws ga::Error with the failure of any kernel.
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void synchronize() const;
  // Milliseconds between two recorded (and completed) events of timing kind.
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace ga::cuda
