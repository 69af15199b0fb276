// Achieved memory bandwidth and arithmetic rate of LLM inference, estimated from token rates.
//
// Why an estimate: the scheduler counts tokens, not bytes. During decode, every step reads every
// weight once whatever the batch size (the batch shares each weight load), so the bytes moved per
// second are about (decode steps per second) x weight_bytes. With B sequences decoding together,
// one step yields B tokens, so steps/s = generation tok/s / B. KV-cache reads, activations and the
// prompt phase are ignored: for small batches and short contexts the weights dominate.
// The FLOP count of a dense transformer is about 2 x n_params per token (one multiply-add per
// weight), for prompt and generated tokens alike; attention's own FLOPs are ignored.
#pragma once

#include <cstdint>

namespace ga::telemetry {

struct ThroughputInputs {
  double prompt_tokens_per_second = 0;
  double generation_tokens_per_second = 0;
  int running = 0;            // sequences in the batch now
  uint64_t weight_bytes = 0;  // bytes of all weights as stored (quantized size)
  uint64_t n_params = 0;
};

struct AchievedThroughput {
  double decode_steps_per_second = 0;
  double gb_per_second = 0;      // 1e9 bytes/s
  double tflops_per_second = 0;  // 1e12 FLOP/s
};

AchievedThroughput achieved_throughput(const ThroughputInputs& in);

}  // namespace ga::telemetry
