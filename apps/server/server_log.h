// The server's own log: the request lines and the library's log lines, kept three ways.
//
// stderr, as before (the request lines the server always printed; the library's lines are printed by
// core/log itself); a ring of the most recent lines, which the host assistant puts in its prompt and
// its briefs; and, with `serve --log-file PATH`, that file, appended to and rotated like logrotate's
// numbered scheme: PATH -> PATH.1 -> PATH.2 ... up to `keep` old files, the oldest deleted. Rotation
// happens when the file reaches max_bytes and whenever housekeeping asks (rotate()). Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace ga::server {

struct ServerLogOptions {
  std::string path;                         // "": no file
  uint64_t max_bytes = uint64_t{64} << 20;  // the file is rotated when a line would take it past this
  int keep = 3;                             // rotated files kept (PATH.1 .. PATH.keep)
  size_t ring_lines = 200;                  // recent lines kept in memory
};

struct LogRotation {
  bool rotated = false;
  std::string path;               // the file rotated
  uint64_t bytes = 0;             // its size when rotated
  std::vector<std::string> kept;  // the rotated files that exist afterwards, newest first
  std::string error;              // non-empty: why it could not (the log keeps writing where it can)
  std::string skipped;            // non-empty: why it was not due (rotate_if_older)
};

class ServerLog {
 public:
  explicit ServerLog(ServerLogOptions options = {});
  ~ServerLog();
  ServerLog(const ServerLog&) = delete;
  ServerLog& operator=(const ServerLog&) = delete;

  // A request line: to stderr (when echo) and to the ring and the file.
  void request_line(const std::string& line, bool echo);
  // A line that was printed already (the library's log): to the ring and the file only.
  void printed_line(const std::string& line);

  std::vector<std::string> recent(size_t n) const;  // the last n lines, oldest first
  uint64_t lines_total() const;
  uint64_t error_lines_total() const;  // lines that start with "error: " (the library's errors)
  const std::string& path() const { return options_.path; }
  uint64_t file_bytes() const;

  // Rotates the file now (when there is one and it is not empty).
  LogRotation rotate();
  // Rotates it only when it was started at least `age` ago (the schedule's daily rotation); else says why not.
  LogRotation rotate_if_older(std::chrono::seconds age);

 private:
  void add(const std::string& line);  // under mutex_
  LogRotation rotate_locked();
  void open_file();

  ServerLogOptions options_;
  mutable std::mutex mutex_;
  std::deque<std::string> ring_;
  uint64_t lines_ = 0;
  uint64_t error_lines_ = 0;
  std::FILE* file_ = nullptr;
  uint64_t file_bytes_ = 0;
  std::chrono::steady_clock::time_point file_started_ = std::chrono::steady_clock::now();
  std::string file_error_;  // the last failure to open the file, reported once
};

}  // namespace ga::server
