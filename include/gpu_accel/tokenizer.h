// Tokenizers: SentencePiece-style (llama "spm") and byte-level BPE with the pre-tokenizers of the
// common model families, exactly as llama.cpp's test vectors define them.
//
// A Vocab holds everything a tokenizer needs, whatever file it came from (GGUF `tokenizer.*` keys or
// a Hugging Face tokenizer.json), so the algorithms never look at file formats.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ga {

namespace gguf {
class File;
}

enum class VocabType {
  SPM,  // SentencePiece-style BPE over characters with byte fallback (tokenizer.ggml.model = "llama")
  BPE,  // byte-level BPE with merges (tokenizer.ggml.model = "gpt2")
  Bytes,  // token id = byte value, 256 tokens "<0xXX>" (rwkv.cpp's tiny byte-level RWKV models)
  RwkvWorld,  // greedy longest match over bytes, tokens as raw bytes (RWKV World, rwkv_vocab_v20230424)
};

// ggml token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct Vocab {
  VocabType type = VocabType::SPM;
  // Pre-tokenizer name as in `tokenizer.ggml.pre`: "default", "llama-bpe" (Llama 3), "qwen2",
  // "gpt-2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", "refact", "mpt", ...
  std::string pre = "default";
  // Split regexes applied in sequence. Filled from `pre` for GGUF vocabs, or taken from
  // tokenizer.json's pre_tokenizer; used as given when non-empty.
  std::vector<std::string> pre_regexes;

  std::vector<std::string> tokens;     // token text as stored (SPM: "▁" for space; BPE: byte-level chars)
  std::vector<float> scores;           // SPM merge priorities (may be empty for BPE)
  std::vector<TokenType> token_types;  // may be empty: every token Normal
  // BPE: "left right", rank = index. SPM: normally empty (merges follow `scores`); a Hugging Face
  // byte_fallback BPE (Llama 2 tokenizer.json) fills it, and then merge rank decides instead of score.
  std::vector<std::string> merges;

  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1, eom_id = -1;
  std::vector<int32_t> extra_eog_ids;  // other end-of-generation tokens (e.g. <|im_end|>)
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM: prepend "▁" to the text (SentencePiece's dummy prefix)
  bool byte_fallback = true;     // SPM: unknown characters become <0xXX> byte tokens
  bool ignore_merges = false;    // BPE: a pre-token that is itself a token is taken whole (Llama 3)
  // Qwen2's normalizer: encode() puts the text between special tokens into Unicode NFC first, like
  // Hugging Face tokenizers (invalid UTF-8 bytes pass through unchanged).
  bool requires_nfc = false;

  std::string chat_template;  // tokenizer.chat_template, if any

  // Reads the `tokenizer.*` keys of a GGUF file (throws InvalidFormat/Unsupported with the reason).
  static Vocab from_gguf(const gguf::File& file);
  // Reads a Hugging Face tokenizer.json (and, if the path is non-empty, tokenizer_config.json for
  // add_bos/add_eos, the chat template and special tokens).
  static Vocab from_hf_json(const std::string& tokenizer_json_path, const std::string& tokenizer_config_path = {});
  // Reads an RWKV World vocabulary file (rwkv_vocab_v20230424.txt: `<id> <Python literal> <length>` lines).
  static Vocab from_rwkv_world(const std::string& path);
};

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // add_special: prepend BOS / append EOS as the vocab says. parse_special: text that spells a
  // control/user-defined token (e.g. "<|im_end|>") becomes that token instead of plain text.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;

  // The bytes a token stands for ("▁the" -> " the", "<0x0A>" -> "\n", byte-level chars -> bytes).
  // Control tokens give "" unless render_special. A piece may be an incomplete UTF-8 sequence.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // Concatenated pieces; for SPM vocabs with add_space_prefix the leading space of the first piece
  // after BOS is removed, so decode(encode(s)) == s.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  const Vocab& vocab() const;
  int32_t n_vocab() const;
  int32_t bos() const;
  int32_t eos() const;
  bool is_eog(int32_t id) const;      // EOS, EOT, EOM or another end-of-generation token
  bool is_control(int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ga
