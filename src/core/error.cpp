#include "gpu_accel/error.h"

namespace ga {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::InvalidFormat: return "invalid format";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Io: return "I/O error";
    case ErrorKind::OutOfMemory: return "out of memory";
    case ErrorKind::OutOfRange: return "out of range";
    case ErrorKind::Unavailable: return "unavailable";
    case ErrorKind::Internal: return "internal error";
  }
  return "error";
}

namespace {
std::string located(const std::string& message, const char* file, int line) {
  if (file == nullptr) return message;
  return message + " [" + file + ":" + std::to_string(line) + "]";
}
}  // namespace

Error::Error(ErrorKind kind, std::string message, const char* file, int line)
    : std::runtime_error(located(message, file, line)), kind_(kind), message_(std::move(message)), file_(file), line_(line) {}

}  // namespace ga
