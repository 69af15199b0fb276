// The whole-model check of the CUDA forward tests: every row of a GPU run's logits against the CPU
// reference's row by relative L2. The engine tests (test_cuda_forward, test_cuda_forward_shapes,
// test_cuda_batch_forward) each spelled this loop out; one copy keeps their bar and their NaN rule
// the same (a NaN row counts as the worst error, so a poisoned row can never look good in a summary).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "common/test_data.h"

namespace ga::test::cuda {

// Compares the rows of n_vocab logits of `gpu` [rows][n_vocab] with `cpu`'s: each row's rel L2 must stay within
// max_rel_l2 (a failure names `what` and the row), and both must hold as many floats. Raises `worst` to the
// worst row's rel L2 (NaN: 1e9); returns the number of rows compared.
inline size_t expect_logit_rows_close(const std::string& what, std::span<const float> gpu, std::span<const float> cpu,
                                      int64_t n_vocab, double max_rel_l2, double& worst) {
  EXPECT_EQ(gpu.size(), cpu.size()) << what;
  const size_t rows = std::min(gpu.size(), cpu.size()) / static_cast<size_t>(n_vocab);
  for (size_t r = 0; r < rows; ++r) {
    const double e = rel_l2(gpu.data() + r * n_vocab, cpu.data() + r * n_vocab, static_cast<size_t>(n_vocab));
    worst = std::max(worst, std::isnan(e) ? 1e9 : e);
    EXPECT_LE(e, max_rel_l2) << what << " row " << r;
  }
  return rows;
}

}  // namespace ga::test::cuda
