// Server-sent events framing (the WHATWG EventSource format OpenAI streams use).
//
// Each event is one "data:" line with compact JSON (JSON from nlohmann never contains a raw newline,
// so one line is always enough), ended by a blank line. The stream ends with "data: [DONE]". While
// a request waits in the queue or its prompt is being processed nothing else would be written, so a
// comment line (": ...", ignored by every SSE parser) is sent now and then: it is how a client that
// went away is noticed (the write fails) and its request cancelled, freeing its KV blocks.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ga::server {

std::string sse_data(const nlohmann::json& payload);  // "data: {...}\n\n"
std::string sse_done();                                // "data: [DONE]\n\n"
std::string sse_comment(std::string_view text);        // ": text\n\n" (newlines in text become spaces)

}  // namespace ga::server
