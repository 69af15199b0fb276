// Running the built gpu-accel binary from a test, as a user would, and scratch folders for its files.
//
// The end-to-end suites (tests/e2e) all need the same two things: a folder of their own that disappears
// with the test, and one run of `gpu-accel <args>` with stdin empty (or given through a pipe) and stdout /
// stderr captured. The child gets files (not pipes) for its output, so a chatty child can never block on a
// full pipe while the test waits for it, and posix_spawn (not fork) keeps this safe in a multithreaded test
// binary. PtyCli runs it on a pseudo-terminal instead, for what only a terminal does (prompts, Ctrl-C).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>
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
// The same with `stdin_text` written into a pipe that is the child's stdin (closed after it: end of input).
CliResult run_cli(const std::vector<std::string>& args, std::string_view stdin_text);

// `gpu-accel <args>` on a pseudo-terminal that is its controlling terminal (stdin, stdout and stderr), with
// the line discipline's defaults: canonical input with echo, "\x03" (Ctrl-C) sends SIGINT to it, "\x04"
// (Ctrl-D) at the start of a line is the end of input, and output "\n" shows as "\r\n".
class PtyCli {
 public:
  explicit PtyCli(const std::vector<std::string>& args);  // a failure to start is a test failure
  ~PtyCli();                                               // kills the child if it still runs
  PtyCli(const PtyCli&) = delete;
  PtyCli& operator=(const PtyCli&) = delete;

  void type(std::string_view keys);  // what a user types
  // Reads the terminal until `marker` appears in output() at or after `from`; returns its position, or npos
  // when the timeout passes or the child closes the terminal first.
  size_t wait_for(const std::string& marker, size_t from, double timeout_seconds);
  // Everything the terminal showed so far (the typed text's echo included), without the '\r's.
  const std::string& output() const { return output_; }
  // Waits for the child to end (reading the terminal meanwhile); its exit code, or -1 when it died from a signal
  // or was still running after the timeout (then it is killed).
  int wait_exit(double timeout_seconds);

 private:
  // Appends what the terminal shows within the timeout: the bytes read, 0 for none yet, -1 at its end.
  int read_some(double timeout_seconds);
  int master_ = -1;
  pid_t pid_ = -1;
  std::string output_;
};

// "exit N", then stdout and stderr, for failure messages.
std::string describe(const CliResult& r);

}  // namespace ga::test
