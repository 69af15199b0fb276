// Tokenizer: special-token splitting, then SentencePiece or byte-level BPE per text fragment, and the
// reverse mapping from ids to bytes.
//
// The Vocab is turned once into the lookup structures the loops need (text -> id hash map, interned BPE
// merge table, byte tokens, compiled pre-tokenizer regexes), so encode() does no per-call setup.
// Behaviour follows llama.cpp's llama-vocab.cpp, whose test vectors are the reference:
// - SPM: a space is prepended to each text fragment that starts the input or follows a special token
//   (when add_space_prefix), spaces become U+2581, symbols that are not tokens become <0xXX> byte tokens.
// - BPE: each fragment is split by the pre-tokenizer regexes, each piece's bytes are mapped through
//   GPT-2's byte-to-unicode table and merged by rank.
// Invalid UTF-8 never throws: for matching, each bad byte counts as U+FFFD, but the byte itself is what
// gets encoded (SPM: its <0xXX> token; BPE: its byte-level character), so decode(encode(s)) == s holds
// for any bytes. decode() concatenates pieces without Hugging Face's clean_up_tokenization_spaces, so
// it stays the exact inverse of encode().
#include "gpu_accel/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <unordered_set>

#include "gpu_accel/error.h"
#include "runtime/tokenizer/merge.h"
#include "runtime/tokenizer/nfc.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/special_tokens.h"
#include "runtime/tokenizer/vocab_common.h"

