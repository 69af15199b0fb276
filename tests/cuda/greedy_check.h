// The greedy check of the GPU family tests: from the same prompt, the GPU and the CPU Session each pick the most
// likely token and feed it back, step by step, and the tokens must be the same. A step where the CPU's two best
// logits are within `near_tie` of each other and the devices disagree ends the comparison (a near-tie f16 rounding
// may break either way; it is printed); any other disagreement fails. One copy for every test that asks it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gpu_accel/session.h"

namespace ga::test::cuda {

// Returns the number of identical tokens (the caller expects it > 0).
inline int expect_same_greedy_tokens(const std::string& tag, ga::Session& cpu, ga::Session& gpu,
                                     std::span<const int32_t> prompt, int steps, double near_tie) {
  std::vector<float> lc = cpu.eval(prompt), lg = gpu.eval(prompt);
  int compared = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> sorted = lc;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    const int32_t want = static_cast<int32_t>(std::max_element(lc.begin(), lc.end()) - lc.begin());
    const int32_t got = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    if (sorted[0] - sorted[1] < near_tie && want != got) {
      std::printf("%-24s step %d: a near-tie (%.2e) ends the comparison\n", tag.c_str(), step,
                  static_cast<double>(sorted[0] - sorted[1]));
      break;
    }
    EXPECT_EQ(got, want) << tag << ": greedy step " << step;
    if (got != want) break;
    ++compared;
    const std::span<const int32_t> next(&want, 1);
    lc = cpu.eval(next);
    lg = gpu.eval(next);
  }
  std::printf("%-24s %d greedy tokens identical\n", tag.c_str(), compared);
  return compared;
}

}  // namespace ga::test::cuda
