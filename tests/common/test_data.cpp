#include "common/test_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ga::test {

std::string shared_path(const std::string& relative) {
  const char* env = std::getenv("GA_SHARED");
  std::filesystem::path p = std::filesystem::path(env ? env : GA_SHARED_DIR) / relative;
  if (!std::filesystem::exists(p)) throw std::runtime_error("missing shared test data: " + p.string());
  return p.string();
}

std::string repo_path(const std::string& relative) {
  std::filesystem::path p = std::filesystem::path(GA_SOURCE_DIR) / relative;
  if (!std::filesystem::exists(p)) throw std::runtime_error("missing test data in the checkout: " + p.string());
  return p.string();
}

std::string fetched_path(const std::string& relative) {
  std::filesystem::path p = std::filesystem::path(GA_TEST_DATA_DIR) / relative;
  return std::filesystem::exists(p) ? p.string() : std::string();
}

bool require_fetched_data() {
  const char* env = std::getenv("GA_REQUIRE_TEST_DATA");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> read_f32_file(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

std::string binary_dir() { return GA_BINARY_DIR; }

double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace ga::test
