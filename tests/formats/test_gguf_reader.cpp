// GGUF reader against real files, checked with independent references:
// - fixtures/manifest.json (written by llama.cpp's gguf-py): every tensor's name, ne, type, bytes and
//   absolute data offset, file size, GGUF version and the scalar metadata of every fixture model;
// - vocab/README.md's table (also from llama.cpp/gguf-py): arch, tokenizer model/pre, token and merge
//   counts, BOS/EOS of every vocab-only GGUF;
// - the dequant-<T>.gguf entries of the manifest (tensor name, ne, type, quantized bytes).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::gguf {
namespace {

nlohmann::json load_manifest() {
  return nlohmann::json::parse(test::read_file(test::shared_path("fixtures/manifest.json")));
}

// Compares one scalar metadata entry of the manifest with the parsed file.
void expect_metadata_matches(const File& f, const std::string& key, const nlohmann::json& expected) {
  SCOPED_TRACE(key);
  const Value* v = f.find(key);
  ASSERT_NE(v, nullptr) << "missing key";
  if (expected.is_string()) {
    const std::string s = expected.get<std::string>();
    if (s.rfind("array[", 0) == 0) {  // the manifest abbreviates arrays as "array[N]"
      ASSERT_EQ(v->type, ValueType::ARRAY);
      const size_t n = std::stoul(s.substr(6));
      EXPECT_EQ(std::get<Array>(v->data).items.size(), n);
    } else {
      EXPECT_EQ(f.get_string(key), s);
    }
  } else if (expected.is_boolean()) {
    EXPECT_EQ(f.get_bool(key), expected.get<bool>());
  } else if (expected.is_number_integer()) {
    EXPECT_EQ(f.get_int(key), expected.get<int64_t>());
  } else if (expected.is_number_float()) {
    const auto got = f.get_float(key);
    ASSERT_TRUE(got.has_value());
    // The manifest holds the float32 value widened to double, so equality is exact.
    EXPECT_EQ(static_cast<float>(*got), static_cast<float>(expected.get<double>()));
  } else {
    ADD_FAILURE() << "unexpected manifest value " << expected.dump();
  }
}

TEST(GgufReader, EveryFixtureModelMatchesManifest) {
  const auto manifest = load_manifest();
  size_t models = 0;
  for (const auto& [rel, m] : manifest.at("models").items()) {
    SCOPED_TRACE(rel);
    const File f = File::open(test::shared_path("fixtures/" + rel));
    EXPECT_EQ(f.file_size(), m.at("size").get<uint64_t>());
    EXPECT_EQ(f.version(), m.at("gguf_version").get<uint32_t>());
    for (const auto& [key, value] : m.at("metadata").items()) expect_metadata_matches(f, key, value);
    const auto& tensors = m.at("tensors");
    ASSERT_EQ(f.tensors().size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& ref = tensors[i];
      const TensorInfo& t = f.tensors()[i];  // the manifest keeps file order
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, ref.at("name").get<std::string>());
      EXPECT_EQ(t.ne, ref.at("ne").get<std::vector<uint64_t>>());
      EXPECT_STREQ(dtype_name(t.type), ref.at("type").get<std::string>().c_str());
      EXPECT_EQ(t.nbytes, ref.at("n_bytes").get<uint64_t>());
      EXPECT_EQ(f.data_offset() + t.offset, ref.at("data_offset").get<uint64_t>());
      EXPECT_EQ(f.find_tensor(t.name), &t);
      EXPECT_EQ(f.tensor_data(t), f.tensor_data(f.tensors()[0]) + (t.offset - f.tensors()[0].offset));
    }
    ++models;
  }
  EXPECT_EQ(models, 14u);  // stories260K + fixture-f32 + 12 quantized types
}

TEST(GgufReader, Stories260K) {
  const File f = File::open(test::shared_path("models/tinyllamas/stories260K.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.alignment(), kDefaultAlignment);
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 2u);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  EXPECT_EQ(tokens->size(), 512u);
  const auto scores = f.get_f32_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.has_value());
  EXPECT_EQ(scores->size(), 512u);
  // Absent keys are nullopt; wrong kinds are InvalidFormat.
  EXPECT_FALSE(f.get_string("no.such.key").has_value());
  EXPECT_FALSE(f.get_string_array("no.such.key").has_value());
  EXPECT_EQ(f.find("no.such.key"), nullptr);
  EXPECT_EQ(f.find_tensor("no.such.tensor"), nullptr);
  EXPECT_THROW(f.get_string("llama.block_count"), Error);
  EXPECT_THROW(f.get_uint("general.architecture"), Error);
  EXPECT_THROW(f.get_float("general.architecture"), Error);
  EXPECT_THROW(f.get_bool("general.architecture"), Error);
  EXPECT_THROW(f.get_f32_array("tokenizer.ggml.tokens"), Error);
  EXPECT_THROW(f.get_string_array("general.architecture"), Error);
  EXPECT_THROW(f.get_int_array("tokenizer.ggml.tokens"), Error);
  // to_string renders what inspect shows.
  EXPECT_EQ(f.find("general.architecture")->to_string(), "\"llama\"");
  EXPECT_EQ(f.find("llama.block_count")->to_string(), "5");
  EXPECT_EQ(f.find("llama.attention.layer_norm_rms_epsilon")->to_string(), "1e-05");
  const std::string toks = f.find("tokenizer.ggml.tokens")->to_string(3);
  EXPECT_EQ(toks.rfind("[\"<unk>\", \"<s>\", \"</s>\", ... (512 string items)]", 0), 0u) << toks;
  // The storage keeps the mapping alive after the File is gone.
  std::shared_ptr<const void> storage = f.storage();
  EXPECT_NE(storage, nullptr);
  EXPECT_EQ(f.path(), test::shared_path("models/tinyllamas/stories260K.gguf"));
}

