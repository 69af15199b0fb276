// Generation-loop tests on stories260K, against llama2.c run.c's greedy reference
// (models/tinyllamas/stories260K.greedy-reference.json), plus the text streamer on hand-made pieces.
//
// Reference conventions (the JSON's description): token_ids = BOS + prompt + generated; stdout_text
// is run.c's print of the prompt followed by the continuation, with the leading space of the first
// piece after BOS removed. So the continuation is stdout_text without the prompt's text, and the
// generated ids are token_ids after prompt_token_ids.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/generate.h"
#include "gpu_accel/model.h"
#include "runtime/engine/generate_stream.h"

namespace ga {
namespace {

struct ReferenceCase {
  std::string prompt;
  std::vector<int32_t> prompt_ids;     // BOS + prompt
  std::vector<int32_t> generated_ids;  // what run.c generated after the prompt
  std::string continuation;            // what run.c printed after the prompt
};

std::vector<ReferenceCase> reference_cases() {
  const auto j = nlohmann::json::parse(
      test::read_file(test::shared_path("models/tinyllamas/stories260K.greedy-reference.json")));
  std::vector<ReferenceCase> cases;
  for (const auto& c : j.at("cases")) {
    ReferenceCase r;
    r.prompt = c.at("prompt").get<std::string>();
    r.prompt_ids = c.at("prompt_token_ids").get<std::vector<int32_t>>();
    const auto all = c.at("token_ids").get<std::vector<int32_t>>();
    r.generated_ids.assign(all.begin() + static_cast<ptrdiff_t>(r.prompt_ids.size()), all.end());
    const std::string printed = c.at("stdout_text").get<std::string>();
    EXPECT_EQ(printed.substr(0, r.prompt.size()), r.prompt) << "run.c printed the prompt first";
    r.continuation = printed.substr(r.prompt.size());
    cases.push_back(std::move(r));
  }
  EXPECT_EQ(cases.size(), 4u);
  return cases;
}

class Generate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = new LoadedModel(load_model(test::shared_path("models/tinyllamas/stories260K.gguf")));
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  static Session session(int64_t n_ctx = 512) {
    SessionOptions o;
    o.n_ctx = n_ctx;
    o.n_threads = 2;
    return Session(*model_, o);
  }
  static GenerateOptions greedy(int64_t max_tokens) {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0.0f;
    return o;
  }
  // generate() that also records what was streamed.
  static GenerateResult run(Session& s, const Tokenizer& tok, const std::string& prompt, const GenerateOptions& o,
                            std::vector<std::string>* chunks) {
    return generate(s, tok, prompt, o, [chunks](std::string_view text) {
      EXPECT_FALSE(text.empty()) << "empty chunks are not streamed";
      chunks->emplace_back(text);
      return true;
    });
  }
  static std::string joined(const std::vector<std::string>& chunks) {
    std::string s;
    for (const auto& c : chunks) s += c;
    return s;
  }
  // The text the generated ids add after the prompt, by the tokenizer's own decode.
  static std::string decoded_continuation(const Tokenizer& tok, const GenerateResult& r) {
    std::vector<int32_t> all = r.prompt_tokens;
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    const std::string prompt_text = tok.decode(r.prompt_tokens);
    const std::string all_text = tok.decode(all);
    EXPECT_EQ(all_text.substr(0, prompt_text.size()), prompt_text);
    return all_text.substr(prompt_text.size());
  }

