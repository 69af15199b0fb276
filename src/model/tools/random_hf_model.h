// make-model's Hugging Face output: a random-weight model of a real shape as a transformers folder (config.json of
// the family's class, model.safetensors or shards with model.safetensors.index.json), for what reads only HF
// folders (`gpu-accel quantize ... fp8`, the FP8 benchmarks of docs/performance.md).
//
// The weights are the GGUF writer's (random_weights.h: the same tensor index and row streams), in HF names and
// torch shapes, so a folder and the GGUF made from the same preset, seed and float type hold the same model:
// for Llama the q/k rows are stored in HF's order (llama.cpp's converter permutes them into GGUF's interleaved
// RoPE order; here HF row r takes the values of the GGUF row it becomes), so both give the same logits.
// Families: Llama (dense) and Qwen3; others are refused. No tokenizer is written: benchmarks use token ids.
#pragma once

#include <cstdint>
#include <string>

#include "model/formats/safetensors.h"
#include "model/tools/random_model.h"

namespace ga::tools {

struct MakeHfModelSummary {
  int64_t n_vocab = 0;
  int n_tensors = 0;
  int n_files = 0;  // safetensors files (shards)
  uint64_t n_params = 0;
  uint64_t data_bytes = 0;
  double seconds = 0.0;
};

// The vocabulary size a preset's HF folder gets without --vocab: the real model's (Llama-3 128256, Qwen3 151936,
// Llama-2 and the tiny test shapes 32000).
int64_t hf_default_vocab(const ModelPreset& preset);

// Writes the folder out_dir (created). options.type: F32, F16 or BF16 (HF checkpoints are float; quantize to FP8
// afterwards); options.vocab_path: empty, or a vocab-only GGUF whose token count sets vocab_size (its tokenizer is
// not converted). Unsupported for a family other than Llama / Qwen3.
MakeHfModelSummary make_random_hf_model(const std::string& out_dir, const MakeModelOptions& options,
                                        uint64_t max_shard_bytes = safetensors::kDefaultMaxShardBytes);

}  // namespace ga::tools
