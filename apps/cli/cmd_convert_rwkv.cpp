// gpu-accel convert-rwkv: an rwkv.cpp RWKV 6/7 model file as a GGUF in llama.cpp's converter layout
// (tools::write_rwkv_cpp_as_gguf), so llama.cpp (llama-bench, llama-server) runs the same weights.
#include <cstdio>
#include <string>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "gpu_accel/model.h"
#include "model/tools/rwkv_to_gguf.h"

namespace ga::cli {

int cmd_convert_rwkv(int argc, char** argv) {
  std::string input, output;
  int64_t rescale_every = 0;
  bool dequantize = false;
  ArgParser parser("convert-rwkv", "IN.bin OUT.gguf [--rescale-every N] [--dequantize]",
                   "Writes an rwkv.cpp RWKV 6 or 7 file (FP32, FP16 or quantized) as a GGUF laid out as llama.cpp's "
                   "convert_hf_to_gguf.py writes one: its names, shapes, order and keys; tensors keep their types. "
                   "The vocabulary: the byte vocabulary of the tiny models, else the World one beside the file "
                   "(rwkv_vocab_v20230424.txt), else a byte-level World vocabulary.");
  parser.positional("IN.bin", &input, "the rwkv.cpp model file");
  parser.positional("OUT.gguf", &output, "where to write the GGUF");
  parser.option("--rescale-every", &rescale_every, "N",
                "RWKV 6: divide layer il's output matrices by 2^(il / N) as the converter does for rescale_every "
                "(needs float tensors; see --dequantize)");
  parser.flag("--dequantize", &dequantize, "write quantized tensors as F32");
  if (!parser.parse(argc, argv)) return 0;
  require_exists(input);
  require(rescale_every >= 0, "--rescale-every must be >= 0");
  tools::RwkvToGgufOptions options;
  options.rescale_every = rescale_every;
  options.dequantize = dequantize;
  const LoadedModel model = load_model(input);
  tools::write_rwkv_cpp_as_gguf(model, output, options);
  std::printf("wrote %s: %s, %lld layers, n_embd %lld, vocab %lld\n", output.c_str(), model.config.arch.c_str(),
              static_cast<long long>(model.config.n_layer), static_cast<long long>(model.config.n_embd),
              static_cast<long long>(model.config.n_vocab));
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
