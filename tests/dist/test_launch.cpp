// gpu-accel launch's process side: every rank runs with torchrun's variables, and a failing rank ends the
// job (the others terminated, not waited for) with that rank named.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "dist/launch.h"
#include "gpu_accel/error.h"

namespace {

TEST(Launch, EveryRankSeesItsVariables) {
  char dir[] = "/tmp/ga-launch-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ga::dist::LaunchOptions o;
  o.n_procs = 4;
  o.master_port = 23456;
  const std::string script = std::string("echo \"$RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT\" > ") +
                             dir + "/rank-$RANK";
  const ga::dist::LaunchResult r = ga::dist::launch_local({"/bin/sh", "-c", script}, o);
  EXPECT_EQ(r.exit_code, 0) << r.what;
  EXPECT_EQ(r.failed_rank, -1);
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(std::string(dir) + "/rank-" + std::to_string(rank));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, std::to_string(rank) + " " + std::to_string(rank) + " 4 127.0.0.1 23456");
    std::remove((std::string(dir) + "/rank-" + std::to_string(rank)).c_str());
  }
  ::rmdir(dir);
}

TEST(Launch, AFailingRankEndsTheJobAndIsNamed) {
  ga::dist::LaunchOptions o;
  o.n_procs = 3;
  o.grace = std::chrono::milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  // rank 1 fails at once; the others would run for a minute
  const ga::dist::LaunchResult r =
      ga::dist::launch_local({"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 60"}, o);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.what, "rank 1 exited with code 7");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Launch, ReportsACommandThatCannotRun) {
  ga::dist::LaunchOptions o;
  o.n_procs = 2;
  const ga::dist::LaunchResult r = ga::dist::launch_local({"/nonexistent/gpu-accel-no-such-binary"}, o);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_GE(r.failed_rank, 0);
  EXPECT_THROW(ga::dist::launch_local({}, o), ga::Error);
}

}  // namespace
