// GGUF writer: round trips through the reader, and a re-write of a real llama.cpp file.
//
// The independent reference for the writer's layout is stories260K.gguf itself (written by
// llama.cpp's converter): copying its metadata and tensors in order must reproduce the file byte for
// byte. Synthetic round trips cover every value type, nested arrays, a non-default alignment and
// several tensor types.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::gguf {
namespace {

// Deep equality; floats compare by bits so NaN payloads and -0 must survive too.
bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type || a.data.index() != b.data.index()) return false;
  if (const auto* x = std::get_if<float>(&a.data)) return bits_from_f32(*x) == bits_from_f32(std::get<float>(b.data));
  if (const auto* x = std::get_if<double>(&a.data)) {
    const double y = std::get<double>(b.data);
    return std::memcmp(x, &y, sizeof y) == 0;
  }
  if (const auto* x = std::get_if<Array>(&a.data)) {
    const Array& y = std::get<Array>(b.data);
    if (x->elem_type != y.elem_type || x->items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x->items.size(); ++i) {
      if (!same_value(x->items[i], y.items[i])) return false;
    }
    return true;
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Array>) {
          return false;  // handled above
        } else {
          return x == std::get<T>(b.data);
        }
      },
      a.data);
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensor) {
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  w.set("general.alignment", Value::u32(64));
  w.set("t.u8", Value::u8(250));
  w.set("t.i8", Value::i8(-7));
  w.set("t.u16", Value::u16(65535));
  w.set("t.i16", Value::i16(-32768));
  w.set("t.u32", Value::u32(4000000000u));
  w.set("t.i32", Value::i32(-123456));
  w.set("t.f32", Value::f32(-0.0f));
  w.set("t.nan", Value::f32(std::nanf("")));
  w.set("t.bool", Value::boolean(true));
  w.set("t.str", Value::string(std::string("with\0nul and \xc3\xa9", 15)));
  w.set("t.u64", Value::u64(UINT64_MAX));
  w.set("t.i64", Value::i64(INT64_MIN));
  w.set("t.f64", Value::f64(1e-300));
  w.set("t.strs", Value::string_array({"a", "", "ccc"}));
  w.set("t.f32s", Value::f32_array({1.5f, -2.0f}));
  w.set("t.i32s", Value::i32_array({}));
  w.set("t.nested", Value::array(ValueType::ARRAY, {Value::i32_array({1, 2}), Value::i32_array({3})}));
  w.set("t.u8", Value::u8(1));  // replacing keeps the first position

  const std::vector<float> f32_data = {1, 2, 3, 4, 5, 6};  // [3, 2]
  w.add_tensor("a.f32", DType::F32, {2, 3}, f32_data.data(), f32_data.size() * sizeof(float));
  const auto q4k = random_bytes(2 * 144, 1);  // [2, 256] Q4_K: two super-blocks
  w.add_tensor("b.q4k", DType::Q4_K, {256, 2}, q4k.data(), q4k.size());
  const auto iq2 = random_bytes(66, 2);  // a known but unsupported type is written and read back
  w.add_tensor("c.iq2xxs", DType::IQ2_XXS, {256, 1, 1, 1}, iq2.data(), iq2.size());
  const auto f16 = random_bytes(7 * 2, 3);
  w.add_tensor("d.f16", DType::F16, {7}, f16.data(), f16.size());

  const std::vector<uint8_t> bytes = w.to_bytes();
  EXPECT_EQ(bytes.size() % 64, 0u);
  const File f = File::parse(bytes);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.metadata()[2].key, "t.u8");
  EXPECT_EQ(f.get_uint("t.u8"), 1u);
  EXPECT_EQ(f.get_int("t.i64"), INT64_MIN);
  EXPECT_EQ(f.get_uint("t.u64"), UINT64_MAX);
  EXPECT_THROW(f.get_int("t.u64"), Error);   // does not fit int64
  EXPECT_THROW(f.get_uint("t.i8"), Error);   // negative
  EXPECT_EQ(f.get_string("t.str")->size(), 15u);
  EXPECT_EQ(f.get_f32_array("t.f32s"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.get_int_array("t.i32s"), std::vector<int64_t>{});
  EXPECT_EQ(f.find("t.nested")->to_string(), "[[1, 2], [3]]");
  EXPECT_EQ(f.find("t.str")->to_string(), "\"with\\x00nul and \xc3\xa9\"");
  EXPECT_EQ(f.find("t.strs")->to_string(2), "[\"a\", \"\", ... (3 string items)]");
  EXPECT_EQ(f.find("t.bool")->to_string(), "true");
  EXPECT_EQ(f.find("t.i8")->to_string(), "-7");

  // Every KV equal, in insertion order (compared with what the writer was given).
  Writer again;
  again.copy_metadata(f);
  const File f2 = File::parse(again.to_bytes());
  ASSERT_EQ(f2.metadata().size(), f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    EXPECT_EQ(f2.metadata()[i].key, f.metadata()[i].key);
    EXPECT_TRUE(same_value(f2.metadata()[i].value, f.metadata()[i].value)) << f.metadata()[i].key;
  }

  ASSERT_EQ(f.tensors().size(), 4u);
  const auto check = [&](const char* name, DType type, std::vector<uint64_t> ne, const void* data, size_t n) {
    SCOPED_TRACE(name);
    const TensorInfo* t = f.find_tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, type);
    EXPECT_EQ(t->ne, ne);
    EXPECT_EQ(t->nbytes, n);
    EXPECT_EQ(t->offset % 64, 0u);
    EXPECT_EQ(std::memcmp(f.tensor_data(*t), data, n), 0);
  };
  check("a.f32", DType::F32, {2, 3}, f32_data.data(), 24);
  check("b.q4k", DType::Q4_K, {256, 2}, q4k.data(), q4k.size());
  check("c.iq2xxs", DType::IQ2_XXS, {256, 1, 1, 1}, iq2.data(), iq2.size());
  check("d.f16", DType::F16, {7}, f16.data(), f16.size());
  EXPECT_EQ(f.find_tensor("b.q4k")->n_elements, 512u);
}

