// safetensors reader/writer and sharded checkpoints.
//
// The round trip checks the writer against the reader, and the layout against the format's spec
// independently of both: the u64 header length is decoded by hand here and the header must be
// JSON the reference Python reader accepts (padded to 8 bytes, contiguous data, no holes). Each
// validation case is a hand-made file with exactly one defect, and the error must have the right
// kind and name the tensor (and the problem), so an error raised for the wrong reason fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "gpu_accel/error.h"
#include "model/formats/safetensors.h"

namespace ga::safetensors {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> raw_file(const std::string& header, const std::vector<uint8_t>& data) {
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  for (size_t i = 0; i < header.size(); ++i) out[8 + i] = static_cast<uint8_t>(header[i]);
  for (size_t i = 0; i < data.size(); ++i) out[8 + header.size() + i] = data[i];
  return out;
}

// Expects parse() to throw `kind` with every string of `needles` in the message.
void expect_error(const std::vector<uint8_t>& bytes, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    File::parse(bytes, "test.safetensors");
    FAIL() << "no error; expected one mentioning " << needles.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const auto& n : needles) EXPECT_NE(e.message().find(n), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("test.safetensors"), std::string::npos) << e.message();
  }
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("ga_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

TEST(Safetensors, RoundTripThroughWriter) {
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-7f, -1e7f};  // [2, 3]
  const std::vector<uint16_t> b = {0x3c00, 0xc000, 0x7bff};             // F16 1, -2, 65504: [3]
  const std::vector<uint16_t> c = {0x3f80, 0x4049, 0xbf80, 0x0000};     // BF16 [2, 1, 2]
  Writer w;
  w.add_tensor("model.a", DType::F32, {2, 3}, a.data(), a.size() * 4);
  w.add_tensor("b", DType::F16, {3}, b.data(), b.size() * 2);
  w.add_tensor("c", DType::BF16, {2, 1, 2}, c.data(), c.size() * 2);
  w.set_metadata("format", "pt");
  const std::vector<uint8_t> bytes = w.to_bytes();

  // Spec layout, decoded independently of the reader.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  EXPECT_EQ((8 + header_len) % 8, 0u) << "header must be padded so the data starts 8-aligned";
  EXPECT_EQ(bytes.size(), 8 + header_len + a.size() * 4 + b.size() * 2 + c.size() * 2) << "no holes in the data";
  EXPECT_EQ(bytes[8], '{');

  const File f = File::parse(bytes);
  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorInfo* ta = f.find_tensor("model.a");
  const TensorInfo* tb = f.find_tensor("b");
  const TensorInfo* tc = f.find_tensor("c");
  ASSERT_TRUE(ta && tb && tc);
  EXPECT_EQ(ta->dtype, "F32");
  EXPECT_EQ(ta->type, DType::F32);
  EXPECT_EQ(ta->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(ta->n_elements, 6u);
  EXPECT_EQ(tb->type, DType::F16);
  EXPECT_EQ(tc->type, DType::BF16);
  EXPECT_EQ(tc->shape, (std::vector<uint64_t>{2, 1, 2}));
  EXPECT_EQ(std::memcmp(f.tensor_data(*ta), a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.tensor_data(*tb), b.data(), 6), 0);
  EXPECT_EQ(std::memcmp(f.tensor_data(*tc), c.data(), 8), 0);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.find_tensor("missing"), nullptr);

  TempDir dir;
  const std::string path = (dir.path() / "x.safetensors").string();
  w.write(path);
  const File g = File::open(path);
  EXPECT_EQ(g.path(), path);
  ASSERT_NE(g.find_tensor("c"), nullptr);
  EXPECT_EQ(std::memcmp(g.tensor_data(*g.find_tensor("c")), c.data(), 8), 0);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Safetensors, HandWrittenFileWithPaddingAndScalar) {
  // A header as the Python writer makes it (trailing spaces), a 0-d tensor and an empty one.
  const std::string header =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F16","shape":[0,5],"data_offsets":[4,4]}})"
      "      ";
  const float one = 1.0f;
  std::vector<uint8_t> data(4);
  std::memcpy(data.data(), &one, 4);
  const std::vector<uint8_t> bytes = raw_file(header, data);  // the File reads it in place
  const File f = File::parse(bytes);
  ASSERT_NE(f.find_tensor("s"), nullptr);
  EXPECT_EQ(f.find_tensor("s")->n_elements, 1u);
  EXPECT_EQ(f.find_tensor("e")->nbytes(), 0u);
  float v = 0;
  std::memcpy(&v, f.tensor_data(*f.find_tensor("s")), 4);
  EXPECT_EQ(v, 1.0f);
}

