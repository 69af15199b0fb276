// Vocab validation and end-of-generation conventions (see vocab_common.h).
#include "runtime/tokenizer/vocab_common.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "gpu_accel/error.h"

namespace ga::tok {

void validate_vocab(const Vocab& v, const char* source) {
  const size_t n = v.tokens.size();
  GA_CHECK(n > 0, InvalidFormat, source, ": the vocabulary has no tokens");
  GA_CHECK(n < static_cast<size_t>(INT32_MAX), InvalidFormat, source, ": ", n, " tokens is too many");
  GA_CHECK(v.scores.empty() || v.scores.size() == n, InvalidFormat, source, ": ", v.scores.size(),
           " scores for ", n, " tokens");
  GA_CHECK(v.token_types.empty() || v.token_types.size() == n, InvalidFormat, source, ": ", v.token_types.size(),
           " token types for ", n, " tokens");
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    const auto t = static_cast<int32_t>(v.token_types[i]);
    GA_CHECK(t >= 0 && t <= static_cast<int32_t>(TokenType::Byte), InvalidFormat, source, ": token ", i,
             " has unknown token type ", t);
  }
  const auto check_id = [&](int32_t id, const char* what) {
    GA_CHECK(id >= -1 && id < static_cast<int64_t>(n), InvalidFormat, source, ": ", what, " id ", id,
             " is outside the vocabulary of ", n, " tokens");
  };
  check_id(v.bos_id, "BOS");
  check_id(v.eos_id, "EOS");
  check_id(v.unk_id, "UNK");
  check_id(v.pad_id, "padding");
  check_id(v.eot_id, "EOT");
  check_id(v.eom_id, "EOM");
  for (int32_t id : v.extra_eog_ids) check_id(id, "end-of-generation");
  GA_CHECK(!(v.add_bos && v.bos_id < 0), InvalidFormat, source, ": add_bos is set but there is no BOS token");
  GA_CHECK(!(v.add_eos && v.eos_id < 0), InvalidFormat, source, ": add_eos is set but there is no EOS token");
  GA_CHECK(v.type != VocabType::BPE || !v.merges.empty(), InvalidFormat, source, ": a BPE vocabulary needs merges");
  GA_CHECK(v.type != VocabType::Bytes || v.tokens.size() == 256, InvalidFormat, source, ": a byte vocabulary has 256 tokens, not ",
           v.tokens.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    // "left right": both sides non-empty. The first character may itself be a space in exotic
    // vocabularies, so the separator is searched from the second byte on (as llama.cpp does).
    const std::string& m = v.merges[i];
    const size_t sep = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    GA_CHECK(sep != std::string::npos && sep + 1 < m.size(), InvalidFormat, source, ": merge ", i, " '", m,
             "' is not of the form 'left right'");
  }
}

void apply_eog_conventions(Vocab& v) {
  static constexpr std::string_view kEotTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek "<｜end▁of▁sentence｜>"
  };
  static constexpr std::string_view kEogTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
  };
  const auto contains = [](const auto& list, const std::string& s) {
    return std::find(std::begin(list), std::end(list), s) != std::end(list);
  };
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), TokenType::Normal);
  const auto mark_control = [&](int32_t id) { v.token_types[static_cast<size_t>(id)] = TokenType::Control; };

  for (int32_t id = 0; id < static_cast<int32_t>(v.tokens.size()); ++id) {
    const std::string& text = v.tokens[static_cast<size_t>(id)];
    if (v.eot_id < 0 && contains(kEotTexts, text)) v.eot_id = id, mark_control(id);
    if (v.eom_id < 0 && text == "<|eom_id|>") v.eom_id = id, mark_control(id);
    if (contains(kEogTexts, text)) {
      mark_control(id);
      if (std::find(v.extra_eog_ids.begin(), v.extra_eog_ids.end(), id) == v.extra_eog_ids.end()) {
        v.extra_eog_ids.push_back(id);
      }
    }
  }
}

}  // namespace ga::tok
