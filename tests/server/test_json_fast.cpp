// The fast request-body parser (apps/server/json_fast.h) against nlohmann::json::parse, its reference: every
// body it accepts must give nlohmann's DOM exactly, number types included (unsigned / signed / float), and it
// must decline every body nlohmann refuses. Bodies: the shapes clients send (which it must accept, or it
// would speed nothing up), edge cases of the grammar, and 30000 random documents, a third of them corrupted.
// Every body is read twice: plainly, and with the top-level "prompt" taken as integers (FastIntegerField); the
// second must accept the same bodies, and its DOM with the ids put back (as nlohmann types them) must be
// nlohmann's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/json_fast.h"

namespace ga::server {
namespace {

using nlohmann::json;

// Equal values of equal types all the way down (json's == calls 5u and 5 equal; the parsers must not differ).
bool same_dom(const json& a, const json& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case json::value_t::object: {
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        const auto other = b.find(it.key());
        if (other == b.end() || !same_dom(it.value(), *other)) return false;
      }
      return true;
    }
    case json::value_t::array: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!same_dom(a[i], b[i])) return false;
      }
      return true;
    }
    case json::value_t::number_float: {
      const double x = a.get<double>(), y = b.get<double>();
      return x == y && std::signbit(x) == std::signbit(y);
    }
    default: return a == b;
  }
}

// Whether `dom` (nlohmann's value of the field) is an array of integers equal to `ids` as parse_request reads
// them (get<int64_t>; "-0" is a signed 0 there and an unsigned one elsewhere: the same id).
bool same_ids(const json& dom, const std::vector<int64_t>& ids) {
  if (!dom.is_array() || dom.size() != ids.size()) return false;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!dom[i].is_number_integer() || dom[i].get<int64_t>() != ids[i]) return false;
  }
  return true;
}

// Checks one body; returns whether the fast parser accepted it.
bool check(const std::string& text) {
  const std::optional<json> fast = parse_json_object_fast(text);
  FastIntegerField prompt_ids;
  prompt_ids.key = "prompt";
  std::optional<json> with_ids = parse_json_object_fast(text, &prompt_ids);
  EXPECT_EQ(fast.has_value(), with_ids.has_value()) << "the integer field changed the decision: " << text;
  if (fast && with_ids) {
    json plain = *fast;  // nlohmann's DOM where fast is right (checked below)
    if (prompt_ids.present) {
      EXPECT_FALSE(with_ids->contains("prompt")) << text;
      EXPECT_TRUE(plain.contains("prompt") && same_ids(plain["prompt"], prompt_ids.values)) << text;
      plain.erase("prompt");
    }
    EXPECT_TRUE(same_dom(plain, *with_ids)) << text << "\nplain: " << plain.dump() << "\nwith ids: " << with_ids->dump();
  }
  json reference;
  bool reference_ok = true;
  try {
    reference = json::parse(text);
  } catch (const json::exception&) {
    reference_ok = false;
  }
  if (!fast) return false;
  EXPECT_TRUE(reference_ok) << "accepted what nlohmann refuses: " << text;
  if (reference_ok) {
    EXPECT_TRUE(same_dom(*fast, reference)) << text << "\nfast: " << fast->dump() << "\nnlohmann: " << reference.dump();
  }
  return true;
}

TEST(JsonFast, AcceptsWhatClientsSendAndGivesNlohmannsDom) {
  const std::vector<std::string> bodies = {
      // bench/serve/bench_http.py's body (Python's json.dumps spacing)
      R"({"prompt": [17, 3, 127999, 0, 42], "max_tokens": 8, "temperature": 0, "ignore_eos": true, "stream": true, )"
      R"("stream_options": {"include_usage": true}, "model": "llama3-1b-f16.gguf"})",
      // the openai clients' chat body (compact), escapes included
      R"({"messages":[{"role":"system","content":"Be brief.\nReally."},{"role":"user","content":"Say \"hi\" \\ \/ )"
      R"(\t\b\f\r"}],"model":"m","temperature":0.7,"top_p":1e-1,"max_tokens":16,"stream":false,"seed":-3,)"
      R"("stop":["\n\n","END"],"logprobs":null,"frequency_penalty":-0.0})",
      "{}", " { } ", "{\"a\":[]}", "{\"a\":{}}", "{\"a\":[[],[[]],{}]}", "{\"x\":1,\"x\":2}",  // last value wins
      "{\"n\":0}", "{\"n\":-0}", "{\"n\":999999999999999999}", "{\"n\":-999999999999999999}", "{\"n\":0.5}",
      "{\"n\":1E+2}", "{\"n\":1e-400}", "{\"n\":-1.5e3}", "{\"s\":\"\x7f~ \"}", "{\"b\":false,\"t\":true,\"z\":null}",
      "\t{\r\n\"a\" :\n1 ,\"b\":[ 1 , 2 ]}\n"};
  for (const std::string& body : bodies) EXPECT_TRUE(check(body)) << "declined: " << body;
}

