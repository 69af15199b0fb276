// RWKV 6 and 7 in GGUF, as llama.cpp's convert_hf_to_gguf.py writes them (its conversion/rwkv.py, the tensor
// table of gguf-py, and src/models/rwkv{6,7}.cpp, which reads them).
//
// llama.cpp names tensors blk.N.time_mix_* / channel_mix_* where rwkv.cpp keeps BlinkDL's state-dict names
// (blocks.N.att.* / ffn.*), and fuses what BlinkDL keeps apart: v6's five lerp vectors time_maa_{w,k,v,r,g}
// and v7's six x_{r,w,k,v,a,g} become one time_mix_lerp_fused [C, 1, 1, 5|6]. The values are the same
// otherwise: both converters transpose the LoRA matrices the same way and leave time_decay and time_first raw
// for v6 (only the rescaling differs, see RwkvParams::rescale_every). So a GGUF loads by renaming and splitting
// views (no copy) onto the names model/arch/rwkv.cpp binds, one table serving both directions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "model/arch/architecture.h"

namespace ga::arch {

// `<arch>.*` keys -> config (rwkv6, rwkv7). InvalidFormat / Unsupported naming the key.
void read_rwkv_gguf(const GgufKeys& keys, ModelConfig& c);
// The inverse, in the converter's order (make-model).
void write_rwkv_gguf(const ModelConfig& c, gguf::Writer& w);

// The GGUF's tensors, llama.cpp's names and shapes, in the converter's order (v7's layer 0 holds the
// converter's dummy time_mix_v0/v1/v2, copies of a0/a1/a2 that llama.cpp requires and never reads).
std::vector<TensorSpec> rwkv_gguf_tensor_specs(const ModelConfig& c);

// After load_gguf_model viewed the tensors: checks them against rwkv_gguf_tensor_specs (errors name the
// file's tensor), then renames them to BlinkDL's names and splits the fused stacks, as rwkv_loader leaves
// an rwkv.cpp file.
void rwkv_gguf_fixup(LoadedModel& model);

// BlinkDL's name (rwkv_loader's) of a GGUF tensor, for tools that write a GGUF from an rwkv.cpp file and for
// the fixup; nullopt for the stacks the caller assembles from pieces (time_mix_lerp_fused, v6's time_mix_w2)
// and for names the table does not hold.
std::optional<std::string> rwkv_blink_name(std::string_view arch, std::string_view gguf_name);

// The pieces of time_mix_lerp_fused, in order (v6: att.time_maa_w .. g; v7: att.x_r .. g), as layer suffixes.
std::vector<std::string> rwkv_fused_lerp_pieces(std::string_view arch);

}  // namespace ga::arch
