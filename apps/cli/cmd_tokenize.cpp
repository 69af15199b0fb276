// gpu-accel tokenize: print the token ids of a text, space-separated on one line.
//
// Only the vocabulary is read (no weights), so it works on vocab-only GGUF files and is instant on
// big models. BOS/EOS are added as the vocabulary says, unless --no-bos.
#include <cstdio>
#include <string>

#include "args.h"
#include "cli_common.h"
#include "commands.h"

namespace ga::cli {

int cmd_tokenize(int argc, char** argv) {
  std::string model_path;
  std::string text;
  bool no_bos = false;
  bool parse_special = false;
  ArgParser parser("tokenize", "-m MODEL -p TEXT [--no-bos] [--parse-special]",
                   "Prints the token ids of TEXT on one line, separated by spaces.");
  parser.option("-m,--model", &model_path, "MODEL", "a .gguf file (vocab-only is enough) or a Hugging Face folder");
  parser.option("-p,--prompt", &text, "TEXT", "the text to tokenize");
  parser.flag("--no-bos", &no_bos, "do not add BOS/EOS");
  parser.flag("--parse-special", &parse_special, "text spelling a special token becomes that token");
  if (!parser.parse(argc, argv)) return 0;
  require(parser.given("-m"), "missing -m MODEL");
  require(parser.given("-p"), "missing -p TEXT");

  const Tokenizer tokenizer(load_vocab(model_path));
  const std::vector<int32_t> ids = tokenizer.encode(text, !no_bos, parse_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
