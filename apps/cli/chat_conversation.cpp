// See chat_conversation.h.
#include "chat_conversation.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gpu_accel/error.h"

namespace ga::cli {

Conversation::Conversation(Session& session, const Tokenizer& tokenizer, const ChatFormat& format,
                           int64_t reply_room)
    : session_(session), tokenizer_(tokenizer), format_(format), reply_room_(reply_room) {}

void Conversation::set_system(std::string text) { system_ = std::move(text); }

void Conversation::reset() { turns_.clear(); }

std::vector<ChatMessage> Conversation::prompt_messages(const std::string& user, size_t first_turn) const {
  std::vector<ChatMessage> out;
  out.reserve(turns_.size() * 2 + 2);
  if (!system_.empty()) out.push_back({"system", system_});
  for (size_t i = first_turn; i < turns_.size(); ++i) {
    out.push_back({"user", turns_[i].user});
    out.push_back({"assistant", turns_[i].assistant});
  }
  if (!user.empty()) out.push_back({"user", user});
  return out;
}

std::vector<ChatMessage> Conversation::messages() const { return prompt_messages({}, 0); }

std::string Conversation::messages_json() const {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages()) array.push_back({{"role", m.role}, {"content", m.content}});
  return array.dump(2) + "\n";
}

GenerateResult Conversation::reply(const std::string& user, const GenerateOptions& options,
                                   const std::function<bool(std::string_view)>& on_text,
                                   const std::function<void(size_t, size_t)>& on_dropped) {
  const auto n_ctx = static_cast<size_t>(session_.n_ctx());
  const size_t room = static_cast<size_t>(std::min<int64_t>(reply_room_, session_.n_ctx() - 1));
  std::vector<int32_t> tokens = format_.tokens(prompt_messages(user, 0));
  const size_t tokens_before = tokens.size();
  size_t dropped = 0;  // the oldest turns left out
  while (tokens.size() + room > n_ctx && dropped < turns_.size()) {
    ++dropped;
    tokens = format_.tokens(prompt_messages(user, dropped));
  }
  GA_CHECK(tokens.size() < n_ctx, OutOfRange, "the message needs ", tokens.size(),
           " tokens with the chat template", system_.empty() ? "" : " and the system message",
           " but the context has ", n_ctx, " (--ctx)");
  if (dropped > 0) {
    turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(dropped));
    on_dropped(dropped, tokens_before);
  }

  // Keep what the KV cache already holds of this prompt; at least one token must be evaluated to sample from.
  size_t keep = 0;
  const size_t limit = std::min(cached_.size(), tokens.size() - 1);
  while (keep < limit && cached_[keep] == tokens[keep]) ++keep;
  session_.truncate(static_cast<int64_t>(keep));
  cached_.resize(keep);

  GenerateResult result;
  try {
    std::vector<int32_t> new_tokens(tokens.begin() + static_cast<std::ptrdiff_t>(keep), tokens.end());
    result = generate_from_tokens(session_, tokenizer_, std::move(new_tokens), options, on_text);
  } catch (...) {
    session_.reset();  // what the session holds is unknown now
    cached_.clear();
    throw;
  }
  // The session evaluated the prompt and every generated token but the last one it sampled (or every one, when
  // an end-of-generation token ended the reply): a prefix of prompt + reply.
  cached_ = std::move(tokens);
  cached_.insert(cached_.end(), result.tokens.begin(), result.tokens.end());
  GA_CHECK(static_cast<size_t>(session_.n_past()) <= cached_.size(), Internal, "the session holds ",
           session_.n_past(), " tokens of a conversation of ", cached_.size());
  cached_.resize(static_cast<size_t>(session_.n_past()));
  turns_.push_back({user, result.text});
  return result;
}

}  // namespace ga::cli