  static LoadedModel* model_;
};
LoadedModel* Generate::model_ = nullptr;

TEST_F(Generate, GreedyMatchesRunCReference) {
  const Tokenizer tok(model_->vocab);
  for (const auto& c : reference_cases()) {
    SCOPED_TRACE("prompt '" + c.prompt + "'");
    Session s = session();
    std::vector<std::string> chunks;
    const GenerateResult r =
        run(s, tok, c.prompt, greedy(static_cast<int64_t>(c.generated_ids.size())), &chunks);
    EXPECT_EQ(r.prompt_tokens, c.prompt_ids);
    EXPECT_EQ(r.tokens, c.generated_ids);
    EXPECT_EQ(r.finish, FinishReason::Length);
    EXPECT_EQ(r.text, c.continuation);
    EXPECT_EQ(joined(chunks), r.text);
    EXPECT_EQ(decoded_continuation(tok, r), r.text);
    EXPECT_GT(r.gen_seconds, 0.0);
    EXPECT_GT(r.prompt_seconds, 0.0);
    // The first token's time covers the prefill and then its sampling.
    EXPECT_GE(r.first_token_seconds, r.prompt_seconds);
  }
}

TEST_F(Generate, StopStringSpanningTokensEndsTheTextBeforeIt) {
  const Tokenizer tok(model_->vocab);
  const ReferenceCase c = reference_cases()[1];  // "Once upon a time" -> ", there was a little girl named Lily..."
  const std::string stop = "little girl";
  const size_t at = c.continuation.find(stop);
  ASSERT_NE(at, std::string::npos);
  // The test is only meaningful if no single piece holds the whole stop string.
  for (int32_t id : c.generated_ids) ASSERT_EQ(tok.token_to_piece(id).find(stop), std::string::npos);

  Session s = session();
  GenerateOptions o = greedy(64);
  o.stop = {"never appears", stop};
  std::vector<std::string> chunks;
  const GenerateResult r = run(s, tok, c.prompt, o, &chunks);
  EXPECT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.text, c.continuation.substr(0, at));
  EXPECT_EQ(joined(chunks), r.text);
  // The tokens stop with the one that completed the stop string (it is included).
  ASSERT_FALSE(r.tokens.empty());
  EXPECT_NE(decoded_continuation(tok, r).find(stop), std::string::npos);
  std::vector<int32_t> expected_tokens(c.generated_ids.begin(),
                                       c.generated_ids.begin() + static_cast<ptrdiff_t>(r.tokens.size()));
  EXPECT_EQ(r.tokens, expected_tokens);
  GenerateResult shorter = r;
  shorter.tokens.pop_back();
  EXPECT_EQ(decoded_continuation(tok, shorter).find(stop), std::string::npos);
}

TEST_F(Generate, EarliestStopStringWins) {
  const Tokenizer tok(model_->vocab);
  const ReferenceCase c = reference_cases()[1];
  Session s = session();
  GenerateOptions o = greedy(64);
  o.stop = {"Lily", "girl"};  // "girl" comes first in the text
  std::vector<std::string> chunks;
  const GenerateResult r = run(s, tok, c.prompt, o, &chunks);
  EXPECT_EQ(r.finish, FinishReason::Stop);
  EXPECT_EQ(r.text, c.continuation.substr(0, c.continuation.find("girl")));
  EXPECT_EQ(joined(chunks), r.text);
}

TEST_F(Generate, MaxTokens) {
  const Tokenizer tok(model_->vocab);
  const ReferenceCase c = reference_cases()[2];
  for (int64_t n : {0, 1, 5}) {
    Session s = session();
    std::vector<std::string> chunks;
    const GenerateResult r = run(s, tok, c.prompt, greedy(n), &chunks);
    EXPECT_EQ(r.finish, FinishReason::Length);
    ASSERT_EQ(static_cast<int64_t>(r.tokens.size()), n);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(c.generated_ids.begin(), c.generated_ids.begin() + n));
    EXPECT_EQ(r.text, decoded_continuation(tok, r));
    EXPECT_EQ(joined(chunks), r.text);
  }
}

TEST_F(Generate, StopsWhenTheContextIsFull) {
  const Tokenizer tok(model_->vocab);
  const ReferenceCase c = reference_cases()[1];  // 5 prompt tokens
  constexpr int64_t kCtx = 16;
  Session s = session(kCtx);
  std::vector<std::string> chunks;
  const GenerateResult r = run(s, tok, c.prompt, greedy(-1), &chunks);
  EXPECT_EQ(r.finish, FinishReason::Length);
  // Every position holds a token; the last sampled token needs no forward pass of its own.
  const size_t expected = static_cast<size_t>(kCtx) - c.prompt_ids.size() + 1;
  ASSERT_EQ(r.tokens.size(), expected);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(c.generated_ids.begin(), c.generated_ids.begin() + expected));
  EXPECT_EQ(s.n_past(), kCtx);
}