TEST(Safetensors, KnownDtypeWeDoNotComputeStillParses) {
  const std::string header = R"({"pos":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  const std::vector<uint8_t> bytes = raw_file(header, std::vector<uint8_t>(16));
  const File f = File::parse(bytes);
  ASSERT_NE(f.find_tensor("pos"), nullptr);
  EXPECT_EQ(f.find_tensor("pos")->dtype, "I64");
  EXPECT_FALSE(f.find_tensor("pos")->type.has_value());
}

TEST(Safetensors, TruncatedHeader) {
  expect_error({1, 2, 3}, ErrorKind::InvalidFormat, {"too small"});
  // Length says 100 bytes of header, the file has 10.
  std::vector<uint8_t> bytes = raw_file(std::string(10, ' '), {});
  bytes[0] = 100;
  expect_error(bytes, ErrorKind::InvalidFormat, {"header length 100", "past the end"});
  // A length over the cap is refused before anything is read or allocated.
  std::vector<uint8_t> huge(16, 0);
  huge[7] = 0x40;
  expect_error(huge, ErrorKind::InvalidFormat, {"exceeds the limit"});
}

TEST(Safetensors, BadJson) {
  expect_error(raw_file(R"({"a": {"dtype": "F32", )", {}), ErrorKind::InvalidFormat, {"not valid JSON"});
  expect_error(raw_file(R"([1, 2])", {}), ErrorKind::InvalidFormat, {"does not start with '{'"});
  expect_error(raw_file(R"({"a": 5})", {}), ErrorKind::InvalidFormat, {"'a'", "not an object"});
  expect_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1]}})", {}), ErrorKind::InvalidFormat,
               {"'a'", "data_offsets"});
  expect_error(raw_file(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", std::vector<uint8_t>(4)),
               ErrorKind::InvalidFormat, {"'a'", "shape"});
  expect_error(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4]}})", std::vector<uint8_t>(4)),
               ErrorKind::InvalidFormat, {"'a'", "data_offsets"});
  expect_error(raw_file(R"({"__metadata__": {"k": 1}})", {}), ErrorKind::InvalidFormat, {"__metadata__", "'k'"});
}

TEST(Safetensors, DuplicateTensorName) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  expect_error(raw_file(header, std::vector<uint8_t>(8)), ErrorKind::InvalidFormat, {"'w'", "twice"});
}

TEST(Safetensors, SizeMismatch) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})";
  expect_error(raw_file(header, std::vector<uint8_t>(16)), ErrorKind::InvalidFormat, {"'w'", "needs 16 bytes", "12"});
  const std::string overflow = R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})";
  expect_error(raw_file(overflow, std::vector<uint8_t>(4)), ErrorKind::InvalidFormat, {"'w'", "overflow"});
}

TEST(Safetensors, OffsetsOutOfRange) {
  const std::string past = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  expect_error(raw_file(past, std::vector<uint8_t>(8)), ErrorKind::InvalidFormat, {"'w'", "past the data section"});
  const std::string reversed = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
  expect_error(raw_file(reversed, std::vector<uint8_t>(8)), ErrorKind::InvalidFormat, {"'w'", "begin 8 > end 4"});
}

TEST(Safetensors, OverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_error(raw_file(header, std::vector<uint8_t>(12)), ErrorKind::InvalidFormat, {"'a'", "'b'", "overlap"});
}

TEST(Safetensors, UnknownDtype) {
  const std::string header = R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})";
  expect_error(raw_file(header, std::vector<uint8_t>(1)), ErrorKind::Unsupported, {"'w'", "Q7"});
}

TEST(Safetensors, WriterChecksSizes) {
  const float x[2] = {1, 2};
  Writer w;
  EXPECT_THROW(w.add_tensor("x", DType::F32, {3}, x, sizeof x), Error);
  EXPECT_THROW(w.add_tensor("q", DType::Q4_0, {32}, x, sizeof x), Error);
  w.add_tensor("x", DType::F32, {2}, x, sizeof x);
  EXPECT_THROW(w.add_tensor("x", DType::F32, {2}, x, sizeof x), Error);
}

