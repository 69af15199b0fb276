// Where tests find their data, and how they treat missing data.
//
// ../shared (models, fixtures, vocab) must exist: a test that needs it fails when it is absent. The
// repository's own models/ (stories260K) is always there.
// Data fetched by tools/fetch_test_data.sh (npm tokenizers) may be absent on a developer machine:
// such tests are skipped with a reason, unless GA_REQUIRE_TEST_DATA=1 (CI), where absence fails.
#pragma once

#include <string>
#include <vector>

namespace ga::test {

std::string shared_path(const std::string& relative);     // ../shared/<relative>, checked to exist
std::string repo_path(const std::string& relative);       // <the checkout>/<relative>, checked to exist
std::string fetched_path(const std::string& relative);    // .cache/test-data/<relative>, "" if absent
bool require_fetched_data();                               // GA_REQUIRE_TEST_DATA=1
std::vector<float> read_f32_file(const std::string& path); // raw little-endian float32
std::string read_file(const std::string& path);
std::string binary_dir();                                  // the CMake build folder

// Relative L2 error ||a - b|| / ||b|| (double accumulation).
double rel_l2(const float* a, const float* b, size_t n);
double max_abs_diff(const float* a, const float* b, size_t n);

}  // namespace ga::test

// Skips (or fails under GA_REQUIRE_TEST_DATA=1) when fetched data is missing.
#define GA_REQUIRE_FETCHED(path_var, relative)                                                   \
  std::string path_var = ::ga::test::fetched_path(relative);                                    \
  if (path_var.empty()) {                                                                        \
    if (::ga::test::require_fetched_data()) FAIL() << "missing test data " << (relative)          \
                                                   << " (run tools/fetch_test_data.sh)";         \
    GTEST_SKIP() << "test data " << (relative) << " not fetched (run tools/fetch_test_data.sh)"; \
  }
