// rwkv.cpp model -> llama.cpp-layout GGUF, and the World tokenizer keys (see rwkv_to_gguf.h).
#include "model/tools/rwkv_to_gguf.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "gpu_accel/error.h"
#include "model/arch/architecture.h"
#include "model/arch/rwkv_gguf.h"
#include "model/tools/quant_mix.h"
#include "model/tools/row_convert.h"

namespace ga::tools {
namespace {

constexpr int64_t kRwkvContext = 1048576;  // the converter's "RWKV isn't context limited"
constexpr int32_t kWorldEot = 261;         // "\n\n", the converter's end-of-turn for chat
constexpr uint32_t kQuantizationVersion = 2;

// The source tensors of one GGUF tensor: one, or the pieces of a stack in order.
std::vector<const WeightView*> sources(const LoadedModel& m, const std::string& arch, int64_t il,
                                       std::string_view suffix, const std::string& gguf_name) {
  const std::string base = "blocks." + std::to_string(il) + ".";
  std::vector<const WeightView*> out;
  if (suffix == "time_mix_lerp_fused.weight") {
    for (const std::string& p : arch::rwkv_fused_lerp_pieces(arch)) out.push_back(&m.weight(base + p));
  } else if (arch == "rwkv6" && suffix == "time_mix_w2.weight") {
    for (int i = 0; i < 5; ++i) out.push_back(&m.weight(base + "att.time_maa_w2." + std::to_string(i)));
  } else if (arch == "rwkv7" && il == 0 &&
             (suffix == "time_mix_v0.weight" || suffix == "time_mix_v1.weight" || suffix == "time_mix_v2.weight")) {
    // the converter's layer-0 dummies: copies of a0 / a1 / a2
    out.push_back(&m.weight(base + "att.a" + std::string(1, suffix[std::string_view("time_mix_v").size()])));
  } else {
    const std::optional<std::string> blink = arch::rwkv_blink_name(arch, gguf_name);
    GA_CHECK(blink.has_value(), Internal, "rwkv: no BlinkDL name for ", gguf_name);
    out.push_back(&m.weight(*blink));
  }
  return out;
}

// "blk.3.time_mix_key.weight" -> "time_mix_key.weight"; a top-level name as it is.
std::string_view layer_suffix(std::string_view name, int64_t il) {
  return il < 0 ? name : name.substr(name.find('.', std::string_view("blk.").size()) + 1);
}

}  // namespace

std::string rwkv_token_repr(std::string_view bytes) {
  const bool single = bytes.find('\'') != std::string_view::npos, dbl = bytes.find('"') != std::string_view::npos;
  const char quote = single && !dbl ? '"' : '\'';  // repr's choice of delimiter, which it then escapes
  std::string out;
  for (const char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    if (ch == '\\' || ch == quote) {
      out += '\\';
      out += ch;
    } else if (ch == '\t') {
      out += "\\t";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (b < 0x20 || b >= 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", b);
      out += hex;
    } else {
      out += ch;
    }
  }
  return out;
}

Vocab rwkv_world_gguf_vocab(const Vocab* world_file, int64_t n_vocab) {
  Vocab v;
  v.type = VocabType::RwkvWorld;
  v.add_bos = false;
  v.add_space_prefix = false;
  v.tokens = {"<s>"};
  v.token_types = {TokenType::Control};
  if (world_file != nullptr) {
    // from_rwkv_world puts its end of text at id 0; the file's tokens follow it, as in the converter
    v.tokens.insert(v.tokens.end(), world_file->tokens.begin() + 1, world_file->tokens.end());
  } else {
    for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, static_cast<char>(b)));
  }
  v.token_types.resize(v.tokens.size(), TokenType::Normal);
  GA_CHECK(static_cast<int64_t>(v.tokens.size()) <= n_vocab, InvalidArgument, "the World vocabulary has ",
           v.tokens.size(), " tokens, more than the model's ", n_vocab);
  for (int64_t i = static_cast<int64_t>(v.tokens.size()); i < n_vocab; ++i) {
    v.tokens.push_back("[PAD" + std::to_string(i) + "]");
    v.token_types.push_back(TokenType::Unused);
  }
  v.bos_id = 0;
  v.eos_id = 0;
  if (n_vocab > kWorldEot) v.eot_id = kWorldEot;
  return v;
}

