// Minimal leveled logging to stderr. The CLI keeps stdout for generated text only.
#pragma once

#include "gpu_accel/error.h"

namespace ga {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3, Silent = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& message);

}  // namespace ga

#define GA_LOG(level, ...)                                                          \
  do {                                                                              \
    if (::ga::LogLevel::level >= ::ga::log_level())                                 \
      ::ga::log_message(::ga::LogLevel::level, ::ga::str(__VA_ARGS__));             \
  } while (0)
