// Telemetry: the /proc parsers on synthetic text (whose fields are written here, so the expected
// values are known) and on the live files (checked against effects this test causes: CPU time it
// burns, memory it touches), the throughput formulas against hand-derived numbers, the NVML peak
// formulas against NVIDIA's datasheets, and NVML loading failing with a reason where it must.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "runtime/telemetry/cpu_monitor.h"
#include "runtime/telemetry/nvml_monitor.h"
#include "runtime/telemetry/proc_stats.h"
#include "runtime/telemetry/telemetry.h"
#include "runtime/telemetry/throughput.h"

namespace ga::telemetry {
namespace {

// Spins for `ms` of wall time, keeping the optimizer from removing the loop.
void burn_cpu(int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 10000; ++i) x = x + static_cast<uint64_t>(i);
  }
}

TEST(ProcStats, ProcessStatSyntheticWithAwkwardName) {
  // comm holds spaces and a ')' : fields must be counted from the last ')'.
  // fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
  std::string text = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 500 0 3 0 1234 567 0 0 20 0 8 0 99\n";
  auto ticks = parse_process_stat(text);
  ASSERT_TRUE(ticks.has_value());
  EXPECT_EQ(ticks->user, 1234u);
  EXPECT_EQ(ticks->system, 567u);
  EXPECT_EQ(ticks->total(), 1801u);
}

TEST(ProcStats, ProcessStatRejectsMalformed) {
  EXPECT_FALSE(parse_process_stat("").has_value());
  EXPECT_FALSE(parse_process_stat("12 (x) S 1 2 3").has_value());  // too few fields
  EXPECT_FALSE(parse_process_stat("12 (x) S 1 2 3 4 5 6 7 8 9 10 eleven 12").has_value());
  EXPECT_FALSE(parse_process_stat("12 x S 1 2 3 4 5 6 7 8 9 10 11 12").has_value());  // no ')'
}

TEST(ProcStats, MachineStatSynthetic) {
  std::string text =
      "cpu  100 5 30 1000 20 3 2 1 50 0\n"
      "cpu0 50 2 15 500 10 1 1 0 25 0\n";
  auto ticks = parse_machine_stat(text);
  ASSERT_TRUE(ticks.has_value());
  EXPECT_EQ(ticks->busy, 100u + 5 + 30 + 3 + 2 + 1);  // guest (50) is already inside user
  EXPECT_EQ(ticks->idle, 1000u + 20);
  // An old kernel with only the first four fields.
  auto old = parse_machine_stat("cpu 1 2 3 4\n");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->busy, 6u);
  EXPECT_EQ(old->idle, 4u);
  EXPECT_FALSE(parse_machine_stat("cpu0 1 2 3 4\n").has_value());
  EXPECT_FALSE(parse_machine_stat("cpu 1 2\n").has_value());
  EXPECT_FALSE(parse_machine_stat("cpu 1 2 x 4\n").has_value());
}

TEST(ProcStats, KbFieldsAndMeminfo) {
  std::string status = "Name:\tserver\nVmPeak:\t  9000 kB\nVmRSS:\t    1976 kB\nThreads:\t7\n";
  EXPECT_EQ(parse_kb_field(status, "VmRSS"), std::optional<uint64_t>(1976u * 1024));
  EXPECT_EQ(parse_kb_field(status, "Threads"), std::optional<uint64_t>(7u));  // a count, no unit
  EXPECT_FALSE(parse_kb_field(status, "VmRS").has_value());  // a prefix of a key is not the key
  EXPECT_FALSE(parse_kb_field(status, "VmSwap").has_value());

  auto mem = parse_meminfo("MemTotal:       24684092 kB\nMemFree:        21639660 kB\nMemAvailable:   23470932 kB\n");
  ASSERT_TRUE(mem.has_value());
  EXPECT_EQ(mem->total_bytes, 24684092ull * 1024);
  EXPECT_EQ(mem->available_bytes, 23470932ull * 1024);
  auto old = parse_meminfo("MemTotal: 1000 kB\nMemFree: 400 kB\n");  // before MemAvailable existed
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->available_bytes, 400u * 1024);
  EXPECT_FALSE(parse_meminfo("MemFree: 1 kB\n").has_value());
}

