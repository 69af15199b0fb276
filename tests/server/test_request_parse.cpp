// Request parsing and validation against the OpenAI API reference (platform.openai.com/docs/api-reference):
// field types, documented ranges and defaults, and the error object's `param` naming the field at fault.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/request_parse.h"

namespace ga::server {
namespace {

constexpr const char* kChatPrefix = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";
constexpr const char* kCompletionPrefix = R"({"model":"m","prompt":"Once upon")";

// A chat request with extra fields (a JSON fragment starting with ',' or empty).
std::string chat(const std::string& extra) { return std::string(kChatPrefix) + extra + "}"; }
std::string completion(const std::string& extra) { return std::string(kCompletionPrefix) + extra + "}"; }

// The error a body gets; fails the test when it parses.
ApiError error_of(Endpoint endpoint, const std::string& body) {
  try {
    parse_request(endpoint, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "", "");
}

void expect_bad(Endpoint endpoint, const std::string& body, const std::string& param) {
  const ApiError e = error_of(endpoint, body);
  EXPECT_EQ(e.status(), 400) << body;
  EXPECT_EQ(e.type(), "invalid_request_error") << body;
  EXPECT_EQ(e.param(), param) << body << " -> " << e.message();
  EXPECT_FALSE(e.message().empty());
}

TEST(RequestParse, ChatDefaultsFollowOpenAI) {
  const ParsedRequest r = parse_request(Endpoint::ChatCompletions, chat(""));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);  // OpenAI: temperature 1, top_p 1
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
  EXPECT_TRUE(r.stop.empty());
}

TEST(RequestParse, ChatFields) {
  const ParsedRequest r = parse_request(
      Endpoint::ChatCompletions,
      R"({"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},)"
      R"({"type":"text","text":"b"}]},{"role":"assistant","content":null}],"max_completion_tokens":7,"temperature":0,)"
      R"("top_p":0.5,"top_k":3,"min_p":0.1,"seed":-1,"stop":["x","","y"],"presence_penalty":-2,)"
      R"("frequency_penalty":2,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,)"
      R"("top_logprobs":20,"n":1,"user":"ignored","unknown_field":{"ignored":[1,2]}})");
  EXPECT_EQ(r.model, "");  // omitted: the served model
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is OpenAI's new name for system
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, UINT64_MAX);  // -1 wraps: every 64-bit value is a distinct seed
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "y"}));  // empty stop strings can never match
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -2.0f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 2.0f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
}

TEST(RequestParse, NullMeansNotGiven) {
  const ParsedRequest r = parse_request(
      Endpoint::ChatCompletions,
      chat(R"(,"max_tokens":null,"temperature":null,"stop":null,"seed":null,"stream":null,"logprobs":null)"));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.seed_given);
}

TEST(RequestParse, IntegersMaySpellAsIntegralFloats) {
  EXPECT_EQ(parse_request(Endpoint::ChatCompletions, chat(R"(,"max_tokens":16.0)")).max_tokens, 16);
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"max_tokens":16.5)"), "max_tokens");
}

TEST(RequestParse, CompletionPromptForms) {
  EXPECT_EQ(parse_request(Endpoint::Completions, completion("")).prompt_text, "Once upon");
  const ParsedRequest one = parse_request(Endpoint::Completions, R"({"prompt":["single"]})");
  EXPECT_FALSE(one.prompt_is_tokens);
  EXPECT_EQ(one.prompt_text, "single");
  const ParsedRequest ids = parse_request(Endpoint::Completions, R"({"prompt":[1,2,3]})");
  EXPECT_TRUE(ids.prompt_is_tokens);
  EXPECT_EQ(ids.prompt_token_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt":[[4,5]]})").prompt_token_ids,
            (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(parse_request(Endpoint::Completions, R"({"prompt":""})").prompt_text, "");
  expect_bad(Endpoint::Completions, R"({"prompt":["a","b"]})", "prompt");  // batches: one prompt per request
  expect_bad(Endpoint::Completions, R"({"prompt":[]})", "prompt");
  expect_bad(Endpoint::Completions, R"({"prompt":[1,"a"]})", "prompt");
  expect_bad(Endpoint::Completions, R"({"prompt":[1.5]})", "prompt");
  expect_bad(Endpoint::Completions, R"({"prompt":{"a":1}})", "prompt");
  expect_bad(Endpoint::Completions, R"({"prompt":[18446744073709551615]})", "prompt");
  expect_bad(Endpoint::Completions, R"({"model":"m"})", "prompt");
}

TEST(RequestParse, CompletionLogprobsIsAnInteger) {
  const ParsedRequest r = parse_request(Endpoint::Completions, completion(R"(,"logprobs":3)"));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  const ParsedRequest zero = parse_request(Endpoint::Completions, completion(R"(,"logprobs":0)"));
  EXPECT_TRUE(zero.logprobs);  // 0: the chosen tokens' logprobs, no alternatives
  EXPECT_EQ(zero.top_logprobs, 0);
  expect_bad(Endpoint::Completions, completion(R"(,"logprobs":6)"), "logprobs");
  expect_bad(Endpoint::Completions, completion(R"(,"logprobs":true)"), "logprobs");
  expect_bad(Endpoint::Completions, completion(R"(,"logprobs":-1)"), "logprobs");
}

TEST(RequestParse, MalformedBodies) {
  for (const std::string body : {"", "{", "nul", "{\"messages\":[}", "[]", "42", "\"text\"", "null",
                                 "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}",     // invalid UTF-8
                                 "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}",     // overlong
                                 "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}",     // lone surrogate
                                 "{\"max_tokens\":1e400}", "{\"a\":NaN}", "{\"a\":Infinity}",
                                 "{\"messages\":[]} trailing"}) {
    const ApiError e = error_of(Endpoint::ChatCompletions, body);
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.code(), "invalid_json") << body;
    EXPECT_FALSE(dump_json(e.to_json()).empty());  // quoted invalid bytes must still serialize
  }
}

