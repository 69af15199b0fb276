// See responses.h.
#include "server/responses.h"

#include <atomic>
#include <random>

#include "server/api_error.h"
#include "server/sse.h"

namespace ga::server {

namespace {

using nlohmann::json;

const char* object_type(const ResponseHeader& h, bool chunk) {
  if (h.endpoint == Endpoint::Completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json base_object(const ResponseHeader& h, bool chunk) {
  return {{"id", h.id},
          {"object", object_type(h, chunk)},
          {"created", h.created},
          {"model", h.model},
          {"system_fingerprint", system_fingerprint()}};
}

json token_bytes(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

json chat_token_entry(const TokenLogprob& t) {
  return {{"token", t.text}, {"logprob", t.logprob}, {"bytes", token_bytes(t.text)}};
}

json logprobs_or_null(const ResponseHeader& h, std::span<const TokenEvent> events, size_t text_offset_start) {
  if (!h.logprobs) return nullptr;
  return h.endpoint == Endpoint::ChatCompletions ? chat_logprobs(events)
                                                 : completion_logprobs(events, text_offset_start);
}

void add_stream_usage_placeholder(const ResponseHeader& h, json& chunk) {
  if (h.include_usage) chunk["usage"] = nullptr;  // OpenAI's shape: only the last chunk carries usage
}

}  // namespace

uint64_t random_u64() {
  static const uint64_t base = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  static std::atomic<uint64_t> counter{0};
  // splitmix64 (Steele, Lea, Flood 2014): a bijection of its input, so distinct counters give distinct outputs.
  uint64_t z = base + 0x9e3779b97f4a7c15ull * (counter.fetch_add(1, std::memory_order_relaxed) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string new_completion_id(Endpoint endpoint) {
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr int kIdHexDigits = 24;
  std::string id = endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-";
  uint64_t bits = 0;
  for (int i = 0; i < kIdHexDigits; ++i) {
    if (i % 16 == 0) bits = random_u64();
    id += kHex[bits & 0xf];
    bits >>= 4;
  }
  return id;
}

const char* openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
    case FinishReason::Eos: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "stop";
}

std::string system_fingerprint() { return std::string("gpu-accel-") + GA_VERSION; }

json usage_json(const CompletionResult& result) {
  return {{"prompt_tokens", result.prompt_tokens},
          {"completion_tokens", result.completion_tokens},
          {"total_tokens", result.prompt_tokens + result.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", result.cached_prompt_tokens}}}};
}

json chat_logprobs(std::span<const TokenEvent> events) {
  json content = json::array();
  for (const TokenEvent& e : events) {
    if (e.token < 0) continue;  // a text-only event (held-back text released at the end): no token
    json entry = chat_token_entry(e.chosen);
    json top = json::array();
    for (const TokenLogprob& t : e.top) top.push_back(chat_token_entry(t));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs(std::span<const TokenEvent> events, size_t text_offset_start) {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  size_t offset = text_offset_start;
  for (const TokenEvent& e : events) {
    if (e.token < 0) continue;  // a text-only event (held-back text released at the end): no token
    tokens.push_back(e.chosen.text);
    token_logprobs.push_back(e.chosen.logprob);
    json top = json::object();
    for (const TokenLogprob& t : e.top) {
      if (!top.contains(t.text)) top[t.text] = t.logprob;  // two tokens may spell the same text: keep the likelier
    }
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    offset += e.chosen.text.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

json full_response(const ResponseHeader& h, const CompletionResult& result, std::span<const TokenEvent> events) {
  json out = base_object(h, false);
  json choice = {{"index", 0}, {"logprobs", logprobs_or_null(h, events, 0)},
                 {"finish_reason", openai_finish_reason(result.finish)}};
  if (h.endpoint == Endpoint::ChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", result.text}, {"refusal", nullptr}};
  } else {
    choice["text"] = result.text;
  }
  out["choices"] = json::array({std::move(choice)});
  out["usage"] = usage_json(result);
  return out;
}

json chat_role_chunk(const ResponseHeader& h) {
  json out = base_object(h, true);
  out["choices"] = json::array(
      {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
        {"finish_reason", nullptr}}});
  add_stream_usage_placeholder(h, out);
  return out;
}

json delta_chunk(const ResponseHeader& h, const std::string& text, std::span<const TokenEvent> events,
                 size_t text_offset_start) {
  json out = base_object(h, true);
  json choice = {{"index", 0}, {"logprobs", logprobs_or_null(h, events, text_offset_start)},
                 {"finish_reason", nullptr}};
  if (h.endpoint == Endpoint::ChatCompletions) {
    choice["delta"] = {{"content", text}};
  } else {
    choice["text"] = text;
  }
  out["choices"] = json::array({std::move(choice)});
  add_stream_usage_placeholder(h, out);
  return out;
}

json finish_chunk(const ResponseHeader& h, FinishReason reason) {
  json out = base_object(h, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish_reason(reason)}};
  if (h.endpoint == Endpoint::ChatCompletions) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  out["choices"] = json::array({std::move(choice)});
  add_stream_usage_placeholder(h, out);
  return out;
}

DeltaEventTemplate::DeltaEventTemplate(const ResponseHeader& header) : header_(header) {
  header_.logprobs = false;  // the template's events carry no logprobs (the caller keeps logprob streams apart)
  // Control characters: the dump escapes them (\u001f), so the marker's dumped form cannot come from plain text.
  const std::string marker = "\x1f<gpu-accel delta text>\x1f";
  const std::string event = sse_data(delta_chunk(header_, marker, {}, 0));
  const std::string dumped_marker = dump_json(json(marker));
  const size_t at = event.find(dumped_marker);
  if (at == std::string::npos || event.find(dumped_marker, at + 1) != std::string::npos) return;
  prefix_ = event.substr(0, at);
  suffix_ = event.substr(at + dumped_marker.size());
  usable_ = true;
}

namespace {

// Text that nlohmann's dump writes as it is between the quotes: printable ASCII other than '"' and '\\' (anything
// else, control characters and UTF-8 included, is escaped or checked by the dump).
bool dumps_verbatim(std::string_view text) {
  for (const char c : text) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
  }
  return true;
}

}  // namespace

std::string DeltaEventTemplate::event(const std::string& text) const {
  if (!usable_) return sse_data(delta_chunk(header_, text, {}, 0));
  // A token's text is usually a plain word: quoted as it is, without a json value and the serializer (~1 us of cold
  // code on a lone stream's first token); anything else gets the object's own escaping and invalid-UTF-8 handling.
  const bool verbatim = dumps_verbatim(text);
  const std::string dumped = verbatim ? std::string() : dump_json(json(text));
  std::string out;
  out.reserve(prefix_.size() + (verbatim ? text.size() + 2 : dumped.size()) + suffix_.size());
  out += prefix_;
  if (verbatim) {
    out += '"';
    out += text;
    out += '"';
  } else {
    out += dumped;
  }
  out += suffix_;
  return out;
}

json usage_chunk(const ResponseHeader& h, const CompletionResult& result) {
  json out = base_object(h, true);
  out["choices"] = json::array();
  out["usage"] = usage_json(result);
  return out;
}

}  // namespace ga::server