void write_rwkv_tokenizer(const Vocab& v, gguf::Writer& w) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType t = i < v.token_types.size() ? v.token_types[i] : TokenType::Normal;
    tokens.push_back(t == TokenType::Normal ? rwkv_token_repr(v.tokens[i]) : v.tokens[i]);  // '<s>', pads: as is
    types.push_back(static_cast<int32_t>(t));
  }
  w.set("tokenizer.ggml.model", gguf::Value::string("rwkv"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  const auto id = [&](const char* key, int32_t value) {
    if (value >= 0) w.set(key, gguf::Value::u32(static_cast<uint32_t>(value)));
  };
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.eot_token_id", v.eot_id);
  if (v.eos_id >= 0) w.set("tokenizer.chat_template", gguf::Value::string("rwkv-world"));
}

void write_rwkv_cpp_as_gguf(const LoadedModel& m, const std::string& out_path, const RwkvToGgufOptions& opt) {
  ModelConfig c = m.config;
  GA_CHECK(c.arch == "rwkv6" || c.arch == "rwkv7", Unsupported, "llama.cpp's GGUF holds RWKV 6 and 7, not ", c.arch);
  GA_CHECK(opt.rescale_every >= 0 && (opt.rescale_every == 0 || c.arch == "rwkv6"), InvalidArgument,
           "rescaling is what the converter does for RWKV 6 only");
  const bool v6 = c.arch == "rwkv6";
  c.n_ctx_train = kRwkvContext;
  RwkvParams& p = c.rwkv;
  p.rescale_every = opt.rescale_every;
  if (v6) {
    p.time_mix_extra_dim = m.weight("blocks.0.att.time_maa_w1").rows() / 5;
    p.time_decay_extra_dim = m.weight("blocks.0.att.time_decay_w1").rows();
  } else {
    p.lora_decay = m.weight("blocks.0.att.w1").rows();
    p.lora_iclr = m.weight("blocks.0.att.a1").rows();
    p.lora_value_mix = c.n_layer > 1 ? m.weight("blocks.1.att.v1").rows() : p.lora_iclr;
    p.lora_gate = m.weight("blocks.0.att.g1").rows();
  }

  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string(c.arch));
  w.set("general.type", gguf::Value::string("model"));
  w.set("general.name", gguf::Value::string(c.name));
  const DType matrix_type = opt.dequantize ? DType::F32 : m.weight("blocks.0.att.key.weight").type;
  if (const std::optional<FileType> ft = file_type_from_name(traits(matrix_type).name)) {
    w.set("general.file_type", gguf::Value::u32(ft->id));
  }
  arch::arch_of(c).write_gguf(c, w);
  if (m.vocab.type == VocabType::Bytes) {
    Vocab bytes = m.vocab;  // id = byte: every token is its one byte
    bytes.type = VocabType::RwkvWorld;
    for (size_t b = 0; b < bytes.tokens.size(); ++b) bytes.tokens[b] = std::string(1, static_cast<char>(b));
    bytes.token_types.assign(bytes.tokens.size(), TokenType::Normal);
    write_rwkv_tokenizer(bytes, w);
  } else {
    const Vocab v = rwkv_world_gguf_vocab(m.vocab.type == VocabType::RwkvWorld ? &m.vocab : nullptr, c.n_vocab);
    write_rwkv_tokenizer(v, w);
  }
  w.set("general.quantization_version", gguf::Value::u32(kQuantizationVersion));

  for (const arch::TensorSpec& spec : arch::rwkv_gguf_tensor_specs(c)) {
    const int64_t il = layer_of(spec.name);
    const std::string_view suffix = layer_suffix(spec.name, il);
    const std::vector<const WeightView*> parts = sources(m, c.arch, il, suffix, spec.name);
    const DType src_type = parts[0]->type;
    for (const WeightView* part : parts) {
      GA_CHECK(part->type == src_type, InvalidFormat, "rwkv: the pieces of ", spec.name, " differ in type");
    }
    const bool quantized = src_type != DType::F32 && src_type != DType::F16;
    const DType dst_type = opt.dequantize && quantized ? DType::F32 : src_type;
    float factor = 1.0f;
    if (opt.rescale_every > 0 && (suffix == "time_mix_output.weight" || suffix == "channel_mix_value.weight")) {
      factor = std::ldexp(1.0f, -static_cast<int>(il / opt.rescale_every));  // a power of two: exact in f16/f32
      GA_CHECK(dst_type == DType::F32 || dst_type == DType::F16, Unsupported, "rwkv: rescaling ", spec.name, " (",
               traits(dst_type).name, ") needs float weights; convert with dequantize");
    }
    std::vector<uint8_t> data;
    for (const WeightView* part : parts) {
      const int64_t cols = part->cols();
      const int64_t rows = static_cast<int64_t>(part->nbytes / row_bytes(src_type, static_cast<uint64_t>(cols)));
      std::vector<uint8_t> bytes(row_bytes(dst_type, static_cast<uint64_t>(cols)) * static_cast<uint64_t>(rows));
      if (factor == 1.0f) {
        convert_rows(src_type, part->data, dst_type, bytes.data(), rows, cols, nullptr);
      } else {
        std::vector<float> f(static_cast<size_t>(rows * cols));  // [rows][cols]
        convert_rows(src_type, part->data, DType::F32, reinterpret_cast<uint8_t*>(f.data()), rows, cols, nullptr);
        for (float& x : f) x *= factor;
        convert_rows(DType::F32, reinterpret_cast<const uint8_t*>(f.data()), dst_type, bytes.data(), rows, cols, nullptr);
      }
      data.insert(data.end(), bytes.begin(), bytes.end());
    }
    w.add_tensor(spec.name, dst_type, spec.ne, data.data(), data.size());
  }
  w.write(out_path);
}

}  // namespace ga::tools
