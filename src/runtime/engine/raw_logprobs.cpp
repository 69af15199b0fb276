// raw_logprobs.h: a float maximum, a double sum, and a partial sort with a strict total order (ties
// by lowest id), so the result does not depend on the standard library's sort.
#include "runtime/engine/raw_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ga::engine {

double raw_log_sum_exp(std::span<const float> logits) {
  float mx = -std::numeric_limits<float>::infinity();
  for (const float l : logits) mx = std::max(mx, l);
  double sum = 0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  return static_cast<double>(mx) + std::log(sum);
}

std::vector<int32_t> top_logit_ids(std::span<const float> logits, size_t k) {
  k = std::min(k, logits.size());
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(), [&logits](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la != lb ? la > lb : a < b;
  });
  ids.resize(k);
  return ids;
}

}  // namespace ga::engine
