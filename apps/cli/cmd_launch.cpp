// gpu-accel launch: start N local ranks of a command with torchrun's variables (dist/launch.h).
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "dist/launch.h"

namespace ga::cli {

int cmd_launch(int argc, char** argv) {
  // Everything after "--" is the command; the options before it are the launcher's.
  int split = argc;
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      split = i;
      break;
    }
  }
  int32_t n = 1, port = 29500, grace_s = 5;
  std::string addr = "127.0.0.1";
  ArgParser parser("launch", "-n N [--master-port P] [--grace S] -- COMMAND [ARGS...]",
                   "Runs COMMAND as N local processes (ranks) with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and "
                   "MASTER_PORT set as torchrun sets them. When a rank fails, the others are stopped (SIGTERM, then "
                   "SIGKILL after the grace period) and the launcher exits with that rank's code.");
  parser.option("-n,--nproc", &n, "N", "ranks to start");
  parser.option("--master-addr", &addr, "ADDR", "rank 0's address, for the ranks' rendezvous");
  parser.option("--master-port", &port, "PORT", "rank 0's TCP port, for the ranks' rendezvous");
  parser.option("--grace", &grace_s, "S", "seconds between SIGTERM and SIGKILL when a rank failed");
  if (!parser.parse(split, argv)) return 0;
  require(split + 1 < argc, "missing the command: gpu-accel launch -n N -- COMMAND [ARGS...]");
  require(n >= 1 && n <= 1024, "-n must be in 1..1024");
  require(port >= 1 && port <= 65535, "--master-port must be a TCP port");
  require(grace_s >= 0, "--grace must be >= 0");
  dist::LaunchOptions o;
  o.n_procs = n;
  o.master_addr = addr;
  o.master_port = port;
  o.grace = std::chrono::seconds(grace_s);
  const std::vector<std::string> command(argv + split + 1, argv + argc);
  const dist::LaunchResult r = dist::launch_local(command, o);
  if (r.exit_code != 0) std::fprintf(stderr, "error: launch: %s\n", r.what.c_str());
  return r.exit_code;
}

}  // namespace ga::cli
