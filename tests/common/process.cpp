// See process.h: posix_spawn with stdin from /dev/null and stdout / stderr redirected to files in a
// TempDir of the run's own, read back once the child has exited.
#include "common/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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

CliResult run_cli(const std::vector<std::string>& args) {
  const std::string binary = binary_dir() + "/bin/gpu-accel";
  EXPECT_TRUE(fs::exists(binary)) << binary;
  TempDir tmp("ga_cli_run");
  const std::string out_path = tmp.file("stdout"), err_path = tmp.file("stderr");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_storage = {binary};  // argv[0], then the arguments
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  CliResult r;
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
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

std::string describe(const CliResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\n--- stdout:\n" + r.out + "\n--- stderr:\n" + r.err;
}

}  // namespace ga::test
