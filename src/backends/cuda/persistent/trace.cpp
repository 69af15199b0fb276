// The persistent decode kernel's trace: JSON timeline and summary (see the header).
#include "backends/cuda/persistent/trace.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace ga::cuda::persistent {
namespace {

struct Stamp {
  uint64_t start, met, done;
};

Stamp stamp_of(std::span<const uint64_t> stamps, size_t n_instrs, int32_t cta, size_t i) {
  const size_t o = (static_cast<size_t>(cta) * n_instrs + i) * 3;
  return Stamp{stamps[o], stamps[o + 1], stamps[o + 2]};
}

std::string class_of(const Instr& in) {
  switch (in.kind) {
    case OpKind::kGemv: return std::string("GEMV ") + dtype_name(in.gemv.type);
    case OpKind::kAttention: return "attention";
    case OpKind::kRmsNorm: return "norm";
    case OpKind::kGlu: return "GLU";
  }
  return "?";
}

int64_t bytes_of(const Instr& in) { return in.kind == OpKind::kGemv ? gemv_weight_bytes(in.gemv) : 0; }

uint64_t first_start(const Plan& plan, std::span<const uint64_t> stamps) {
  uint64_t t0 = std::numeric_limits<uint64_t>::max();
  for (int32_t c = 0; c < plan.grid; ++c) {
    for (size_t i = 0; i < plan.instrs.size(); ++i) {
      const Stamp s = stamp_of(stamps, plan.instrs.size(), c, i);
      if (s.done != 0) t0 = std::min(t0, s.start);
    }
  }
  return t0;
}

}  // namespace

std::string trace_json(const Plan& plan, std::span<const uint64_t> stamps) {
  const size_t n = plan.instrs.size();
  if (stamps.size() < static_cast<size_t>(plan.grid) * n * 3) return "[]";
  const uint64_t t0 = first_start(plan, stamps);
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  char line[256];
  for (int32_t c = 0; c < plan.grid; ++c) {
    for (size_t i = 0; i < n; ++i) {
      const Stamp s = stamp_of(stamps, n, c, i);
      if (s.done == 0) continue;
      const std::string cls = class_of(plan.instrs[i]);
      // two events per instruction and CTA: the wait for its dependencies, then the work
      std::snprintf(line, sizeof line,
                    "%s{\"name\":\"wait %zu\",\"cat\":\"wait\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                    first ? "" : ",\n", i, c, static_cast<double>(s.start - t0) / 1e3,
                    static_cast<double>(s.met - s.start) / 1e3);
      out += line;
      first = false;
      std::snprintf(line, sizeof line,
                    ",\n{\"name\":\"%zu %s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", i,
                    cls.c_str(), cls.c_str(), c, static_cast<double>(s.met - t0) / 1e3,
                    static_cast<double>(s.done - s.met) / 1e3);
      out += line;
    }
  }
  out += "\n]}\n";
  return out;
}

std::string trace_summary(const Plan& plan, std::span<const uint64_t> stamps) {
  const size_t n = plan.instrs.size();
  if (n == 0 || stamps.size() < static_cast<size_t>(plan.grid) * n * 3) return "no trace";
  struct Class {
    double held_us = 0, wait_us = 0;
    int64_t bytes = 0;
    int count = 0;
  };
  std::map<std::string, Class> classes;
  const uint64_t t0 = first_start(plan, stamps);
  uint64_t end = t0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t met = 0, done = 0;
    double wait = 0;
    int ctas = 0;
    for (int32_t c = 0; c < plan.grid; ++c) {
      const Stamp s = stamp_of(stamps, n, c, i);
      if (s.done == 0) continue;
      met = std::max(met, s.met);
      done = std::max(done, s.done);
      wait += static_cast<double>(s.met - s.start) / 1e3;
      ++ctas;
    }
    if (ctas == 0) continue;
    end = std::max(end, done);
    Class& k = classes[class_of(plan.instrs[i])];
    k.held_us += static_cast<double>(done - std::min(met, done)) / 1e3;
    k.wait_us += wait / ctas;
    k.bytes += bytes_of(plan.instrs[i]);
    ++k.count;
  }
  const double step_us = static_cast<double>(end - t0) / 1e3;
  std::string out;
  char line[200];
  std::snprintf(line, sizeof line, "persistent decode step: %.1f us, %.1f GB/s of weights over the whole step\n", step_us,
                static_cast<double>(plan.weight_bytes) / (step_us * 1e3));
  out += line;
  out += "| class | instructions | held us (last CTA's deps met -> last CTA done) | mean CTA wait us | GB/s while held |\n";
  out += "|---|---:|---:|---:|---:|\n";
  for (const auto& [name, k] : classes) {
    std::snprintf(line, sizeof line, "| %s | %d | %.1f | %.1f | %s |\n", name.c_str(), k.count, k.held_us, k.wait_us,
                  k.bytes > 0 ? std::to_string(static_cast<int64_t>(static_cast<double>(k.bytes) / (k.held_us * 1e3))).c_str()
                              : "-");
    out += line;
  }
  return out;
}

}  // namespace ga::cuda::persistent
