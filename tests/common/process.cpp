// See process.h: posix_spawn with stdin from /dev/null (or a pipe) and stdout / stderr redirected to files in
// a TempDir of the run's own, read back once the child has exited. PtyCli: posix_spawn into a new session whose
// first terminal opened, the pseudo-terminal's slave side, becomes its controlling terminal.
#include "common/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/test_data.h"

extern char** environ;

namespace ga::test {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& tag) {
  static int counter = 0;  // several folders of one process, and of one test, stay apart
  path_ = fs::temp_directory_path() / (tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;  // never throw from a destructor: a folder left behind is not worth a crash
  fs::remove_all(path_, ec);
}

namespace {

std::string gpu_accel_binary() {
  const std::string binary = binary_dir() + "/bin/gpu-accel";
  EXPECT_TRUE(fs::exists(binary)) << binary;
  return binary;
}

// argv for posix_spawn: the binary, then args; the strings live in `storage`.
std::vector<char*> make_argv(const std::string& binary, const std::vector<std::string>& args,
                             std::vector<std::string>& storage) {
  storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// stdin_text: nullptr for /dev/null, else written through a pipe.
CliResult run_cli_with_input(const std::vector<std::string>& args, const std::string_view* stdin_text) {
  const std::string binary = gpu_accel_binary();
  TempDir tmp("ga_cli_run");
  const std::string out_path = tmp.file("stdout"), err_path = tmp.file("stderr");

  int input[2] = {-1, -1};
  if (stdin_text != nullptr) {
    EXPECT_EQ(pipe2(input, O_CLOEXEC), 0) << "pipe2 failed";
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdin_text != nullptr) {
    posix_spawn_file_actions_adddup2(&actions, input[0], STDIN_FILENO);  // dup2 clears O_CLOEXEC
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> storage;
  std::vector<char*> argv = make_argv(binary, args, storage);

  CliResult r;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (stdin_text != nullptr) {
    close(input[0]);
    // The child reads while this writes, so the input may be longer than the pipe's buffer; a child that exits
    // early makes the write fail (EPIPE: the test binary ignores SIGPIPE here, see below), which is its business.
    size_t done = 0;
    while (rc == 0 && done < stdin_text->size()) {
      const ssize_t n = write(input[1], stdin_text->data() + done, stdin_text->size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(input[1]);
  }
  EXPECT_EQ(rc, 0) << "posix_spawn failed";
  if (rc != 0) return r;
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status)) << "gpu-accel died from a signal: " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

CliResult run_cli(const std::vector<std::string>& args) { return run_cli_with_input(args, nullptr); }

CliResult run_cli(const std::vector<std::string>& args, std::string_view stdin_text) {
  // A child that stops reading must not kill the test binary with SIGPIPE.
  static const bool sigpipe_ignored = std::signal(SIGPIPE, SIG_IGN) != SIG_ERR;
  EXPECT_TRUE(sigpipe_ignored);
  return run_cli_with_input(args, &stdin_text);
}

PtyCli::PtyCli(const std::vector<std::string>& args) {
  const std::string binary = gpu_accel_binary();
  master_ = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  EXPECT_GE(master_, 0) << "posix_openpt failed: " << std::strerror(errno);
  if (master_ < 0) return;
  EXPECT_EQ(grantpt(master_), 0);
  EXPECT_EQ(unlockpt(master_), 0);
  const char* slave = ptsname(master_);
  EXPECT_NE(slave, nullptr);
  if (slave == nullptr) return;

  // A new session has no controlling terminal; the first terminal it opens without O_NOCTTY becomes it, and
  // its process group the terminal's foreground group (the one Ctrl-C signals).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, slave, O_RDWR, 0);
  posix_spawn_file_actions_adddup2(&actions, STDIN_FILENO, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, STDIN_FILENO, STDERR_FILENO);
  std::vector<std::string> storage;
  std::vector<char*> argv = make_argv(binary, args, storage);
  const int rc = posix_spawn(&pid_, binary.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  EXPECT_EQ(rc, 0) << "posix_spawn failed: " << std::strerror(rc);
  if (rc != 0) pid_ = -1;
}

PtyCli::~PtyCli() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (master_ >= 0) close(master_);
}

void PtyCli::type(std::string_view keys) {
  while (!keys.empty()) {
    const ssize_t n = write(master_, keys.data(), keys.size());
    if (n < 0 && errno == EINTR) continue;
    EXPECT_GT(n, 0) << "writing to the terminal failed: " << std::strerror(errno);
    if (n <= 0) return;
    keys.remove_prefix(static_cast<size_t>(n));
  }
}

int PtyCli::read_some(double timeout_seconds) {
  if (master_ < 0) return -1;
  pollfd fd = {master_, POLLIN, 0};
  const int ready = poll(&fd, 1, static_cast<int>(timeout_seconds * 1000));
  if (ready == 0 || (ready < 0 && errno == EINTR)) return 0;
  if (ready < 0) return -1;
  char buffer[4096];
  const ssize_t n = read(master_, buffer, sizeof buffer);
  if (n < 0 && errno == EINTR) return 0;
  if (n <= 0) return -1;  // EIO once every holder of the slave side closed it: the end
  for (ssize_t i = 0; i < n; ++i) {
    if (buffer[i] != '\r') output_ += buffer[i];
  }
  return static_cast<int>(n);
}

size_t PtyCli::wait_for(const std::string& marker, size_t from, double timeout_seconds) {
  const auto start = Clock::now();
  while (true) {
    const size_t at = output_.find(marker, std::min(from, output_.size()));
    if (at != std::string::npos) return at;
    const double left = timeout_seconds - seconds_since(start);
    if (left <= 0 || read_some(std::min(left, 0.2)) < 0) return std::string::npos;
  }
}

int PtyCli::wait_exit(double timeout_seconds) {
  if (pid_ <= 0) return -1;
  const auto start = Clock::now();
  while (seconds_since(start) < timeout_seconds) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      while (read_some(0.05) > 0) {  // what it wrote last
      }
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    if (read_some(0.05) < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;  // the destructor kills it
}

std::string describe(const CliResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout:\n" + r.out + "\n--- stderr:\n" + r.err;
}

}  // namespace ga::test
