// rwkv.cpp model files (docs/FILE_FORMAT.md of RWKV/rwkv.cpp) -> LoadedModel.
//
// Layout: 6 x uint32 header (magic 'ggmf' 0x67676d66, version 100|101, n_vocab, n_embed, n_layer, data type),
// then records until the end of the file: uint32 dim_count, key_length, data_type, dim_count x uint32 sizes
// (ggml order, ne0 first), the key bytes, the data. Tensors keep BlinkDL's PyTorch names
// (emb.weight, blocks.N.att.key.weight, ...); rwkv.cpp's converter has already transformed some of them
// (v4 time_decay = -exp(w); v5 time_decay = exp(-exp(w)), v5.1 time_first = exp(u); LoRA matrices
// transposed; v7's x_r..x_g concatenated into x_rwkvag) and the forward (model/arch/rwkv.cpp) reads them
// as stored.
//
// The version is the tensors' (rwkv.cpp's rule): att.ln_x -> 5 (gate -> 5.2, else 5.1), att.time_maa_x -> 6,
// att.r_k -> 7, else 4. Two reshapes happen here, as views into the mapping (no copy): 1-D parameters
// stored with extra dimensions ([1, S, H] decays, [S, H] r_k) become flat vectors, and the stacks the
// forward multiplies piece by piece (v6 time_maa_w2 [D, C, 5], v7 x_rwkvag [6 C]) are split into
// named pieces (which replace the stack). Every byte count is checked against the file size before a view is made, so a truncated
// or corrupt file is an InvalidFormat naming the tensor, never a read past the mapping.
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"

namespace ga {
namespace {

constexpr uint32_t kRwkvMagic = 0x67676d66;  // "ggmf"
constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kMaxKeyLength = 1024;

// rwkv.cpp's data type ids (rwkv_file_format.inc), as gpu_accel's types; 4..6 were removed formats.
std::optional<DType> rwkv_type(uint32_t id) {
  switch (id) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 7: return DType::Q5_0;
    case 8: return DType::Q5_1;
    case 9: return DType::Q8_0;
    default: return std::nullopt;
  }
}

struct Reader {
  std::span<const uint8_t> bytes;
  uint64_t pos = 0;
  const std::string& path;

  bool at_end() const { return pos >= bytes.size(); }
  uint32_t u32(const char* what) {
    GA_CHECK(bytes.size() - pos >= 4, InvalidFormat, "rwkv: '", path, "' is truncated (", what, " at byte ", pos, ")");
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  }
};

// A parameter the forward reads as one flat vector, whatever extra dimensions the converter gave it.
bool flat_vector(const WeightView& w) {
  for (const char* s : {".time_decay", ".time_faaaa", ".time_first", ".r_k", ".x_rwkvag"}) {
    if (w.name.ends_with(s)) return true;
  }
  int big = 0;
  for (const uint64_t n : w.ne) big += n > 1 ? 1 : 0;
  return big <= 1;
}

// The stacks the forward multiplies piece by piece, as named views of their pieces: v6 time_maa_w2
// [D, C, 5] -> time_maa_w2.0 .. .4 ([D, C]: the w, k, v, r, g mixes' LoRA up-projections); v7 x_rwkvag
// [6 C] -> x_r, x_w, x_k, x_v, x_a, x_g (the converter concatenated them in this order).
void split_stacks(LoadedModel& model) {
  std::vector<WeightView> pieces;
  std::vector<std::string> stacks;  // replaced by their pieces (so no byte is counted twice)
  for (const auto& [name, w] : model.weights) {
    if (name.ends_with(".att.time_maa_w2")) {
      GA_CHECK(w.ne.size() == 3, InvalidFormat, "rwkv: tensor ", name, " has ", w.ne.size(), " dimensions, expected 3");
      stacks.push_back(name);
      const uint64_t piece = w.nbytes / w.ne[2];
      for (uint64_t i = 0; i < w.ne[2]; ++i) {
        WeightView p{name + "." + std::to_string(i), w.type, {w.ne[0], w.ne[1]}, w.data + i * piece, piece};
        pieces.push_back(std::move(p));
      }
    } else if (name.ends_with(".att.x_rwkvag")) {
      GA_CHECK(w.type == DType::F32 && w.ne.size() == 1 && w.ne[0] % 6 == 0, InvalidFormat, "rwkv: tensor ", name,
               " is not 6 float32 vectors");
      stacks.push_back(name);
      const std::string base = name.substr(0, name.size() - std::string_view("rwkvag").size());
      const uint64_t n = w.ne[0] / 6;
      const char* parts = "rwkvag";
      for (uint64_t i = 0; i < 6; ++i) {
        pieces.push_back(WeightView{base + parts[i], w.type, {n}, w.data + i * n * 4, n * 4});
      }
    }
  }
  for (const std::string& name : stacks) model.weights.erase(name);
  for (WeightView& p : pieces) {
    const std::string name = p.name;
    GA_CHECK(!model.weights.contains(name), InvalidFormat, "rwkv: tensor ", name, " is also a piece of a stack");
    model.weights.emplace(name, std::move(p));
  }
}

}  // namespace

