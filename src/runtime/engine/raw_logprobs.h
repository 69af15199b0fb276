// OpenAI's logprobs: the log-softmax of the RAW logits, before penalties, temperature and filters.
//
// One implementation for every place that reports them from a whole host row (the Scheduler's host
// sampling and the GPU sampler's full-row fallback), so both paths give the same figures bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ga::engine {

// log(sum(exp(logits))) in double, around the row's float maximum.
double raw_log_sum_exp(std::span<const float> logits);

// The ids of the k largest logits, ordered (logit desc, id asc); k is capped at the row's size.
std::vector<int32_t> top_logit_ids(std::span<const float> logits, size_t k);

}  // namespace ga::engine