TEST(GgufWriter, RewritesStories260KByteForByte) {
  const std::string path = test::shared_path("models/tinyllamas/stories260K.gguf");
  const File src = File::open(path);
  Writer w;
  w.copy_metadata(src);
  for (const auto& t : src.tensors()) w.add_tensor(t.name, t.type, t.ne, src.tensor_data(t), t.nbytes);
  const std::vector<uint8_t> bytes = w.to_bytes();

  const File back = File::parse(bytes);
  ASSERT_EQ(back.metadata().size(), src.metadata().size());
  for (size_t i = 0; i < src.metadata().size(); ++i) {
    EXPECT_EQ(back.metadata()[i].key, src.metadata()[i].key);
    EXPECT_TRUE(same_value(back.metadata()[i].value, src.metadata()[i].value)) << src.metadata()[i].key;
  }
  ASSERT_EQ(back.tensors().size(), src.tensors().size());
  for (size_t i = 0; i < src.tensors().size(); ++i) {
    const TensorInfo& a = src.tensors()[i];
    const TensorInfo& b = back.tensors()[i];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.type, a.type);
    EXPECT_EQ(b.ne, a.ne);
    EXPECT_EQ(b.offset, a.offset);
    ASSERT_EQ(b.nbytes, a.nbytes);
    EXPECT_EQ(std::memcmp(back.tensor_data(b), src.tensor_data(a), a.nbytes), 0);
  }
  // llama.cpp's layout reproduced exactly: the original file is the reference.
  const std::string original = test::read_file(path);
  ASSERT_EQ(bytes.size(), original.size());
  EXPECT_EQ(std::memcmp(bytes.data(), original.data(), bytes.size()), 0);
}

TEST(GgufWriter, RewritesVocabFileByteForByte) {
  // A vocab-only file (no tensors, ends without padding) with 32000-token arrays.
  const std::string path = test::shared_path("vocab/ggml-vocab-llama-spm.gguf");
  const File src = File::open(path);
  Writer w;
  w.copy_metadata(src);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const std::string original = test::read_file(path);
  ASSERT_EQ(bytes.size(), original.size());
  EXPECT_EQ(std::memcmp(bytes.data(), original.data(), bytes.size()), 0);
}

TEST(GgufWriter, CopyMetadataWithPrefix) {
  const File src = File::open(test::shared_path("models/tinyllamas/stories260K.gguf"));
  Writer w;
  w.copy_metadata(src, "tokenizer.");
  const File f = File::parse(w.to_bytes());
  size_t expected = 0;
  for (const auto& kv : src.metadata()) expected += kv.key.rfind("tokenizer.", 0) == 0 ? 1 : 0;
  EXPECT_GT(expected, 0u);
  EXPECT_EQ(f.metadata().size(), expected);
  for (const auto& kv : f.metadata()) EXPECT_EQ(kv.key.rfind("tokenizer.", 0), 0u) << kv.key;
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), src.get_string_array("tokenizer.ggml.tokens"));
}

TEST(GgufWriter, WritesAtomicallyToPath) {
  const auto dir = std::filesystem::path(test::binary_dir()) / "gguf_writer_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.gguf").string();
  Writer w;
  w.set("general.architecture", Value::string("llama"));
  const std::vector<float> data = {1.0f, 2.0f};
  w.add_tensor("x", DType::F32, {2}, data.data(), 8);
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  const File f = File::open(path);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(reinterpret_cast<const float*>(f.tensor_data(f.tensors()[0]))[1], 2.0f);
  EXPECT_THROW(w.write((dir / "no_such_dir" / "out.gguf").string()), Error);
  std::filesystem::remove_all(dir);
}

TEST(GgufWriter, RejectsInconsistentInput) {
  const std::vector<uint8_t> data(1024);
  Writer w;
  EXPECT_THROW(w.add_tensor("x", DType::F32, {4}, data.data(), 15), Error);   // wrong byte count
  EXPECT_THROW(w.add_tensor("x", DType::Q4_0, {31}, data.data(), 18), Error);  // not a whole block
  EXPECT_THROW(w.add_tensor("x", DType::F32, {}, data.data(), 4), Error);
  EXPECT_THROW(w.add_tensor("x", DType::F32, {1, 1, 1, 1, 1}, data.data(), 4), Error);
  EXPECT_THROW(w.add_tensor("x", DType::F32, {0}, data.data(), 0), Error);
  EXPECT_THROW(w.add_tensor("", DType::F32, {1}, data.data(), 4), Error);
  w.add_tensor("x", DType::F32, {4}, data.data(), 16);
  EXPECT_THROW(w.add_tensor("x", DType::F32, {4}, data.data(), 16), Error);  // duplicate
  EXPECT_THROW(w.set("", Value::u8(1)), Error);
  EXPECT_THROW(w.set("k", Value{ValueType::U32, std::string("not a u32")}), Error);
  EXPECT_THROW(w.set("k", Value::array(ValueType::STRING, {Value::u8(1)})), Error);
  w.set("general.alignment", Value::u32(3));
  EXPECT_THROW(w.to_bytes(), Error);
  w.set("general.alignment", Value::u64(32));
  EXPECT_THROW(w.to_bytes(), Error);
  w.set("general.alignment", Value::u32(16));
  EXPECT_EQ(File::parse(w.to_bytes()).alignment(), 16u);
}

}  // namespace
}  // namespace ga::gguf
