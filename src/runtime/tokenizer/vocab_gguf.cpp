// Vocab::from_gguf: the `tokenizer.*` keys of a GGUF file.
//
// Defaults follow llama.cpp's llama-vocab.cpp, because GGUF files are written by its converter and
// leave out keys whose llama.cpp default is right: an SPM ("llama") vocab adds BOS and a space prefix
// unless told otherwise and has UNK 0 / BOS 1 / EOS 2; a BPE ("gpt2") vocab gets its add_bos and
// ignore_merges from the pre-tokenizer name. Special ids equal to 0xFFFFFFFF (converters write it for
// "none") are treated as absent; any other id outside the vocabulary is a corrupt file.
#include <cstdint>
#include <optional>
#include <string>

#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab_common.h"

namespace ga {
namespace {

constexpr int64_t kNoTokenU32 = 0xFFFFFFFF;

// Reads an optional special-token id; keeps `id` (the default) when absent or "none".
void read_token_id(const gguf::File& file, const char* key, size_t n_tokens, int32_t& id) {
  const std::optional<int64_t> value = file.get_int(key);
  if (!value || *value == kNoTokenU32 || *value == -1) return;
  GA_CHECK(*value >= 0 && *value < static_cast<int64_t>(n_tokens), InvalidFormat, "GGUF key ", key, " = ", *value,
           " is outside the vocabulary of ", n_tokens, " tokens");
  id = static_cast<int32_t>(*value);
}

// BPE pre-tokenizers for which llama.cpp adds BOS and takes whole-token pre-tokens without merging.
bool is_llama3_style(const std::string& pre) {
  return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "falcon3";
}

// A token of an RWKV World GGUF: llama.cpp's converter stores the token's bytes as Python's bytes repr without
// the b'' (\xHH for bytes outside printable ASCII; \t \n \r; \\ and \' for themselves); llama.cpp's
// llama_unescape_rwkv_token reads it back the same way.
std::string unescape_rwkv_token(const std::string& escaped, size_t id) {
  std::string out;
  out.reserve(escaped.size());
  for (size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '\\') {
      out += escaped[i];
      continue;
    }
    GA_CHECK(i + 1 < escaped.size(), InvalidFormat, "GGUF tokenizer.ggml.tokens: RWKV token ", id, " ends in a backslash");
    const char e = escaped[++i];
    if (e == 't') {
      out += '\t';
    } else if (e == 'n') {
      out += '\n';
    } else if (e == 'r') {
      out += '\r';
    } else if (e == 'x') {
      const int hi = i + 2 < escaped.size() ? text::hex_digit_value(escaped[i + 1]) : -1;
      const int lo = hi >= 0 ? text::hex_digit_value(escaped[i + 2]) : -1;
      GA_CHECK(lo >= 0, InvalidFormat, "GGUF tokenizer.ggml.tokens: RWKV token ", id, " has a bad \\x escape");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += e;  // a backslash, a quote
    }
  }
  return out;
}

}  // namespace

