// The JSON bodies the completion endpoints answer with, in OpenAI's shapes.
//
//   chat, whole:   {"id":"chatcmpl-..","object":"chat.completion","choices":[{"index","message":{"role",
//                   "content"},"logprobs","finish_reason"}],"usage":{..}}
//   chat, stream:  "chat.completion.chunk" objects: the role first, then content deltas, then an empty
//                   delta with finish_reason; with include_usage a last chunk with empty choices.
//   completions:   "text_completion" objects with choices[{"text","index","logprobs","finish_reason"}]
//                   (the same object type for whole answers and stream chunks, as OpenAI does).
//
// Logprobs have two shapes too: chat's {"content":[{"token","logprob","bytes","top_logprobs":[..]}]}
// and the legacy completions' {"tokens","token_logprobs","top_logprobs":[{token: logprob}],
// "text_offset"}. Builders are pure functions so that the formats are unit-tested without a model.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu_accel/scheduler.h"
#include "server/request_parse.h"

namespace ga::server {

// What every object of one response repeats.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::ChatCompletions;
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  bool logprobs = false;       // include logprobs objects
  bool include_usage = false;  // streams: "usage": null in every chunk but the last
};

std::string new_completion_id(Endpoint endpoint);  // random, unique within the process, to correlate logs

// 64 random-looking bits, distinct on every call within the process: splitmix64 of a per-process random base
// plus a counter. Cheap on any thread: a std::random_device + mt19937_64 per HTTP thread cost ~40 us on each
// thread's first request (random_device opens an entropy source), which a lone request's time to first token
// paid twice (its id, its sampling seed) whenever it landed on a fresh connection thread.
uint64_t random_u64();
const char* openai_finish_reason(FinishReason reason);  // "stop" (EOS or stop string) / "length" / "cancelled"
std::string system_fingerprint();                       // "gpu-accel-<version>"

nlohmann::json usage_json(const CompletionResult& result);

// Logprobs of a run of tokens. text_offset_start: the completion bytes before the first of them.
nlohmann::json chat_logprobs(std::span<const TokenEvent> events);
nlohmann::json completion_logprobs(std::span<const TokenEvent> events, size_t text_offset_start);

// A whole (non-streaming) answer; events are every token's event (for logprobs).
nlohmann::json full_response(const ResponseHeader& header, const CompletionResult& result,
                             std::span<const TokenEvent> events);

// Stream chunks.
nlohmann::json chat_role_chunk(const ResponseHeader& header);
// A text delta with the logprobs of the tokens that produced it. text_offset_start as above.
nlohmann::json delta_chunk(const ResponseHeader& header, const std::string& text, std::span<const TokenEvent> events,
                           size_t text_offset_start);
nlohmann::json finish_chunk(const ResponseHeader& header, FinishReason reason);

// A stream's text deltas without logprobs as SSE events, byte for byte sse_data(delta_chunk(header, text, {}, 0)),
// from a template made once per stream: the event is prefix + the text as a JSON string + suffix. Building and
// dumping the whole chunk object for every token cost ~10-15 us (a map per object), on the first token's way
// to a lone client and on every token of 64 streams; the text's own dump is the only part that changes. The
// template is made from delta_chunk itself (a marker string in place of the text), so the two cannot drift
// apart; should the marker not be found exactly once (a model id that contains it), every event is built the
// slow way.
class DeltaEventTemplate {
 public:
  explicit DeltaEventTemplate(const ResponseHeader& header);
  std::string event(const std::string& text) const;  // "data: {...}\n\n"

 private:
  ResponseHeader header_;
  std::string prefix_, suffix_;
  bool usable_ = false;
};
nlohmann::json usage_chunk(const ResponseHeader& header, const CompletionResult& result);

}  // namespace ga::server
