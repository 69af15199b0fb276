// Writing RWKV 6 / 7 GGUF files the way llama.cpp's convert_hf_to_gguf.py does (model/arch/rwkv_gguf.h holds
// the keys and the tensor table): from an rwkv.cpp model (tests compare the two files' logits; users with an
// rwkv.cpp file get a GGUF llama.cpp runs), and the World tokenizer keys make-model writes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "gpu_accel/tokenizer.h"

namespace ga::tools {

// A token's bytes as the converter stores them: Python's repr of the bytes without the b'' (printable ASCII as
// is; \t \n \r; \\ and the quote repr picked escaped; everything else \xhh).
std::string rwkv_token_repr(std::string_view bytes);

// The converter's World vocabulary layout (_set_vocab_rwkv_world): id 0 '<s>' (control), the file's tokens,
// then "[PAD<i>]" (unused) up to n_vocab; bos = eos = 0, eot = 261 ("\n\n"). From a parsed
// rwkv_vocab_v20230424.txt (Vocab::from_rwkv_world), or, with no file, every byte as one token (ids 1..256)
// so that any text still tokenizes: enough for random-weight benchmark models.
Vocab rwkv_world_gguf_vocab(const Vocab* world_file, int64_t n_vocab);

// tokenizer.ggml.model "rwkv", the tokens in repr form, their types, the special ids that are set, and the
// converter's chat template name ("rwkv-world").
void write_rwkv_tokenizer(const Vocab& vocab, gguf::Writer& w);

struct RwkvToGgufOptions {
  // Divide layer il's time_mix_output and channel_mix_value by 2^(il / n) and write rescale_every_n_layers n,
  // as the converter does for an HF folder whose config says rescale_every (rwkv6 only; float tensors only).
  int64_t rescale_every = 0;
  bool dequantize = false;  // write every quantized tensor as F32 (exact values), e.g. to rescale it
};

// An rwkv.cpp model (load_rwkv_model: arch rwkv6 or rwkv7) as a GGUF: the converter's keys, names, shapes and
// order; tensors keep their stored types (the tiny models' Q5_1 matrices stay Q5_1). The vocabulary: a World
// one as the converter lays it out, a byte-level one (the tiny models) as 256 'rwkv' tokens, id = byte.
void write_rwkv_cpp_as_gguf(const LoadedModel& model, const std::string& out_path, const RwkvToGgufOptions& options = {});

}  // namespace ga::tools