bool is_rwkv_cpp_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint32_t magic = 0;
  const bool ok = std::fread(&magic, 4, 1, f) == 1;
  std::fclose(f);
  return ok && magic == kRwkvMagic;
}

LoadedModel load_rwkv_model(const std::string& path, const LoadOptions& options) {
  const std::shared_ptr<MappedFile> file = MappedFile::open(path);
  Reader in{file->bytes(), 0, path};
  const uint32_t magic = in.u32("the magic");
  GA_CHECK(magic == kRwkvMagic, InvalidFormat, "rwkv: '", path, "' does not start with the rwkv.cpp magic 'ggmf'");
  const uint32_t version = in.u32("the version");
  GA_CHECK(version == 100 || version == 101, Unsupported, "rwkv: '", path, "' has file version ", version,
           " (rwkv.cpp writes 100 or 101)");
  const uint32_t n_vocab = in.u32("n_vocab");
  const uint32_t n_embed = in.u32("n_embed");
  const uint32_t n_layer = in.u32("n_layer");
  const uint32_t file_type = in.u32("the data type");
  GA_CHECK(rwkv_type(file_type).has_value(), Unsupported, "rwkv: '", path, "' has data type ", file_type,
           ", which gpu_accel does not read (FP32, FP16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0)");
  GA_CHECK(n_vocab > 0 && n_embed > 0 && n_layer > 0, InvalidFormat, "rwkv: '", path, "' has n_vocab ", n_vocab,
           ", n_embed ", n_embed, ", n_layer ", n_layer);

  LoadedModel model;
  model.format = "rwkv.cpp";
  model.path = path;
  model.storage.push_back(file);
  std::vector<uint64_t> head_ne;  // the stored shape the head count comes from
  while (!in.at_end()) {
    const uint32_t dims = in.u32("a tensor's dimension count");
    const uint32_t key_length = in.u32("a tensor's name length");
    const uint32_t type_id = in.u32("a tensor's data type");
    GA_CHECK(dims >= 1 && dims <= kMaxDims, InvalidFormat, "rwkv: '", path, "': a tensor at byte ", in.pos - 12,
             " has ", dims, " dimensions");
    GA_CHECK(key_length >= 1 && key_length <= kMaxKeyLength, InvalidFormat, "rwkv: '", path,
             "': a tensor at byte ", in.pos - 12, " has a name of ", key_length, " bytes");
    WeightView w;
    for (uint32_t d = 0; d < dims; ++d) {
      w.ne.push_back(in.u32("a tensor's shape"));
      GA_CHECK(w.ne.back() > 0, InvalidFormat, "rwkv: '", path, "': a tensor has a dimension of size 0");
    }
    GA_CHECK(in.bytes.size() - in.pos >= key_length, InvalidFormat, "rwkv: '", path, "' is truncated in a tensor name");
    w.name.assign(reinterpret_cast<const char*>(in.bytes.data() + in.pos), key_length);
    in.pos += key_length;
    const std::optional<DType> type = rwkv_type(type_id);
    GA_CHECK(type.has_value(), Unsupported, "rwkv: tensor ", w.name, " has data type ", type_id,
             ", which gpu_accel does not read");
    GA_CHECK(version == 101 || *type == DType::F32 || *type == DType::F16, Unsupported, "rwkv: tensor ", w.name,
             " is quantized in the file version 100 layout, which ggml dropped; quantize the FP16 file again");
    w.type = *type;
    const DTypeTraits& t = traits(w.type);
    GA_CHECK(w.ne[0] % t.block_size == 0, InvalidFormat, "rwkv: tensor ", w.name, " has rows of ", w.ne[0],
             " elements, not a multiple of the ", t.name, " block size ", t.block_size);
    constexpr uint64_t kMaxElements = uint64_t{1} << 40;  // far above any model, far below overflow
    uint64_t rows = 1;
    for (size_t d = 1; d < w.ne.size(); ++d) {
      rows *= w.ne[d];
      GA_CHECK(rows <= kMaxElements && w.ne[0] <= kMaxElements && rows * w.ne[0] <= kMaxElements, InvalidFormat,
               "rwkv: tensor ", w.name, " has an impossible shape");
    }
    w.nbytes = row_bytes(w.type, w.ne[0]) * rows;
    GA_CHECK(in.bytes.size() - in.pos >= w.nbytes, InvalidFormat, "rwkv: '", path, "' is truncated: tensor ", w.name,
             " needs ", w.nbytes, " bytes, ", in.bytes.size() - in.pos, " are left");
    w.data = in.bytes.data() + in.pos;
    in.pos += w.nbytes;
    if (w.name == "blocks.0.att.time_decay" || w.name == "blocks.0.att.r_k") head_ne = w.ne;
    if (w.type == DType::F32 && flat_vector(w)) w.ne = {w.ne[0] * rows};
    GA_CHECK(!model.weights.contains(w.name), InvalidFormat, "rwkv: tensor ", w.name, " appears twice");
    model.weights.emplace(w.name, std::move(w));
  }

  split_stacks(model);

  // The version, by the tensors present (rwkv.cpp's rule).
  const auto has = [&](const char* name) { return model.weights.contains(name); };
  std::string arch = "rwkv4";
  if (has("blocks.0.att.ln_x.weight")) arch = has("blocks.0.att.gate.weight") ? "rwkv5.2" : "rwkv5.1";
  if (has("blocks.0.att.time_maa_x")) arch = "rwkv6";
  if (has("blocks.0.att.r_k")) arch = "rwkv7";

  ModelConfig& c = model.config;
  c.arch = arch;
  c.name = std::filesystem::path(path).stem().string();
  c.n_vocab = n_vocab;
  c.n_embd = n_embed;
  c.n_layer = n_layer;
  const WeightView* ffn_key = model.find_weight("blocks.0.ffn.key.weight");
  GA_CHECK(ffn_key != nullptr, InvalidFormat, "rwkv: '", path, "' has no tensor blocks.0.ffn.key.weight");
  c.n_ff = ffn_key->rows();
  c.n_head = 1;
  // Heads (rwkv.cpp's rule, on the stored shapes): v5/v6 time_decay is [1, S, H] (v5.1 [1, 1, H]), v7 r_k [S, H].
  if (arch != "rwkv4") {
    const bool v7 = arch == "rwkv7";
    GA_CHECK(head_ne.size() >= (v7 ? 2u : 3u), InvalidFormat, "rwkv: '", path, "': ",
             v7 ? "blocks.0.att.r_k" : "blocks.0.att.time_decay", " is missing or has too few dimensions to give the head count");
    c.n_head = static_cast<int64_t>(head_ne[v7 ? 1 : 2]);
    GA_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, InvalidFormat, "rwkv: ", c.n_head, " heads do not divide n_embed ",
             c.n_embd);
  }
  c.head_dim = c.n_embd / c.n_head;
  model.metadata.push_back({"rwkv.file_version", std::to_string(version)});
  model.metadata.push_back({"rwkv.version", arch.substr(4)});
  model.metadata.push_back({"rwkv.data_type", std::to_string(file_type)});

  // Byte-level vocabulary (the tiny models: 256 tokens, token = byte). rwkv.cpp's files carry no vocabulary
  // otherwise: a World model (65536 tokens) takes rwkv_vocab_v20230424.txt from the model's folder when it is
  // there (rwkv.cpp keeps it in python/rwkv_cpp/); without it the model loads with no tokenizer.
  const std::filesystem::path world = std::filesystem::path(path).parent_path() / "rwkv_vocab_v20230424.txt";
  if (n_vocab != 256 && std::filesystem::exists(world)) {
    model.vocab = Vocab::from_rwkv_world(world.string());
    GA_CHECK(static_cast<int64_t>(model.vocab.tokens.size()) <= c.n_vocab, InvalidFormat, world.string(), " has ",
             model.vocab.tokens.size(), " tokens, more than the model's ", c.n_vocab);
  } else if (n_vocab == 256) {
    model.vocab.type = VocabType::Bytes;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      model.vocab.tokens.push_back(name);
      model.vocab.token_types.push_back(TokenType::Byte);
    }
    model.vocab.add_space_prefix = false;
  }
  arch::check_model(model, options.progress);
  return model;
}

}  // namespace ga
