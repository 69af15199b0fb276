// gpu-accel inspect: print a model's metadata (key = value) and its tensor table.
//
// A GGUF file is read through ga::gguf::File directly, not load_model: inspect must work on files
// gpu_accel cannot run (vocab-only files, unsupported architectures, tensor types we do not
// compute), because that is exactly when someone wants to look inside. A Hugging Face folder has no
// single header to read, so it goes through load_model; when its architecture is not one gpu_accel runs
// (a vision-language checkpoint, another family), the config's keys and the safetensors tensors are
// listed as they are, under the reason it does not load. Values are printed one per line: long arrays
// are abbreviated, and long strings (chat templates) shortened, with newlines shown as \n.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/formats/hf_config.h"
#include "model/formats/safetensors.h"

namespace ga::cli {

namespace {

constexpr size_t kMaxArrayItems = 8;
constexpr size_t kMaxValueChars = 160;

// One line, bounded: control characters escaped, long text cut with a note of its size.
std::string printable(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (out.size() >= kMaxValueChars) {
      out += "... (" + std::to_string(value.size()) + " bytes)";
      break;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

std::string shape_text(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

struct TensorRow {
  std::string name, type, shape, bytes, offset;
};

void print_tensor_table(const std::vector<TensorRow>& rows, uint64_t total_bytes) {
  std::printf("tensors: %zu, %llu bytes\n", rows.size(), static_cast<unsigned long long>(total_bytes));
  TensorRow header{"name", "type", "shape", "bytes", "offset"};
  size_t w_name = header.name.size(), w_type = header.type.size(), w_shape = header.shape.size(),
         w_bytes = header.bytes.size();
  for (const auto& r : rows) {
    w_name = std::max(w_name, r.name.size());
    w_type = std::max(w_type, r.type.size());
    w_shape = std::max(w_shape, r.shape.size());
    w_bytes = std::max(w_bytes, r.bytes.size());
  }
  auto print_row = [&](const TensorRow& r) {
    std::printf("  %-*s  %-*s  %-*s  %*s  %s\n", static_cast<int>(w_name), r.name.c_str(), static_cast<int>(w_type),
                r.type.c_str(), static_cast<int>(w_shape), r.shape.c_str(), static_cast<int>(w_bytes),
                r.bytes.c_str(), r.offset.c_str());
  };
  print_row(header);
  for (const auto& r : rows) print_row(r);
}

void inspect_gguf(const std::string& path) {
  const gguf::File file = gguf::File::open(path);
  std::printf("file: %s\n", path.c_str());
  std::printf("format: GGUF v%u, alignment %llu, data offset %llu, file size %llu bytes\n", file.version(),
              static_cast<unsigned long long>(file.alignment()), static_cast<unsigned long long>(file.data_offset()),
              static_cast<unsigned long long>(file.file_size()));
  std::printf("metadata: %zu keys\n", file.metadata().size());
  for (const auto& kv : file.metadata()) {
    std::printf("  %s = %s\n", kv.key.c_str(), printable(kv.value.to_string(kMaxArrayItems)).c_str());
  }
  std::vector<TensorRow> rows;
  uint64_t total = 0;
  for (const auto& t : file.tensors()) {
    rows.push_back({t.name, dtype_name(t.type), shape_text(t.ne), std::to_string(t.nbytes), std::to_string(t.offset)});
    total += t.nbytes;
  }
  print_tensor_table(rows, total);
}

// A folder load_model refuses (Unsupported): config.json's keys and every safetensors tensor, as stored.
void inspect_raw_folder(const std::string& path, const Error& why) {
  std::printf("folder: %s\n", path.c_str());
  std::printf("not loadable: %s\n", why.message().c_str());
  const hf::HfConfig config = hf::read_config((std::filesystem::path(path) / "config.json").string());
  std::printf("metadata: %zu keys\n", config.entries.size());
  for (const auto& m : config.entries) std::printf("  %s = %s\n", m.key.c_str(), printable(m.value).c_str());
  const safetensors::Checkpoint ckpt = safetensors::Checkpoint::open_dir(path);
  std::vector<TensorRow> rows;
  uint64_t total = 0;
  for (const auto& [name, entry] : ckpt.entries()) {
    const safetensors::TensorInfo& t = *ckpt.find(name);
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());  // ggml order, as the loaded view shows it
    rows.push_back({name, t.dtype, shape_text(ne), std::to_string(t.nbytes()), "-"});
    total += t.nbytes();
  }
  print_tensor_table(rows, total);
}

// A Hugging Face folder, or an rwkv.cpp file (load_model reads both; neither has one header to print).
// With --precision, a GGUF file too: the tensor table then shows the types the model runs in.
void inspect_loaded(const std::string& path, const PrecisionArgs& precision) {
  const bool folder = std::filesystem::is_directory(path);
  std::optional<LoadedModel> loaded;
  try {
    loaded.emplace(load_model_verbose(path, precision, "auto"));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Unsupported || !folder) throw;
    inspect_raw_folder(path, e);
    return;
  }
  const LoadedModel& model = *loaded;
  const ModelConfig& c = model.config;
  std::printf("%s: %s\n", folder ? "folder" : "file", path.c_str());
  std::printf("format: %s, architecture %s, %lld layers, n_embd %lld, n_head %lld, n_head_kv %lld, vocab %lld\n",
              model.format.c_str(), c.arch.c_str(), static_cast<long long>(c.n_layer),
              static_cast<long long>(c.n_embd), static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv),
              static_cast<long long>(c.n_vocab));
  std::printf("precision: %s\n", model.precision.detail.c_str());
  std::printf("metadata: %zu keys\n", model.metadata.size());
  for (const auto& m : model.metadata) std::printf("  %s = %s\n", m.key.c_str(), printable(m.value).c_str());
  std::vector<TensorRow> rows;
  uint64_t total = 0;
  for (const auto& [name, w] : model.weights) {
    // Views of a folder point into several files (or converted buffers): no single offset exists.
    rows.push_back({name, dtype_name(w.type), shape_text(w.ne), std::to_string(w.nbytes), "-"});
    total += w.nbytes;
  }
  print_tensor_table(rows, total);
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string path;
  std::string model_flag;
  ArgParser parser("inspect", "MODEL",
                   "Prints the metadata (key = value) and the tensor table (name, type, shape, bytes, offset)\n"
                   "of a .gguf file or a Hugging Face model folder; with --precision, of the model as it loads in\n"
                   "that precision (auto: for GPU 0 when there is one).");
  parser.positional("MODEL", &path, "a .gguf file or a Hugging Face model folder");
  parser.option("-m,--model", &model_flag, "MODEL", "the same as the positional MODEL");
  PrecisionArgs precision;
  add_precision_options(parser, precision);
  if (!parser.parse(argc, argv)) return 0;
  precision_options(precision);
  require(path.empty() || model_flag.empty(), "give MODEL once (either positional or -m)");
  if (path.empty()) path = model_flag;
  require(!path.empty(), "missing MODEL (a .gguf file or a Hugging Face folder)");
  require_exists(path);
  const bool convert = parser.given("--precision") || parser.given("--precision-keep");
  if (convert || std::filesystem::is_directory(path) || is_rwkv_cpp_file(path)) {
    inspect_loaded(path, precision);
  } else {
    inspect_gguf(path);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace ga::cli
