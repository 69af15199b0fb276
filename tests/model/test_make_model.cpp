// make_random_model and the streaming GGUF writer it relies on.
//
// The model: the `tiny` preset with the 32000-token Llama-2 vocabulary loads through our loader
// with the preset's shapes (make_gguf.py's table), the tokenizer keys are the vocab file's, the same
// seed gives the same bytes whatever the thread count (and another seed other bytes), and the
// weights have the documented statistics (measured from the written F32 values).
// The writer: deferred tensors produce exactly the bytes of the in-memory path (whose layout is
// tested against llama.cpp files in tests/formats), and a failing fill leaves no file behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "gpu_accel/model.h"
#include "model/tools/random_model.h"

namespace ga::tools {
namespace {

namespace fs = std::filesystem;

struct TempFile {
  explicit TempFile(const std::string& name)
      : path((fs::temp_directory_path() / ("ga_make_model_" + std::to_string(getpid()) + "_" + name)).string()) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  std::string path;
};

std::string vocab() { return test::shared_path("vocab/ggml-vocab-llama-spm.gguf"); }

MakeModelOptions tiny(const std::string& type, uint64_t seed, int threads) {
  MakeModelOptions o;
  o.preset = "tiny";
  o.type = type;
  o.vocab_path = vocab();
  o.seed = seed;
  o.n_threads = threads;
  return o;
}

TEST(MakeModel, TinyLoadsWithThePresetShapesAndTheVocabTokenizer) {
  TempFile out("tiny_q4_0.gguf");
  const MakeModelSummary s = make_random_model(out.path, tiny("Q4_0", 1, 2));
  EXPECT_EQ(s.n_vocab, 32000);
  const LoadedModel m = load_model(out.path);
  const ModelConfig& c = m.config;
  // make_gguf.py: "tiny": (256, 4, 8, 4, 768, 1024)
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_layer, 4);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.n_ff, 768);
  EXPECT_EQ(c.n_ctx_train, 1024);
  EXPECT_EQ(c.n_vocab, 32000);
  EXPECT_EQ(m.weight("blk.3.attn_k.weight").ne, (std::vector<uint64_t>{256, 128}));
  EXPECT_EQ(m.weight("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{768, 256}));
  EXPECT_EQ(m.weight("blk.0.attn_q.weight").type, DType::Q4_0);
  EXPECT_EQ(m.weight("output.weight").type, DType::Q6_K);  // llama.cpp's rule for Q4_0 files
  EXPECT_EQ(m.weight("output_norm.weight").type, DType::F32);
  EXPECT_EQ(m.vocab.tokens.size(), 32000u);

  const auto written = gguf::File::open(out.path);
  const auto source = gguf::File::open(vocab());
  int copied = 0;
  for (const auto& kv : source.metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    const gguf::Value* v = written.find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->to_string(1u << 20), kv.value.to_string(1u << 20)) << kv.key;
    ++copied;
  }
  EXPECT_GT(copied, 3);
  EXPECT_EQ(written.get_uint("general.file_type"), 2u);
}

TEST(MakeModel, SameSeedSameBytesWhateverTheThreadCount) {
  TempFile a("seed_a.gguf"), b("seed_b.gguf"), c("seed_c.gguf");
  make_random_model(a.path, tiny("Q8_0", 7, 1));
  make_random_model(b.path, tiny("Q8_0", 7, 2));
  make_random_model(c.path, tiny("Q8_0", 8, 2));
  const std::string bytes_a = test::read_file(a.path);
  EXPECT_TRUE(bytes_a == test::read_file(b.path)) << "seed 7: 1 thread and 2 threads differ";
  const std::string bytes_c = test::read_file(c.path);
  ASSERT_EQ(bytes_a.size(), bytes_c.size());
  EXPECT_FALSE(bytes_a == bytes_c) << "seeds 7 and 8 gave the same file";
}

TEST(MakeModel, WeightStatisticsAreTheDocumentedOnes) {
  TempFile out("tiny_f32.gguf");
  make_random_model(out.path, tiny("F32", 3, 2));
  const auto f = gguf::File::open(out.path);
  struct Want {
    const char* name;
    double mean, std;
  };
  const Want wants[] = {
      {"token_embd.weight", 0.0, 1.0},                    // lookup: N(0, 1)
      {"blk.0.attn_q.weight", 0.0, 1.0 / std::sqrt(256.0)},  // N(0, 1/fan_in)
      {"blk.2.ffn_down.weight", 0.0, 1.0 / std::sqrt(768.0)},
      {"output.weight", 0.0, 1.0 / std::sqrt(256.0)},
  };
  for (const auto& w : wants) {
    const gguf::TensorInfo* t = f.find_tensor(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    ASSERT_EQ(t->type, DType::F32);
    const auto* x = reinterpret_cast<const float*>(f.tensor_data(*t));
    double sum = 0, sq = 0, max_abs = 0;
    for (uint64_t i = 0; i < t->n_elements; ++i) {
      sum += x[i];
      sq += static_cast<double>(x[i]) * x[i];
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(x[i])));
    }
    const double n = static_cast<double>(t->n_elements);
    const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, w.mean, 5.0 * w.std / std::sqrt(n)) << w.name;
    EXPECT_NEAR(stddev / w.std, 1.0, 0.01) << w.name;
    EXPECT_LE(max_abs, 3.47 * w.std) << w.name;  // the sum of four uniforms ends at sqrt(12) sigma
    EXPECT_GE(max_abs, 3.0 * w.std) << w.name;   // but does reach the tails
  }
  const gguf::TensorInfo* norm = f.find_tensor("blk.1.ffn_norm.weight");
  ASSERT_NE(norm, nullptr);
  const auto* g = reinterpret_cast<const float*>(f.tensor_data(*norm));
  double sum = 0;
  for (uint64_t i = 0; i < norm->n_elements; ++i) sum += g[i];
  EXPECT_NEAR(sum / static_cast<double>(norm->n_elements), 1.0, 0.03);
}

