// llama.cpp's tokenizer test vectors: every case of every supported vocabulary must give exactly the
// ids that the model's Hugging Face tokenizer gave (../shared/vocab/README.md), with add_special = false
// and parse_special = false. GGUF vocabs are read with Vocab::from_gguf; Llama 3 and Qwen2 (whose vocab
// GGUFs are not in the snapshot) and Llama 2 are read from their tokenizer.json with Vocab::from_hf_json.
// Each test prints its pass count and fails on any mismatch, showing the text and both id lists.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "common/test_data.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/tokenizer.h"
#include "tokenizer/test_vocab_cases.h"

namespace ga {
namespace {

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  for (int32_t id : ids) os << ' ' << id;
  return os.str();
}

void expect_all_cases(const Tokenizer& tokenizer, const std::string& vector_name) {
  const auto cases = test::read_vocab_cases(vector_name);
  ASSERT_EQ(cases.size(), 46u) << vector_name;
  size_t passed = 0;
  for (const auto& c : cases) {
    const std::vector<int32_t> got = tokenizer.encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    if (got == c.ids) {
      ++passed;
    } else {
      ADD_FAILURE() << vector_name << ": text \"" << c.text << "\"\n  expected" << ids_to_string(c.ids)
                    << "\n  got     " << ids_to_string(got);
    }
  }
  std::printf("[ vectors  ] %-15s %zu / %zu cases match\n", vector_name.c_str(), passed, cases.size());
  EXPECT_EQ(passed, cases.size());
}

Tokenizer load_gguf_vocab(const std::string& name) {
  const gguf::File file = gguf::File::open(test::shared_path("vocab/ggml-vocab-" + name + ".gguf"));
  return Tokenizer(Vocab::from_gguf(file));
}

class GgufVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufVectors, AllCasesMatch) { expect_all_cases(load_gguf_vocab(GetParam()), GetParam()); }

INSTANTIATE_TEST_SUITE_P(Vocabs, GgufVectors,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "deepseek-llm", "falcon",
                                           "starcoder", "refact", "mpt"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(HfJsonVectors, Llama3MatchesLlamaBpe) {
  GA_REQUIRE_FETCHED(path, "llama3/tokenizer.json");
  expect_all_cases(Tokenizer(Vocab::from_hf_json(path)), "llama-bpe");
}

TEST(HfJsonVectors, Qwen2MatchesQwen2) {
  GA_REQUIRE_FETCHED(path, "qwen2/tokenizer.json");
  expect_all_cases(Tokenizer(Vocab::from_hf_json(path)), "qwen2");
}

// Hugging Face's SentencePiece converter (SentencePieceExtractor) turns a SentencePiece vocabulary into
// BPE merges: for every token, every split into two tokens is a merge; merges are ordered by the score of
// the token they create (best first, stable), and within one token by the ids of the two parts. Building
// them from the llama-spm GGUF's tokens and scores gives the merges of Llama 2's tokenizer.json, so the
// rank-based SentencePiece path (what from_hf_json uses for byte_fallback BPE) must reproduce the
// llama-spm vectors, which are that tokenizer's output.
TEST(HfJsonVectors, RankMergesFromSentencePieceScoresMatchLlamaSpm) {
  Vocab v = Vocab::from_gguf(gguf::File::open(test::shared_path("vocab/ggml-vocab-llama-spm.gguf")));
  std::unordered_map<std::string, int32_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) ids[v.tokens[i]] = static_cast<int32_t>(i);
  struct Merge {
    float score;
    int32_t left, right;
    std::string text;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    std::vector<Merge> local;
    for (size_t cut = 1; cut < t.size(); ++cut) {
      if ((static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) continue;  // split between code points only
      const auto l = ids.find(t.substr(0, cut)), r = ids.find(t.substr(cut));
      if (l != ids.end() && r != ids.end()) local.push_back({v.scores[i], l->second, r->second, l->first + " " + r->first});
    }
    std::sort(local.begin(), local.end(),
              [](const Merge& a, const Merge& b) { return std::make_pair(a.left, a.right) < std::make_pair(b.left, b.right); });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  for (const auto& m : merges) v.merges.push_back(m.text);
  ASSERT_GT(v.merges.size(), 30000u);
  expect_all_cases(Tokenizer(v), "llama-spm");
}

}  // namespace
}  // namespace ga
