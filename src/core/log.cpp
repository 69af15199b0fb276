#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <utility>

namespace ga {
namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};
std::mutex g_mutex;
LogObserver g_observer;  // under g_mutex
const char* prefix(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return "debug: ";
    case LogLevel::Info: return "";
    case LogLevel::Warn: return "warning: ";
    case LogLevel::Error: return "error: ";
    case LogLevel::Silent: return "";
  }
  return "";
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(); }

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s%s\n", prefix(level), message.c_str());
  if (g_observer) g_observer(level, prefix(level) + message);
}

void set_log_observer(LogObserver observer) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_observer = std::move(observer);
}

}  // namespace ga
