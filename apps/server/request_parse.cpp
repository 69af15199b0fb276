// See request_parse.h. Every reader takes the object and the field name, so messages name the
// field the way OpenAI's do ("Invalid type for 'temperature': expected a number, but got a string").
// A JSON null counts as "not given" for every optional field, as in the OpenAI API.
#include "server/request_parse.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/json_fast.h"

namespace ga::server {

namespace {

using nlohmann::json;

// The ranges OpenAI documents; top_k/min_p/repeat_penalty are llama.cpp's extensions.
constexpr double kMaxTemperature = 2.0;
constexpr double kMaxPenalty = 2.0;
constexpr double kMaxRepeatPenalty = 100.0;  // any sane value is < 2; this only rejects absurd input

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a decimal number";
    default: return "an unsupported value";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const std::string& expected, const json& got) {
  throw invalid_request("Invalid type for '" + param + "': expected " + expected + ", but got " + type_name(got) +
                            " instead.",
                        param, "invalid_type");
}

[[noreturn]] void bad_value(const std::string& param, const std::string& why) {
  throw invalid_request("Invalid value for '" + param + "': " + why, param, "invalid_value");
}

// The field's value, or nullptr when it is absent or null.
const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

double read_number(const json& object, const char* key, double lo, double hi, double fallback) {
  const json* v = field(object, key);
  if (!v) return fallback;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    bad_value(key, "expected a number in [" + number_text(lo) + ", " + number_text(hi) + "], got " + v->dump() + ".");
  }
  return x;
}

// Integers may be spelled 16 or 16.0 (JSON does not distinguish; Python clients sometimes send floats).
std::optional<int64_t> read_integer(const json& object, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  const auto out_of_range = [&] {
    bad_value(key, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                       v->dump() + ".");
  };
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) out_of_range();
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) out_of_range();
    return i;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) wrong_type(key, "an integer", *v);
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) out_of_range();
    return static_cast<int64_t>(d);
  }
  wrong_type(key, "an integer", *v);
}

bool read_bool(const json& object, const char* key, bool fallback) {
  const json* v = field(object, key);
  if (!v) return fallback;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

// seed: any 64-bit integer; negative ones wrap (two's complement), so every value is a distinct seed.
std::optional<uint64_t> read_seed(const json& object) {
  const json* v = field(object, "seed");
  if (!v) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  if (v->is_number_integer()) return static_cast<uint64_t>(v->get<int64_t>());
  const auto i = read_integer(object, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  return static_cast<uint64_t>(*i);
}

std::vector<std::string> read_stop(const json& object) {
  const json* v = field(object, "stop");
  if (!v) return {};
  std::vector<std::string> raw;
  if (v->is_string()) {
    raw.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings) {
      bad_value("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings are supported.");
    }
    for (const json& s : *v) {
      if (!s.is_string()) wrong_type("stop", "a string or an array of strings", *v);
      raw.push_back(s.get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *v);
  }
  std::vector<std::string> stop;
  for (std::string& s : raw) {
    if (s.size() > kMaxStopStringBytes) {
      bad_value("stop", "a stop string is at most " + std::to_string(kMaxStopStringBytes) + " bytes.");
    }
    if (!s.empty()) stop.push_back(std::move(s));  // an empty stop string can never match: ignore it
  }
  return stop;
}

// Options whose presence would change the meaning of the request in a way we cannot honour: refuse
// them instead of silently answering something else.
void reject_unsupported(const json& body, Endpoint endpoint) {
  if (const auto n = read_integer(body, "n", 1, std::numeric_limits<int32_t>::max()); n && *n != 1) {
    bad_value("n", "only n = 1 is supported.");
  }
  for (const char* key : {"tools", "functions"}) {
    const json* v = field(body, key);
    if (v && !(v->is_array() && v->empty())) {
      throw invalid_request(std::string("'") + key + "' is not supported (this server has no tool calling).", key,
                            "unsupported_parameter");
    }
  }
  if (const json* v = field(body, "tool_choice"); v && !(v->is_string() && v->get<std::string>() == "none")) {
    throw invalid_request("'tool_choice' is not supported (this server has no tool calling).", "tool_choice",
                          "unsupported_parameter");
  }
  if (const json* v = field(body, "response_format")) {
    const bool text = v->is_object() && v->contains("type") && (*v)["type"] == "text";
    if (!text) {
      throw invalid_request("Only 'response_format' {\"type\": \"text\"} is supported.", "response_format",
                            "unsupported_parameter");
    }
  }
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty())) {
    throw invalid_request("'logit_bias' is not supported.", "logit_bias", "unsupported_parameter");
  }
  if (endpoint == Endpoint::Completions) {
    if (read_bool(body, "echo", false)) {
      throw invalid_request("'echo' is not supported.", "echo", "unsupported_parameter");
    }
    if (const auto best_of = read_integer(body, "best_of", 1, std::numeric_limits<int32_t>::max());
        best_of && *best_of != 1) {
      bad_value("best_of", "only best_of = 1 is supported.");
    }
    if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
      throw invalid_request("'suffix' is not supported.", "suffix", "unsupported_parameter");
    }
  }
}

