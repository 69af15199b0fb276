// Response objects in the OpenAI API reference's shapes (chat.completion, chat.completion.chunk,
// text_completion, both logprobs formats, usage), the error object and the HTTP status of each library
// error kind, and the request checks that need no model (Content-Type, context arithmetic, API key).
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "server/api_error.h"
#include "server/api_server.h"
#include "server/completion_route.h"
#include "server/responses.h"
#include "server/sse.h"

namespace ga::server {
namespace {

using nlohmann::json;

ResponseHeader header(Endpoint endpoint, bool logprobs = false, bool include_usage = false) {
  ResponseHeader h;
  h.endpoint = endpoint;
  h.id = new_completion_id(endpoint);
  h.created = 1700000000;
  h.model = "stories260K.gguf";
  h.logprobs = logprobs;
  h.include_usage = include_usage;
  return h;
}

std::vector<TokenEvent> two_tokens() {
  TokenEvent a;
  a.token = 10;
  a.text = "Hi";
  a.chosen = {10, "Hi", -0.5f};
  a.top = {{10, "Hi", -0.5f}, {11, "Ho", -1.5f}};
  TokenEvent b;
  b.token = 12;
  b.text = "";  // a partial UTF-8 sequence: no text yet
  b.chosen = {12, std::string("\xe2\x82"), -2.0f};
  b.top = {{12, std::string("\xe2\x82"), -2.0f}};
  return {a, b};
}

CompletionResult result() {
  CompletionResult r;
  r.finish = FinishReason::Eos;
  r.text = "Hi there";
  r.prompt_tokens = 7;
  r.cached_prompt_tokens = 4;
  r.completion_tokens = 3;
  return r;
}

TEST(Responses, Ids) {
  const std::string chat = new_completion_id(Endpoint::ChatCompletions);
  EXPECT_EQ(chat.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(new_completion_id(Endpoint::Completions).rfind("cmpl-", 0), 0u);
  EXPECT_NE(chat, new_completion_id(Endpoint::ChatCompletions));
}

// Ids and default sampling seeds: distinct across calls and threads, and every bit set about half the time
// (a counter or a constant would fail both).
TEST(Responses, RandomBitsAreDistinctAcrossThreadsAndLookUniform) {
  constexpr int kThreads = 4, kPerThread = 5000;
  std::vector<std::vector<uint64_t>> drawn(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&drawn, t] {
      for (int i = 0; i < kPerThread; ++i) drawn[static_cast<size_t>(t)].push_back(random_u64());
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<uint64_t> all;
  std::vector<int> ones(64, 0);
  for (const auto& v : drawn) {
    for (const uint64_t x : v) {
      all.insert(x);
      for (int b = 0; b < 64; ++b) ones[static_cast<size_t>(b)] += static_cast<int>((x >> b) & 1u);
    }
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  for (int b = 0; b < 64; ++b) {  // binomial(20000, 0.5): sd ~71, so +-500 is 7 sd
    EXPECT_NEAR(ones[static_cast<size_t>(b)], kThreads * kPerThread / 2, 500) << "bit " << b;
  }
}

TEST(Responses, FinishReasons) {
  EXPECT_STREQ(openai_finish_reason(FinishReason::Eos), "stop");
  EXPECT_STREQ(openai_finish_reason(FinishReason::Stop), "stop");
  EXPECT_STREQ(openai_finish_reason(FinishReason::Length), "length");
}

TEST(Responses, ChatCompletion) {
  const json j = json::parse(dump_json(full_response(header(Endpoint::ChatCompletions), result(), {})));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "stories260K.gguf");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hi there");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 10);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(Responses, ChatLogprobs) {
  const auto events = two_tokens();
  const json j = json::parse(dump_json(full_response(header(Endpoint::ChatCompletions, true), result(), events)));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "Hi");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"], json({72, 105}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "Ho");
  EXPECT_EQ(content[1]["bytes"], json({0xe2, 0x82}));  // the raw bytes of a partial character
  EXPECT_EQ(content[1]["token"], "\xef\xbf\xbd");        // its text: U+FFFD, still valid JSON
}

TEST(Responses, CompletionLogprobs) {
  const auto events = two_tokens();
  const json j = completion_logprobs(events, 5);
  EXPECT_EQ(j["tokens"][0], "Hi");
  EXPECT_FLOAT_EQ(j["token_logprobs"][1].get<float>(), -2.0f);
  EXPECT_EQ(j["text_offset"], json({5, 7}));
  EXPECT_FLOAT_EQ(j["top_logprobs"][0]["Ho"].get<float>(), -1.5f);
  const json whole = json::parse(dump_json(full_response(header(Endpoint::Completions, true), result(), events)));
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "Hi there");
  EXPECT_EQ(whole["choices"][0]["logprobs"]["text_offset"][0], 0);
}

TEST(Responses, ChatStreamChunks) {
  const ResponseHeader h = header(Endpoint::ChatCompletions, false, true);
  const json role = chat_role_chunk(h);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], h.id);
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());  // include_usage: null until the last chunk
  const json delta = delta_chunk(h, "Hi", {}, 0);
  EXPECT_EQ(delta["choices"][0]["delta"], json({{"content", "Hi"}}));
  const json finish = finish_chunk(h, FinishReason::Length);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  const json usage = usage_chunk(h, result());
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 10);
  EXPECT_FALSE(delta_chunk(header(Endpoint::ChatCompletions), "x", {}, 0).contains("usage"));
}

