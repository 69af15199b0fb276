// Parsers for /proc text. Hand-written scanning (no regex, no streams) because the dashboard polls
// these every second and the formats are fixed, whitespace-separated decimal fields.
#include "runtime/telemetry/proc_stats.h"

#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace ga::telemetry {
namespace {

constexpr uint64_t kBytesPerKb = 1024;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Splits on runs of blanks (spaces and tabs), stopping at the end of the first line.
std::vector<std::string_view> split_first_line(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < text.size() && text[i] != '\n') {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  return fields;
}

// The line that starts at *pos (without its '\n'); moves *pos past it. Call while *pos < text.size().
std::string_view next_line(std::string_view text, size_t* pos) {
  size_t eol = text.find('\n', *pos);
  if (eol == std::string_view::npos) eol = text.size();
  const std::string_view line = text.substr(*pos, eol - *pos);
  *pos = eol + 1;
  return line;
}

std::optional<uint64_t> to_u64(std::string_view s) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<ProcessCpuTicks> parse_process_stat(std::string_view text) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // After "pid (comm)" come fields 3.. (state, ppid, ...); utime and stime are fields 14 and 15,
  // i.e. indices 11 and 12 of what follows the ')'.
  std::vector<std::string_view> rest = split_first_line(text.substr(close + 1));
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3;
  if (rest.size() <= kStime) return std::nullopt;
  auto user = to_u64(rest[kUtime]);
  auto system = to_u64(rest[kStime]);
  if (!user || !system) return std::nullopt;
  return ProcessCpuTicks{*user, *system};
}

std::optional<MachineCpuTicks> parse_machine_stat(std::string_view text) {
  std::vector<std::string_view> f = split_first_line(text);
  if (f.size() < 5 || f[0] != "cpu") return std::nullopt;
  // user nice system idle [iowait irq softirq steal guest guest_nice]; guest time is already
  // counted in user, so it is not added again.
  uint64_t v[8] = {};
  for (size_t i = 0; i < 8 && i + 1 < f.size(); ++i) {
    auto parsed = to_u64(f[i + 1]);
    if (!parsed) return std::nullopt;
    v[i] = *parsed;
  }
  MachineCpuTicks ticks;
  ticks.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  ticks.idle = v[3] + v[4];
  return ticks;
}

std::optional<uint64_t> parse_kb_field(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view line = next_line(text, &pos);
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':') continue;
    std::vector<std::string_view> f = split_first_line(line.substr(key.size() + 1));
    if (f.empty()) return std::nullopt;
    auto value = to_u64(f[0]);
    if (!value) return std::nullopt;
    // Values are in kB (really KiB) when a unit is given; a bare number (e.g. HugePages_Total) is a count.
    return (f.size() > 1 && f[1] == "kB") ? *value * kBytesPerKb : *value;
  }
  return std::nullopt;
}

std::optional<MemInfo> parse_meminfo(std::string_view text) {
  auto total = parse_kb_field(text, "MemTotal");
  auto available = parse_kb_field(text, "MemAvailable");
  if (!total) return std::nullopt;
  // MemAvailable appeared in Linux 3.14; older kernels get MemFree (an underestimate).
  if (!available) available = parse_kb_field(text, "MemFree");
  return MemInfo{*total, available.value_or(0)};
}

std::optional<std::string> parse_cpu_model_name(std::string_view text) {
  constexpr std::string_view kKey = "model name";
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string_view line = next_line(text, &pos);
    if (line.substr(0, kKey.size()) != kKey) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && is_space(value.front())) value.remove_prefix(1);
    while (!value.empty() && is_space(value.back())) value.remove_suffix(1);
    if (!value.empty()) return std::string(value);
  }
  return std::nullopt;
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return os.str();
}

std::optional<ProcessCpuTicks> read_process_cpu_ticks() {
  auto text = read_text_file("/proc/self/stat");
  return text ? parse_process_stat(*text) : std::nullopt;
}

std::optional<MachineCpuTicks> read_machine_cpu_ticks() {
  auto text = read_text_file("/proc/stat");
  return text ? parse_machine_stat(*text) : std::nullopt;
}

std::optional<uint64_t> read_process_rss_bytes() {
  auto text = read_text_file("/proc/self/status");
  return text ? parse_kb_field(*text, "VmRSS") : std::nullopt;
}

std::optional<MemInfo> read_meminfo() {
  auto text = read_text_file("/proc/meminfo");
  return text ? parse_meminfo(*text) : std::nullopt;
}

std::optional<std::string> read_cpu_model_name() {
  auto text = read_text_file("/proc/cpuinfo");
  return text ? parse_cpu_model_name(*text) : std::nullopt;
}

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

int64_t clock_ticks_per_second() {
  long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? ticks : 100;  // 100 is Linux's USER_HZ on every mainstream architecture
}

}  // namespace ga::telemetry