// A message's content: a string, or an array of text parts (joined), or null (an empty turn).
std::string read_content(const json& message, const std::string& param) {
  const json* v = field(message, "content");
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (!v->is_array()) wrong_type(param, "a string or an array of content parts", *v);
  std::string text;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& part = (*v)[i];
    const std::string part_param = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(part_param, "an object", part);
    const json* type = field(part, "type");
    if (!type || !type->is_string()) wrong_type(part_param + ".type", "a string", type ? *type : json());
    if (type->get<std::string>() != "text") {
      throw invalid_request("Content part type '" + type->get<std::string>() +
                                "' is not supported (this is a text-only model); use 'text'.",
                            part_param + ".type", "unsupported_content_type");
    }
    const json* part_text = field(part, "text");
    if (!part_text || !part_text->is_string()) {
      wrong_type(part_param + ".text", "a string", part_text ? *part_text : json());
    }
    text += part_text->get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> read_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) throw invalid_request("Missing required parameter: 'messages'.", "messages", "missing_required_parameter");
  if (!v->is_array()) wrong_type("messages", "an array", *v);
  if (v->empty()) bad_value("messages", "expected a non-empty array.");
  std::vector<ChatMessage> messages;
  messages.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(param, "an object", m);
    const json* role = field(m, "role");
    if (!role) throw invalid_request("Missing required parameter: '" + param + ".role'.", param + ".role");
    if (!role->is_string()) wrong_type(param + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system prompt
    if (r == "tool" || r == "function") {
      throw invalid_request("Role '" + r + "' is not supported (this server has no tool calling).", param + ".role",
                            "unsupported_value");
    }
    if (r != "system" && r != "user" && r != "assistant") {
      bad_value(param + ".role", "supported values are 'system', 'developer', 'user' and 'assistant'.");
    }
    if (const json* name = field(m, "name"); name && !name->is_string()) wrong_type(param + ".name", "a string", *name);
    messages.push_back({std::move(r), read_content(m, param + ".content")});
  }
  return messages;
}

// `fast_ids`: the prompt when the fast reader took it straight as token ids (a non-empty array of integers, which
// passes every check below: nothing to check).
void read_prompt(const json& body, FastIntegerField& fast_ids, ParsedRequest& out) {
  if (fast_ids.present) {
    out.prompt_is_tokens = true;
    out.prompt_token_ids = std::move(fast_ids.values);
    return;
  }
  const json* v = field(body, "prompt");
  if (!v) throw invalid_request("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter");
  const char* expected = "a string, an array of token ids, or an array with one string or one array of token ids";
  const json* prompt = v;
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) prompt = &(*v)[0];
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
    return;
  }
  if (!prompt->is_array()) wrong_type("prompt", expected, *v);
  if (prompt->empty()) bad_value("prompt", "expected a non-empty array of token ids.");
  out.prompt_is_tokens = true;
  out.prompt_token_ids.reserve(prompt->size());
  for (const json& id : *prompt) {
    if (id.is_string() || id.is_array()) {
      throw invalid_request("Only one prompt per request is supported.", "prompt", "unsupported_value");
    }
    if (!id.is_number_integer()) wrong_type("prompt", expected, *v);
    if (id.is_number_unsigned() && id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad_value("prompt", "token id " + id.dump() + " is out of range.");
    }
    out.prompt_token_ids.push_back(id.get<int64_t>());
  }
}

