// The generation loop (see gpu_accel/generate.h).
//
// Design: the prompt is evaluated in one batch after checking that it fits, so a prompt that is
// too long fails before any work. Each step samples from the last logits, and only evaluates the
// new token if another one will be needed: the last token of a run costs no forward pass, and a
// prompt that fills the context exactly still yields one token.
//
// Text: each generated token's piece goes through a TextStreamer, which releases complete UTF-8
// and holds back what could still become a stop string. Pieces are used as they are (llama.cpp's
// llama-simple does the same): the prompt precedes them, so " there" keeps its space. The one
// exception is SentencePiece's dummy prefix: when nothing but BOS precedes the first generated
// token, its leading space is the one decode() removes after BOS, so we remove it too, and the
// stream equals decode(prompt + generated) minus decode(prompt).
//
// Sampling goes through Session::eval_for_sampling / sample_next: on a GPU the logits row stays on
// the device and is sampled there (same token as Sampler::sample on the host row).
//
// The generation continues the session's state: a caller who wants a fresh sequence resets it.
#include "gpu_accel/generate.h"

#include <chrono>

#include "gpu_accel/error.h"
#include "runtime/engine/generate_stream.h"

namespace ga {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::Eos: return "eos";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

GenerateResult generate(Session& session, const Tokenizer& tokenizer, std::string_view prompt,
                        const GenerateOptions& options, const std::function<bool(std::string_view)>& on_text) {
  std::vector<int32_t> tokens = tokenizer.encode(prompt, options.add_special, options.parse_special);
  return generate_from_tokens(session, tokenizer, std::move(tokens), options, on_text);
}

GenerateResult generate_from_tokens(Session& session, const Tokenizer& tokenizer, std::vector<int32_t> prompt_tokens,
                                    const GenerateOptions& options,
                                    const std::function<bool(std::string_view)>& on_text) {
  GA_CHECK(!prompt_tokens.empty(), InvalidArgument,
           "the prompt has no tokens (an empty prompt needs a BOS token: keep add_special on)");
  const int64_t n_past_before = session.n_past();
  const int64_t room = session.n_ctx() - n_past_before;
  GA_CHECK(static_cast<int64_t>(prompt_tokens.size()) <= room, OutOfRange, "the prompt has ", prompt_tokens.size(),
           " tokens but the context has room for ", room, " (context size ", session.n_ctx(), ")");

  detail::TextStreamer streamer(options.stop);  // validates the stop strings before any work
  Sampler sampler(options.sampling);

  GenerateResult result;
  result.prompt_tokens = std::move(prompt_tokens);

  const auto prefill_start = Clock::now();
  session.eval_for_sampling(result.prompt_tokens);  // the last logits stay where the backend made them
  result.prompt_seconds = seconds_since(prefill_start);

  std::vector<int32_t> history = result.prompt_tokens;  // what the penalties look at
  bool strip_space = detail::strips_first_space(tokenizer, result.prompt_tokens, n_past_before);

  // Hands text to the caller; false when the caller cancels.
  auto emit = [&](const std::string& text) {
    if (text.empty()) return true;
    result.text += text;
    return !on_text || on_text(text);
  };

  const auto gen_start = Clock::now();
  result.finish = FinishReason::Length;
  while (true) {
    if (options.max_tokens >= 0 && static_cast<int64_t>(result.tokens.size()) >= options.max_tokens) break;

    const int32_t id = session.sample_next(sampler, history);  // = sampler.sample(logits, history)
    if (result.first_token_seconds == 0) result.first_token_seconds = seconds_since(prefill_start);
    if (!options.ignore_eos && tokenizer.is_eog(id)) {
      result.finish = FinishReason::Eos;
      break;
    }
    result.tokens.push_back(id);
    history.push_back(id);

    std::string piece = tokenizer.token_to_piece(id);
    if (strip_space) {  // only the very first generated piece, as decode() does
      if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      strip_space = false;
    }
    const detail::TextStreamer::Update update = streamer.push(piece);
    if (!emit(update.ready)) {
      result.finish = FinishReason::Cancelled;
      break;
    }
    if (update.stopped) {
      result.finish = FinishReason::Stop;
      break;
    }

    const bool more_wanted =
        options.max_tokens < 0 || static_cast<int64_t>(result.tokens.size()) < options.max_tokens;
    if (!more_wanted) break;
    if (session.n_past() >= session.n_ctx()) break;  // context full: Length
    const int32_t next[1] = {id};
    session.eval_for_sampling(next);
  }
  if (result.finish == FinishReason::Length || result.finish == FinishReason::Eos) {
    if (!emit(streamer.flush())) result.finish = FinishReason::Cancelled;
  }
  result.gen_seconds = seconds_since(gen_start);
  return result;
}

}  // namespace ga
