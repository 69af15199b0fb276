// llama.cpp's file types and k-quant mixture rules (see quant_mix.h for the list and its source).
//
// The rules are written as one function per tensor family, each a short if-chain in llama.cpp's
// order, because that order decides which rule wins. Layer indices come from the tensor name:
// llama-quantize counts attn_v / ffn_down tensors in its layer-sorted processing order, which gives
// the same index for models with one such tensor per layer (all Llama-family models).
#include "model/tools/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "gpu_accel/error.h"

namespace ga::tools {
namespace {

// llama_ftype values (llama.h).
enum FtypeId : uint32_t {
  kAllF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 7, kQ5_0 = 8, kQ5_1 = 9, kQ2_K = 10,
  kQ3_K_S = 11, kQ3_K_M = 12, kQ3_K_L = 13, kQ4_K_S = 14, kQ4_K_M = 15, kQ5_K_S = 16, kQ5_K_M = 17,
  kQ6_K = 18, kBF16 = 32, kMXFP4 = 38 /* llama.cpp's MXFP4_MOE */, kNVFP4 = 39,
};

const FileType kFileTypes[] = {
    {"F32", kAllF32, DType::F32},   {"F16", kF16, DType::F16},         {"BF16", kBF16, DType::BF16},
    {"Q8_0", kQ8_0, DType::Q8_0},   {"Q4_0", kQ4_0, DType::Q4_0},      {"Q4_1", kQ4_1, DType::Q4_1},
    {"Q5_0", kQ5_0, DType::Q5_0},   {"Q5_1", kQ5_1, DType::Q5_1},      {"Q2_K", kQ2_K, DType::Q2_K},
    {"Q3_K_S", kQ3_K_S, DType::Q3_K}, {"Q3_K_M", kQ3_K_M, DType::Q3_K}, {"Q3_K_L", kQ3_K_L, DType::Q3_K},
    {"Q4_K_S", kQ4_K_S, DType::Q4_K}, {"Q4_K_M", kQ4_K_M, DType::Q4_K}, {"Q5_K_S", kQ5_K_S, DType::Q5_K},
    {"Q5_K_M", kQ5_K_M, DType::Q5_K}, {"Q6_K", kQ6_K, DType::Q6_K},   {"MXFP4", kMXFP4, DType::MXFP4},
    {"NVFP4", kNVFP4, DType::NVFP4},
};

// llama-quantize's aliases: a bare k-quant name means its _M mixture.
struct Alias {
  const char* alias;
  const char* target;
};
const Alias kAliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool is_fp4(DType t) { return t == DType::MXFP4 || t == DType::NVFP4; }

bool use_more_bits(int64_t i_layer, int64_t n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

DType attn_v_type(uint32_t ftype, const MixContext& ctx, int64_t i, DType t) {
  if (ftype == kQ2_K) {
    t = ctx.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
  } else if (ftype == kQ3_K_M) {
    t = i < 2 ? DType::Q5_K : DType::Q4_K;
  } else if (ftype == kQ3_K_L) {
    t = DType::Q5_K;
  } else if ((ftype == kQ4_K_M || ftype == kQ5_K_M) && use_more_bits(i, ctx.n_attn_v)) {
    t = DType::Q6_K;
  } else if (ftype == kQ4_K_S && i < 4) {
    t = DType::Q5_K;
  }
  // llama.cpp's LLM_TYPE_70B (80 Llama layers): attn_v is 8x smaller than attn_q under GQA 8, so
  // more bits cost almost nothing.
  constexpr int64_t kLlama70bLayers = 80;
  if (ctx.n_layer == kLlama70bLayers && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
  return t;
}

DType ffn_down_type(uint32_t ftype, const MixContext& ctx, int64_t i, DType t) {
  const int64_t n = ctx.n_layer;
  if (ftype == kQ2_K) return DType::Q3_K;
  if (ftype == kQ3_K_M) return i < n / 16 ? DType::Q5_K : DType::Q4_K;  // non-Falcon: always >= Q4_K
  if (ftype == kQ3_K_L) return DType::Q5_K;
  if (ftype == kQ4_K_M) return use_more_bits(i, n) ? DType::Q6_K : t;
  if (ftype == kQ5_K_M) return use_more_bits(i, n) ? DType::Q6_K : t;
  if (ftype == kQ4_K_S && i < n / 8) return DType::Q5_K;
  return t;
}

DType attn_output_type(uint32_t ftype, DType t) {
  if (ftype == kQ2_K) return DType::Q3_K;
  if (ftype == kQ3_K_M) return DType::Q4_K;
  if (ftype == kQ3_K_L) return DType::Q5_K;
  return t;
}

DType attn_qkv_type(uint32_t ftype, DType t) {
  if (ftype == kQ3_K_M || ftype == kQ3_K_L) return DType::Q4_K;
  if (ftype == kQ4_K_M) return DType::Q5_K;
  if (ftype == kQ5_K_M) return DType::Q6_K;
  return t;
}

// The next type down llama.cpp's fallback chain for a row length the type cannot hold.
DType fallback_for(DType t) {
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: return DType::Q4_0;  // llama.cpp: IQ4_NL, which we cannot quantize to
    case DType::Q4_K: return DType::Q5_0;
    case DType::Q5_K: return DType::Q5_1;
    case DType::Q6_K: return DType::Q8_0;
    case DType::NVFP4: return DType::MXFP4;  // the same levels, blocks of 32
    default: return DType::F16;
  }
}

}  // namespace

std::optional<FileType> file_type_from_name(std::string_view name) {
  std::string key = upper(name);
  for (const auto& a : kAliases) {
    if (key == a.alias) key = a.target;
  }
  for (const auto& f : kFileTypes) {
    if (key == f.name) return f;
  }
  return std::nullopt;
}

std::string file_type_names() {
  std::string out;
  for (const auto& f : kFileTypes) out += std::string(out.empty() ? "" : ", ") + f.name;
  out += " (Q3_K, Q4_K, Q5_K: the _M mixes)";
  return out;
}

int64_t layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  const char* begin = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  int64_t layer = -1;
  const auto [ptr, ec] = std::from_chars(begin, end, layer);
  if (ec != std::errc() || ptr == begin || ptr == end || *ptr != '.') return -1;
  return layer;
}

bool should_quantize(std::string_view name, size_t n_dims) {
  constexpr std::string_view kWeight = "weight";
  if (name.size() < kWeight.size() || name.substr(name.size() - kWeight.size()) != kWeight) return false;
  if (n_dims < 2) return false;
  // llama-quantize keeps these as they are: norms, MoE routers, positional / token-type embeddings.
  for (const char* keep : {"_norm.weight", "ffn_gate_inp.weight", "position_embd.weight", "token_types.weight"}) {
    if (contains(name, keep)) return false;
  }
  // ... and RWKV's small 2-D tensors: time_first, the LoRA matrices, the fused lerp stack (llama-quant.cpp's list)
  for (const char* keep : {"time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
                           "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
                           "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
                           "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight"}) {
    if (contains(name, keep)) return false;
  }
  return true;
}

bool converter_keeps_f32(std::string_view name) {
  for (const char* f32 : {"time_mix_first.weight", "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_decay_w1.weight",
                          "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight"}) {
    if (contains(name, f32)) return true;
  }
  return false;
}

DType choose_tensor_type(const FileType& ftype, const MixContext& ctx, std::string_view name, uint64_t ne0,
                         bool pure, std::string* fallback_note) {
  DType t = ftype.base;
  if (!pure && traits(ftype.base).quantized) {
    const int64_t layer = layer_of(name);
    if (name == "output.weight" || (!ctx.has_output && name == "token_embd.weight")) {
      if (ne0 % traits(t).block_size != 0 || is_fp4(t)) {  // llama.cpp gives its FP4 file types a Q8_0 classifier
        t = DType::Q8_0;
      } else if (t != DType::Q8_0) {
        t = DType::Q6_K;
      }
    } else if (name == "token_embd.weight") {
      // keeps the default type for every file type we offer
    } else if (contains(name, "attn_v.weight")) {
      t = attn_v_type(ftype.id, ctx, layer, t);
    } else if (contains(name, "ffn_down")) {
      t = ffn_down_type(ftype.id, ctx, layer, t);
    } else if (contains(name, "attn_output.weight")) {
      t = attn_output_type(ftype.id, t);
    } else if (contains(name, "attn_qkv.weight")) {
      t = attn_qkv_type(ftype.id, t);
    }
  }
  const DType chosen = t;
  while (ne0 % traits(t).block_size != 0) t = fallback_for(t);
  if (t != chosen && fallback_note != nullptr) {
    *fallback_note = str(name, ": row length ", ne0, " is not a multiple of the ", dtype_name(chosen), " block size ",
                         traits(chosen).block_size, "; using fallback quantization ", dtype_name(t));
  }
  return t;
}

}  // namespace ga::tools