TEST(RequestParse, DeepNestingIsRejectedWithoutCrashing) {
  const std::string deep = "{\"messages\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_bad(Endpoint::ChatCompletions, deep, "messages[0]");
}

TEST(RequestParse, WrongTypesNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(,"max_tokens":"5")", "max_tokens"},   {R"(,"max_tokens":true)", "max_tokens"},
      {R"(,"temperature":"hot")", "temperature"}, {R"(,"temperature":[1])", "temperature"},
      {R"(,"top_p":{})", "top_p"},              {R"(,"top_k":0.5)", "top_k"},
      {R"(,"min_p":false)", "min_p"},           {R"(,"seed":"1")", "seed"},
      {R"(,"seed":1.5)", "seed"},               {R"(,"stop":5)", "stop"},
      {R"(,"stop":[1])", "stop"},               {R"(,"stream":"yes")", "stream"},
      {R"(,"stream":1)", "stream"},             {R"(,"logprobs":1)", "logprobs"},
      {R"(,"model":5)", "model"},               {R"(,"presence_penalty":"0")", "presence_penalty"},
      {R"(,"frequency_penalty":null,"ignore_eos":"no")", "ignore_eos"},
      {R"(,"n":"1")", "n"},
  };
  for (const auto& [extra, param] : cases) expect_bad(Endpoint::ChatCompletions, chat(extra), param);
}

TEST(RequestParse, OutOfRangeNumbers) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(,"max_tokens":0)", "max_tokens"},
      {R"(,"max_tokens":-5)", "max_tokens"},
      {R"(,"max_tokens":99999999999999999999999)", "max_tokens"},
      {R"(,"max_tokens":18446744073709551615)", "max_tokens"},
      {R"(,"max_tokens":-9223372036854775808)", "max_tokens"},
      {R"(,"max_completion_tokens":1e300)", "max_completion_tokens"},
      {R"(,"temperature":2.5)", "temperature"},
      {R"(,"temperature":-0.1)", "temperature"},
      {R"(,"temperature":1e308)", "temperature"},
      {R"(,"top_p":1.01)", "top_p"},
      {R"(,"min_p":-1)", "min_p"},
      {R"(,"top_k":-1)", "top_k"},
      {R"(,"top_k":4294967296)", "top_k"},
      {R"(,"presence_penalty":2.1)", "presence_penalty"},
      {R"(,"frequency_penalty":-3)", "frequency_penalty"},
      {R"(,"repeat_penalty":0)", "repeat_penalty"},
      {R"(,"seed":1e30)", "seed"},
      {R"(,"logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"(,"logprobs":true,"top_logprobs":-1)", "top_logprobs"},
  };
  for (const auto& [extra, param] : cases) expect_bad(Endpoint::ChatCompletions, chat(extra), param);
}

TEST(RequestParse, Messages) {
  expect_bad(Endpoint::ChatCompletions, R"({"model":"m"})", "messages");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[]})", "messages");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":{"role":"user"}})", "messages");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":["hi"]})", "messages[0]");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"content":"hi"}]})", "messages[0].role");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":7,"content":"hi"}]})", "messages[0].role");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":"wizard","content":"hi"}]})", "messages[0].role");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":"user","content":"a"},{"role":"tool","content":"x"}]})",
             "messages[1].role");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":"user","content":5}]})", "messages[0].content");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":"user","content":[5]}]})", "messages[0].content[0]");
  expect_bad(Endpoint::ChatCompletions,
             R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
             "messages[0].content[0].type");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
             "messages[0].content[0].text");
  expect_bad(Endpoint::ChatCompletions, R"({"messages":[{"role":"user","content":"a","name":3}]})",
             "messages[0].name");
}

