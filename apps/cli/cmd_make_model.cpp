// gpu-accel make-model: write a random-weight model of a real shape for benchmarks (the C++
// twin of ../shared/tools/make_gguf.py, but multithreaded and for any quantization type), through
// ga::tools::make_random_model. One summary line on stdout.
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "model/tools/random_hf_model.h"
#include "model/tools/random_model.h"

namespace ga::cli {
namespace {

// The 32000-token Llama-2 SentencePiece vocabulary the benchmarks of ANCHORS.md use, where the
// shared data sits beside a checkout.
constexpr const char* kDefaultVocab = "../shared/vocab/ggml-vocab-llama-spm.gguf";
// RWKV's World vocabulary where one sits there; without it an RWKV preset gets a byte-level World vocabulary.
constexpr const char* kDefaultRwkvVocab = "../shared/vocab/rwkv_vocab_v20230424.txt";

}  // namespace

int cmd_make_model(int argc, char** argv) {
  std::string preset, type = "F16", out, vocab, format = "gguf";
  uint64_t seed = 0;
  int32_t n_threads = 0;
  ArgParser parser("make-model", "--preset NAME --type TYPE --out FILE.gguf|DIR [--format gguf|hf] [--vocab VOCAB.gguf] [--seed S]",
                   "Writes a random-weight GGUF of a real model shape, any supported family (presets: " + tools::preset_names() +
                       "). The tokenizer is copied from a vocab-only GGUF (RWKV: or an rwkv_vocab_v20230424.txt, else "
                       "a byte-level World vocabulary; the file is laid out as llama.cpp's converter writes it). Weights: matrices ~N(0, 1/row length), "
                       "token_embd ~N(0, 1), norms 1 + N(0, 0.01), from a seeded generator (the same seed gives the "
                       "same file), quantized to TYPE (" + tools::file_type_names() + "). --format hf writes a Hugging Face folder instead "
                       "(config.json, model.safetensors or <= 4 GiB shards with their index; Llama and Qwen3 presets; "
                       "TYPE F16, BF16 or F32; the same weights as the GGUF of the same seed): it carries no "
                       "tokenizer (benchmarks use token ids); --vocab only sets its vocab_size, else the real model's.");
  parser.option("--preset", &preset, "NAME", "model shape: " + tools::preset_names());
  parser.option("--type", &type, "TYPE", "weight type or mix (F16, Q8_0, Q4_0, Q4_K_M, ...)");
  parser.option("-o,--out", &out, "FILE", "the .gguf file to write (--format hf: the folder)");
  parser.option("--format", &format, "gguf|hf", "a GGUF file (default) or a Hugging Face safetensors folder");
  parser.option("--vocab", &vocab, "VOCAB",
                std::string("vocab-only GGUF to copy the tokenizer from (default ") + kDefaultVocab +
                    "; RWKV presets: an rwkv_vocab_v20230424.txt, default " + kDefaultRwkvVocab + " if present)");
  parser.option("--seed", &seed, "S", "random seed");
  parser.option("-t,--threads", &n_threads, "N", "CPU threads (0: all)");
  if (!parser.parse(argc, argv)) return 0;
  require(!preset.empty(), "missing --preset NAME (one of " + tools::preset_names() + ")");
  require(tools::find_preset(preset) != nullptr,
          "unknown preset '" + preset + "' (one of " + tools::preset_names() + ")");
  require(format == "gguf" || format == "hf", "unknown --format '" + format + "' (gguf or hf)");
  require(tools::file_type_from_name(type).has_value(),
          "unknown --type '" + type + "' (one of " + tools::file_type_names() + ")");
  require(!out.empty(), "missing --out FILE.gguf");
  require(n_threads >= 0, "--threads must be >= 0");
  const bool rwkv = std::string_view(tools::find_preset(preset)->arch).starts_with("rwkv");
  // GGUF files carry a vocabulary (the Llama-2 one, or RWKV's World file when it is there); HF folders only its size.
  if (format == "gguf" && vocab.empty()) {
    vocab = rwkv ? (std::filesystem::exists(kDefaultRwkvVocab) ? kDefaultRwkvVocab : "") : kDefaultVocab;
  }
  if (!vocab.empty()) require_exists(vocab);
  tools::MakeModelOptions options;
  options.preset = preset;
  options.type = type;
  options.vocab_path = vocab;
  options.seed = seed;
  options.n_threads = n_threads;
  if (format == "hf") {
    const tools::MakeHfModelSummary s = tools::make_random_hf_model(out, options);
    std::printf("wrote %s: %s %s (Hugging Face), vocab %lld, %d tensors in %d file(s), %.3f B params, %.2f GiB in "
                "%.1f s\n",
                out.c_str(), preset.c_str(), type.c_str(), static_cast<long long>(s.n_vocab), s.n_tensors, s.n_files,
                static_cast<double>(s.n_params) / 1e9, static_cast<double>(s.data_bytes) / (1ull << 30), s.seconds);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  const tools::MakeModelSummary s = tools::make_random_model(out, options);
  std::printf("wrote %s: %s %s (file_type %u), vocab %lld, %d tensors, %.3f B params, %.2f GiB in %.1f s\n",
              out.c_str(), preset.c_str(), s.ftype.name, s.ftype.id, static_cast<long long>(s.n_vocab), s.n_tensors,
              static_cast<double>(s.n_params) / 1e9, static_cast<double>(s.data_bytes) / (1ull << 30), s.seconds);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
