// Vocab::from_gguf and Vocab::from_hf_json: defaults, special tokens and validation errors.
// Real files come from ../shared (GGUF vocabs, stories260K) and .cache/test-data (tokenizer.json);
// broken inputs are small GGUF files built in memory with gguf::Writer and JSON files in a temp dir.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/tokenizer.h"

namespace ga {
namespace {

Vocab gguf_vocab(const std::string& name) {
  return Vocab::from_gguf(gguf::File::open(test::shared_path("vocab/ggml-vocab-" + name + ".gguf")));
}

// Expects `fn` to throw ga::Error of `kind` whose message contains `needle`.
void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

// A minimal valid SPM tokenizer; tests break one key at a time.
gguf::Writer tiny_spm() {
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "a"}));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array({0, 0, 0, -1, -2}));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({2, 3, 3, 1, 1}));
  return w;
}

Vocab load(const gguf::Writer& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  return Vocab::from_gguf(gguf::File::parse(bytes));
}

TEST(VocabGguf, SpmDefaultsLikeLlamaCpp) {
  const Vocab v = load(tiny_spm());
  EXPECT_EQ(v.type, VocabType::SPM);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_TRUE(v.add_bos);  // no add_bos_token key: llama.cpp adds BOS for SentencePiece vocabs
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("a", true), (std::vector<int32_t>{1, 3}));
}

TEST(VocabGguf, NoneSentinelIdsAreAbsent) {
  gguf::Writer w = tiny_spm();
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(0xFFFFFFFF));  // as in stories260K.gguf
  EXPECT_EQ(load(w).pad_id, -1);
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(4));
  EXPECT_EQ(load(w).pad_id, 4);
}

TEST(VocabGguf, RejectsWhatItCannotUse) {
  {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::string("llama"));
    expect_error([&] { load(w); }, ErrorKind::Unsupported, "tokenizer.ggml.model");
  }
  for (const char* model : {"bert", "t5", "plamo2", "no_vocab"}) {
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.model", gguf::Value::string(model));
    expect_error([&] { load(w); }, ErrorKind::Unsupported, model);
  }
  {  // an RWKV World token in repr form that cannot be undone names the token
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.model", gguf::Value::string("rwkv"));
    w.set("tokenizer.ggml.tokens", gguf::Value::string_array({"<s>", "a", "\\x4", "b\\", "c"}));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "RWKV token 2");
  }
  {
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.scores", gguf::Value::f32_array({0, 0}));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "scores");
  }
  {
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({1, 1, 1}));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "token_type");
  }
  {
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.token_type", gguf::Value::i32_array({1, 1, 1, 1, 9}));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "type 9");
  }
  {
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(5));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "eos_token_id");
  }
  {
    gguf::Writer w = tiny_spm();
    w.set("tokenizer.ggml.model", gguf::Value::string("gpt2"));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "merges");
    w.set("tokenizer.ggml.merges", gguf::Value::string_array({"a a"}));
    w.set("tokenizer.ggml.pre", gguf::Value::string("no-such-pre"));
    expect_error([&] { load(w); }, ErrorKind::Unsupported, "no-such-pre");
    w.set("tokenizer.ggml.pre", gguf::Value::string("gpt-2"));
    w.set("tokenizer.ggml.merges", gguf::Value::string_array({"aa"}));
    expect_error([&] { load(w); }, ErrorKind::InvalidFormat, "merge 0");
  }
}

TEST(VocabGguf, RealVocabs) {
  const Vocab spm = gguf_vocab("llama-spm");
  EXPECT_EQ(spm.tokens.size(), 32000u);
  EXPECT_EQ(spm.bos_id, 1);
  EXPECT_TRUE(spm.add_bos);

  const Vocab phi3 = gguf_vocab("phi-3");
  EXPECT_EQ(phi3.eos_id, 32000);
  EXPECT_FALSE(phi3.chat_template.empty());
  const Tokenizer phi3_tok(phi3);
  EXPECT_TRUE(phi3_tok.is_eog(32007));  // "<|end|>", found by its text as llama.cpp does

  const Vocab gpt2 = gguf_vocab("gpt-2");
  EXPECT_EQ(gpt2.type, VocabType::BPE);
  EXPECT_EQ(gpt2.pre, "gpt-2");
  EXPECT_FALSE(gpt2.add_bos);
  EXPECT_EQ(gpt2.merges.size(), 50000u);

  const Vocab ds = gguf_vocab("deepseek-llm");
  EXPECT_TRUE(ds.add_bos);
  EXPECT_EQ(ds.bos_id, 100000);
  EXPECT_EQ(ds.pre_regexes.size(), 6u);
}

