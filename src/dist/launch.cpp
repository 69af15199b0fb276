#include "dist/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "gpu_accel/error.h"

namespace ga::dist {
namespace {

volatile sig_atomic_t g_stop_signal = 0;  // SIGINT / SIGTERM sent to the launcher
void on_stop_signal(int sig) { g_stop_signal = sig; }

// Each rank leads its own process group, so that terminating it reaches what it started (a shell's children)
// too; the launcher forwards Ctrl-C and SIGTERM to every group.
void signal_ranks(const std::vector<pid_t>& pids, int sig) {
  for (const pid_t p : pids)
    if (p > 0) ::kill(-p, sig);
}

[[noreturn]] void exec_rank(const std::vector<std::string>& command, const LaunchOptions& o, int rank) {
  ::setpgid(0, 0);
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(o.n_procs).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.n_procs).c_str(), 1);
  ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
  ::setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "error: launch: rank %d: cannot run %s: %s\n", rank, argv[0], std::strerror(errno));
  std::_Exit(127);
}

}  // namespace

LaunchResult launch_local(const std::vector<std::string>& command, const LaunchOptions& o) {
  GA_CHECK(!command.empty(), InvalidArgument, "launch: no command to run (gpu-accel launch -n N -- CMD ...)");
  GA_CHECK(o.n_procs >= 1 && o.n_procs <= 1024, InvalidArgument, "launch: -n ", o.n_procs, " (1..1024)");
  std::vector<pid_t> pids(static_cast<size_t>(o.n_procs), -1);
  std::fflush(nullptr);  // the children must not repeat buffered output
  for (int r = 0; r < o.n_procs; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) exec_rank(command, o, r);
    if (pid < 0) {
      for (const pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      for (const pid_t p : pids)
        if (p > 0) ::waitpid(p, nullptr, 0);
      GA_THROW(Io, "launch: fork for rank ", r, ": ", std::strerror(errno));
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  const std::vector<pid_t> pids_started = pids;
  for (const pid_t p : pids) ::setpgid(p, p);  // also here: the race with the child's own call
  struct sigaction sa{}, old_int{}, old_term{};
  sa.sa_handler = on_stop_signal;  // no SA_RESTART: waitpid returns EINTR
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  g_stop_signal = 0;
  LaunchResult result;
  int running = o.n_procs;
  std::chrono::steady_clock::time_point kill_at{};
  bool terminating = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, terminating ? WNOHANG : 0);
    if (pid == 0) {  // terminating: the others have not exited yet
      if (std::chrono::steady_clock::now() >= kill_at) signal_ranks(pids, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (pid < 0) {
      if (errno != EINTR) break;  // no children left
      if (g_stop_signal != 0 && !terminating) {
        terminating = true;
        kill_at = std::chrono::steady_clock::now() + o.grace;
        signal_ranks(pids, g_stop_signal);
        result.exit_code = 128 + g_stop_signal;
        result.what = str("the launcher got signal ", g_stop_signal, " and passed it to every rank");
      }
      continue;
    }
    int rank = -1;
    for (int r = 0; r < o.n_procs; ++r) {
      if (pids[static_cast<size_t>(r)] == pid) rank = r;
    }
    if (rank < 0) continue;  // not one of ours
    pids[static_cast<size_t>(rank)] = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && result.failed_rank < 0 && !terminating) {
      result.failed_rank = rank;
      if (WIFSIGNALED(status)) {
        result.exit_code = 128 + WTERMSIG(status);
        result.what = str("rank ", rank, " was killed by signal ", WTERMSIG(status));
      } else {
        result.exit_code = WEXITSTATUS(status);
        result.what = str("rank ", rank, " exited with code ", WEXITSTATUS(status));
      }
      terminating = true;
      kill_at = std::chrono::steady_clock::now() + o.grace;
      signal_ranks(pids, SIGTERM);
    }
  }
  // the groups' other processes (a rank's children) go too
  for (int r = 0; r < o.n_procs; ++r) ::kill(-pids_started[static_cast<size_t>(r)], SIGKILL);
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace ga::dist
