// One point of a sampling-parameter grid, for the tests that sweep the Sampler's filters
// (tests/runtime/test_sampler_candidates.cpp on the CPU; tests/cuda/test_cuda_sampling.cpp and
// test_cuda_forward_sampling.cpp against the GPU sampler): temperature, top-k, top-p and min-p set,
// everything else (penalties off, seed 0) left at SamplerParams' defaults, so each grid lists only what
// it varies.
#pragma once

#include "gpu_accel/sampler.h"

namespace ga::test {

inline SamplerParams sampler_params(float temperature, int top_k, float top_p, float min_p) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

}  // namespace ga::test
