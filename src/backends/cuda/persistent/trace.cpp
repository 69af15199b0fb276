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
  uint64_t t[kTraceStamps];
  uint64_t start() const { return t[kStampStart]; }
  uint64_t met() const { return t[kStampMet]; }
  uint64_t done() const { return t[kStampDone]; }
};

Stamp stamp_of(std::span<const uint64_t> stamps, size_t n_instrs, int32_t cta, size_t i) {
  const size_t o = (static_cast<size_t>(cta) * n_instrs + i) * kTraceStamps;
  Stamp s;
  for (int k = 0; k < kTraceStamps; ++k) s.t[k] = stamps[o + k];
  return s;
}

// Microseconds from stamp a to stamp b (0 where either was not written: a phase the CTA's tile did not have).
double span_us(const Stamp& s, int a, int b) {
  return s.t[a] != 0 && s.t[b] >= s.t[a] ? static_cast<double>(s.t[b] - s.t[a]) / 1e3 : 0.0;
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
      if (s.done() != 0) t0 = std::min(t0, s.start());
    }
  }
  return t0;
}

}  // namespace

std::string trace_json(const Plan& plan, std::span<const uint64_t> stamps) {
  const size_t n = plan.instrs.size();
  if (stamps.size() < static_cast<size_t>(plan.grid) * n * kTraceStamps) return "[]";
  const uint64_t t0 = first_start(plan, stamps);
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  char line[256];
  const auto event = [&](const std::string& name, const char* cat, int32_t cta, uint64_t from, uint64_t to) {
    if (from == 0 || to < from) return;
    std::snprintf(line, sizeof line, "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                  first ? "" : ",\n", name.c_str(), cat, cta, static_cast<double>(from - t0) / 1e3,
                  static_cast<double>(to - from) / 1e3);
    out += line;
    first = false;
  };
  for (int32_t c = 0; c < plan.grid; ++c) {
    for (size_t i = 0; i < n; ++i) {
      const Stamp s = stamp_of(stamps, n, c, i);
      if (s.done() == 0) continue;
      const std::string cls = class_of(plan.instrs[i]);
      // the wait for its dependencies, then the work, with its phases nested in it
      event("wait " + std::to_string(i), "wait", c, s.start(), s.met());
      event(std::to_string(i) + " " + cls, cls.c_str(), c, s.met(), s.done());
      event("stage", "phase", c, s.met(), s.t[kStampStaged]);
      event("first data", "phase", c, s.t[kStampStaged], s.t[kStampFirst]);
      event("compute", "phase", c, s.t[kStampFirst] != 0 ? s.t[kStampFirst] : s.t[kStampStaged],
            s.t[kStampComputed]);
      event("release", "phase", c, s.t[kStampComputed], s.done());
    }
  }
  out += "\n]}\n";
  return out;
}

std::string trace_summary(const Plan& plan, std::span<const uint64_t> stamps) {
  const size_t n = plan.instrs.size();
  if (n == 0 || stamps.size() < static_cast<size_t>(plan.grid) * n * kTraceStamps) return "no trace";
  // Per class: where the time of the instruction's critical CTA (the last to finish) went, from the moment the
  // last of its dependencies was released (signal: until the CTA saw it; stage: x or the heads; first: until its
  // first weights or cache rows were there; compute; release: the fence and the counter).
  struct Class {
    double held_us = 0, wait_us = 0, signal_us = 0, stage_us = 0, first_us = 0, compute_us = 0, release_us = 0;
    int64_t bytes = 0;
    int count = 0;
  };
  std::map<std::string, Class> classes;
  std::vector<uint64_t> done_of(n, 0);
  const uint64_t t0 = first_start(plan, stamps);
  uint64_t end = t0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t met = 0, done = 0;
    double wait = 0;
    int ctas = 0;
    int32_t critical = -1;
    for (int32_t c = 0; c < plan.grid; ++c) {
      const Stamp s = stamp_of(stamps, n, c, i);
      if (s.done() == 0) continue;
      met = std::max(met, s.met());
      if (s.done() > done) {
        done = s.done();
        critical = c;
      }
      wait += static_cast<double>(s.met() - s.start()) / 1e3;
      ++ctas;
    }
    if (ctas == 0) continue;
    done_of[i] = done;
    end = std::max(end, done);
    Class& k = classes[class_of(plan.instrs[i])];
    k.held_us += static_cast<double>(done - std::min(met, done)) / 1e3;
    k.wait_us += wait / ctas;
    k.bytes += bytes_of(plan.instrs[i]);
    const Stamp s = stamp_of(stamps, n, critical, i);
    uint64_t released = 0;
    const Instr& in = plan.instrs[i];
    for (int32_t d = 0; d < in.n_deps; ++d) released = std::max(released, done_of[plan.deps[in.dep_begin + d]]);
    if (released != 0 && s.met() > released) k.signal_us += static_cast<double>(s.met() - released) / 1e3;
    k.stage_us += span_us(s, kStampMet, kStampStaged);
    k.first_us += span_us(s, kStampStaged, kStampFirst);
    k.compute_us += s.t[kStampFirst] != 0 ? span_us(s, kStampFirst, kStampComputed)
                                          : span_us(s, kStampStaged, kStampComputed);
    k.release_us += span_us(s, kStampComputed, kStampDone);
    ++k.count;
  }
  const double step_us = static_cast<double>(end - t0) / 1e3;
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "persistent decode step: %.1f us, %.1f GB/s of weights over the whole step\n", step_us,
                static_cast<double>(plan.weight_bytes) / (step_us * 1e3));
  out += line;
  out += "| class | instructions | held us (last CTA's deps met -> last CTA done) | mean CTA wait us | GB/s while held |"
         " critical CTA us: signal / stage / first data / compute / release |\n";
  out += "|---|---:|---:|---:|---:|---|\n";
  for (const auto& [name, k] : classes) {
    std::snprintf(line, sizeof line, "| %s | %d | %.1f | %.1f | %s | %.1f / %.1f / %.1f / %.1f / %.1f |\n", name.c_str(),
                  k.count, k.held_us, k.wait_us,
                  k.bytes > 0 ? std::to_string(static_cast<int64_t>(static_cast<double>(k.bytes) / (k.held_us * 1e3))).c_str()
                              : "-",
                  k.signal_us, k.stage_us, k.first_us, k.compute_us, k.release_us);
    out += line;
  }
  return out;
}

}  // namespace ga::cuda::persistent
