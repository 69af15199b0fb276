// gpu-accel logits: evaluate given token ids in one batch and write the logits as raw float32.
//
// This is the hook for parity checks against other implementations (tools/hf_parity runs
// transformers on the same ids): no tokenizer is involved, so it also works on model folders
// without tokenizer.json, and the output is the plain row-major array numpy.fromfile reads
// ([n_vocab] for the last position, or [n_tokens][n_vocab] with --all). The KV cache is float32
// and sized to the ids, so nothing but the model's own float32 math touches the numbers.
// stdout gets one summary line (sizes, argmax, the first values) for eyeballing and for scripts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "gpu_accel/error.h"
#include "gpu_accel/session.h"

namespace ga::cli {
namespace {

constexpr size_t kSummaryValues = 4;

// "1,2,3" or "1 2 3" (or a mix) -> ids; anything else is a usage error naming the bad piece.
std::vector<int32_t> parse_token_list(const std::string& text) {
  std::string normalized = text;
  std::replace(normalized.begin(), normalized.end(), ',', ' ');
  std::istringstream in(normalized);
  std::vector<int32_t> ids;
  std::string piece;
  while (in >> piece) {
    const int64_t id = parse_int(piece, "token id");
    require(id >= 0 && id <= INT32_MAX, "token id " + piece + " is out of range");
    ids.push_back(static_cast<int32_t>(id));
  }
  require(!ids.empty(), "--tokens holds no token ids");
  return ids;
}

void write_f32(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  GA_CHECK(out.good(), Io, "cannot create '", path, "'");
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  out.flush();
  GA_CHECK(out.good(), Io, "cannot write '", path, "'");
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  std::string model_path;
  std::string tokens_text;
  std::string out_path;
  bool all_positions = false;
  int32_t n_threads = 0;
  ArgParser parser("logits", "-m MODEL --tokens 1,2,3 [--out FILE.f32] [--all] [--threads N]",
                   "Evaluates the token ids in one batch (positions 0..n-1) with a float32 KV cache and writes the "
                   "logits of the last position ([n_vocab]) or, with --all, of every position ([n][n_vocab]) as raw "
                   "little-endian float32 to --out. Prints one summary line of the last position to stdout.");
  parser.option("-m,--model", &model_path, "MODEL", "a .gguf file or a Hugging Face folder");
  parser.option("--tokens", &tokens_text, "IDS", "token ids separated by commas or spaces");
  parser.option("-o,--out", &out_path, "FILE", "where to write the float32 logits (none: summary only)");
  parser.flag("--all", &all_positions, "write the logits of every position, not only the last");
  parser.option("-t,--threads", &n_threads, "N", "CPU threads (0: all)");
  PrecisionArgs precision;
  add_precision_options(parser, precision);  // the CPU forward: auto is native
  if (!parser.parse(argc, argv)) return 0;
  precision_options(precision);
  require(parser.given("-m"), "missing -m MODEL");
  require(parser.given("--tokens"), "missing --tokens IDS");
  require(n_threads >= 0, "--threads must be >= 0");
  const std::vector<int32_t> ids = parse_token_list(tokens_text);

  const LoadedModel model = load_model_verbose(model_path, precision);
  SessionOptions options;
  options.n_ctx = static_cast<int64_t>(ids.size());
  options.n_threads = n_threads;
  options.kv_type = KvType::F32;
  Session session(model, options);
  const std::vector<float> logits = session.eval(ids, all_positions);

  const size_t n_vocab = static_cast<size_t>(model.config.n_vocab);
  GA_CHECK(n_vocab > 0 && logits.size() % n_vocab == 0, Internal, "logits of size ", logits.size(),
           " for n_vocab ", n_vocab);
  if (!out_path.empty()) write_f32(out_path, logits);

  const float* last = logits.data() + logits.size() - n_vocab;  // [n_vocab]
  const size_t argmax = static_cast<size_t>(std::max_element(last, last + n_vocab) - last);  // lowest id on ties
  std::ostringstream line;
  line.precision(6);
  line << "n_tokens=" << ids.size() << " n_vocab=" << n_vocab << " rows=" << logits.size() / n_vocab
       << " argmax=" << argmax << " max=" << last[argmax] << " first=[";
  for (size_t i = 0; i < std::min(kSummaryValues, n_vocab); ++i) line << (i ? ", " : "") << last[i];
  line << "]\n";
  const std::string text = line.str();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
