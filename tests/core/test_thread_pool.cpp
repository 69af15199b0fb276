#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

namespace ga {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 19, 37, 733}) {
      for (int64_t grain : {1, 4, 32}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
          EXPECT_TRUE(b % grain == 0);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
      }
    }
  }
}

TEST(ThreadPool, RethrowsWorkerExceptions) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t b, int64_t, int) {
    if (b > 0) throw std::runtime_error("boom");
  }), std::runtime_error);
  // still usable afterwards
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

}  // namespace
}  // namespace ga