// Which values of "prompt" are read as integers: top level only, non-empty arrays of integers only, last key wins.
TEST(JsonFast, PromptIdsReadAsIntegers) {
  struct Case {
    std::string body;
    bool accepted;   // by the fast reader at all
    bool present;    // the prompt read as integers
    std::vector<int64_t> ids;
  };
  const std::vector<Case> cases = {
      {R"({"prompt": [17, 3, 127999, 0, 42], "max_tokens": 8})", true, true, {17, 3, 127999, 0, 42}},
      {R"({"prompt":[-0,-5, 999999999999999999 ]})", true, true, {0, -5, 999999999999999999}},
      {R"({"prompt":[1,2],"prompt":"x"})", true, false, {}},
      {R"({"prompt":"x","prompt":[7]})", true, true, {7}},
      {R"({"prompt":[1],"prompt":[2,3]})", true, true, {2, 3}},
      {R"({"prompt":[]})", true, false, {}},
      {R"({"prompt":[1,2.0]})", true, false, {}},
      {R"({"prompt":[1,2e1]})", true, false, {}},
      {R"({"prompt":[[1,2]]})", true, false, {}},
      {R"({"prompt":[1,"a"]})", true, false, {}},
      {R"({"prompt":null})", true, false, {}},
      {R"({"prompt":[1234567890123456789]})", false, false, {}},  // 19 digits: nlohmann's
      {R"({"prompt":[01]})", false, false, {}},                   // invalid JSON
      {R"({"prompt":[1,2)", false, false, {}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(check(c.body), c.accepted) << c.body;
    FastIntegerField ids;
    ids.key = "prompt";
    const std::optional<json> dom = parse_json_object_fast(c.body, &ids);
    EXPECT_EQ(ids.present, c.present) << c.body;
    if (c.present) {
      EXPECT_EQ(ids.values, c.ids) << c.body;
    }
    if (dom) {
      EXPECT_EQ(dom->contains("prompt"), !c.present) << c.body;  // a value not taken as integers stays in the DOM
    }
  }
  // Only the top-level key is watched.
  FastIntegerField ids;
  ids.key = "prompt";
  const std::optional<json> nested = parse_json_object_fast(R"({"a":{"prompt":[1]}})", &ids);
  ASSERT_TRUE(nested.has_value());
  EXPECT_FALSE(ids.present);
  EXPECT_TRUE(same_dom((*nested)["a"]["prompt"], json::parse("[1]")));
}

TEST(JsonFast, DeclinesWhatItLeavesToNlohmann) {
  // Refused by both, or valid but outside the subset (UTF-8, \u escapes, long integers, deep nesting).
  const std::vector<std::string> bodies = {
      "", "{", "}", "[]", "42", "\"text\"", "null", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "{\"a\":[1,]}", "{,}",
      "{\"a\":01}", "{\"a\":-}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":1e}", "{\"a\":+1}", "{\"a\":1e400}",
      "{\"a\":NaN}", "{\"a\":Infinity}", "{\"a\":tru}", "{\"a\":truex}", "{\"a\":1} x", "{\"a\":1}{}",
      "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u0041\"}", "{\"a\":\"\xc3\xa9\"}", "{\"a\":\"\xff\"}",
      "{\"a\":1234567890123456789}", "{\"a\":18446744073709551616}", "{'a':1}", "{\"a\":1 /* c */}",
      "{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}"};
  for (const std::string& body : bodies) EXPECT_FALSE(check(body)) << "accepted: " << body;
}

// Random documents in random layouts, a third of them corrupted by a few byte edits.
class RandomJson {
 public:
  explicit RandomJson(uint32_t seed) : rng_(seed) {}

  std::string document() {
    std::string out;
    if (pick(10) == 0) {
      value(out, 0);  // sometimes not an object at the top
    } else {
      object(out, 0);
    }
    space(out);
    if (pick(3) == 0) corrupt(out);
    return out;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint32_t>(n)); }

  void space(std::string& out) {
    static const char* const kSpaces[] = {"", "", "", " ", "\n", "\t ", "\r\n  "};
    out += kSpaces[pick(7)];
  }

  void value(std::string& out, int depth) {
    space(out);
    switch (depth > 4 ? pick(4) : pick(7)) {
      case 0: integer(out); break;
      case 1: real(out); break;
      case 2: string(out); break;
      case 3: out += pick(3) == 0 ? "true" : pick(2) == 0 ? "false" : "null"; break;
      case 4:
      case 5: array(out, depth + 1); break;
      default: object(out, depth + 1); break;
    }
    space(out);
  }

  void integer(std::string& out) {
    if (pick(2) == 0) out += '-';
    const int digits = 1 + pick(pick(4) == 0 ? 22 : 6);
    out += static_cast<char>('0' + pick(10));  // a leading zero now and then: "01" is invalid JSON
    for (int i = 1; i < digits; ++i) out += static_cast<char>('0' + pick(10));
  }

  void real(std::string& out) {
    static const char* const kReals[] = {"0.5",   "-0.0",    "1e5",  "2E-3",      "1.25e+400", "1e-400",
                                         "3.14159", "-2.5E2", "0.1", "123456.789", "1e308",     "-1e-7"};
    out += kReals[pick(12)];
  }

  void string(std::string& out) {
    static const char* const kPieces[] = {"a",  "Z",  " ",      "~",      "\x7f",     "\\n",      "\\\"",
                                          "\\\\", "\\/", "\\t",   "\\u00e9", "\xc3\xa9", "\xe2\x82\xac", "\x01",
                                          "\xff", "\\q", "text", "0"};
    out += '"';
    for (int i = 0, n = pick(6); i < n; ++i) out += kPieces[pick(pick(3) == 0 ? 18 : 10)];
    out += '"';
  }

  void integer_array(std::string& out) {
    out += '[';
    for (int i = 0, n = pick(8); i < n; ++i) {
      if (i) out += ',';
      space(out);
      if (pick(20) == 0) {
        real(out);
      } else {
        integer(out);
      }
      space(out);
    }
    out += ']';
  }

  void array(std::string& out, int depth) {
    out += '[';
    for (int i = 0, n = pick(5); i < n; ++i) {
      if (i) out += ',';
      value(out, depth);
    }
    out += ']';
  }

  void object(std::string& out, int depth) {
    static const char* const kKeys[] = {"\"prompt\"", "\"max_tokens\"", "\"a\"", "\"stream\"", "\"a\"", "\"\"",
                                        "\"k\\n\""};
    out += '{';
    for (int i = 0, n = pick(6); i < n; ++i) {
      if (i) out += ',';
      space(out);
      const int key = pick(7);
      out += kKeys[key];  // "a" twice: repeated keys
      space(out);
      out += ':';
      if (key == 0 && pick(2) == 0) {
        integer_array(out);  // a prompt of ids (FastIntegerField's case), sometimes with a non-integer in it
      } else {
        value(out, depth);
      }
    }
    out += '}';
  }

  void corrupt(std::string& out) {
    static const char kBytes[] = "{}[],:\"\\0123456789-+.eEtfn \x80x\x01";
    for (int i = 0, n = 1 + pick(3); i < n && !out.empty(); ++i) {
      const size_t at = static_cast<size_t>(pick(static_cast<int>(out.size())));
      const char b = kBytes[pick(static_cast<int>(sizeof(kBytes) - 1))];
      switch (pick(3)) {
        case 0: out.erase(at, 1); break;
        case 1: out.insert(at, 1, b); break;
        default: out[at] = b; break;
      }
    }
  }

  std::mt19937 rng_;
};

TEST(JsonFast, RandomDocumentsAgreeWithNlohmann) {
  RandomJson gen(20261122);
  int accepted = 0, valid = 0;
  constexpr int kDocuments = 30000;
  for (int i = 0; i < kDocuments; ++i) {
    const std::string text = gen.document();
    if (json::accept(text)) ++valid;
    if (check(text)) ++accepted;
    if (HasFailure()) break;
  }
  // The generator must exercise both sides: many accepted documents, and many valid ones that are declined.
  EXPECT_GT(accepted, kDocuments / 10);
  EXPECT_GT(valid - accepted, kDocuments / 20);
}

}  // namespace
}  // namespace ga::server
