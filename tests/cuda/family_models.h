// The models of every architecture family the CUDA engine tests run: the tiny transformers models of
// tests/data/arch (their GGUF conversions; heads of 16 and 32, so the engine's simple attention serves them,
// with sliding windows of 8, soft-caps of 2 and 3, YaRN and LongRoPE) and random models of the make-model
// tiny-* presets (head dims 64 and 96: the tuned decode, paged and prefill attention kernels, with windows of
// 24 and 40 and Gemma 2's soft-caps of 50 / 30), in F16 and in a Q4_K_M mix.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "cuda/random_test_model.h"
#include "gpu_accel/model.h"
#include "gpu_accel/session.h"

namespace ga::test::cuda {

struct FamilyModel {
  std::string tag;
  ga::LoadedModel model;
};

inline std::vector<std::string> arch_data_models() {
  return {"qwen3", "qwen3-yarn", "gemma2", "gemma3", "phi3", "phi3-gqa", "phi3-longrope", "mixtral", "qwen2moe",
          "qwen3moe"};
}

inline std::vector<std::string> family_presets() {
  return {"tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-phi3", "tiny-mixtral", "tiny-qwen2moe", "tiny-qwen3moe"};
}

// The Session options the family tests compare devices with: an F16 KV cache (the GPU's), 2 CPU threads.
inline ga::SessionOptions family_session_options(const std::string& device, int64_t n_ctx) {
  ga::SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_threads = 2;
  o.kv_type = ga::KvType::F16;
  o.device = device;
  return o;
}

// n token ids drawn from [3, n_vocab) (past the special tokens), seeded.
inline std::vector<int32_t> random_token_ids(int64_t n_vocab, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(3, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = pick(rng);
  return out;
}

// Every family model (loaded once per process).
inline const std::vector<FamilyModel>& family_models() {
  static const std::vector<FamilyModel> models = [] {
    std::vector<FamilyModel> out;
    for (const std::string& name : arch_data_models()) {
      out.push_back({name, ga::load_model(ga::test::repo_path("tests/data/arch/" + name + "/model.gguf"))});
    }
    uint64_t seed = 11;
    for (const std::string& preset : family_presets()) {
      for (const char* type : {"F16", "Q4_K_M"}) {
        out.push_back({preset + " " + type, load_random_test_model("ga-" + preset + "-", preset, type, seed++)});
      }
    }
    return out;
  }();
  return models;
}

}  // namespace ga::test::cuda
