// Stop strings and UTF-8 holdback for streamed generation (see generate_stream.h).
//
// Invariant: every stop string that can ever match lies entirely inside pending_, because any
// suffix of the released text that is a proper prefix of a stop string is held back. So a search
// of pending_ after each piece finds a stop string spanning any number of tokens.
#include "runtime/engine/generate_stream.h"

#include <algorithm>

#include "gpu_accel/error.h"

namespace ga::detail {

size_t complete_utf8_prefix(std::string_view text) {
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  const size_t n = text.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto byte = static_cast<unsigned char>(text[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((byte & 0xE0) == 0xC0) {
      need = 2;
    } else if ((byte & 0xF0) == 0xE0) {
      need = 3;
    } else if ((byte & 0xF8) == 0xF0) {
      need = 4;
    }
    return back < need ? n - back : n;
  }
  // Only continuation bytes (or nothing) at the end: not a sequence that can still complete.
  return n;
}

bool strips_first_space(const Tokenizer& tokenizer, std::span<const int32_t> prompt_tokens, int64_t n_past_before) {
  const Vocab& vocab = tokenizer.vocab();
  return vocab.type == VocabType::SPM && vocab.add_space_prefix && n_past_before == 0 && prompt_tokens.size() == 1 &&
         prompt_tokens[0] == tokenizer.bos() && tokenizer.bos() >= 0;
}

TextStreamer::TextStreamer(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  for (const auto& s : stops_) GA_CHECK(!s.empty(), InvalidArgument, "a stop string is empty");
}

size_t TextStreamer::stop_prefix_holdback() const {
  size_t hold = 0;
  for (const auto& stop : stops_) {
    // The longest suffix of pending_ that is a proper prefix of `stop`.
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

TextStreamer::Update TextStreamer::push(std::string_view piece) {
  Update update;
  if (stopped_) {
    update.stopped = true;
    return update;
  }
  pending_.append(piece);

  // When several stop strings occur, the one that starts first decides where the text ends.
  size_t cut = std::string::npos;
  for (const auto& stop : stops_) cut = std::min(cut, pending_.find(stop));
  if (cut != std::string::npos) {
    update.ready = pending_.substr(0, cut);
    update.stopped = stopped_ = true;
    pending_.clear();
    return update;
  }

  const size_t releasable = pending_.size() - stop_prefix_holdback();
  const size_t release = complete_utf8_prefix(std::string_view(pending_).substr(0, releasable));
  update.ready = pending_.substr(0, release);
  pending_.erase(0, release);
  return update;
}

std::string TextStreamer::flush() {
  std::string rest;
  rest.swap(pending_);
  return stopped_ ? std::string() : rest;
}

}  // namespace ga::detail