TEST(Responses, CompletionStreamChunks) {
  const ResponseHeader h = header(Endpoint::Completions, true);
  const auto events = two_tokens();
  const json delta = delta_chunk(h, "Hi", events, 3);
  EXPECT_EQ(delta["object"], "text_completion");
  EXPECT_EQ(delta["choices"][0]["text"], "Hi");
  EXPECT_EQ(delta["choices"][0]["logprobs"]["text_offset"], json({3, 5}));
  const json finish = finish_chunk(h, FinishReason::Stop);
  EXPECT_EQ(finish["choices"][0]["text"], "");
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
}

// Every printable ASCII byte, '"' and '\\' included (the template quotes plain text itself).
std::string printable_ascii() {
  std::string text;
  for (char c = 0x20; c < 0x7f; ++c) text += c;
  return text + " and a plain word";
}

// The per-stream template of text deltas gives exactly the bytes of the whole chunk object's event, for both
// endpoints, with and without the usage placeholder, for texts the JSON dump must escape or repair; a model id
// that contains the template's marker falls back to the whole object, with the same bytes.
TEST(Responses, DeltaEventTemplateGivesTheWholeChunksBytes) {
  const std::vector<std::string> texts = {"",
                                          "Hi",
                                          " a \"quoted\" \\ back/slash",
                                          "line\nbreak\ttab\r\x01\x1f\x7f",
                                          "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                          std::string("\xe2\x82", 2),  // half of a 3-byte sequence: U+FFFD
                                          std::string("nul\0inside", 10),
                                          "\x1f<gpu-accel delta text>\x1f",
                                          printable_ascii()};
  for (const Endpoint e : {Endpoint::Completions, Endpoint::ChatCompletions}) {
    for (const bool usage : {false, true}) {
      for (const char* model : {"stories260K.gguf", "m\x1f<gpu-accel delta text>\x1f.gguf"}) {
        ResponseHeader h = header(e, false, usage);
        h.model = model;
        const DeltaEventTemplate deltas(h);
        for (const std::string& text : texts) {
          SCOPED_TRACE("endpoint " + std::to_string(static_cast<int>(e)) + " usage " + std::to_string(usage) +
                       " model " + model + " text '" + text + "'");
          EXPECT_EQ(deltas.event(text), sse_data(delta_chunk(h, text, {}, 0)));
        }
      }
    }
  }
}

TEST(ApiErrors, ObjectShape) {
  const json j = invalid_request("bad", "temperature", "invalid_value").to_json();
  EXPECT_EQ(j, json::parse(R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature",)"
                           R"("code":"invalid_value"}})"));
  const json no_param = invalid_request("bad").to_json();
  EXPECT_TRUE(no_param["error"]["param"].is_null());
  EXPECT_TRUE(no_param["error"]["code"].is_null());
  EXPECT_EQ(dump_json(json(std::string("a\xff"))), "\"a\xef\xbf\xbd\"");
}

