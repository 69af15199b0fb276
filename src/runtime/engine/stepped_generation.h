// One generation on a Session, advanced by its caller one bounded step at a time.
//
// ga::generate runs a whole answer in one call: nobody can stop it between its forward passes. Work that
// must give way to something more important (the server's host assistant, which runs only while the
// main scheduler is idle) needs the loop turned inside out: the caller asks for one step, looks at the
// world, and asks for the next one, or waits, or gives up. A step is one prompt chunk of at most
// prefill_chunk tokens, or one generated token, so its cost is bounded and known: a long prompt does
// not become one long uninterruptible prefill.
//
// The tokens, text and finish reason equal generate_from_tokens() on the same session state and options
// (the same sampler, TextStreamer, dummy-prefix rule and context limit), which tests check.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_accel/generate.h"
#include "gpu_accel/sampler.h"
#include "gpu_accel/session.h"
#include "gpu_accel/tokenizer.h"
#include "runtime/engine/generate_stream.h"

namespace ga::engine {

class SteppedGeneration {
 public:
  static constexpr int64_t kDefaultPrefillChunk = 32;

  // Validates like generate_from_tokens (empty prompt: InvalidArgument; no room: OutOfRange; bad stop
  // strings or sampling: InvalidArgument) before any work. The session continues from its n_past().
  SteppedGeneration(Session& session, const Tokenizer& tokenizer, std::vector<int32_t> prompt_tokens,
                    const GenerateOptions& options, int64_t prefill_chunk = kDefaultPrefillChunk);

  bool finished() const { return finished_; }
  // Runs the next step and returns the text that became final in it (often empty). Throws what the
  // session or sampler throws (the generation is finished then). InvalidArgument once finished.
  std::string step();
  // Ends the generation before its natural end (finish() reads Cancelled); the session keeps what it has.
  void cancel();

  FinishReason finish() const { return finish_; }
  const std::vector<int32_t>& prompt_tokens() const { return prompt_; }
  const std::vector<int32_t>& tokens() const { return generated_; }  // generated so far (EOS excluded)
  const std::string& text() const { return text_; }                  // final text so far
  int64_t steps() const { return steps_; }
  int64_t prompt_done() const { return prompt_done_; }  // prompt tokens evaluated

 private:
  std::string decode_step();
  void end(FinishReason reason);

  Session& session_;
  const Tokenizer& tokenizer_;
  GenerateOptions options_;
  int64_t prefill_chunk_;
  detail::TextStreamer streamer_;
  Sampler sampler_;
  std::vector<int32_t> prompt_;
  std::vector<int32_t> history_;  // prompt + generated: what the penalties look at
  std::vector<int32_t> generated_;
  std::string text_;
  bool strip_space_ = false;
  int64_t prompt_done_ = 0;
  int64_t steps_ = 0;
  bool finished_ = false;
  FinishReason finish_ = FinishReason::Length;
};

}  // namespace ga::engine
