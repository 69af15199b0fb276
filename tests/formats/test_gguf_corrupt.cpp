// The GGUF reader on corrupt input: targeted cases with hand-assembled bytes, each asserting the
// error kind and that the message names the problem, then mass truncation and seeded bit flips of
// real files, where parsing must either succeed or throw ga::Error (never crash, never another
// exception type). Parsing goes through File::parse on an in-memory copy so the mass tests stay fast;
// a successful parse is exercised (getters, to_string, every tensor byte's first and last byte) so
// AddressSanitizer builds would catch a read outside the buffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/test_data.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::gguf {
namespace {

// Little-endian byte assembler for hand-made files.
struct Raw {
  std::vector<uint8_t> b;
  Raw& u32(uint32_t v) { return put(&v, 4); }
  Raw& u64(uint64_t v) { return put(&v, 8); }
  Raw& u8(uint8_t v) { return put(&v, 1); }
  Raw& str(const std::string& s) {
    u64(s.size());
    return put(s.data(), s.size());
  }
  Raw& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(n_tensors).u64(n_kv);
  }
  Raw& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(static_cast<uint32_t>(ValueType::U32)).u32(v); }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (const uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  Raw& pad(size_t alignment) {
    while (b.size() % alignment != 0) b.push_back(0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.insert(b.end(), n, uint8_t{0});
    return *this;
  }
  Raw& put(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) b.push_back(c[i]);
    return *this;
  }
};

// Expects parsing to fail with `kind` and a message containing every one of `needles`.
void expect_error(const std::vector<uint8_t>& bytes, std::vector<std::string> needles,
                  ErrorKind kind = ErrorKind::InvalidFormat) {
  try {
    File::parse(bytes);
    ADD_FAILURE() << "parsed without error; expected: " << needles[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) {
      EXPECT_NE(e.message().find(n), std::string::npos) << "'" << n << "' not in: " << e.message();
    }
  }
}

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ4_0 = 2;

TEST(GgufCorrupt, ValidHandAssembledBaseline) {
  // The shape every targeted case below breaks in one place: two F32 tensors of 8 elements.
  Raw r;
  r.header(2, 1).kv_u32("k", 7).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(64);
  const File f = File::parse(r.b);
  EXPECT_EQ(f.get_uint("k"), 7u);
  EXPECT_EQ(f.tensors().size(), 2u);
  // Version 2 has the same layout as version 3.
  r.b[4] = 2;
  EXPECT_EQ(File::parse(r.b).version(), 2u);
}

TEST(GgufCorrupt, HeaderProblems) {
  Raw bad_magic;
  bad_magic.u32(0x58554747).u32(3).u64(0).u64(0);  // "GGUX"
  expect_error(bad_magic.b, {"bad magic", "GGUX", "offset 0"});
  expect_error(Raw().header(0, 0, 1).b, {"version 1"}, ErrorKind::Unsupported);
  expect_error(Raw().header(0, 0, 99).b, {"version 99", "offset 4"}, ErrorKind::Unsupported);
  expect_error(Raw().header(0, 0, 0).b, {"version 0"});
  expect_error(Raw().header(0, 0, 0x03000000u).b, {"big-endian"}, ErrorKind::Unsupported);
  expect_error(std::vector<uint8_t>{'G', 'G'}, {"magic", "truncated"});
  expect_error(std::vector<uint8_t>{}, {"magic", "truncated"});
  expect_error(Raw().header(0, UINT64_MAX).b, {"metadata count 18446744073709551615", "offset 16"});
  expect_error(Raw().header(1ull << 40, 0).zeros(100).b, {"tensor count 1099511627776"});
}

