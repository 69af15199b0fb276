// From a request to prompt tokens.
//
// Chat: the messages go through the model's chat template (ga::ChatTemplate: the GGUF/HF template,
// or its ChatML fallback when the model has none), and the rendered text is tokenized with special
// tokens parsed (the template's "<|im_start|>" must become the control token, not text). BOS is
// added when the vocabulary asks for it, unless the template already wrote it (Llama 2/3 templates
// start with {{ bos_token }}): never twice.
//
// Completions: a string prompt is tokenized the same way (BOS as the vocabulary says, special tokens
// parsed, like llama.cpp's server, so hand-written templates work); token-id prompts are used as
// given after a range check against the vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu_accel/tokenizer.h"
#include "server/request_parse.h"

namespace ga::server {

class ChatPrompter {
 public:
  explicit ChatPrompter(const Tokenizer& tokenizer);  // parses the template once (throws ga::Error if broken)
  ~ChatPrompter();

  std::string render(const std::vector<ChatMessage>& messages) const;  // ends with the assistant's turn opening
  std::vector<int32_t> tokens(const std::vector<ChatMessage>& messages) const;

 private:
  struct Impl;
  const Tokenizer& tokenizer_;
  std::unique_ptr<Impl> impl_;
};

// The prompt of a /v1/completions request (throws ApiError 400 for token ids outside the vocabulary).
std::vector<int32_t> completion_prompt_tokens(const Tokenizer& tokenizer, const ParsedRequest& request);

// tokens with BOS in front when the vocabulary adds BOS and tokens do not already start with it.
std::vector<int32_t> with_bos(const Tokenizer& tokenizer, std::vector<int32_t> tokens);

}  // namespace ga::server
