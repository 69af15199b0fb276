// See throughput.h for the model behind these figures.
#include "runtime/telemetry/throughput.h"

#include <algorithm>

namespace ga::telemetry {

AchievedThroughput achieved_throughput(const ThroughputInputs& in) {
  AchievedThroughput out;
  // The token rate is averaged over a recent window while `running` is instantaneous: right after
  // the last request finishes, running is 0 but the window still holds tokens. Treat that as a batch
  // of one rather than dividing by zero (a batch of one is what produced the tail of most windows).
  double batch = static_cast<double>(std::max(in.running, 1));
  out.decode_steps_per_second = std::max(in.generation_tokens_per_second, 0.0) / batch;
  constexpr double kBytesPerGb = 1e9, kFlopsPerTflop = 1e12, kFlopsPerParamPerToken = 2.0;
  out.gb_per_second = out.decode_steps_per_second * static_cast<double>(in.weight_bytes) / kBytesPerGb;
  double tokens_per_second =
      std::max(in.prompt_tokens_per_second, 0.0) + std::max(in.generation_tokens_per_second, 0.0);
  out.tflops_per_second = kFlopsPerParamPerToken * static_cast<double>(in.n_params) * tokens_per_second / kFlopsPerTflop;
  return out;
}

}  // namespace ga::telemetry
