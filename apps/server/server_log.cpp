// See server_log.h.
#include "server/server_log.h"

#include <filesystem>
#include <system_error>

namespace ga::server {

namespace fs = std::filesystem;

namespace {

constexpr const char* kErrorPrefix = "error: ";

std::string numbered(const std::string& path, int n) {
  return path + "." + std::to_string(n);
}

}  // namespace

ServerLog::ServerLog(ServerLogOptions options) : options_(std::move(options)) {
  if (options_.keep < 0) options_.keep = 0;
  if (!options_.path.empty()) open_file();
}

ServerLog::~ServerLog() {
  if (file_) std::fclose(file_);
}

void ServerLog::open_file() {
  file_ = std::fopen(options_.path.c_str(), "a");
  if (!file_) {
    file_error_ = "cannot open the log file " + options_.path;
    std::fprintf(stderr, "warning: %s: the log goes to stderr only\n", file_error_.c_str());
    return;
  }
  std::error_code ec;
  const auto size = fs::file_size(options_.path, ec);
  file_bytes_ = ec ? 0 : static_cast<uint64_t>(size);
}

void ServerLog::request_line(const std::string& line, bool echo) {
  if (echo) std::fprintf(stderr, "%s\n", line.c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  add(line);
}

void ServerLog::printed_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  add(line);
}

void ServerLog::add(const std::string& line) {
  ++lines_;
  if (line.rfind(kErrorPrefix, 0) == 0) ++error_lines_;
  if (options_.ring_lines > 0) {
    if (ring_.size() >= options_.ring_lines) ring_.pop_front();
    ring_.push_back(line);
  }
  if (!file_) return;
  const uint64_t bytes = line.size() + 1;
  if (file_bytes_ > 0 && file_bytes_ + bytes > options_.max_bytes) rotate_locked();
  if (!file_) return;
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);  // a crash must not lose the lines that explain it
  file_bytes_ += bytes;
}

std::vector<std::string> ServerLog::recent(size_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t first = ring_.size() > n ? ring_.size() - n : 0;
  return {ring_.begin() + static_cast<std::ptrdiff_t>(first), ring_.end()};
}

uint64_t ServerLog::lines_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

uint64_t ServerLog::error_lines_total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_lines_;
}

uint64_t ServerLog::file_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return file_bytes_;
}

LogRotation ServerLog::rotate() {
  std::lock_guard<std::mutex> lock(mutex_);
  return rotate_locked();
}

LogRotation ServerLog::rotate_if_older(std::chrono::seconds age) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto started =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - file_started_);
  if (file_ && started < age) {
    LogRotation r;
    r.path = options_.path;
    r.skipped = "started " + std::to_string(started.count()) + " s ago, rotated every " + std::to_string(age.count()) +
                " s (or at " + std::to_string(options_.max_bytes) + " bytes)";
    return r;
  }
  return rotate_locked();
}

LogRotation ServerLog::rotate_locked() {
  LogRotation r;
  r.path = options_.path;
  if (options_.path.empty()) {
    r.error = "no log file (serve --log-file PATH)";
    return r;
  }
  if (!file_) {
    r.error = file_error_.empty() ? "the log file is not open" : file_error_;
    return r;
  }
  if (file_bytes_ == 0) return r;  // nothing to rotate
  std::fclose(file_);
  file_ = nullptr;
  std::error_code ec;
  if (options_.keep == 0) {
    fs::remove(options_.path, ec);
  } else {
    fs::remove(numbered(options_.path, options_.keep), ec);
    for (int n = options_.keep - 1; n >= 1; --n) {
      if (fs::exists(numbered(options_.path, n), ec))
        fs::rename(numbered(options_.path, n), numbered(options_.path, n + 1), ec);
    }
    fs::rename(options_.path, numbered(options_.path, 1), ec);
  }
  if (ec) r.error = "rotating " + options_.path + ": " + ec.message();
  r.rotated = !ec;
  r.bytes = file_bytes_;
  file_bytes_ = 0;
  file_started_ = std::chrono::steady_clock::now();
  open_file();
  for (int n = 1; n <= options_.keep; ++n) {
    std::error_code exists_ec;
    if (fs::exists(numbered(options_.path, n), exists_ec)) r.kept.push_back(numbered(options_.path, n));
  }
  return r;
}

}  // namespace ga::server
