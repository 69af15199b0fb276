// Steps shared by every Vocab source (GGUF keys, Hugging Face tokenizer.json): validation and the
// end-of-generation / control-token conventions llama.cpp applies after loading.
//
// Why shared: the tokenizer algorithms trust a Vocab completely, so both loaders must end with the
// same checks, and both must agree on which tokens stop generation.
#pragma once

#include "gpu_accel/tokenizer.h"

namespace ga::tok {

// Throws InvalidFormat (naming `source`) when array lengths differ from the token count, a special id
// is outside the vocab, or a BPE merge is malformed.
void validate_vocab(const Vocab& vocab, const char* source);

// Finds EOT/EOM tokens by their usual texts when the file does not name them ("<|eot_id|>",
// "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", DeepSeek's end of sentence),
// lists every such token in extra_eog_ids and marks it Control, as llama.cpp does: a chat model's
// turn-end token must stop generation and never be rendered as text.
void apply_eog_conventions(Vocab& vocab);

}  // namespace ga::tok