TEST(GgufCorrupt, MetadataProblems) {
  Raw huge_key;
  huge_key.header(0, 1).u64(UINT64_MAX).zeros(100);
  expect_error(huge_key.b, {"metadata key length 18446744073709551615", "offset 24", "exceeds the 100 bytes left"});

  Raw huge_string;
  huge_string.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::STRING)).u64(1ull << 62).zeros(16);
  expect_error(huge_string.b, {"string value length 4611686018427387904", "exceeds"});

  Raw huge_array;
  huge_array.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  huge_array.u32(static_cast<uint32_t>(ValueType::U32)).u64(1ull << 61).zeros(64);
  expect_error(huge_array.b, {"array count 2305843009213693952", "u32"});

  Raw string_array;  // 10^9 strings of at least 8 bytes each in 64 bytes
  string_array.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  string_array.u32(static_cast<uint32_t>(ValueType::STRING)).u64(1000000000).zeros(64);
  expect_error(string_array.b, {"array count 1000000000", "string"});

  Raw unknown_type;
  unknown_type.header(0, 1).str("k").u32(13).u32(0);
  expect_error(unknown_type.b, {"unknown metadata value type 13", "offset 33"});

  Raw unknown_elem;
  unknown_elem.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY)).u32(77).u64(0);
  expect_error(unknown_elem.b, {"unknown array element type 77"});

  Raw deep;  // arrays of arrays, 9 levels
  deep.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  for (int i = 0; i < 9; ++i) deep.u32(static_cast<uint32_t>(ValueType::ARRAY)).u64(1);
  deep.u32(static_cast<uint32_t>(ValueType::U8)).u64(0);
  expect_error(deep.b, {"nested deeper than 8"});

  Raw too_many;  // 2^24 + 1 u8 items: present in the file, but past the reader's item budget
  too_many.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::ARRAY));
  too_many.u32(static_cast<uint32_t>(ValueType::U8)).u64((1ull << 24) + 1).zeros((1ull << 24) + 1);
  expect_error(too_many.b, {"array count 16777217", "16777216 array items"});

  Raw dup;
  dup.header(0, 2).kv_u32("general.x", 1).kv_u32("general.x", 2);
  expect_error(dup.b, {"duplicate metadata key 'general.x'", "offset 49"});

  Raw empty_key;
  empty_key.header(0, 1).str("").u32(static_cast<uint32_t>(ValueType::U8)).u8(0).zeros(8);
  expect_error(empty_key.b, {"empty metadata key", "offset 24"});

  Raw bad_utf8;
  bad_utf8.header(0, 1).str("k\xff").u32(static_cast<uint32_t>(ValueType::U8)).u8(0);
  expect_error(bad_utf8.b, {"not valid UTF-8"});

  Raw bad_bool;
  bad_bool.header(0, 1).str("k").u32(static_cast<uint32_t>(ValueType::BOOL)).u8(2);
  expect_error(bad_bool.b, {"bool value 2"});
}

TEST(GgufCorrupt, AlignmentProblems) {
  expect_error(Raw().header(0, 1).kv_u32("general.alignment", 0).b, {"general.alignment 0", "power of two"});
  expect_error(Raw().header(0, 1).kv_u32("general.alignment", 3).b, {"general.alignment 3", "power of two"});
  Raw wrong_type;
  wrong_type.header(0, 1).str("general.alignment").u32(static_cast<uint32_t>(ValueType::U64)).u64(32);
  expect_error(wrong_type.b, {"general.alignment has type u64"});
  // A valid non-default alignment moves the data section.
  Raw ok;
  ok.header(1, 1).kv_u32("general.alignment", 128).tensor("a", {4}, kF32, 0).pad(128).zeros(16);
  const File f = File::parse(ok.b);
  EXPECT_EQ(f.alignment(), 128u);
  EXPECT_EQ(f.data_offset() % 128, 0u);
}

