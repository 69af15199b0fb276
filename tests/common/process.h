// Running the built gpu-accel binary from a test, as a user would, and scratch folders for its files.
//
// The end-to-end suites (tests/e2e) all need the same two things: a folder of their own that disappears
// with the test, and one run of `gpu-accel <args>` with stdin empty and stdout / stderr captured. The
// child gets files (not pipes) for its output, so a chatty child can never block on a full pipe while
// the test waits for it, and posix_spawn (not fork) keeps this safe in a multithreaded test binary.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ga::test {

// A folder of its own under the system temp dir (tag_<pid>_<n>), removed with everything in it at the end
// of the scope.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "ga_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct CliResult {
  int exit_code = -1;  // -1 when the binary could not be started or died from a signal
  std::string out;     // everything it wrote to stdout
  std::string err;     // everything it wrote to stderr
};

// Runs <build>/bin/gpu-accel with args and waits for it. A binary that is missing, cannot be started or
// dies from a signal is a test failure (EXPECT), reported with the result's exit code -1.
CliResult run_cli(const std::vector<std::string>& args);

// "exit N", then stdout and stderr, for failure messages.
std::string describe(const CliResult& r);

}  // namespace ga::test
