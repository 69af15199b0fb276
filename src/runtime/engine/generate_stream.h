// Turns the byte pieces of generated tokens into text that is safe to hand to a user as it arrives.
//
// Two things can make text not yet final: a multi-byte UTF-8 character split over tokens (byte
// fallback pieces like <0xE2><0x80><0x9C>), and text that might be the start of a stop string that
// the next tokens complete ("\n" then "User:"). The streamer keeps such a tail pending and releases
// it once it is decided. It knows nothing about models, so it is tested on hand-made pieces.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/tokenizer.h"

namespace ga::detail {

class TextStreamer {
 public:
  explicit TextStreamer(std::vector<std::string> stop_strings);

  struct Update {
    std::string ready;     // text that became final (may be empty)
    bool stopped = false;  // a stop string appeared: `ready` ends right before it, nothing follows
  };

  // Adds the bytes of the next token.
  Update push(std::string_view piece);
  // Generation ended without a stop string: everything still pending is final, as it is (a trailing
  // incomplete UTF-8 sequence included, so the stream equals the concatenated pieces).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;

  size_t stop_prefix_holdback() const;
};

// True when the first generated piece directly follows a sequence-initial BOS of an SPM vocab that
// adds a dummy space prefix: that piece's leading space is the one decode() removes after BOS, so
// generation removes it too and the stream equals decode(prompt + generated) - decode(prompt).
// Shared by ga::generate and the Scheduler so both produce the same text.
bool strips_first_space(const Tokenizer& tokenizer, std::span<const int32_t> prompt_tokens, int64_t n_past_before);

// Length of the longest prefix of `text` that does not end inside an incomplete UTF-8 sequence.
size_t complete_utf8_prefix(std::string_view text);

}  // namespace ga::detail
