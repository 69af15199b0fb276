// ga::ChatFormat and prompt_text_tokens (include/gpu_accel/chat.h): a template plus the tokenization its output
// needs, shared by the server and the CLI's chat so that both send a model the same tokens for a conversation.
#include "gpu_accel/chat.h"

#include "gpu_accel/tokenizer.h"

namespace ga {

ChatFormat::ChatFormat(const Tokenizer& tokenizer)
    : tokenizer_(tokenizer),
      template_(ChatTemplate::for_vocab(tokenizer.vocab())),
      options_(ChatTemplate::options_for_vocab(tokenizer.vocab(), /*add_generation_prompt=*/true)),
      has_model_template_(!tokenizer.vocab().chat_template.empty()) {}

std::string ChatFormat::render(const std::vector<ChatMessage>& messages) const {
  return template_.apply(messages, options_);
}

std::vector<int32_t> ChatFormat::tokens(const std::vector<ChatMessage>& messages) const {
  return prompt_text_tokens(tokenizer_, render(messages));
}

std::vector<int32_t> prompt_text_tokens(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/true);
  const int32_t bos = tokenizer.bos();
  if (tokenizer.vocab().add_bos && bos >= 0 && (tokens.empty() || tokens.front() != bos)) {
    tokens.insert(tokens.begin(), bos);
  }
  return tokens;
}

}  // namespace ga