TEST(ProcStats, CpuModelName) {
  std::string text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz \n"
                     "processor\t: 1\nmodel name\t: other\n";
  EXPECT_EQ(parse_cpu_model_name(text), std::optional<std::string>("Intel(R) Xeon(R) CPU @ 2.20GHz"));
  EXPECT_FALSE(parse_cpu_model_name("processor : 0\n").has_value());
}

TEST(ProcStats, LiveProcessTicksGrowWithBurnedCpu) {
  auto before = read_process_cpu_ticks();
  ASSERT_TRUE(before.has_value()) << "cannot read /proc/self/stat";
  // Burn until the kernel has charged at least 5 ticks (50 ms at USER_HZ 100), bounded in time.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::optional<ProcessCpuTicks> after;
  do {
    burn_cpu(20);
    after = read_process_cpu_ticks();
    ASSERT_TRUE(after.has_value());
  } while (after->total() < before->total() + 5 && std::chrono::steady_clock::now() < deadline);
  EXPECT_GE(after->total(), before->total() + 5) << "5 s of spinning was not charged to this process";
}

TEST(ProcStats, LiveRssGrowsWhenMemoryIsTouched) {
  auto before = read_process_rss_bytes();
  ASSERT_TRUE(before.has_value()) << "cannot read VmRSS from /proc/self/status";
  constexpr size_t kBytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 7, kBytes);  // touch every page
  auto after = read_process_rss_bytes();
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after, *before + kBytes * 9 / 10);
  volatile char sink = block[kBytes - 1];
  (void)sink;
}

TEST(ProcStats, LiveMachineFigures) {
  auto machine = read_machine_cpu_ticks();
  ASSERT_TRUE(machine.has_value());
  EXPECT_GT(machine->total(), 0u);
  auto mem = read_meminfo();
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(mem->total_bytes, mem->available_bytes);
  EXPECT_GE(usable_cpu_count(), 1);
}

TEST(CpuMonitor, RatesFromTickDeltas) {
  // 150 ticks at 100 Hz over 1 s of wall time: 1.5 cores busy.
  EXPECT_DOUBLE_EQ(*process_cpu_percent({100, 50}, {200, 100}, 1.0, 100), 150.0);
  EXPECT_FALSE(process_cpu_percent({100, 50}, {200, 100}, 0.0, 100).has_value());
  // busy 30 of 120 ticks.
  EXPECT_DOUBLE_EQ(*machine_cpu_percent({100, 400}, {130, 490}), 25.0);
  EXPECT_FALSE(machine_cpu_percent({100, 400}, {100, 400}).has_value());
}

TEST(CpuMonitor, MeasuresThisProcessBurningCpu) {
  CpuMonitor monitor(std::chrono::milliseconds(0));
  CpuSnapshot first = monitor.sample();
  EXPECT_GE(first.cores, 1);
  ASSERT_TRUE(first.rss_bytes.has_value());
  burn_cpu(300);
  CpuSnapshot second = monitor.sample();
  ASSERT_TRUE(second.process_cpu_percent.has_value());
  // One spinning thread: at most one core (plus tick rounding), and more than nothing even on a
  // crowded machine.
  EXPECT_GT(*second.process_cpu_percent, 0.0);
  EXPECT_LE(*second.process_cpu_percent, 100.0 * 1.2);
  ASSERT_TRUE(second.machine_cpu_percent.has_value());
  EXPECT_GE(*second.machine_cpu_percent, 0.0);
  EXPECT_LE(*second.machine_cpu_percent, 100.0);
}

TEST(CpuMonitor, CopyBandwidthIsPlausible) {
  CopyBandwidth bw = measure_copy_bandwidth(uint64_t{16} << 20, 2);
  EXPECT_EQ(bw.buffer_bytes, uint64_t{16} << 20);
  // Any machine since the 1990s copies faster than 0.2 GB/s and no DRAM does 10 TB/s.
  EXPECT_GT(bw.gb_per_second, 0.2);
  EXPECT_LT(bw.gb_per_second, 10000.0);
}

