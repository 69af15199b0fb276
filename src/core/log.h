// Minimal leveled logging to stderr. The CLI keeps stdout for generated text only.
#pragma once

#include <functional>
#include <string>

#include "gpu_accel/error.h"

namespace ga {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Silent = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

// Receives a copy of every line log_message() writes (the server keeps its recent lines for the host
// assistant and its log file). One observer at a time; an empty function removes it. Called under the
// log's lock, in the logging thread: it must be quick and must not log.
using LogObserver = std::function<void(LogLevel level, const std::string& line)>;
void set_log_observer(LogObserver observer);

}  // namespace ga

#define GA_LOG(level, ...)                                                          \
  do {                                                                              \
    if (::ga::LogLevel::level >= ::ga::log_level())                                 \
      ::ga::log_message(::ga::LogLevel::level, ::ga::str(__VA_ARGS__));             \
  } while (0)