TEST(ApiErrors, StatusOfEachLibraryErrorKind) {
  const auto status = [](ErrorKind kind) { return api_error_from(Error(kind, "m")).status(); };
  EXPECT_EQ(status(ErrorKind::InvalidArgument), 400);
  EXPECT_EQ(status(ErrorKind::OutOfRange), 400);
  EXPECT_EQ(status(ErrorKind::Unsupported), 400);
  EXPECT_EQ(status(ErrorKind::Unavailable), 503);
  EXPECT_EQ(status(ErrorKind::Internal), 500);
  EXPECT_EQ(status(ErrorKind::Io), 500);
  EXPECT_EQ(status(ErrorKind::OutOfMemory), 500);
  EXPECT_EQ(api_error_from(Error(ErrorKind::Unavailable, "full")).retry_after_seconds(), 1);
  EXPECT_EQ(api_error_from(Error(ErrorKind::OutOfRange, "long")).code(), "context_length_exceeded");
  EXPECT_EQ(api_error_from(Error(ErrorKind::InvalidArgument, "why")).message(), "why");
}

TEST(RequestChecks, ContentType) {
  EXPECT_NO_THROW(check_content_type(""));
  EXPECT_NO_THROW(check_content_type("application/json"));
  EXPECT_NO_THROW(check_content_type("Application/JSON; charset=utf-8"));
  EXPECT_NO_THROW(check_content_type("application/vnd.api+json"));
  EXPECT_NO_THROW(check_content_type(" \tapplication/json \r; charset=utf-8"));  // C-locale white space trimmed
  EXPECT_NO_THROW(check_content_type("APPLICATION/VND.API+JSON ;"));
  EXPECT_NO_THROW(check_content_type("a+json"));
  EXPECT_TRUE(is_multipart_form_data("multipart/form-data; boundary=x"));  // httplib's test: a case-sensitive prefix
  EXPECT_FALSE(is_multipart_form_data("Multipart/Form-Data; boundary=x"));
  EXPECT_FALSE(is_multipart_form_data(" multipart/form-data"));
  for (const char* bad : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                          "application/jsonx", "json", "+json", " +JSON ", "application/ json", ";application/json",
                          "application/json\xa0", "\xc3\xa1pplication/json"}) {
    try {
      check_content_type(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 415) << bad;
    }
  }
}

TEST(RequestChecks, MaxTokensAgainstTheContext) {
  ParsedRequest chat;
  chat.endpoint = Endpoint::ChatCompletions;
  EXPECT_EQ(resolve_max_tokens(chat, 100, 512), 412);  // chat: up to the context
  ParsedRequest completion;
  completion.endpoint = Endpoint::Completions;
  EXPECT_EQ(resolve_max_tokens(completion, 100, 512), kCompletionsDefaultMaxTokens);
  EXPECT_EQ(resolve_max_tokens(completion, 505, 512), 7);
  completion.max_tokens = 412;
  EXPECT_EQ(resolve_max_tokens(completion, 100, 512), 412);
  completion.max_tokens = 413;
  try {
    resolve_max_tokens(completion, 100, 512);
    ADD_FAILURE() << "max_tokens beyond the context accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "max_tokens");
    EXPECT_NE(e.message().find("512"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("513"), std::string::npos) << e.message();
  }
  try {
    resolve_max_tokens(chat, 600, 512);
    ADD_FAILURE() << "prompt longer than the context accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "messages");
    EXPECT_EQ(e.code(), "context_length_exceeded");
    EXPECT_NE(e.message().find("512"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("600"), std::string::npos) << e.message();
  }
  EXPECT_THROW(resolve_max_tokens(chat, 512, 512), ApiError);  // nothing left to generate
}

TEST(RequestChecks, ApiKey) {
  EXPECT_TRUE(authorized("Bearer s3cret", "s3cret"));
  EXPECT_FALSE(authorized("Bearer s3creT", "s3cret"));
  EXPECT_FALSE(authorized("Bearer s3cret2", "s3cret"));
  EXPECT_FALSE(authorized("bearer s3cret", "s3cret"));
  EXPECT_FALSE(authorized("s3cret", "s3cret"));
  EXPECT_FALSE(authorized("", "s3cret"));
  EXPECT_FALSE(authorized("Bearer ", "s3cret"));
}

}  // namespace
}  // namespace ga::server
