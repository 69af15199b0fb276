// Parsing and validating the JSON bodies of /v1/chat/completions and /v1/completions.
//
// Everything a client can get wrong is checked here, before any model work, and reported as an
// OpenAI-style 400 naming the field: malformed JSON (nlohmann rejects invalid UTF-8 and lone
// surrogates while parsing), wrong types, out-of-range numbers (NaN and huge values included), empty
// or unknown message roles, unsupported features (n > 1, tools, logit_bias, ...). Checks that need
// the model (token ids against the vocabulary, lengths against the context) happen later, in
// completion_route.cpp. Unknown fields are ignored, like most OpenAI-compatible servers do, so
// clients that send extra options keep working.
//
// Sampling defaults follow the OpenAI API (temperature 1, top_p 1, no top-k/min-p), not llama.cpp's,
// so a request means the same thing here as there. top_k, min_p, repeat_penalty and ignore_eos are
// accepted as extensions (llama.cpp's server names).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/sampler.h"

namespace ga::server {

enum class Endpoint { ChatCompletions, Completions };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant" ("developer" is read as "system")
  std::string content;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string model;  // "" when the client left it out (the served model is meant)

  std::vector<ChatMessage> messages;  // chat: non-empty

  bool prompt_is_tokens = false;          // completions: the prompt was given as token ids
  std::string prompt_text;                // completions, when !prompt_is_tokens
  std::vector<int64_t> prompt_token_ids;  // completions, when prompt_is_tokens (checked against the vocab later)

  std::optional<int64_t> max_tokens;  // absent: the endpoint's default (see completion_route.cpp)
  SamplerParams sampling;
  bool seed_given = false;  // otherwise the server draws a seed
  std::vector<std::string> stop;
  bool ignore_eos = false;

  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage

  bool logprobs = false;  // report the chosen tokens' log-probabilities
  int top_logprobs = 0;   // and this many alternatives per token
};

// Limits of the API (OpenAI's where it has one).
constexpr int kMaxTopLogprobsChat = 20;
constexpr int kMaxLogprobsCompletions = 5;
constexpr size_t kMaxStopStrings = 16;    // OpenAI allows 4; more costs nothing here
constexpr size_t kMaxStopStringBytes = 1024;
constexpr int64_t kMaxTokensLimit = 1 << 30;  // beyond any context; the real bound is the context

// Throws ApiError (400) describing the first problem found.
ParsedRequest parse_request(Endpoint endpoint, std::string_view body);

}  // namespace ga::server
