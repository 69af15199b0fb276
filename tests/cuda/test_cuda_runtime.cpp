// The CUDA backend's host side: device queries, the error macro, the caching allocator and the
// stream/event wrappers. Like every CUDA test, each one skips with "no CUDA device" without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/allocator.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/stream.h"
#include "cuda_harness.h"
#include "gpu_accel/device.h"
#include "gpu_accel/error.h"

namespace ga::test::cuda {
namespace {

using ::ga::cuda::CachingAllocator;
using ::ga::cuda::DeviceBuffer;

TEST(CudaRuntime, DeviceQueriesAgreeWithTheRuntime) {
  GA_REQUIRE_CUDA_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(::ga::cuda_device_count(), count);
  const std::vector<CudaDeviceInfo> devices = ::ga::cuda_devices();
  ASSERT_EQ(static_cast<int>(devices.size()), count);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(devices[0].name, std::string(prop.name));
  EXPECT_EQ(devices[0].sm_count, prop.multiProcessorCount);
  EXPECT_EQ(devices[0].total_memory, prop.totalGlobalMem);
  EXPECT_GT(devices[0].free_memory, 0u);
  const std::string summary = ::ga::cuda_device_summary();
  EXPECT_NE(summary.find(prop.name), std::string::npos) << summary;
  std::printf("%s\n", summary.c_str());
  EXPECT_THROW(::ga::cuda::device_info(count), ::ga::Error);
}

TEST(CudaRuntime, FailedCallsBecomeErrorsNamingTheCall) {
  GA_REQUIRE_CUDA_DEVICE();
  try {
    GA_CUDA_CHECK(cudaSetDevice(12345));
    FAIL() << "cudaSetDevice(12345) did not throw";
  } catch (const ::ga::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaSetDevice(12345)"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidDevice"), std::string::npos) << what;
    EXPECT_NE(what.find("test_cuda_runtime.cpp"), std::string::npos) << what;
    EXPECT_EQ(e.kind(), ::ga::ErrorKind::InvalidArgument);
  }
  // the error was consumed: the next call is clean
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaRuntime, AllocatorReusesFreedBlocksOfTheSameBucket) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  void* a = alloc.allocate(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(alloc.bytes_in_use(), CachingAllocator::bucket_size(1000));
  alloc.deallocate(a);
  EXPECT_EQ(alloc.bytes_in_use(), 0u);
  EXPECT_EQ(alloc.bytes_cached(), CachingAllocator::bucket_size(1000));
  void* b = alloc.allocate(900);  // same 1 KiB bucket: the cached block comes back, no cudaMalloc
  EXPECT_EQ(b, a);
  EXPECT_EQ(alloc.cuda_malloc_calls(), 1u);
  void* c = alloc.allocate(5u << 20);  // a different bucket
  EXPECT_NE(c, b);
  EXPECT_EQ(alloc.cuda_malloc_calls(), 2u);
  alloc.deallocate(b);
  alloc.deallocate(c);
  alloc.release_cached();
  EXPECT_EQ(alloc.bytes_cached(), 0u);
  EXPECT_THROW(alloc.deallocate(reinterpret_cast<void*>(0x1234)), ::ga::Error);
  {
    DeviceBuffer buf(alloc, 4096);
    EXPECT_EQ(buf.size(), 4096u);
    DeviceBuffer moved = std::move(buf);
    EXPECT_EQ(buf.data(), nullptr);
    EXPECT_NE(moved.data(), nullptr);
  }
  EXPECT_EQ(alloc.bytes_in_use(), 0u);
}

TEST(CudaRuntime, BucketsBoundTheWaste) {
  GA_REQUIRE_CUDA_DEVICE();  // a pure function, but part of the CUDA backend's contract
  EXPECT_EQ(CachingAllocator::bucket_size(1), 512u);
  EXPECT_EQ(CachingAllocator::bucket_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::bucket_size(1u << 20), 1u << 20);
  EXPECT_EQ(CachingAllocator::bucket_size((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(CachingAllocator::bucket_size((7u << 20) + 5), 8u << 20);
}

TEST(CudaRuntime, OutOfMemoryIsATypedErrorWithTheSizes) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  const size_t huge = size_t{1} << 50;  // 1 PiB
  try {
    alloc.allocate(huge);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const ::ga::Error& e) {
    EXPECT_EQ(e.kind(), ::ga::ErrorKind::OutOfMemory);
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(huge)), std::string::npos) << what;
    EXPECT_NE(what.find("free of"), std::string::npos) << what;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* ok = alloc.allocate(1024);  // the allocator still works afterwards
  EXPECT_NE(ok, nullptr);
  alloc.deallocate(ok);
}

TEST(CudaRuntime, StreamsAndEventsTimeWork) {
  GA_REQUIRE_CUDA_DEVICE();
  CachingAllocator alloc(0);
  ::ga::cuda::Stream stream(0);
  ::ga::cuda::Event start, stop;
  DeviceBuffer a(alloc, 64u << 20), b(alloc, 64u << 20);
  start.record(stream.get());
  GA_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), 64u << 20, cudaMemcpyDeviceToDevice, stream.get()));
  stop.record(stream.get());
  stream.synchronize();
  EXPECT_GT(::ga::cuda::Event::elapsed_ms(start, stop), 0.0f);
}

}  // namespace
}  // namespace ga::test::cuda