namespace ga {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (const char c : text) {
    if (c == ' ') {
      out += kSpaceMarker;
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_spaces(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
      out += ' ';
      i += kSpaceMarker.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

// "<0x0A>" -> 10; -1 when the text is not a byte token.
int parse_byte_token(const std::string& text) {
  if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Byte-level token text -> the bytes it stands for. Characters outside GPT-2's table (which only
// user-defined tokens contain) are kept as their UTF-8.
std::string byte_level_decode(const std::string& text) {
  std::string out;
  const tok::DecodedText decoded = tok::decode_utf8(text);
  for (size_t i = 0; i < decoded.cps.size(); ++i) {
    const int byte = tok::unicode_to_byte(decoded.cps[i]);
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text, decoded.byte_offsets[i], decoded.byte_offsets[i + 1] - decoded.byte_offsets[i]);
    }
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  Vocab v;
  tok::TokenMap token_ids;                 // token text -> id (a later duplicate wins, as in llama.cpp)
  std::unique_ptr<tok::RankMerger> ranks;  // BPE, and SPM vocabs that come with merges
  std::unique_ptr<tok::PreTokenizer> pre;  // BPE only
  std::unique_ptr<tok::SpecialTokenSplitter> specials;
  std::array<int32_t, 256> byte_tokens{};   // SPM: the <0xXX> token; BPE: the token of the byte's character
  std::array<int32_t, 256> byte_symbols{};  // BPE: the merge symbol of the byte's character
  std::array<int32_t, 3> replacement_tokens{};  // byte tokens of U+FFFD's UTF-8 (EF BF BD), -1 if missing
  tok::JoinablePairs joinable;               // SPM: where the text may be cut before merging
  std::unordered_set<int32_t> eog;
  std::vector<std::string> pieces;  // token_to_piece(id, render_special = false) for every id
  size_t max_token_bytes = 0;        // RwkvWorld: the longest match to try

  explicit Impl(Vocab vocab) : v(std::move(vocab)) {
    tok::validate_vocab(v, "tokenizer vocabulary");
    const size_t n = v.tokens.size();
    if (v.token_types.empty()) v.token_types.assign(n, TokenType::Normal);
    token_ids.reserve(n);
    for (size_t id = 0; id < n; ++id) {
      if (!v.tokens[id].empty()) token_ids[v.tokens[id]] = static_cast<int32_t>(id);
    }
    if (!v.merges.empty()) ranks = std::make_unique<tok::RankMerger>(v.merges, token_ids, n);
    if (v.type == VocabType::Bytes || v.type == VocabType::RwkvWorld) {
      // nothing to merge or split: a byte is its token, or the longest token at each byte wins
      for (const std::string& t : v.tokens) max_token_bytes = std::max(max_token_bytes, t.size());
    } else if (v.type == VocabType::SPM) {
      for (const auto& [text, id] : token_ids) joinable.add(text);
      for (const auto& m : v.merges) joinable.add(m.substr(0, m.find(' ', 1)) + m.substr(m.find(' ', 1) + 1));
    } else {
      pre = std::make_unique<tok::PreTokenizer>(v.pre_regexes.empty() ? tok::pre_regexes_for(v.pre) : v.pre_regexes);
    }
    specials = std::make_unique<tok::SpecialTokenSplitter>(v);

    for (int b = 0; b < 256; ++b) {
      std::string text;
      if (v.type == VocabType::Bytes) {
        byte_tokens[b] = b;
        continue;
      }
      if (v.type == VocabType::RwkvWorld) {
        const auto it = token_ids.find(std::string(1, static_cast<char>(b)));
        byte_tokens[b] = it == token_ids.end() ? -1 : it->second;
        continue;
      }
      if (v.type == VocabType::SPM) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        text = buf;
      } else {
        text = tok::byte_to_unicode_utf8(static_cast<uint8_t>(b));
        byte_symbols[b] = ranks->symbol_id(text, token_ids);
      }
      const auto it = token_ids.find(text);
      byte_tokens[b] = it == token_ids.end() ? -1 : it->second;
    }

    replacement_tokens = {byte_tokens[0xEF], byte_tokens[0xBF], byte_tokens[0xBD]};

    for (int32_t id : {v.eos_id, v.eot_id, v.eom_id}) {
      if (id >= 0) eog.insert(id);
    }
    eog.insert(v.extra_eog_ids.begin(), v.extra_eog_ids.end());

    pieces.resize(n);
    for (size_t id = 0; id < n; ++id) pieces[id] = make_piece(static_cast<int32_t>(id));
  }

  TokenType type_of(int32_t id) const { return v.token_types[static_cast<size_t>(id)]; }

  std::string make_piece(int32_t id) const {
    const std::string& text = v.tokens[static_cast<size_t>(id)];
    switch (type_of(id)) {
      case TokenType::UserDefined:
        return text;
      case TokenType::Normal:
        if (v.type == VocabType::RwkvWorld) return text;  // raw bytes
        return v.type == VocabType::SPM ? unescape_spaces(text) : byte_level_decode(text);
      case TokenType::Byte: {
        const int byte = parse_byte_token(text);
        if (byte >= 0) return std::string(1, static_cast<char>(byte));
        return v.type == VocabType::SPM ? unescape_spaces(text) : byte_level_decode(text);
      }
      default:  // Control, Unknown: only with render_special. Unused, Undefined: nothing (as llama.cpp)
        return {};
    }
  }

  // Bytes of a symbol that is not a token. SPM without byte fallback: UNK. Otherwise each byte's token;
  // a byte the vocabulary has no token for (e.g. 0xFF, which never occurs in UTF-8, is missing from
  // Falcon's) becomes U+FFFD's bytes, like a decoder's errors="replace", else UNK; only a vocabulary
  // with neither makes encode() throw.
  void emit_fallback(std::string_view bytes, std::vector<int32_t>& out) const {
    if (v.type == VocabType::SPM && !v.byte_fallback) {
      push_unk(out);
      return;
    }
    for (const char c : bytes) {
      const int32_t id = byte_tokens[static_cast<uint8_t>(c)];
      if (id >= 0) {
        out.push_back(id);
      } else if (replacement_tokens[0] >= 0 && replacement_tokens[1] >= 0 && replacement_tokens[2] >= 0) {
        out.insert(out.end(), replacement_tokens.begin(), replacement_tokens.end());
      } else {
        push_unk(out);
      }
    }
  }

  void push_unk(std::vector<int32_t>& out) const {
    GA_CHECK(v.unk_id >= 0, InvalidArgument, "the text contains bytes the vocabulary cannot represent (no byte",
             " tokens for them, no U+FFFD and no UNK token)");
    out.push_back(v.unk_id);
  }

  void emit_symbols(std::string_view text, const std::vector<tok::MergedSymbol>& symbols,
                    std::vector<int32_t>& out) const {
    for (const auto& s : symbols) {
      if (s.id >= 0 && static_cast<size_t>(s.id) < v.tokens.size()) {
        out.push_back(s.id);
      } else {
        emit_fallback(text.substr(s.begin, s.end - s.begin), out);
      }
    }
  }

  // Merges escaped[begin, end): one segment that no merge can cross at either end.
  void encode_spm_segment(std::string_view escaped, size_t begin, size_t end, std::vector<int32_t>& out) const {
    const std::string_view segment = escaped.substr(begin, end - begin);
    if (!ranks) {
      emit_symbols(segment, tok::merge_by_score(segment, token_ids, v.scores), out);
      return;
    }
    // Hugging Face byte_fallback BPE: characters merged by rank.
    std::vector<tok::MergedSymbol> symbols;
    for (size_t pos = 0; pos < segment.size();) {
      const size_t len = tok::utf8_sequence_length(segment, pos);
      symbols.push_back({pos, pos + len, ranks->symbol_id(segment.substr(pos, len), token_ids)});
      pos += len;
    }
    ranks->merge(symbols);
    emit_symbols(segment, symbols, out);
  }

  void encode_spm(std::string_view escaped, std::vector<int32_t>& out) const {
    const tok::DecodedText decoded = tok::decode_utf8(escaped);
    size_t begin = 0;
    for (size_t i = 1; i < decoded.cps.size(); ++i) {
      if (joinable.joinable(decoded.cps[i - 1], decoded.cps[i])) continue;
      encode_spm_segment(escaped, begin, decoded.byte_offsets[i], out);
      begin = decoded.byte_offsets[i];
    }
    if (begin < escaped.size()) encode_spm_segment(escaped, begin, escaped.size(), out);
  }

  // RWKV World: at each byte the longest token that matches (BlinkDL's trie tokenizer); a byte no token
  // starts with goes through emit_fallback (U+FFFD's bytes, else UNK, else an error).
  void encode_greedy(std::string_view text, std::vector<int32_t>& out) const {
    size_t i = 0;
    while (i < text.size()) {
      size_t len = std::min(max_token_bytes, text.size() - i);
      int32_t id = -1;
      for (; len > 0; --len) {
        const auto it = token_ids.find(text.substr(i, len));
        if (it != token_ids.end() && type_of(it->second) == TokenType::Normal) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {
        emit_fallback(text.substr(i, 1), out);
        ++i;
        continue;
      }
      out.push_back(id);
      i += len;
    }
  }

  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<tok::MergedSymbol> symbols;
    std::string byte_level;
    for (const auto& [begin, end] : pre->split(text)) {
      const std::string_view piece = text.substr(begin, end - begin);
      if (v.ignore_merges) {
        byte_level.clear();
        for (const char c : piece) byte_level += tok::byte_to_unicode_utf8(static_cast<uint8_t>(c));
        if (const auto it = token_ids.find(byte_level); it != token_ids.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      // One symbol per byte: byte-level BPE maps each byte to one character.
      symbols.clear();
      for (size_t i = 0; i < piece.size(); ++i) symbols.push_back({i, i + 1, byte_symbols[static_cast<uint8_t>(piece[i])]});
      ranks->merge(symbols);
      emit_symbols(piece, symbols, out);
    }
  }
};

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_unique<Impl>(std::move(vocab))) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && m.v.add_bos) out.push_back(m.v.bos_id);

  bool after_special = true;  // SPM: the text at the start and after a special token gets the space prefix
  for (const tok::Fragment& f : m.specials->split(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    // Like Hugging Face, the normalizer (NFC for Qwen2) runs on the text between special tokens.
    std::string nfc_storage;
    const std::string_view raw = m.v.requires_nfc ? tok::to_nfc(text.substr(f.begin, f.end - f.begin), nfc_storage)
                                                  : text.substr(f.begin, f.end - f.begin);
    if (m.v.type == VocabType::Bytes) {
      for (const char c : raw) out.push_back(static_cast<uint8_t>(c));
    } else if (m.v.type == VocabType::RwkvWorld) {
      m.encode_greedy(raw, out);
    } else if (m.v.type == VocabType::SPM) {
      std::string escaped;
      if (m.v.add_space_prefix && after_special) escaped = kSpaceMarker;
      escaped += escape_spaces(raw);
      m.encode_spm(escaped, out);
    } else {
      m.encode_bpe(raw, out);
    }
    after_special = false;
  }

  if (add_special && m.v.add_eos) out.push_back(m.v.eos_id);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  GA_CHECK(id >= 0 && id < n_vocab(), OutOfRange, "token id ", id, " is outside the vocabulary of ", n_vocab(),
           " tokens");
  const TokenType type = impl_->type_of(id);
  if (render_special && (type == TokenType::Control || type == TokenType::Unknown)) {
    return impl_->v.tokens[static_cast<size_t>(id)];
  }
  return impl_->pieces[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  const Impl& m = *impl_;
  std::string out;
  // SentencePiece's dummy prefix: the first piece after an optional leading BOS loses one leading space.
  const bool strip = m.v.type == VocabType::SPM && m.v.add_space_prefix;
  const size_t first = !ids.empty() && ids[0] == m.v.bos_id ? 1 : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], render_special);
    if (strip && i == first && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  return out;
}

const Vocab& Tokenizer::vocab() const { return impl_->v; }
int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->v.tokens.size()); }
int32_t Tokenizer::bos() const { return impl_->v.bos_id; }
int32_t Tokenizer::eos() const { return impl_->v.eos_id; }
bool Tokenizer::is_eog(int32_t id) const { return impl_->eog.count(id) > 0; }
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && impl_->type_of(id) == TokenType::Control;
}

}  // namespace ga