// ---- Hugging Face tokenizer.json ----

TEST(VocabHfJson, Llama3) {
  GA_REQUIRE_FETCHED(path, "llama3/tokenizer.json");
  const Vocab v = Vocab::from_hf_json(path, test::fetched_path("llama3/tokenizer_config.json"));
  EXPECT_EQ(v.type, VocabType::BPE);
  EXPECT_EQ(v.tokens.size(), 128256u);
  EXPECT_TRUE(v.ignore_merges);
  EXPECT_EQ(v.pre_regexes.size(), 1u);  // the Split regex; its ByteLevel has use_regex = false
  EXPECT_EQ(v.bos_id, 128000);
  EXPECT_EQ(v.eos_id, 128001);
  EXPECT_EQ(v.token_types[128000], TokenType::Control);
  EXPECT_FALSE(v.chat_template.empty());
  const Tokenizer tok(v);
  EXPECT_TRUE(tok.is_eog(128009));  // <|eot_id|>
}

TEST(VocabHfJson, Qwen2WithConfig) {
  GA_REQUIRE_FETCHED(path, "qwen2/tokenizer.json");
  const Vocab v = Vocab::from_hf_json(path, test::fetched_path("qwen2/tokenizer_config.json"));
  EXPECT_TRUE(v.requires_nfc);
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.tokens[static_cast<size_t>(v.eos_id)], "<|im_end|>");
  EXPECT_EQ(v.tokens[static_cast<size_t>(v.pad_id)], "<|endoftext|>");
  EXPECT_FALSE(v.chat_template.empty());
}

TEST(VocabHfJson, SentencePieceStyleBpe) {
  GA_REQUIRE_FETCHED(path, "mistral/tokenizer.json");
  const Vocab v = Vocab::from_hf_json(path, test::fetched_path("mistral/tokenizer_config.json"));
  EXPECT_EQ(v.type, VocabType::SPM);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_TRUE(v.byte_fallback);
  EXPECT_FALSE(v.merges.empty());
  EXPECT_TRUE(v.add_bos);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_EQ(v.token_types[13], TokenType::Byte);  // <0x0A>
  const Tokenizer tok(v);
  EXPECT_EQ(tok.decode(tok.encode(" Hello\n world", true)), " Hello\n world");
}

std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (const auto p : parts) out += p;
  return out;
}

class HfJsonErrors : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& json) {
    const auto& dir = dir_;
    std::filesystem::create_directories(dir);
    const std::string path = (dir / ga::str("t", counter_++, ".json")).string();
    std::ofstream(path) << json;
    return path;
  }
  const std::filesystem::path dir_ = std::filesystem::temp_directory_path() / ga::str("ga_vocab_test_", ::getpid());
  int counter_ = 0;
};

TEST_F(HfJsonErrors, ReportsWhatIsWrong) {
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2})";
  expect_error([&] { Vocab::from_hf_json(write(join({R"({"model": {"type": "WordPiece", )", vocab, "}}"}))); },
               ErrorKind::Unsupported, "WordPiece");
  expect_error([&] { Vocab::from_hf_json(write("{not json")); }, ErrorKind::InvalidFormat, "JSON");
  const std::string bpe = join({R"({"model": {"type": "BPE", )", vocab, R"(, "merges": ["a b"]})"});
  expect_error([&] { Vocab::from_hf_json(write(join({bpe, R"(, "normalizer": {"type": "NFKC"}})"}))); },
               ErrorKind::Unsupported, "NFKC");
  expect_error([&] { Vocab::from_hf_json(write(join({bpe, R"(, "pre_tokenizer": {"type": "Whitespace"}})"}))); },
               ErrorKind::Unsupported, "Whitespace");
  const std::string byte_level = R"(, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false})";
  expect_error([&] {
    Vocab::from_hf_json(write(join({R"({"model": {"type": "BPE", )", vocab, R"(, "merges": [["a"]]})", byte_level, "}"})));
  }, ErrorKind::InvalidFormat, "merge");
  // Valid: merges as pairs, ByteLevel with its regex.
  const Vocab v = Vocab::from_hf_json(
      write(join({R"({"model": {"type": "BPE", )", vocab, R"(, "merges": [["a", "b"]]})", byte_level, "}"})));
  EXPECT_EQ(v.merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(Tokenizer(v).encode("ab", false), std::vector<int32_t>{2});
}

}  // namespace
}  // namespace ga