// Two shards and an index, as save_pretrained writes them when a model exceeds max_shard_size.
struct ShardedFolder {
  TempDir dir;
  std::vector<float> a{1, 2, 3, 4}, b{5, 6}, c{7, 8, 9};

  void write(const std::map<std::string, std::string>& weight_map) {
    Writer s1, s2;
    s1.add_tensor("a", DType::F32, {2, 2}, a.data(), 16);
    s1.add_tensor("b", DType::F32, {2}, b.data(), 8);
    s2.add_tensor("c", DType::F32, {3}, c.data(), 12);
    s1.write((dir.path() / "model-00001-of-00002.safetensors").string());
    s2.write((dir.path() / "model-00002-of-00002.safetensors").string());
    write_text(dir.path() / kIndexFileName, index_json(weight_map, 36));
  }
};

const std::map<std::string, std::string> kGoodMap = {{"a", "model-00001-of-00002.safetensors"},
                                                     {"b", "model-00001-of-00002.safetensors"},
                                                     {"c", "model-00002-of-00002.safetensors"}};

TEST(SafetensorsCheckpoint, ShardedIndex) {
  ShardedFolder f;
  f.write(kGoodMap);
  const Checkpoint ckpt = Checkpoint::open_dir(f.dir.path().string());
  EXPECT_EQ(ckpt.files().size(), 2u) << "each shard opened once";
  EXPECT_EQ(ckpt.entries().size(), 3u);
  ASSERT_NE(ckpt.find("c"), nullptr);
  EXPECT_EQ(ckpt.find("c")->shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(std::memcmp(ckpt.tensor_data("c"), f.c.data(), 12), 0);
  EXPECT_EQ(std::memcmp(ckpt.tensor_data("a"), f.a.data(), 16), 0);
  EXPECT_NE(ckpt.path_of("c").find("model-00002-of-00002"), std::string::npos);
  EXPECT_EQ(ckpt.storages().size(), 2u);
  EXPECT_EQ(ckpt.find("zzz"), nullptr);
  EXPECT_THROW(ckpt.tensor_data("zzz"), Error);
}

TEST(SafetensorsCheckpoint, IndexPointsToWrongShard) {
  ShardedFolder f;
  auto map = kGoodMap;
  map["c"] = "model-00001-of-00002.safetensors";
  f.write(map);
  try {
    Checkpoint::open_dir(f.dir.path().string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFormat);
    EXPECT_NE(e.message().find("'c'"), std::string::npos) << e.message();
  }
}

TEST(SafetensorsCheckpoint, TensorInTwoShards) {
  TempDir dir;
  const float x = 1;
  Writer s1, s2;
  s1.add_tensor("x", DType::F32, {1}, &x, 4);
  s2.add_tensor("x", DType::F32, {1}, &x, 4);
  s1.write((dir.path() / "s1.safetensors").string());
  s2.write((dir.path() / "s2.safetensors").string());
  write_text(dir.path() / kIndexFileName, R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  try {
    Checkpoint::open_dir(dir.path().string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidFormat);
    EXPECT_NE(e.message().find("'x'"), std::string::npos) << e.message();
  }
}

TEST(SafetensorsCheckpoint, IndexCannotLeaveTheFolder) {
  ShardedFolder f;
  auto map = kGoodMap;
  map["c"] = "../model-00002-of-00002.safetensors";
  f.write(map);
  EXPECT_THROW(Checkpoint::open_dir(f.dir.path().string()), Error);
}

TEST(SafetensorsCheckpoint, BadIndexJson) {
  TempDir dir;
  write_text(dir.path() / kIndexFileName, R"({"weight_map": )");
  EXPECT_THROW(Checkpoint::open_dir(dir.path().string()), Error);
  write_text(dir.path() / kIndexFileName, R"({"metadata": {}})");
  EXPECT_THROW(Checkpoint::open_dir(dir.path().string()), Error);
}

TEST(SafetensorsCheckpoint, SingleFileAndEmptyFolder) {
  TempDir dir;
  EXPECT_THROW(Checkpoint::open_dir(dir.path().string()), Error);
  const float x = 3;
  Writer w;
  w.add_tensor("x", DType::F32, {1}, &x, 4);
  w.write((dir.path() / kSingleFileName).string());
  const Checkpoint ckpt = Checkpoint::open_dir(dir.path().string());
  EXPECT_EQ(ckpt.files().size(), 1u);
  ASSERT_NE(ckpt.find("x"), nullptr);
}

}  // namespace
}  // namespace ga::safetensors