TEST(Throughput, DecodeBandwidthAndFlops) {
  ThroughputInputs in;
  in.generation_tokens_per_second = 40;  // 4 sequences x 10 steps/s
  in.prompt_tokens_per_second = 60;
  in.running = 4;
  in.weight_bytes = 2'000'000'000;  // 2 GB read per step
  in.n_params = 1'000'000'000;
  AchievedThroughput t = achieved_throughput(in);
  EXPECT_DOUBLE_EQ(t.decode_steps_per_second, 10.0);
  EXPECT_DOUBLE_EQ(t.gb_per_second, 20.0);
  EXPECT_DOUBLE_EQ(t.tflops_per_second, 2.0 * 1e9 * 100 / 1e12);  // 0.2
  in.running = 0;  // the window still holds tokens after the last request finished
  EXPECT_DOUBLE_EQ(achieved_throughput(in).gb_per_second, 80.0);
}

TEST(NvmlPeaks, MatchDatasheets) {
  // A100 SXM4 80GB: HBM2e at 1593 MHz on 5120 bits = 2039 GB/s; 108 SMs (6912 cores) at 1410 MHz =
  // 312 dense FP16 TFLOP/s (NVIDIA A100 datasheet).
  GpuSnapshot a100;
  a100.memory_clock_max_mhz = 1593;
  a100.memory_bus_width_bits = 5120;
  a100.compute_capability_major = 8;
  a100.compute_capability_minor = 0;
  a100.cuda_cores = 6912;
  a100.sm_clock_max_mhz = 1410;
  EXPECT_NEAR(*peak_memory_gbs(a100), 2039.0, 2.0);
  EXPECT_NEAR(*peak_fp16_tflops(a100), 312.0, 1.0);
  // H100 SXM5: HBM3 at 2619 MHz on 5120 bits = 3.35 TB/s (datasheet).
  GpuSnapshot h100;
  h100.memory_clock_max_mhz = 2619;
  h100.memory_bus_width_bits = 5120;
  EXPECT_NEAR(*peak_memory_gbs(h100), 3352.0, 2.0);
  EXPECT_FALSE(peak_fp16_tflops(h100).has_value());  // no compute capability: no guess
  // V100 SXM2: 80 SMs (5120 cores) at 1530 MHz = 125 TFLOP/s (datasheet).
  GpuSnapshot v100;
  v100.compute_capability_major = 7;
  v100.compute_capability_minor = 0;
  v100.cuda_cores = 5120;
  v100.sm_clock_max_mhz = 1530;
  EXPECT_NEAR(*peak_fp16_tflops(v100), 125.0, 1.0);
  v100.compute_capability_major = 6;  // Pascal: not in the table
  EXPECT_FALSE(peak_fp16_tflops(v100).has_value());
}

TEST(Nvml, MissingLibraryGivesReason) {
  NvmlMonitor nvml("libga-no-such-nvml.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.reason().find("libga-no-such-nvml.so.1"), std::string::npos) << nvml.reason();
  EXPECT_FALSE(nvml.sample(0).has_value());
}

TEST(Nvml, LibraryWithoutNvmlSymbolsGivesReason) {
  NvmlMonitor nvml("libc.so.6");  // loads, but is not NVML
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.reason().find("nvmlInit_v2"), std::string::npos) << nvml.reason();
}

