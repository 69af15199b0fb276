// How the ranks of a multi-process job find each other: the launch conventions of torchrun (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK; mpirun's OMPI_COMM_WORLD_* as a fallback), and a small TCP
// rendezvous through which rank 0 hands every rank the same bytes (NCCL's ncclUniqueId, 128 bytes).
//
// Rank 0 listens on MASTER_PORT; every other rank connects (retrying while rank 0 is not up yet), says who it
// is, and receives the bytes once all world_size - 1 peers have checked in, so the call is also a barrier. A
// peer that never comes, a duplicate or out-of-range rank, a different world size or a silent rank 0 gives a
// ga::Error (Unavailable / InvalidArgument) that names the rank, within the timeout; nobody hangs.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ga::dist {

struct LaunchEnv {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // torchrun's default
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
};

// The launch variables of this process; nullopt when none is set (a single-process run). A set but
// malformed or inconsistent variable is an InvalidArgument naming it.
std::optional<LaunchEnv> launch_env_from_environment();

// Every rank calls it; rank 0 passes the bytes (the others' `bytes` is ignored) and every rank returns them.
std::vector<uint8_t> rendezvous_broadcast(const LaunchEnv& env, std::span<const uint8_t> bytes,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace ga::dist