TEST(GgufCorrupt, TensorInfoProblems) {
  const auto one = [](const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Raw r;
    r.header(1, 0).tensor(name, std::move(ne), type, offset).pad(32).zeros(256);
    return r.b;
  };
  expect_error(one("t", {1, 1, 1, 1, 1}, kF32, 0), {"'t' has n_dims 5"});
  expect_error(one("t", {}, kF32, 0), {"'t' has n_dims 0"});
  expect_error(one("t", {4, 0}, kF32, 0), {"zero dimension ne[1]"});
  expect_error(one("t", {1ull << 32, 1ull << 32}, kF32, 0), {"element count overflows", "ne[1]"});
  expect_error(one("t", {UINT64_MAX}, kF32, 0), {"element count overflows", "ne[0]"});
  expect_error(one("t", {8}, 99, 0), {"unknown type id 99"});
  expect_error(one("t", {8}, 4, 0), {"unknown type id 4"});  // removed Q4_2
  expect_error(one("t", {33}, kQ4_0, 0), {"ne[0] = 33", "block size 32"});
  expect_error(one("t", {8}, kF32, 4), {"misaligned", "data offset 4"});
  expect_error(one("t", {8}, kF32, 256), {"'t'", "past the end"});
  expect_error(one("t", {1ull << 40}, kF32, 0), {"'t'", "past the end"});
  expect_error(one("", {8}, kF32, 0), {"empty name"});
  // A byte size that overflows u64 even though the element count fits in int64.
  expect_error(one("t", {1ull << 62}, kF32, 0), {"byte size overflows"});

  Raw overlap;
  overlap.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(128);
  expect_error(overlap.b, {"'a'", "'b'", "overlap"});
  Raw dup;
  dup.header(2, 0).tensor("a", {8}, kF32, 0).tensor("a", {8}, kF32, 32).pad(32).zeros(64);
  expect_error(dup.b, {"duplicate tensor name 'a'"});
  Raw no_data;  // infos end exactly at the file end: the data section is empty
  no_data.header(1, 0).tensor("a", {8}, kF32, 0);
  expect_error(no_data.b, {"data section", "past the end"});
}

TEST(GgufCorrupt, OpenNamesThePath) {
  const auto dir = std::filesystem::path(test::binary_dir()) / "gguf_corrupt_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "bad.gguf").string();
  Raw r;
  r.header(0, 0, 1);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(r.b.data()), static_cast<std::streamsize>(r.b.size()));
  }
  try {
    File::open(path);
    ADD_FAILURE() << "opened a v1 file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_EQ(e.message().rfind(path + ": gguf: version 1", 0), 0u) << e.message();
  }
  std::filesystem::remove_all(dir);
}

TEST(GgufCorrupt, KnownButUnsupportedTypesStillLoad) {
  Raw r;
  r.header(1, 0).tensor("iq", {256}, static_cast<uint32_t>(DType::IQ2_XXS), 0).pad(32).zeros(66);
  const File f = File::parse(r.b);
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].type, DType::IQ2_XXS);
  EXPECT_EQ(f.tensors()[0].nbytes, 66u);
}

// ---- mass corruption of real files ----

// Touches everything a parsed file exposes; returns a checksum so nothing is optimized away.
uint64_t exercise(const File& f) {
  uint64_t sum = f.version() + f.alignment() + f.data_offset();
  for (const auto& kv : f.metadata()) {
    sum += kv.value.to_string(4).size();
    try {  // wrong-kind getters throw ga::Error; anything else escapes and fails the test
      sum += f.get_string(kv.key).has_value();
    } catch (const Error&) {
    }
    try {
      sum += f.get_int_array(kv.key).has_value();
    } catch (const Error&) {
    }
  }
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(f.find_tensor(t.name), &t);
    EXPECT_LE(f.data_offset() + t.offset + t.nbytes, f.file_size());
    const uint8_t* p = f.tensor_data(t);
    sum += p[0] + p[t.nbytes - 1];
  }
  return sum;
}

struct Outcome {
  size_t ok = 0;
  size_t errors = 0;
};

// Parses bytes that must either parse or throw ga::Error; returns whether they parsed.
bool parse_must_not_crash(const std::vector<uint8_t>& bytes, Outcome& out, const std::string& what) {
  try {
    const File f = File::parse(bytes);
    exercise(f);
    ++out.ok;
    return true;
  } catch (const Error&) {
    ++out.errors;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": non-ga exception: " << e.what();
  }
  return false;
}