void read_sampling(const json& body, ParsedRequest& out) {
  SamplerParams& s = out.sampling;
  s.temperature = static_cast<float>(read_number(body, "temperature", 0.0, kMaxTemperature, 1.0));
  s.top_p = static_cast<float>(read_number(body, "top_p", 0.0, 1.0, 1.0));
  s.min_p = static_cast<float>(read_number(body, "min_p", 0.0, 1.0, 0.0));
  s.top_k = static_cast<int32_t>(read_integer(body, "top_k", 0, std::numeric_limits<int32_t>::max()).value_or(0));
  s.presence_penalty = static_cast<float>(read_number(body, "presence_penalty", -kMaxPenalty, kMaxPenalty, 0.0));
  s.frequency_penalty = static_cast<float>(read_number(body, "frequency_penalty", -kMaxPenalty, kMaxPenalty, 0.0));
  s.repeat_penalty = static_cast<float>(read_number(body, "repeat_penalty", 0.0, kMaxRepeatPenalty, 1.0));
  if (s.repeat_penalty <= 0.0f) bad_value("repeat_penalty", "expected a number > 0 (1: off).");
  if (const auto seed = read_seed(body)) {
    s.seed = *seed;
    out.seed_given = true;
  }
}

void read_max_tokens(const json& body, ParsedRequest& out) {
  // Chat: max_completion_tokens is the current name, max_tokens the deprecated one; either works.
  const char* key = out.endpoint == Endpoint::ChatCompletions && field(body, "max_completion_tokens")
                        ? "max_completion_tokens"
                        : "max_tokens";
  out.max_tokens = read_integer(body, key, 1, kMaxTokensLimit);
}

void read_logprobs(const json& body, ParsedRequest& out) {
  if (out.endpoint == Endpoint::ChatCompletions) {
    out.logprobs = read_bool(body, "logprobs", false);
    const auto top = read_integer(body, "top_logprobs", 0, kMaxTopLogprobsChat);
    if (top && !out.logprobs) {
      throw invalid_request("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs", "invalid_value");
    }
    out.top_logprobs = static_cast<int>(top.value_or(0));
  } else {
    const auto n = read_integer(body, "logprobs", 0, kMaxLogprobsCompletions);
    out.logprobs = n.has_value();
    out.top_logprobs = static_cast<int>(n.value_or(0));
  }
}

void read_stream(const json& body, ParsedRequest& out) {
  out.stream = read_bool(body, "stream", false);
  const json* options = field(body, "stream_options");
  if (!options) return;
  if (!out.stream) {
    throw invalid_request("'stream_options' is only allowed when 'stream' is true.", "stream_options",
                          "invalid_value");
  }
  if (!options->is_object()) wrong_type("stream_options", "an object", *options);
  out.include_usage = read_bool(*options, "include_usage", false);
}

}  // namespace

ParsedRequest parse_request(Endpoint endpoint, std::string_view body_text) {
  json body;
  // Completions: a prompt of token ids is read straight into integers, without a DOM node per id.
  FastIntegerField prompt_ids;
  prompt_ids.key = "prompt";
  FastIntegerField* fast_ids = endpoint == Endpoint::Completions ? &prompt_ids : nullptr;
  // The plain bodies (json_fast.h says why); anything else goes to nlohmann.
  if (std::optional<json> fast = parse_json_object_fast(body_text, fast_ids)) {
    body = std::move(*fast);
  } else {
    try {
      body = json::parse(body_text.begin(), body_text.end());
    } catch (const json::exception& e) {
      throw invalid_request(std::string("The request body is not valid JSON: ") + e.what(), {}, "invalid_json");
    }
  }
  if (!body.is_object()) {
    throw invalid_request("The request body must be a JSON object, got " + type_name(body) + ".", {}, "invalid_json");
  }
  ParsedRequest out;
  out.endpoint = endpoint;
  if (const json* model = field(body, "model")) {
    if (!model->is_string()) wrong_type("model", "a string", *model);
    out.model = model->get<std::string>();
  }
  reject_unsupported(body, endpoint);
  if (endpoint == Endpoint::ChatCompletions) {
    out.messages = read_messages(body);
  } else {
    read_prompt(body, prompt_ids, out);
  }
  read_max_tokens(body, out);
  read_sampling(body, out);
  out.stop = read_stop(body);
  out.ignore_eos = read_bool(body, "ignore_eos", false);
  read_stream(body, out);
  read_logprobs(body, out);
  return out;
}

}  // namespace ga::server