TEST(Nvml, DefaultLibraryAgreesWithTheMachine) {
  // Independent look: can the dynamic loader find the driver's NVML at all?
  void* probe = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  NvmlMonitor nvml;
  if (!probe) {
    EXPECT_FALSE(nvml.available());
    EXPECT_NE(nvml.reason().find("libnvidia-ml.so.1"), std::string::npos) << nvml.reason();
    return;
  }
  dlclose(probe);
  if (nvml.available()) {  // a GPU machine: every device answers with a name and memory size
    ASSERT_GT(nvml.device_count(), 0);
    auto gpu = nvml.sample(0);
    ASSERT_TRUE(gpu.has_value());
    EXPECT_FALSE(gpu->name.empty());
    ASSERT_TRUE(gpu->memory_total_bytes.has_value());
    EXPECT_GT(*gpu->memory_total_bytes, 0u);
  } else {  // a driver library without a usable GPU (e.g. a container without devices)
    EXPECT_FALSE(nvml.reason().empty());
  }
}

TEST(Telemetry, ParseDevice) {
  EXPECT_EQ(parse_device("cpu").kind, "cpu");
  EXPECT_EQ(parse_device("cpu").index, -1);
  EXPECT_EQ(parse_device("cuda").index, 0);
  EXPECT_EQ(parse_device("cuda:3").kind, "cuda");
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  EXPECT_EQ(parse_device("cuda:x").index, 0);
}

TEST(Telemetry, SnapshotOnCpu) {
  TelemetryOptions options;
  options.copy_bytes = uint64_t{8} << 20;  // keep the test quick
  options.copy_repeats = 1;
  Telemetry telemetry(options);
  telemetry.wait_for_copy_bandwidth();
  ASSERT_TRUE(telemetry.copy_bandwidth().has_value()) << telemetry.copy_bandwidth_error().value_or("");
  nlohmann::json model{{"n_params", 1000000}, {"weight_bytes", 4000000}};
  nlohmann::json scheduler{{"device", "cpu"}, {"running", 2}, {"generation_tokens_per_second", 100.0},
                           {"prompt_tokens_per_second", 0.0}, {"weight_bytes", 4000000}};
  nlohmann::json s = telemetry.snapshot(model, scheduler);
  EXPECT_EQ(s["device"]["kind"], "cpu");
  EXPECT_EQ(s["device"]["gpu_available"], telemetry.gpu_available());
  if (!telemetry.gpu_available()) {
    EXPECT_TRUE(s["gpu"].is_null());
    EXPECT_EQ(s["device"]["reason"], telemetry.gpu_unavailable_reason());
  }
  EXPECT_GE(s["cpu"]["cores"].get<int>(), 1);
  EXPECT_GT(s["cpu"]["process_rss_bytes"].get<double>(), 0);
  // 100 tok/s over a batch of 2 = 50 steps/s x 4 MB = 0.2 GB/s; 2 x 1e6 x 100 = 2e8 FLOP/s.
  EXPECT_NEAR(s["throughput"]["achieved_gbs"].get<double>(), 0.2, 1e-12);
  EXPECT_NEAR(s["throughput"]["achieved_tflops"].get<double>(), 2e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s["throughput"]["ceiling_gbs"].get<double>(), telemetry.copy_bandwidth()->gb_per_second);
  EXPECT_TRUE(s["throughput"]["ceiling_tflops"].is_null());
  EXPECT_NE(s["throughput"]["ceiling_source"].get<std::string>().find("memcpy"), std::string::npos);
}

TEST(Telemetry, CudaModelWithoutNvmlSaysWhy) {
  TelemetryOptions options;
  options.nvml_library = "libga-no-such-nvml.so.1";
  options.measure_copy_bandwidth = false;
  Telemetry telemetry(options);
  nlohmann::json s = telemetry.snapshot(nlohmann::json::object(), {{"device", "cuda:1"}});
  EXPECT_EQ(s["device"]["kind"], "cuda");
  EXPECT_EQ(s["device"]["gpu_available"], false);
  EXPECT_TRUE(s["gpu"].is_null());
  EXPECT_TRUE(s["throughput"]["ceiling_gbs"].is_null());
  EXPECT_NE(s["throughput"]["ceiling_source"].get<std::string>().find("no NVML"), std::string::npos);
  EXPECT_DOUBLE_EQ(s["throughput"]["achieved_gbs"].get<double>(), 0.0);
}

}  // namespace
}  // namespace ga::telemetry