TEST_F(Generate, CancelStopsTheStream) {
  const Tokenizer tok(model_->vocab);
  const ReferenceCase c = reference_cases()[0];
  Session s = session();
  int calls = 0;
  std::string streamed;
  const GenerateResult r = generate(s, tok, c.prompt, greedy(100), [&](std::string_view text) {
    streamed += text;
    return ++calls < 3;
  });
  EXPECT_EQ(r.finish, FinishReason::Cancelled);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r.text, streamed);
  EXPECT_EQ(c.continuation.substr(0, streamed.size()), streamed);
  EXPECT_LT(r.tokens.size(), 10u);
}

// Make a token that greedy decoding reaches the EOS token: generation must end before it.
TEST_F(Generate, EndsAtEndOfGenerationUnlessIgnored) {
  const ReferenceCase c = reference_cases()[3];
  const size_t stop_index = 6;
  const int32_t fake_eos = c.generated_ids[stop_index];
  size_t first = 0;
  while (c.generated_ids[first] != fake_eos) ++first;  // its first occurrence ends the generation
  Vocab vocab = model_->vocab;
  vocab.eos_id = fake_eos;
  const Tokenizer tok(vocab);
  ASSERT_TRUE(tok.is_eog(fake_eos));

  Session s = session();
  std::vector<std::string> chunks;
  const GenerateResult r = run(s, tok, c.prompt, greedy(40), &chunks);
  EXPECT_EQ(r.finish, FinishReason::Eos);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(c.generated_ids.begin(), c.generated_ids.begin() + first));
  EXPECT_EQ(r.text, decoded_continuation(tok, r));
  EXPECT_EQ(joined(chunks), r.text);

  GenerateOptions o = greedy(40);
  o.ignore_eos = true;
  Session s2 = session();
  std::vector<std::string> chunks2;
  const GenerateResult r2 = run(s2, tok, c.prompt, o, &chunks2);
  EXPECT_EQ(r2.finish, FinishReason::Length);
  EXPECT_EQ(r2.tokens, std::vector<int32_t>(c.generated_ids.begin(), c.generated_ids.begin() + 40));
}

// Give two generated tokens the two halves of a 3-byte character: no chunk may end inside it.
TEST_F(Generate, HoldsBackIncompleteUtf8) {
  const ReferenceCase c = reference_cases()[2];
  const int32_t a = c.generated_ids[2];
  size_t bi = 3;
  while (c.generated_ids[bi] == a) ++bi;
  const int32_t b = c.generated_ids[bi];
  Vocab vocab = model_->vocab;
  vocab.tokens[static_cast<size_t>(a)] = "\xE2\x80";  // first two bytes of U+201C
  vocab.tokens[static_cast<size_t>(b)] = "\x9C";      // its last byte
  const Tokenizer tok(vocab);

  Session s = session();
  std::vector<std::string> chunks;
  // From ids: the edited vocabulary could tokenize the prompt text differently.
  const GenerateResult r = generate_from_tokens(s, tok, c.prompt_ids, greedy(static_cast<int64_t>(bi) + 3),
                                                [&chunks](std::string_view text) {
                                                  chunks.emplace_back(text);
                                                  return true;
                                                });
  ASSERT_EQ(r.tokens, std::vector<int32_t>(c.generated_ids.begin(), c.generated_ids.begin() + bi + 3));
  for (const auto& chunk : chunks) {
    EXPECT_EQ(detail::complete_utf8_prefix(chunk), chunk.size()) << "chunk ends inside a character";
  }
  EXPECT_EQ(joined(chunks), r.text);
  EXPECT_EQ(r.text, decoded_continuation(tok, r));
  EXPECT_NE(r.text.find("\xE2\x80"), std::string::npos);
}