TEST(RequestParse, UnsupportedFeaturesAreRefused) {
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"n":2)"), "n");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"tools":[{"type":"function"}])"), "tools");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"tool_choice":"auto")"), "tool_choice");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"response_format":{"type":"json_object"})"), "response_format");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"logit_bias":{"50256":-100})"), "logit_bias");
  expect_bad(Endpoint::Completions, completion(R"(,"echo":true)"), "echo");
  expect_bad(Endpoint::Completions, completion(R"(,"best_of":2)"), "best_of");
  expect_bad(Endpoint::Completions, completion(R"(,"suffix":"end")"), "suffix");
  // Their harmless forms are accepted.
  EXPECT_NO_THROW(parse_request(Endpoint::ChatCompletions,
                                chat(R"(,"n":1,"tools":[],"tool_choice":"none","response_format":{"type":"text"},)"
                                     R"("logit_bias":{})")));
}

TEST(RequestParse, StreamOptionsNeedStream) {
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"stream_options":{"include_usage":true})"), "stream_options");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"stream":true,"stream_options":5)"), "stream_options");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"stream":true,"stream_options":{"include_usage":1})"),
             "include_usage");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"top_logprobs":2)"), "top_logprobs");  // needs logprobs: true
}

TEST(RequestParse, StopLimits) {
  std::string many = R"(,"stop":[)";
  for (size_t i = 0; i <= kMaxStopStrings; ++i) many += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  expect_bad(Endpoint::ChatCompletions, chat(many + "]"), "stop");
  expect_bad(Endpoint::ChatCompletions, chat(R"(,"stop":")" + std::string(kMaxStopStringBytes + 1, 'x') + "\""),
             "stop");
  EXPECT_EQ(parse_request(Endpoint::ChatCompletions, chat(R"(,"stop":"\n")")).stop,
            (std::vector<std::string>{"\n"}));
}

// The fast reader (json_fast.h: prompt ids read straight into integers) against nlohmann's path for the same
// request: an unknown key spelled with a \u escape sends the whole body to nlohmann (the fast reader declines
// \u) and changes nothing else (unknown fields are ignored). Same result, or the same error, for every prompt form.
std::string outcome(Endpoint endpoint, const std::string& body) {
  try {
    const ParsedRequest r = parse_request(endpoint, body);
    std::string ids;
    for (const int64_t id : r.prompt_token_ids) ids += std::to_string(id) + ",";
    return "ok tokens=" + std::to_string(r.prompt_is_tokens) + " text=" + r.prompt_text + " ids=" + ids +
           " max=" + std::to_string(r.max_tokens.value_or(-1)) + " stream=" + std::to_string(r.stream) +
           " usage=" + std::to_string(r.include_usage) + " temp=" + std::to_string(r.sampling.temperature);
  } catch (const ApiError& e) {
    return "error " + std::to_string(e.status()) + " " + e.param() + " " + e.code() + ": " + e.message();
  }
}

TEST(RequestParse, FastPromptIdsMatchNlohmannsPath) {
  const std::vector<std::string> prompts = {
      "[17, 3, 127999, 0, 42]", "[-0,-5,999999999999999999]", "[]", "[1,2.0]", "[1.5]", "[1,\"a\"]", "[[4,5]]",
      "[[]]", "[\"a\",\"b\"]", "\"text\"", "null", "{\"a\":1}", "[18446744073709551615]", "[5]", "[1,[2]]",
      "[true]", "[null]", "[-9223372036854775808]"};
  for (const std::string& prompt : prompts) {
    for (const char* layout :
         {"{\"prompt\":P,\"max_tokens\":8,\"stream\":true}", "{\"prompt\":\"x\",\"prompt\":P,\"temperature\":0}",
          "{\"prompt\":P,\"prompt\":[9,8],\"echo\":true}", "{\"prompt\":[9,8],\"prompt\":P}", "{\"n\":2,\"prompt\":P}",
          "{\"model\":\"m\",\"prompt\":P,\"stream_options\":{}}"}) {
      std::string body = layout;
      body.replace(body.find('P'), 1, prompt);
      const std::string via_nlohmann = "{\"\\u0078\":0," + body.substr(1);
      for (const Endpoint endpoint : {Endpoint::Completions, Endpoint::ChatCompletions}) {
        EXPECT_EQ(outcome(endpoint, body), outcome(endpoint, via_nlohmann)) << body;
      }
    }
  }
  // The fast path was taken (and is right) for the plain case.
  const ParsedRequest r = parse_request(Endpoint::Completions, R"({"prompt": [17, 3, -2], "max_tokens": 8})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_token_ids, (std::vector<int64_t>{17, 3, -2}));
}

}  // namespace
}  // namespace ga::server
