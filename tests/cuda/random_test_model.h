// A random-weight model for the CUDA forward tests: make_random_model over stories260K's vocabulary, written to a
// temporary file named after `file_tag` and the process, loaded, and the file removed (the loader keeps what it
// needs: mapped pages stay valid). Shapes come from make_random_model's presets (tiny, tiny-hd64, ...), so the tests
// cover head dims and quant types that no shared fixture has.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "common/test_data.h"
#include "gpu_accel/model.h"
#include "model/tools/random_model.h"

namespace ga::test::cuda {

inline ga::LoadedModel load_random_test_model(const std::string& file_tag, const std::string& preset,
                                              const std::string& type, uint64_t seed) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (file_tag + std::to_string(::getpid()) + ".gguf")).string();
  ga::tools::MakeModelOptions o;
  o.preset = preset;
  o.type = type;
  o.vocab_path = ga::test::shared_path("models/tinyllamas/stories260K.gguf");
  o.seed = seed;
  o.n_threads = 2;
  ga::tools::make_random_model(path, o);
  ga::LoadedModel m = ga::load_model(path);
  std::filesystem::remove(path);
  return m;
}

}  // namespace ga::test::cuda
