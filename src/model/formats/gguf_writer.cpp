// GGUF v3 writer.
//
// Layout follows what llama.cpp writes, so a file read and re-written unchanged comes out byte for
// byte the same: header, KVs in insertion order, tensor infos in insertion order with offsets laid
// out back to back (each rounded up to the alignment), zero padding to the alignment, then each
// tensor's data followed by zero padding to the alignment. A file without tensors ends right after
// its metadata (no padding), as llama.cpp's vocab-only files do. Values are checked for consistency
// (the declared type must match the stored variant, array items their element type) because a
// mismatch would silently write a file other readers misparse. write() goes through a temporary
// file and a rename so a crash or a full disk never leaves a truncated model behind.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <type_traits>
#include <unordered_set>

#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace ga::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Appends little-endian fields. resize + memcpy rather than vector::insert of a pointer range,
// which trips a g++ 12 -Wstringop-overflow false positive.
class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof(T));
  }
  void string(const std::string& s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  void bytes(const std::vector<uint8_t>& b) { append(b.data(), b.size()); }
  void pad_to(uint64_t alignment) {
    const uint64_t pad = (alignment - out_.size() % alignment) % alignment;
    out_.resize(out_.size() + pad, uint8_t{0});
  }

 private:
  void append(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, p, n);
  }
  std::vector<uint8_t>& out_;
};

// Checks that the variant holds the C++ type of the declared GGUF type.
bool storage_matches(const Value& v) {
  switch (v.type) {
    case ValueType::U8: return std::holds_alternative<uint8_t>(v.data);
    case ValueType::I8: return std::holds_alternative<int8_t>(v.data);
    case ValueType::U16: return std::holds_alternative<uint16_t>(v.data);
    case ValueType::I16: return std::holds_alternative<int16_t>(v.data);
    case ValueType::U32: return std::holds_alternative<uint32_t>(v.data);
    case ValueType::I32: return std::holds_alternative<int32_t>(v.data);
    case ValueType::F32: return std::holds_alternative<float>(v.data);
    case ValueType::BOOL: return std::holds_alternative<bool>(v.data);
    case ValueType::STRING: return std::holds_alternative<std::string>(v.data);
    case ValueType::ARRAY: return std::holds_alternative<Array>(v.data);
    case ValueType::U64: return std::holds_alternative<uint64_t>(v.data);
    case ValueType::I64: return std::holds_alternative<int64_t>(v.data);
    case ValueType::F64: return std::holds_alternative<double>(v.data);
  }
  return false;
}

void check_value(const std::string& key, const Value& v) {
  GA_CHECK(storage_matches(v), InvalidArgument, "gguf writer: value of key '", key, "' is declared ",
           value_type_name(v.type), " but holds another type");
  if (v.type != ValueType::ARRAY) return;
  const Array& a = std::get<Array>(v.data);
  for (const auto& item : a.items) {
    GA_CHECK(item.type == a.elem_type, InvalidArgument, "gguf writer: array '", key, "' of ",
             value_type_name(a.elem_type), " holds a ", value_type_name(item.type), " item");
    check_value(key, item);
  }
}

// The value's payload (without its type tag, which the caller writes).
void put_value(ByteSink& out, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          out.put<uint8_t>(x ? 1 : 0);
        } else if constexpr (std::is_arithmetic_v<T>) {
          out.put<T>(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.string(x);
        } else {  // Array
          out.put<uint32_t>(static_cast<uint32_t>(x.elem_type));
          out.put<uint64_t>(x.items.size());
          for (const auto& item : x.items) put_value(out, item);
        }
      },
      v.data);
}

}  // namespace

