// Typed errors for host code.
//
// Library code never exits or aborts: it throws ga::Error, which carries a kind (so callers can
// react, e.g. the server answers 4xx for InvalidArgument), the message, and the source location
// of the check that failed. Kernels and launchers return status codes instead (see DESIGN.md).
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ga {

enum class ErrorKind {
  InvalidArgument,  // the caller passed something wrong (bad CLI flag, bad request, bad shape)
  InvalidFormat,    // a file's contents are corrupt or inconsistent
  Unsupported,      // valid input we do not handle (architecture, tensor type, ...)
  Io,               // open/read/mmap/write failed
  OutOfMemory,      // an allocation failed or a size limit was exceeded
  OutOfRange,       // an index or length beyond a limit (context length, vocab, ...)
  Unavailable,      // temporarily unable to take more work (queue full): retry later (HTTP 429/503)
  Internal,         // a broken invariant: a bug in gpu_accel
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, const char* file = nullptr, int line = 0);

  ErrorKind kind() const { return kind_; }
  // The message without the location prefix, for user-facing output.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  ErrorKind kind_;
  std::string message_;
  const char* file_;
  int line_;
};

// Concatenates anything streamable: ga::str("bad dim ", d, " at ", off).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace ga

#define GA_THROW(kind, ...) throw ::ga::Error(::ga::ErrorKind::kind, ::ga::str(__VA_ARGS__), __FILE__, __LINE__)

// GA_CHECK(n < limit, OutOfRange, "n = ", n, " exceeds ", limit);
#define GA_CHECK(cond, kind, ...)  \
  do {                             \
    if (!(cond)) {                 \
      GA_THROW(kind, __VA_ARGS__); \
    }                              \
  } while (0)
