// CachingAllocator (see allocator.h for the bucket policy and the out-of-memory contract).
#include "backends/cuda/allocator.h"

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "gpu_accel/error.h"

namespace ga::cuda {
namespace {

constexpr size_t kMinBucket = 512;                 // smaller requests share one bucket
constexpr size_t kPowerOfTwoLimit = size_t{1} << 20;  // up to 1 MiB: next power of two
constexpr size_t kLargeGranule = size_t{2} << 20;     // above: multiples of 2 MiB

}  // namespace

size_t CachingAllocator::bucket_size(size_t bytes) {
  if (bytes <= kMinBucket) return kMinBucket;
  if (bytes <= kPowerOfTwoLimit) {
    size_t b = kMinBucket;
    while (b < bytes) b <<= 1;
    return b;
  }
  GA_CHECK(bytes <= SIZE_MAX - kLargeGranule, OutOfMemory, "device allocation of ", bytes, " bytes is too large");
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

CachingAllocator::CachingAllocator(int device) : device_(device) {
  GA_CHECK(device >= 0 && device < device_count(), InvalidArgument, "CachingAllocator: CUDA device ", device,
           " does not exist");
}

CachingAllocator::~CachingAllocator() {
  // No throwing from a destructor: failures here (a dead context at exit) are ignored.
  int previous = -1;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(device_);
  for (auto& [bucket, blocks] : free_lists_) {
    for (void* p : blocks) (void)cudaFree(p);
  }
  for (auto& [p, bucket] : in_use_) (void)cudaFree(p);
  if (restore) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

void* CachingAllocator::cuda_malloc_or_throw(size_t bucket, size_t requested) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, bucket);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    release_cached_locked();
    status = cudaMalloc(&ptr, bucket);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    (void)cudaGetLastError();
    GA_THROW(OutOfMemory, "CUDA device ", device_, ": cannot allocate ", requested, " bytes (bucket ", bucket,
             "): ", free_bytes, " bytes free of ", total_bytes, ", ", bytes_in_use_, " in use by this allocator");
  }
  GA_CUDA_CHECK(status);
  ++cuda_malloc_calls_;
  return ptr;
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t bucket = bucket_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto it = free_lists_.find(bucket);
  if (it != free_lists_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    bytes_cached_ -= bucket;
  } else {
    ptr = cuda_malloc_or_throw(bucket, bytes);
  }
  in_use_.emplace(ptr, bucket);
  bytes_in_use_ += bucket;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  GA_CHECK(it != in_use_.end(), Internal, "CachingAllocator: ", ptr, " was not allocated here (or freed twice)");
  const size_t bucket = it->second;
  in_use_.erase(it);
  bytes_in_use_ -= bucket;
  free_lists_[bucket].push_back(ptr);
  bytes_cached_ += bucket;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  DeviceGuard guard(device_);
  for (auto& [bucket, blocks] : free_lists_) {
    for (void* p : blocks) GA_CUDA_CHECK(cudaFree(p));
    bytes_cached_ -= bucket * blocks.size();
    blocks.clear();
  }
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_in_use_;
}

size_t CachingAllocator::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_cached_;
}

uint64_t CachingAllocator::cuda_malloc_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cuda_malloc_calls_;
}

DeviceBuffer::DeviceBuffer(CachingAllocator& allocator, size_t bytes)
    : allocator_(&allocator), ptr_(allocator.allocate(bytes)), bytes_(bytes) {}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(other.allocator_), ptr_(other.ptr_), bytes_(other.bytes_) {
  other.allocator_ = nullptr;
  other.ptr_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = other.allocator_;
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.allocator_ = nullptr;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (allocator_ != nullptr && ptr_ != nullptr) {
    try {
      allocator_->deallocate(ptr_);
    } catch (...) {
      // deallocate throws only for a pointer it does not own, which a DeviceBuffer never holds
    }
  }
  allocator_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace ga::cuda
