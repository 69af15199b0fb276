// From a request to prompt tokens.
//
// Chat: the messages go through the model's chat format (ga::ChatFormat: the GGUF/HF template, or its
// ChatML fallback when the model has none, tokenized with special tokens parsed and BOS never twice), the
// same as `gpu-accel chat`; a template's rejection of the messages is the client's error (400).
//
// Completions: a string prompt is tokenized the same way (ga::prompt_text_tokens: BOS as the vocabulary
// says, special tokens parsed, like llama.cpp's server, so hand-written templates work); token-id prompts
// are used as given after a range check against the vocabulary.
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
  std::unique_ptr<Impl> impl_;
};

// The prompt of a /v1/completions request (throws ApiError 400 for token ids outside the vocabulary).
std::vector<int32_t> completion_prompt_tokens(const Tokenizer& tokenizer, const ParsedRequest& request);

}  // namespace ga::server
