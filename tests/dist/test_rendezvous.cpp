// The TCP rendezvous: N local processes (forked) agree on the bytes rank 0 hands out; a missing rank makes
// rank 0 fail naming it, and a rank whose rank 0 never comes fails within the timeout; the launch variables
// are read as torchrun sets them, with clear errors for malformed ones.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/rendezvous.h"
#include "gpu_accel/error.h"

namespace {

using ga::dist::LaunchEnv;

int free_port() {  // a port the kernel just handed out (closed again: a small race, fine for a test)
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<uint8_t> the_id() {
  std::vector<uint8_t> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 37 + 11);
  return id;
}

// Forks one process per rank in `ranks`; each runs the rendezvous and exits 0 when it got the_id(), 3 when
// it got other bytes, 4 when the rendezvous threw (its message on stderr). Returns the exit codes.
std::vector<int> run_ranks(int world, const std::vector<int>& ranks, int port, std::chrono::milliseconds timeout) {
  std::vector<pid_t> pids;
  for (const int r : ranks) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        LaunchEnv env;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        env.rank = r;
        env.world_size = world;
        const std::vector<uint8_t> id = the_id();
        const std::vector<uint8_t> got = ga::dist::rendezvous_broadcast(env, r == 0 ? id : std::vector<uint8_t>{}, timeout);
        code = got == id ? 0 : 3;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 4;
      }
      std::_Exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

TEST(Rendezvous, LocalProcessesAgreeOnRankZerosId) {
  for (const int world : {2, 4, 8}) {
    std::vector<int> ranks;
    for (int r = world - 1; r >= 0; --r) ranks.push_back(r);  // rank 0 last: the others wait for it
    const std::vector<int> codes = run_ranks(world, ranks, free_port(), std::chrono::seconds(20));
    for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(codes[i], 0) << "world " << world << ", rank " << ranks[i];
  }
}

TEST(Rendezvous, AMissingRankFailsEveryoneWithinTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> codes = run_ranks(3, {0, 1}, free_port(), std::chrono::milliseconds(800));  // no rank 2
  EXPECT_EQ(codes[0], 4);  // rank 0: "rank(s) 2 of 3 did not join in time"
  EXPECT_EQ(codes[1], 4);  // rank 1: rank 0 never handed out the id
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(Rendezvous, RankZeroNamesTheMissingRank) {
  LaunchEnv env;
  env.master_port = free_port();
  env.world_size = 3;
  const std::vector<uint8_t> id = the_id();
  try {
    ga::dist::rendezvous_broadcast(env, id, std::chrono::milliseconds(300));
    FAIL() << "no error";
  } catch (const ga::Error& e) {
    EXPECT_EQ(e.kind(), ga::ErrorKind::Unavailable);
    EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2 of 3"), std::string::npos) << e.what();
  }
}

TEST(Rendezvous, ReadsTorchrunsVariables) {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK"}) {
    ::unsetenv(v);
  }
  EXPECT_FALSE(ga::dist::launch_env_from_environment().has_value());
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "10.0.0.7", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  const auto env = ga::dist::launch_env_from_environment();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "10.0.0.7");
  EXPECT_EQ(env->master_port, 1234);
  ::setenv("RANK", "4", 1);  // not below WORLD_SIZE
  EXPECT_THROW(ga::dist::launch_env_from_environment(), ga::Error);
  ::setenv("RANK", "x1", 1);
  EXPECT_THROW(ga::dist::launch_env_from_environment(), ga::Error);
  ::setenv("RANK", "1", 1);
  ::setenv("MASTER_PORT", "70000", 1);
  EXPECT_THROW(ga::dist::launch_env_from_environment(), ga::Error);
  ::unsetenv("WORLD_SIZE");
  EXPECT_THROW(ga::dist::launch_env_from_environment(), ga::Error);  // RANK without WORLD_SIZE
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
}

}  // namespace