class GgufMassCorruption : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<uint8_t> load() {
    const std::string s = test::read_file(test::shared_path(GetParam()));
    return std::vector<uint8_t>(s.begin(), s.end());
  }
};

TEST_P(GgufMassCorruption, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> full = load();
  const File reference = File::parse(full);
  Outcome out;
  std::vector<size_t> lengths;
  for (size_t n = 0; n < std::min<size_t>(4096, full.size()); ++n) lengths.push_back(n);
  for (size_t k = 0; k <= 256; ++k) lengths.push_back(4096 + (full.size() - 4096) * k / 256);
  // Around the end of the metadata and the start of the data section, byte by byte.
  for (size_t n = reference.data_offset() - 64; n < reference.data_offset() + 64 && n <= full.size(); ++n) {
    lengths.push_back(n);
  }
  // A prefix may only parse if it keeps all metadata and all tensor data (it may drop trailing padding).
  uint64_t needed = full.size();
  if (!reference.tensors().empty()) {
    needed = 0;
    for (const auto& t : reference.tensors()) needed = std::max(needed, reference.data_offset() + t.offset + t.nbytes);
  }
  for (const size_t n : lengths) {
    if (n > full.size()) continue;
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    const bool ok = parse_must_not_crash(cut, out, "truncated to " + std::to_string(n));
    EXPECT_TRUE(!ok || n >= needed) << "a file truncated to " << n << " bytes parsed";
  }
  EXPECT_GT(out.errors, 4000u);
}

TEST_P(GgufMassCorruption, SeededBitFlipsFailCleanly) {
  const std::vector<uint8_t> full = load();
  const File reference = File::parse(full);
  const size_t header_end = reference.data_offset();  // metadata + tensor infos
  // Vocab files hold a few MB of metadata that takes milliseconds per parse: fewer rounds there.
  const int rounds = reference.tensors().empty() ? 600 : 4000;
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull);
  static constexpr uint64_t kInteresting[] = {0, 1, 2, 4, 5, 8, 31, 32, 33, 255, 0x7fffffffull, 0xffffffffull,
                                              1ull << 32, 1ull << 62, 0x7fffffffffffffffull, ~0ull};
  Outcome out;
  std::vector<uint8_t> bytes = full;
  for (int round = 0; round < rounds; ++round) {
    bytes = full;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    std::string what = "round " + std::to_string(round) + ":";
    for (int m = 0; m < mutations; ++m) {
      // 9 in 10 mutations hit the header; the first 64 bytes (counts, first key) get extra attention.
      const uint64_t r = rng() % 10;
      const size_t limit = r == 0 ? bytes.size() : (r < 3 ? std::min<size_t>(64, header_end) : header_end);
      const size_t pos = rng() % limit;
      if (rng() % 4 == 0 && pos + 8 <= bytes.size()) {
        const uint64_t v = kInteresting[rng() % std::size(kInteresting)];
        const size_t width = (rng() % 2 == 0) ? 4 : 8;
        std::memcpy(&bytes[pos], &v, width);
        what += " set" + std::to_string(width * 8) + "@" + std::to_string(pos) + "=" + std::to_string(v);
      } else {
        const int bit = static_cast<int>(rng() % 8);
        bytes[pos] ^= static_cast<uint8_t>(1u << bit);
        what += " flip@" + std::to_string(pos) + "." + std::to_string(bit);
      }
    }
    parse_must_not_crash(bytes, out, what);
  }
  // Both outcomes must occur, or the mutations are not reaching the parser's checks.
  EXPECT_GT(out.errors, static_cast<size_t>(rounds) / 10);
  EXPECT_GT(out.ok, 0u);
}

INSTANTIATE_TEST_SUITE_P(Files, GgufMassCorruption,
                         ::testing::Values("models/tinyllamas/stories260K.gguf", "fixtures/quant/fixture-Q4_K.gguf",
                                           "vocab/ggml-vocab-llama-spm.gguf"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           name = name.substr(name.rfind('/') + 1);
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ga::gguf
