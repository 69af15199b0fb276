// The loopback transport: ordered point-to-point messages, the ring all-reduce (identical bytes on every
// rank), and failure: a rank that dies mid-collective makes every other rank fail with that rank named, at
// once; a rank that stops answering makes its peers fail within the timeout instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dist/loopback.h"
#include "gpu_accel/error.h"

namespace {

using ga::dist::LoopbackGroup;
using ga::dist::Transport;

TEST(Loopback, ReceivesMatchMessagesInPostingOrder) {
  LoopbackGroup group(2);
  group.run([](Transport& t) {
    if (t.rank() == 0) {
      const int a = 1;
      const int64_t b = 2;
      t.wait(t.send(&a, sizeof a, 1));
      t.wait(t.send(&b, sizeof b, 1));
    } else {
      int a = 0;
      int64_t b = 0;
      const ga::dist::Ticket ta = t.recv(&a, sizeof a, 0), tb = t.recv(&b, sizeof b, 0);
      t.wait(tb);  // waited on out of order: still the second message
      t.wait(ta);
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
    }
  });
}

TEST(Loopback, MessagesArriveInOrder) {
  LoopbackGroup group(2);
  group.run([](Transport& t) {
    if (t.rank() == 0) {
      for (int i = 0; i < 5; ++i) t.wait(t.send(&i, sizeof i, 1));
    } else {
      for (int i = 0; i < 5; ++i) {
        int got = -1;
        t.wait(t.recv(&got, sizeof got, 0));
        EXPECT_EQ(got, i);
      }
    }
  });
}

TEST(Loopback, AllReduceSumsAndEveryRankGetsTheSameBytes) {
  for (const int world : {1, 2, 3, 4, 8}) {
    for (const size_t n : {size_t{1}, size_t{5}, size_t{97}}) {
      LoopbackGroup group(world);
      std::vector<std::vector<float>> results(static_cast<size_t>(world));
      group.run([&](Transport& t) {
        std::vector<float> x(n);
        for (size_t i = 0; i < n; ++i) x[i] = 0.1f * static_cast<float>(t.rank() + 1) + static_cast<float>(i);
        t.all_reduce_sum(x.data(), n);
        results[static_cast<size_t>(t.rank())] = x;
      });
      for (size_t i = 0; i < n; ++i) {
        const double want = 0.1 * world * (world + 1) / 2 + static_cast<double>(i) * world;
        EXPECT_NEAR(results[0][i], want, 1e-4 * (1 + want)) << "world " << world << " element " << i;
        for (int r = 1; r < world; ++r) ASSERT_EQ(results[r][i], results[0][i]) << "rank " << r;
      }
    }
  }
}

TEST(Loopback, AllGatherPlacesEveryRanksBlockInRankOrder) {
  for (const int world : {1, 2, 3, 4, 8}) {
    for (const size_t n : {size_t{1}, size_t{5}, size_t{97}}) {
      LoopbackGroup group(world);
      std::vector<std::vector<float>> results(static_cast<size_t>(world));
      group.run([&](Transport& t) {
        std::vector<float> mine(n), all(n * static_cast<size_t>(world), -1.0f);
        for (size_t i = 0; i < n; ++i) mine[i] = 1000.0f * static_cast<float>(t.rank()) + static_cast<float>(i);
        t.all_gather(mine.data(), n, all.data());
        results[static_cast<size_t>(t.rank())] = all;
      });
      for (int r = 0; r < world; ++r) {
        for (int q = 0; q < world; ++q) {
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(results[r][q * n + i], 1000.0f * static_cast<float>(q) + static_cast<float>(i))
                << "world " << world << ", rank " << r << ", block " << q;
          }
        }
      }
    }
  }
}

TEST(Loopback, ARankThatDiesMidCollectiveIsNamedByTheOthers) {
  LoopbackGroup group(4, std::chrono::seconds(20));
  std::vector<std::string> errors(4);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    group.run([&](Transport& t) {
      std::vector<float> x(64, 1.0f);
      try {
        if (t.rank() == 2) throw std::runtime_error("simulated crash of rank 2");
        t.all_reduce_sum(x.data(), x.size());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t.rank())] = e.what();
        throw;
      }
    });
    FAIL() << "the group did not fail";
  } catch (const std::exception&) {
  }
  // the death is seen at once, not after the 20 s timeout
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  for (const int r : {0, 1, 3}) {
    EXPECT_NE(errors[r].find("rank 2"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

TEST(Loopback, ARankThatStopsAnsweringTimesOutWithItsName) {
  LoopbackGroup group(3, std::chrono::milliseconds(300));
  std::vector<std::string> errors(3);
  try {
    group.run([&](Transport& t) {
      if (t.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // stuck, then leaves without a word
        return;
      }
      std::vector<float> x(8, 1.0f);
      try {
        t.all_reduce_sum(x.data(), x.size());
      } catch (const ga::Error& e) {
        errors[static_cast<size_t>(t.rank())] = e.what();
        EXPECT_EQ(e.kind(), ga::ErrorKind::Unavailable);
        throw;
      }
    });
    FAIL() << "the group did not fail";
  } catch (const ga::Error&) {
  }
  // rank 2 waits on rank 1 directly; rank 0 waits on rank 2, which fails (naming rank 1) as rank 0's own
  // timeout runs out: either way rank 0 fails too, with the rank it waited on named
  EXPECT_NE(errors[2].find("no message from rank 1"), std::string::npos) << errors[2];
  EXPECT_NE(errors[0].find("rank 2"), std::string::npos) << errors[0];
}

TEST(Loopback, RejectsBadPeersAndSizes) {
  LoopbackGroup group(2);
  int x = 0;
  EXPECT_THROW(group.transport(0).send(&x, sizeof x, 0), ga::Error);  // itself
  EXPECT_THROW(group.transport(0).send(&x, sizeof x, 2), ga::Error);  // beyond the group
  EXPECT_THROW(LoopbackGroup(0), ga::Error);
  group.run([](Transport& t) {
    if (t.rank() == 0) {
      const int64_t big = 7;
      t.wait(t.send(&big, sizeof big, 1));
    } else {
      int small = 0;
      EXPECT_THROW(t.wait(t.recv(&small, sizeof small, 0)), ga::Error);
    }
  });
}

}  // namespace
