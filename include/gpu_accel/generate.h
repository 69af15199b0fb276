// The generation loop: tokenize the prompt, prefill it in one batch, then decode token by token,
// sampling each, streaming text as complete UTF-8 and stopping at EOS, a stop string or max_tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/sampler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"

namespace ga {

enum class FinishReason { Length, Stop, Eos, Cancelled };
const char* finish_reason_name(FinishReason r);

struct GenerateOptions {
  int64_t max_tokens = 128;  // < 0: until the context is full
  SamplerParams sampling;
  std::vector<std::string> stop;  // stop strings: generation ends before them; they are not emitted
  bool ignore_eos = false;
  bool add_special = true;  // prepend BOS as the vocab says
  bool parse_special = false;
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated (a stop string's tokens included, EOS excluded)
  std::string text;             // generated text, stop string excluded
  FinishReason finish = FinishReason::Length;
  double prompt_seconds = 0;  // prefill time (the forward only: the first token is not chosen yet)
  // Time to first token: the prefill and the first token's sampling, i.e. from the prompt's start until the
  // first token's id is known (what a server's TTFT covers, before any HTTP). 0 when no token was sampled.
  double first_token_seconds = 0;
  double gen_seconds = 0;     // time of the decode steps
};

// Streams text to on_text as it becomes final (never a partial UTF-8 sequence, never text that
// might still turn into a stop string). on_text returns false to cancel.
GenerateResult generate(Session& session, const Tokenizer& tokenizer, std::string_view prompt,
                        const GenerateOptions& options,
                        const std::function<bool(std::string_view)>& on_text = {});

// Same, from token ids (the caller tokenized, e.g. after a chat template).
GenerateResult generate_from_tokens(Session& session, const Tokenizer& tokenizer, std::vector<int32_t> prompt_tokens,
                                    const GenerateOptions& options,
                                    const std::function<bool(std::string_view)>& on_text = {});

}  // namespace ga
