// `gpu-accel launch -n N -- CMD ...`: N local processes of CMD with torchrun's variables (RANK, LOCAL_RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so a multi-process job starts the same way under our launcher,
// torchrun or mpirun. When a rank fails (a non-zero exit or a signal), the others are terminated (SIGTERM,
// then SIGKILL after a grace period) and the failing rank is reported, so a dead rank never leaves the rest
// hanging.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ga::dist {

struct LaunchOptions {
  int n_procs = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds grace = std::chrono::seconds(5);
};

struct LaunchResult {
  int exit_code = 0;     // 0: every rank exited 0; else the first failing rank's code (128 + signal if killed)
  int failed_rank = -1;  // -1: none failed
  std::string what;      // "rank 1 exited with code 7" / "rank 2 was killed by signal 9"
};

LaunchResult launch_local(const std::vector<std::string>& command, const LaunchOptions& options);

}  // namespace ga::dist
