// See stepped_generation.h. The decode part mirrors generate_from_tokens (generate.cpp) step for step:
// sample from the last logits, stop on EOS, stream the piece, stop on a stop string or max_tokens or a
// full context, else evaluate the new token. The difference is only where the loop is cut: here after
// each evaluation, so a step is one forward pass (a prompt chunk, or one token) plus its sampling.
#include "runtime/engine/stepped_generation.h"

#include <algorithm>
#include <span>

#include "gpu_accel/error.h"

namespace ga::engine {

SteppedGeneration::SteppedGeneration(Session& session, const Tokenizer& tokenizer, std::vector<int32_t> prompt_tokens,
                                     const GenerateOptions& options, int64_t prefill_chunk)
    : session_(session),
      tokenizer_(tokenizer),
      options_(options),
      prefill_chunk_(prefill_chunk),
      streamer_(options.stop),  // validates the stop strings before any work
      sampler_(options.sampling),
      prompt_(std::move(prompt_tokens)) {
  GA_CHECK(!prompt_.empty(), InvalidArgument, "the prompt has no tokens");
  GA_CHECK(prefill_chunk_ > 0, InvalidArgument, "prefill_chunk must be positive, got ", prefill_chunk_);
  const int64_t room = session_.n_ctx() - session_.n_past();
  GA_CHECK(static_cast<int64_t>(prompt_.size()) <= room, OutOfRange, "the prompt has ", prompt_.size(),
           " tokens but the context has room for ", room, " (context size ", session_.n_ctx(), ")");
  strip_space_ = detail::strips_first_space(tokenizer_, prompt_, session_.n_past());
  history_ = prompt_;
}

void SteppedGeneration::end(FinishReason reason) {
  finished_ = true;
  finish_ = reason;
}

void SteppedGeneration::cancel() {
  if (!finished_) end(FinishReason::Cancelled);
}

std::string SteppedGeneration::step() {
  GA_CHECK(!finished_, InvalidArgument, "the generation has finished");
  ++steps_;
  try {
    const int64_t n_prompt = static_cast<int64_t>(prompt_.size());
    if (prompt_done_ < n_prompt) {
      const int64_t n = std::min(prefill_chunk_, n_prompt - prompt_done_);
      const std::span<const int32_t> chunk(prompt_.data() + prompt_done_, static_cast<size_t>(n));
      if (prompt_done_ + n < n_prompt) {
        session_.eval(chunk);  // the logits of a middle chunk are not needed
      } else {
        session_.eval_for_sampling(chunk);  // the last chunk's logits stay where the backend made them
      }
      prompt_done_ += n;
      if (prompt_done_ < n_prompt) return {};
      if (options_.max_tokens == 0) end(FinishReason::Length);
      return {};
    }
    return decode_step();
  } catch (...) {
    end(FinishReason::Cancelled);
    throw;
  }
}

std::string SteppedGeneration::decode_step() {
  std::string ready;
  const int32_t id = session_.sample_next(sampler_, history_);
  if (!options_.ignore_eos && tokenizer_.is_eog(id)) {
    ready = streamer_.flush();
    text_ += ready;
    end(FinishReason::Eos);
    return ready;
  }
  generated_.push_back(id);
  history_.push_back(id);
  std::string piece = tokenizer_.token_to_piece(id);
  if (strip_space_) {  // only the very first generated piece, as decode() does
    if (!piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    strip_space_ = false;
  }
  const detail::TextStreamer::Update update = streamer_.push(piece);
  ready = update.ready;
  if (update.stopped) {
    text_ += ready;
    end(FinishReason::Stop);
    return ready;
  }
  const bool more_wanted = options_.max_tokens < 0 || static_cast<int64_t>(generated_.size()) < options_.max_tokens;
  if (!more_wanted || session_.n_past() >= session_.n_ctx()) {
    ready += streamer_.flush();
    text_ += ready;
    end(FinishReason::Length);
    return ready;
  }
  const int32_t next[1] = {id};
  session_.eval_for_sampling(next);
  text_ += ready;
  return ready;
}

}  // namespace ga::engine
