// The conversation of `gpu-accel chat`: its messages, kept within the model's context, and the session whose
// KV cache holds them.
//
// Each turn renders the whole conversation through the model's chat format (the server's ga::ChatFormat) and
// evaluates only what the session does not hold yet: the rendered tokens are compared with the tokens the KV
// cache was filled from, and the session is cut back to the longest common prefix (a reply's tokens may
// re-tokenize differently once rendered as text, and a new system message changes everything after it). So a
// turn costs the prefill of the new message, as in llama.cpp's server with its prompt cache.
//
// When the next prompt would leave less than `reply_room` tokens of the context for the reply, the oldest turns
// (a user message and its reply) are dropped, the system message kept, and the caller is told how many.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/chat.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace ga::cli {

class Conversation {
 public:
  // session, tokenizer and format must outlive the conversation.
  Conversation(Session& session, const Tokenizer& tokenizer, const ChatFormat& format, int64_t reply_room);

  void set_system(std::string text);  // empty: no system message
  void reset();                       // forgets every turn (the system message stays)

  // Adds `user` and generates the reply (streamed through on_text; false from it cancels: the reply so far is
  // kept), which becomes the assistant's turn. on_dropped(n_turns, n_tokens) is called when older turns had to
  // go (n_tokens: the conversation's prompt before dropping). Throws ga::Error (OutOfRange) when the system
  // message and `user` alone do not fit in the context; the conversation is then unchanged.
  GenerateResult reply(const std::string& user, const GenerateOptions& options,
                       const std::function<bool(std::string_view)>& on_text,
                       const std::function<void(size_t n_turns, size_t n_tokens)>& on_dropped);

  // Every message, the system message first: what /save writes.
  std::vector<ChatMessage> messages() const;
  // The messages as a JSON array of {"role", "content"} objects (2-space indent), the format of OpenAI's
  // `messages` and of `gpu-accel serve`'s /v1/chat/completions.
  std::string messages_json() const;

 private:
  struct Turn {
    std::string user, assistant;
  };
  // The system message, the turns from first_turn on, then `user` (none when empty).
  std::vector<ChatMessage> prompt_messages(const std::string& user, size_t first_turn) const;

  Session& session_;
  const Tokenizer& tokenizer_;
  const ChatFormat& format_;
  int64_t reply_room_;
  std::string system_;
  std::vector<Turn> turns_;
  std::vector<int32_t> cached_;  // the tokens the session's KV cache holds: session_.n_past() of them
};

}  // namespace ga::cli
