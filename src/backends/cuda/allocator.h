// A caching device allocator: cudaMalloc once, reuse forever.
//
// cudaMalloc/cudaFree synchronize the device and cost tens of microseconds, far more than a decode
// kernel, so freed blocks go to a free list keyed by a size bucket and the next request of that
// bucket reuses them (the PyTorch/CTranslate2 scheme, simplified: exact buckets, no splitting).
// Buckets are powers of two up to 1 MiB (activations, scratch) and multiples of 2 MiB above (weights,
// KV cache), so a bucket wastes at most half of a small block and under 2 MiB of a large one.
// Every block is at least 256-byte aligned (cudaMalloc's guarantee), which the 16-byte vector loads
// of the kernels rely on.
//
// When cudaMalloc fails, the cache is released and the request retried once; if that fails too the
// error is ga::Error(OutOfMemory) with the requested, free and total bytes. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ga::cuda {

class CachingAllocator {
 public:
  explicit CachingAllocator(int device = 0);
  ~CachingAllocator();  // frees cached and still-allocated blocks (buffers must not outlive it)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A device block of at least `bytes` bytes (bytes == 0 gives nullptr).
  void* allocate(size_t bytes);
  // Returns a block from allocate() to the cache (nullptr is ignored; a foreign pointer throws).
  void deallocate(void* ptr);
  // cudaFree()s every cached block, e.g. before a large allocation outside this allocator.
  void release_cached();

  int device() const { return device_; }
  size_t bytes_in_use() const;     // bucket bytes handed out and not yet returned
  size_t bytes_cached() const;     // bucket bytes on the free lists
  uint64_t cuda_malloc_calls() const;

  // The bucket size a request of `bytes` is served from.
  static size_t bucket_size(size_t bytes);

 private:
  void* cuda_malloc_or_throw(size_t bucket, size_t requested);
  void release_cached_locked();

  int device_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_lists_;  // bucket size -> cached blocks
  std::unordered_map<void*, size_t> in_use_;          // block -> bucket size
  size_t bytes_in_use_ = 0;
  size_t bytes_cached_ = 0;
  uint64_t cuda_malloc_calls_ = 0;
};

// Owner of one block of a CachingAllocator (move-only); returns it to the cache when destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(CachingAllocator& allocator, size_t bytes);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() noexcept;
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  CachingAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace ga::cuda