void Writer::set(std::string key, Value value) {
  GA_CHECK(!key.empty(), InvalidArgument, "gguf writer: empty metadata key");
  check_value(key, value);
  for (auto& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(KeyValue{std::move(key), std::move(value)});
}

void Writer::copy_metadata(const File& from, std::string_view prefix) {
  for (const auto& kv : from.metadata()) {
    if (kv.key.compare(0, prefix.size(), prefix) == 0) set(kv.key, kv.value);
  }
}

void Writer::add_tensor(std::string name, DType type, std::vector<uint64_t> ne, const void* data, uint64_t nbytes) {
  GA_CHECK(!name.empty(), InvalidArgument, "gguf writer: empty tensor name");
  for (const auto& t : tensors_) {
    GA_CHECK(t.info.name != name, InvalidArgument, "gguf writer: duplicate tensor name '", name, "'");
  }
  GA_CHECK(!ne.empty() && ne.size() <= kMaxDims, InvalidArgument, "gguf writer: tensor '", name, "' has ", ne.size(),
           " dims (must be 1..", kMaxDims, ")");
  const auto traits = dtype_traits(static_cast<uint32_t>(type));
  GA_CHECK(traits.has_value(), InvalidArgument, "gguf writer: tensor '", name, "' has unknown type id ",
           static_cast<uint32_t>(type));
  uint64_t n_elements = 1;
  for (const uint64_t n : ne) {
    // 2^48 elements is far beyond any real tensor and keeps every byte count below 2^64.
    GA_CHECK(n != 0 && n <= (uint64_t{1} << 48) / n_elements, InvalidArgument, "gguf writer: tensor '", name,
             "' has a zero or too large dimension ", n);
    n_elements *= n;
  }
  const uint64_t expected = row_bytes(type, ne[0]) * (n_elements / ne[0]);
  GA_CHECK(nbytes == expected, InvalidArgument, "gguf writer: tensor '", name, "' of type ", traits->name, " needs ",
           expected, " bytes, got ", nbytes);
  GA_CHECK(data != nullptr || nbytes == 0, InvalidArgument, "gguf writer: tensor '", name, "' has no data");
  PendingTensor t;
  t.info.name = std::move(name);
  t.info.type = type;
  t.info.ne = std::move(ne);
  t.info.n_elements = n_elements;
  t.info.nbytes = nbytes;
  const auto* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + nbytes);
  tensors_.push_back(std::move(t));
}

uint64_t Writer::alignment() const {
  for (const auto& kv : kvs_) {
    if (kv.key != "general.alignment") continue;
    GA_CHECK(kv.value.type == ValueType::U32, InvalidArgument, "gguf writer: general.alignment must be u32, not ",
             value_type_name(kv.value.type));
    const uint32_t a = std::get<uint32_t>(kv.value.data);
    GA_CHECK(a != 0 && (a & (a - 1)) == 0, InvalidArgument, "gguf writer: general.alignment ", a,
             " is not a nonzero power of two");
    return a;
  }
  return kDefaultAlignment;
}

std::vector<uint8_t> Writer::to_bytes() const {
  const uint64_t align = alignment();
  std::vector<uint8_t> bytes;
  ByteSink out(bytes);
  out.put<uint32_t>(kMagic);
  out.put<uint32_t>(kVersion);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kvs_.size());
  for (const auto& kv : kvs_) {
    out.string(kv.key);
    out.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    put_value(out, kv.value);
  }
  uint64_t offset = 0;  // relative to the data section
  for (const auto& t : tensors_) {
    out.string(t.info.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.info.ne.size()));
    for (const uint64_t n : t.info.ne) out.put<uint64_t>(n);
    out.put<uint32_t>(static_cast<uint32_t>(t.info.type));
    out.put<uint64_t>(offset);
    offset += (t.info.nbytes + align - 1) / align * align;
  }
  if (tensors_.empty()) return bytes;  // like llama.cpp: a vocab-only file ends without padding
  out.pad_to(align);
  bytes.reserve(bytes.size() + offset);
  for (const auto& t : tensors_) {
    out.bytes(t.data);
    out.pad_to(align);
  }
  return bytes;
}

void Writer::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    GA_CHECK(f.good(), Io, "gguf writer: cannot create '", tmp, "': ", std::strerror(errno));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f.good()) {
      f.close();
      std::remove(tmp.c_str());
      GA_THROW(Io, "gguf writer: cannot write ", bytes.size(), " bytes to '", tmp, "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    GA_THROW(Io, "gguf writer: cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace ga::gguf