TEST(MakeModel, BadArgumentsAreClearErrors) {
  TempFile out("bad.gguf");
  MakeModelOptions o = tiny("Q4_0", 0, 1);
  o.preset = "llama9-1t";
  EXPECT_THROW(make_random_model(out.path, o), Error);
  o = tiny("Q4_9", 0, 1);
  EXPECT_THROW(make_random_model(out.path, o), Error);
  o = tiny("Q4_0", 0, 1);
  o.vocab_path = test::shared_path("fixtures/quant/dequant-Q4_0.gguf");  // a GGUF without a tokenizer
  EXPECT_THROW(make_random_model(out.path, o), Error);
  EXPECT_FALSE(fs::exists(out.path));
}

// ---- the streaming writer ----

gguf::Writer sample_writer(bool deferred, int throw_at = -1) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("test"));
  w.set("general.alignment", gguf::Value::u32(64));
  const std::vector<std::vector<uint64_t>> shapes = {{7}, {32, 3}, {256, 2}, {5, 1, 2}};
  const DType types[] = {DType::F32, DType::Q8_0, DType::Q4_K, DType::F16};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& ne = shapes[i];
    const uint64_t n = row_bytes(types[i], ne[0]) * (ne.size() > 1 ? ne[1] : 1) * (ne.size() > 2 ? ne[2] : 1);
    std::vector<uint8_t> bytes(n);
    for (uint64_t k = 0; k < n; ++k) bytes[k] = static_cast<uint8_t>(k * 31 + i * 7 + 1);
    const std::string name = "t" + std::to_string(i);
    if (!deferred) {
      w.add_tensor(name, types[i], ne, bytes.data(), n);
      continue;
    }
    const bool fail = static_cast<int>(i) == throw_at;
    w.add_tensor_deferred(name, types[i], ne, [bytes, fail](uint8_t* dst) {
      if (fail) throw std::runtime_error("fill failed");
      std::memcpy(dst, bytes.data(), bytes.size());
    });
  }
  return w;
}

TEST(StreamingWriter, DeferredTensorsGiveTheSameBytesAsInMemoryOnes) {
  const std::vector<uint8_t> reference = sample_writer(false).to_bytes();
  EXPECT_EQ(sample_writer(true).to_bytes(), reference);
  TempFile a("stream_a.gguf"), b("stream_b.gguf");
  sample_writer(false).write(a.path);
  sample_writer(true).write(b.path);
  const std::string ref_text(reference.begin(), reference.end());
  EXPECT_TRUE(test::read_file(a.path) == ref_text);
  EXPECT_TRUE(test::read_file(b.path) == ref_text);
  // and it parses back
  const auto f = gguf::File::open(b.path);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensor_data(f.tensors()[3])[0], static_cast<uint8_t>(3 * 7 + 1));
}

TEST(StreamingWriter, AFailingFillLeavesNoFile) {
  TempFile out("stream_fail.gguf");
  EXPECT_THROW(sample_writer(true, 2).write(out.path), std::runtime_error);
  EXPECT_FALSE(fs::exists(out.path));
  EXPECT_FALSE(fs::exists(out.path + ".tmp"));
  gguf::Writer w;
  EXPECT_THROW(w.add_tensor_deferred("x", DType::F32, {4}, nullptr), Error);
  EXPECT_THROW(w.add_tensor_deferred("y", DType::Q4_0, {33}, [](uint8_t*) {}), Error);  // 33 % 32 != 0
}

}  // namespace
}  // namespace ga::tools
