// See chat_prompt.h.
#include "server/chat_prompt.h"

#include "gpu_accel/chat.h"
#include "server/api_error.h"

namespace ga::server {

struct ChatPrompter::Impl {
  const Tokenizer& tokenizer;
  ChatFormat format;
};

ChatPrompter::ChatPrompter(const Tokenizer& tokenizer)
    : impl_(std::make_unique<Impl>(Impl{tokenizer, ChatFormat(tokenizer)})) {}

ChatPrompter::~ChatPrompter() = default;

std::string ChatPrompter::render(const std::vector<ChatMessage>& messages) const {
  std::vector<ga::ChatMessage> converted;
  converted.reserve(messages.size());
  for (const ChatMessage& m : messages) converted.push_back({m.role, m.content});
  try {
    return impl_->format.render(converted);
  } catch (const Error& e) {
    // A template's raise_exception() is about the conversation the client sent (e.g. "roles must
    // alternate user/assistant"): the client's to fix.
    if (e.kind() == ErrorKind::Internal) throw;
    throw invalid_request("The model's chat template rejected the messages: " + e.message(), "messages");
  }
}

std::vector<int32_t> ChatPrompter::tokens(const std::vector<ChatMessage>& messages) const {
  return prompt_text_tokens(impl_->tokenizer, render(messages));
}

std::vector<int32_t> completion_prompt_tokens(const Tokenizer& tokenizer, const ParsedRequest& request) {
  if (!request.prompt_is_tokens) {
    return prompt_text_tokens(tokenizer, request.prompt_text);
  }
  const int64_t n_vocab = tokenizer.n_vocab();
  std::vector<int32_t> tokens;
  tokens.reserve(request.prompt_token_ids.size());
  for (const int64_t id : request.prompt_token_ids) {
    if (id < 0 || id >= n_vocab) {
      throw invalid_request("Invalid token id " + std::to_string(id) + " in 'prompt': the vocabulary has " +
                                std::to_string(n_vocab) + " tokens (ids 0.." + std::to_string(n_vocab - 1) + ").",
                            "prompt", "invalid_value");
    }
    tokens.push_back(static_cast<int32_t>(id));
  }
  return tokens;  // ids are the client's exact choice: no BOS added
}

}  // namespace ga::server
