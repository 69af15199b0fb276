// CPU figures from Linux's /proc: parsers on text, and readers of the live files.
//
// The parsers take the file contents as a string so tests can feed them synthetic input (odd
// process names with spaces and parentheses, missing fields) as well as the real files. Readers
// return std::nullopt where /proc is absent or unreadable (a non-Linux system or a locked-down
// container): the dashboard then shows "n/a" rather than failing a request.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ga::telemetry {

// Cumulative CPU time of one process, in clock ticks (sysconf(_SC_CLK_TCK) per second).
struct ProcessCpuTicks {
  uint64_t user = 0;    // utime, field 14 of /proc/<pid>/stat
  uint64_t system = 0;  // stime, field 15
  uint64_t total() const { return user + system; }
};

// The machine's aggregate "cpu" line of /proc/stat, in clock ticks since boot.
struct MachineCpuTicks {
  uint64_t busy = 0;  // user + nice + system + irq + softirq + steal
  uint64_t idle = 0;  // idle + iowait
  uint64_t total() const { return busy + idle; }
};

struct MemInfo {
  uint64_t total_bytes = 0;      // MemTotal
  uint64_t available_bytes = 0;  // MemAvailable
};

// /proc/<pid>/stat: "pid (comm) state ppid ...". comm may itself hold spaces and ')', so fields are
// counted after the LAST ')'. nullopt when the text is not in that shape.
std::optional<ProcessCpuTicks> parse_process_stat(std::string_view text);

// The first line of /proc/stat ("cpu  user nice system idle iowait irq softirq steal ...").
// Fields missing on old kernels (steal, ...) count as zero; fewer than four fields is an error.
std::optional<MachineCpuTicks> parse_machine_stat(std::string_view text);

// A "Key:   123 kB" field of /proc/<pid>/status or /proc/meminfo, in bytes. nullopt if absent.
std::optional<uint64_t> parse_kb_field(std::string_view text, std::string_view key);

std::optional<MemInfo> parse_meminfo(std::string_view text);

// The first "model name" of /proc/cpuinfo (x86; ARM kernels may not have one). nullopt if absent.
std::optional<std::string> parse_cpu_model_name(std::string_view text);

// Readers of the live files (nullopt when unreadable).
std::optional<std::string> read_text_file(const std::string& path);
std::optional<ProcessCpuTicks> read_process_cpu_ticks();  // this process
std::optional<MachineCpuTicks> read_machine_cpu_ticks();
std::optional<uint64_t> read_process_rss_bytes();  // VmRSS of this process
std::optional<MemInfo> read_meminfo();
std::optional<std::string> read_cpu_model_name();

// Logical CPUs this process may run on (its affinity mask), at least 1.
int usable_cpu_count();
// Clock ticks per second for the tick counts above.
int64_t clock_ticks_per_second();

}  // namespace ga::telemetry