Vocab Vocab::from_gguf(const gguf::File& file) {
  const std::optional<std::string> model = file.get_string("tokenizer.ggml.model");
  GA_CHECK(model.has_value(), Unsupported, "the GGUF file has no tokenizer (tokenizer.ggml.model is absent)");
  GA_CHECK(*model != "no_vocab" && *model != "none", Unsupported, "the GGUF file has no vocabulary (tokenizer.ggml.model = '",
           *model, "')");

  Vocab v;
  if (*model == "llama") {
    v.type = VocabType::SPM;
  } else if (*model == "gpt2") {
    v.type = VocabType::BPE;
  } else if (*model == "rwkv") {
    v.type = VocabType::RwkvWorld;
  } else {
    GA_THROW(Unsupported, "unsupported tokenizer model '", *model,
             "' (tokenizer.ggml.model; supported: 'llama' (SentencePiece), 'gpt2' (byte-level BPE), 'rwkv' (RWKV World))");
  }
  v.pre = file.get_string("tokenizer.ggml.pre").value_or("default");

  std::optional<std::vector<std::string>> tokens = file.get_string_array("tokenizer.ggml.tokens");
  GA_CHECK(tokens.has_value(), InvalidFormat, "GGUF key tokenizer.ggml.tokens is missing");
  v.tokens = std::move(*tokens);
  const size_t n = v.tokens.size();
  GA_CHECK(n > 0, InvalidFormat, "GGUF key tokenizer.ggml.tokens is empty");

  if (auto scores = file.get_f32_array("tokenizer.ggml.scores")) {
    GA_CHECK(scores->size() == n, InvalidFormat, "GGUF key tokenizer.ggml.scores has ", scores->size(),
             " entries for ", n, " tokens");
    v.scores = std::move(*scores);
  }
  if (auto types = file.get_int_array("tokenizer.ggml.token_type")) {
    GA_CHECK(types->size() == n, InvalidFormat, "GGUF key tokenizer.ggml.token_type has ", types->size(),
             " entries for ", n, " tokens");
    v.token_types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = (*types)[i];
      GA_CHECK(t >= 0 && t <= static_cast<int64_t>(TokenType::Byte), InvalidFormat,
               "GGUF key tokenizer.ggml.token_type: token ", i, " has unknown type ", t);
      v.token_types[i] = static_cast<TokenType>(t);
    }
  }

  if (v.type == VocabType::RwkvWorld) {
    // llama.cpp's defaults: no special ids (the converter writes bos = eos = 0 and eot = 261, "\n\n"), no BOS,
    // no space prefix; the tokens' bytes come back from their escaped form.
    for (size_t i = 0; i < n; ++i) v.tokens[i] = unescape_rwkv_token(v.tokens[i], i);
    v.add_bos = false;
    v.add_space_prefix = false;
    v.byte_fallback = false;
  } else if (v.type == VocabType::SPM) {
    v.bos_id = 1, v.eos_id = 2, v.unk_id = 0;  // llama.cpp's defaults for SentencePiece vocabs
    v.add_bos = true;
    v.add_space_prefix = true;
    v.byte_fallback = true;
  } else {
    auto merges = file.get_string_array("tokenizer.ggml.merges");
    GA_CHECK(merges.has_value(), InvalidFormat, "GGUF key tokenizer.ggml.merges is missing (needed by a BPE vocab)");
    v.merges = std::move(*merges);
    v.pre_regexes = tok::pre_regexes_for(v.pre);  // throws Unsupported for an unknown pre-tokenizer
    if (n > 11) v.bos_id = 11, v.eos_id = 11;     // llama.cpp's default (Falcon); real files set both
    v.add_bos = is_llama3_style(v.pre) || v.pre == "tekken" || v.pre == "chameleon";
    v.ignore_merges = is_llama3_style(v.pre) || v.pre == "tekken";
    v.add_space_prefix = false;
    v.byte_fallback = false;
  }

  read_token_id(file, "tokenizer.ggml.bos_token_id", n, v.bos_id);
  read_token_id(file, "tokenizer.ggml.eos_token_id", n, v.eos_id);
  read_token_id(file, "tokenizer.ggml.unknown_token_id", n, v.unk_id);
  read_token_id(file, "tokenizer.ggml.padding_token_id", n, v.pad_id);
  read_token_id(file, "tokenizer.ggml.eot_token_id", n, v.eot_id);
  read_token_id(file, "tokenizer.ggml.eom_token_id", n, v.eom_id);
  if (auto b = file.get_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
  if (auto b = file.get_bool("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
  if (auto b = file.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;
  if (auto t = file.get_string("tokenizer.chat_template")) v.chat_template = std::move(*t);

  tok::apply_eog_conventions(v);
  tok::validate_vocab(v, "GGUF tokenizer");
  return v;
}

}  // namespace ga