struct VocabRow {
  const char* name;
  uint64_t bytes;
  const char* arch;
  const char* model;
  const char* pre;
  uint64_t tokens;
  int64_t merges;  // -1: no merges key
  int64_t bos;     // -1: no bos key
  int64_t eos;
};

// From vocab/README.md's table (llama.cpp's test-tokenizer-0 files).
const VocabRow kVocabs[] = {
    {"llama-spm", 723869, "llama", "llama", "default", 32000, -1, 1, 2},
    {"phi-3", 726019, "phi3", "llama", "default", 32064, -1, 1, 32000},
    {"gpt-2", 1766807, "gpt2", "gpt2", "gpt-2", 50257, 50000, 50256, 50256},
    {"deepseek-coder", 1156067, "llama", "gpt2", "deepseek-coder", 32256, 31757, 32013, 32014},
    {"deepseek-llm", 3970167, "llama", "gpt2", "deepseek-llm", 102400, 99757, 100000, 100001},
    {"falcon", 2287728, "falcon", "gpt2", "falcon", 65024, 64784, 11, 11},
    {"starcoder", 1719346, "starcoder2", "gpt2", "starcoder", 49152, 48872, 0, 0},
    {"refact", 1720710, "refact", "gpt2", "refact", 49216, 48891, 0, 0},
    {"mpt", 1771393, "mpt", "gpt2", "mpt", 50432, 50009, 0, 0},
    {"bert-bge", 627549, "bert", "bert", "bert-bge", 30522, -1, -1, -1},
};

TEST(GgufReader, VocabFilesMatchReadme) {
  for (const auto& row : kVocabs) {
    SCOPED_TRACE(row.name);
    const File f = File::open(test::shared_path(std::string("vocab/ggml-vocab-") + row.name + ".gguf"));
    EXPECT_EQ(f.file_size(), row.bytes);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.get_string("general.architecture"), row.arch);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), row.model);
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), row.pre);
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    EXPECT_EQ(tokens->size(), row.tokens);
    const auto merges = f.get_string_array("tokenizer.ggml.merges");
    EXPECT_EQ(merges.has_value() ? static_cast<int64_t>(merges->size()) : -1, row.merges);
    if (row.bos >= 0) {
      EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), row.bos);
      EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), row.eos);
    }
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.has_value()) {
      EXPECT_EQ(types->size(), row.tokens);
    }
  }
}

TEST(GgufReader, DequantFixturesMatchManifest) {
  const auto manifest = load_manifest();
  size_t checked = 0;
  for (const auto& [type_name, d] : manifest.at("dequant").items()) {
    SCOPED_TRACE(type_name);
    const File f = File::open(test::shared_path("fixtures/" + d.at("file").get<std::string>()));
    EXPECT_EQ(f.file_size(), d.at("size").get<uint64_t>());
    const TensorInfo* q = f.find_tensor(d.at("tensor").get<std::string>());
    ASSERT_NE(q, nullptr);
    EXPECT_STREQ(dtype_name(q->type), type_name.c_str());
    EXPECT_EQ(q->ne, d.at("ne").get<std::vector<uint64_t>>());
    EXPECT_EQ(q->nbytes, d.at("quant_bytes").get<uint64_t>());
    const TensorInfo* deq = f.find_tensor(d.at("deq_tensor").get<std::string>());
    ASSERT_NE(deq, nullptr);
    EXPECT_EQ(deq->type, DType::F32);
    EXPECT_EQ(deq->n_elements, q->n_elements);
    // The dequantized range recorded by gguf-py bounds the F32 data we point at.
    const auto* values = reinterpret_cast<const float*>(f.tensor_data(*deq));
    float lo = INFINITY, hi = -INFINITY;
    for (uint64_t i = 0; i < deq->n_elements; ++i) {
      lo = std::min(lo, values[i]);
      hi = std::max(hi, values[i]);
    }
    EXPECT_EQ(lo, static_cast<float>(d.at("deq_min").get<double>()));
    EXPECT_EQ(hi, static_cast<float>(d.at("deq_max").get<double>()));
    ++checked;
  }
  EXPECT_EQ(checked, 12u);
}

TEST(GgufReader, OpenReportsMissingFileAsIo) {
  try {
    File::open("/nonexistent/model.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

}  // namespace
}  // namespace ga::gguf