TEST_F(Generate, PromptLongerThanTheContextFailsBeforeAnyWork) {
  const Tokenizer tok(model_->vocab);
  const ReferenceCase c = reference_cases()[3];  // 14 prompt tokens
  Session s = session(8);
  try {
    generate(s, tok, c.prompt, greedy(4));
    FAIL() << "expected OutOfRange";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfRange);
    EXPECT_NE(e.message().find(std::to_string(c.prompt_ids.size())), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("8"), std::string::npos) << e.message();
  }
  EXPECT_EQ(s.n_past(), 0);
  // Exactly the context size fits, and yields one token.
  Session exact = session(static_cast<int64_t>(c.prompt_ids.size()));
  const GenerateResult r = generate(exact, tok, c.prompt, greedy(10));
  EXPECT_EQ(r.tokens, std::vector<int32_t>{c.generated_ids[0]});
}

TEST_F(Generate, SeededSamplingIsReproducibleAndStreamsDecodeExactly) {
  const Tokenizer tok(model_->vocab);
  GenerateOptions o;
  o.max_tokens = 80;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 7;
  auto once = [&](uint64_t seed) {
    o.sampling.seed = seed;
    Session s = session();
    std::vector<std::string> chunks;
    GenerateResult r = run(s, tok, "", o, &chunks);
    EXPECT_EQ(joined(chunks), r.text);
    EXPECT_EQ(r.text, decoded_continuation(tok, r));
    return r;
  };
  const GenerateResult a = once(7);
  EXPECT_EQ(a.tokens, once(7).tokens);
  EXPECT_NE(a.tokens, once(8).tokens);
}

TEST_F(Generate, RejectsBadOptions) {
  const Tokenizer tok(model_->vocab);
  Session s = session();
  GenerateOptions o = greedy(4);
  o.stop = {""};
  EXPECT_THROW(generate(s, tok, "Hi", o), Error);
  o = greedy(4);
  o.add_special = false;
  EXPECT_THROW(generate(s, tok, "", o), Error);  // no tokens at all
  EXPECT_EQ(s.n_past(), 0);
}

// ---- the streamer alone ----

TEST(TextStreamer, HoldsBackAStopStringPrefixAndReleasesItWhenItDiverges) {
  detail::TextStreamer st({"User:"});
  EXPECT_EQ(st.push("Hello\nUs").ready, "Hello\n");
  const auto u = st.push("ually");
  EXPECT_EQ(u.ready, "Usually");
  EXPECT_FALSE(u.stopped);
  EXPECT_EQ(st.push(" U").ready, " ");
  const auto stop = st.push("ser: x");
  EXPECT_TRUE(stop.stopped);
  EXPECT_EQ(stop.ready, "");
  EXPECT_EQ(st.flush(), "");
}

TEST(TextStreamer, FlushReleasesAnUnfinishedStopPrefix) {
  detail::TextStreamer st({"###"});
  EXPECT_EQ(st.push("a#").ready, "a");
  EXPECT_EQ(st.push("#").ready, "");
  EXPECT_EQ(st.flush(), "##");
}

TEST(TextStreamer, Utf8SequencesAreReleasedWhole) {
  detail::TextStreamer st({});
  EXPECT_EQ(st.push("a\xE2").ready, "a");
  EXPECT_EQ(st.push("\x80").ready, "");
  EXPECT_EQ(st.push("\x9C" "b").ready, "\xE2\x80\x9C" "b");
  EXPECT_EQ(st.push("\xF0\x9F").ready, "");
  EXPECT_EQ(st.push("\x98\x80").ready, "\xF0\x9F\x98\x80");
  EXPECT_EQ(st.push("\xC3").ready, "");
  EXPECT_EQ(st.flush(), "\xC3");  // the end releases even an unfinished sequence
}

TEST(TextStreamer, CompleteUtf8Prefix) {
  EXPECT_EQ(detail::complete_utf8_prefix(""), 0u);
  EXPECT_EQ(detail::complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(detail::complete_utf8_prefix("ab\xC3"), 2u);
  EXPECT_EQ(detail::complete_utf8_prefix("ab\xC3\xA9"), 4u);
  EXPECT_EQ(detail::complete_utf8_prefix("\xE2\x80"), 0u);
  EXPECT_EQ(detail::complete_utf8_prefix("x\xF0\x9F\x98"), 1u);
  EXPECT_EQ(detail::complete_utf8_prefix("\x80\x80"), 2u);  // stray continuation bytes cannot complete
}

}  // namespace
}  // namespace ga
