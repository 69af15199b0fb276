// The NCCL transport on the one GPU a test machine has (NCCL refuses two ranks on one GPU, so the multi-rank
// algorithms are checked on the loopback; this is the same code path with one rank): a grouped exchange with
// itself moves the bytes, the all-reduce of one rank leaves them, the multi-process constructor (through the
// rendezvous) and the in-process one both work, and a closed transport refuses bad peers.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/nccl_transport.h"
#include "cuda/cuda_harness.h"
#include "gpu_accel/error.h"

namespace {

void exchange_with_itself(ga::cuda::NcclTransport& t) {
  const size_t n = (size_t{1} << 20) + 13;  // an odd size
  std::vector<uint8_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  uint8_t *src = nullptr, *dst = nullptr;
  ASSERT_EQ(cudaMalloc(&src, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dst, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0xAB, n), cudaSuccess);
  t.wait(t.send_recv(src, n, t.rank(), dst, n, t.rank()));
  std::vector<uint8_t> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), dst, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);

  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
  float* dx = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, x.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  t.all_reduce_sum(dx, x.size());  // one rank: the sum is the value
  t.barrier();
  std::vector<float> y(x.size());
  ASSERT_EQ(cudaMemcpy(y.data(), dx, y.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(y, x);
  EXPECT_THROW(t.send(src, 16, 1), ga::Error);  // no rank 1
  cudaFree(src);
  cudaFree(dst);
  cudaFree(dx);
}

TEST(CudaNccl, OneRankOfThisProcess) {
  GA_REQUIRE_CUDA_DEVICE();
  auto group = ga::cuda::NcclTransport::for_devices({0});
  ASSERT_EQ(group.size(), 1u);
  EXPECT_EQ(group[0]->world_size(), 1);
  exchange_with_itself(*group[0]);
}

TEST(CudaNccl, OneRankThroughTheLaunchRendezvous) {
  GA_REQUIRE_CUDA_DEVICE();
  ga::dist::LaunchEnv env;  // rank 0 of 1: the id needs no network
  auto t = ga::cuda::NcclTransport::from_launch(env, 0);
  EXPECT_EQ(t->rank(), 0);
  exchange_with_itself(*t);
}

}  // namespace
