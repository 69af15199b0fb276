// Random-weight models of real shapes, for benchmarks (the C++ twin of ../shared/tools/make_gguf.py, for every
// registered decoder family: Llama, Qwen3, Gemma 2/3, Phi-3, Mixtral, Qwen2/3-MoE; and RWKV 6/7 in the layout of
// llama.cpp's converter, tensor types included, so llama.cpp runs the same file): the speed of a transformer
// does not depend on its weight values, so a random 7B model measures an engine as the real one would, for a
// fixed generation length. The tensors are the architecture's own tensor specs, the hyperparameter keys its
// own GGUF writer's (model/arch/), so a preset loads exactly as a converted model of that family does.
//
// Weights are drawn from our own counter-based generator: every row has its own stream, keyed by
// (seed, tensor index, row), so rows are generated in parallel and the file is identical for the
// same seed whatever the thread count. Values are approximately normal (sum of four uniforms, see
// random_model.cpp); matrices ~N(0, 1/fan_in) with fan_in = the row length, so activations keep unit
// scale; token_embd ~N(0, 1) (its input is one-hot, fan_in 1); norm weights 1 + N(0, 0.1^2) (GGUF's
// convention for Gemma's (1 + w) norms too); biases N(0, 0.1^2); MoE routers N(0, 9/fan_in), so that routing
// varies between tokens. The tokenizer (every tokenizer.* key) is copied from a vocab-only GGUF; the output
// is streamed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gpu_accel/model.h"
#include "model/tools/quant_mix.h"

namespace ga::tools {

struct ModelPreset {
  const char* name;
  const char* arch;  // GGUF general.architecture
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
  int64_t head_dim = 0;  // 0: n_embd / n_head
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  int64_t sliding_window = 0;
  int64_t n_vocab = 0;  // 0: the vocabulary's size (RWKV: the model's, the World vocabulary padded to it)
};

// nullptr when unknown.
const ModelPreset* find_preset(std::string_view name);
std::string preset_names();  // "llama2-7b, llama3-8b, ..., tiny, tiny-hd64, tiny-qwen3, ..."
// The hyperparameters of a preset (the family's defaults for what the table does not say).
ModelConfig preset_config(const ModelPreset& preset, int64_t n_vocab);

struct MakeModelOptions {
  std::string preset;      // a preset name
  std::string type;        // a file type name (quant_mix.h): F16, Q4_0, Q4_K_M, ...
  // A vocab-only GGUF whose tokenizer.* keys are copied; for RWKV also an rwkv_vocab_v20230424.txt (laid out as
  // llama.cpp's converter does) or empty (a byte-level World vocabulary, padded to the preset's n_vocab).
  std::string vocab_path;
  uint64_t seed = 0;
  int n_threads = 0;       // 0: all hardware threads
};

struct MakeModelSummary {
  FileType ftype;
  int64_t n_vocab = 0;
  int n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t data_bytes = 0;
  double seconds = 0.0;
};

MakeModelSummary make_random_model(const std::string& output_path, const MakeModelOptions& options);

}  // namespace ga::tools
