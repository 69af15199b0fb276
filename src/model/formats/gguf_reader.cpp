// GGUF v2/v3 reader: header, metadata, tensor infos, data-section validation.
//
// The parser is one pass over a bounds-checked Cursor. It trusts nothing it reads: every count is
// checked against the bytes that remain (using the smallest number of bytes one item can take)
// before a vector is reserved, arrays nest at most kMaxArrayDepth deep, tensor shapes are checked
// for overflow, and the data ranges of all tensors are checked to lie inside the file, aligned and
// disjoint. Because every item consumes at least one byte of input, the memory the parser builds
// is bounded by a constant times the file size, whatever the file says.
//
// Problems throw ga::Error(InvalidFormat) with the byte offset; a file of a version we do not read
// (v1, or newer than v3) throws Unsupported. Known tensor types that gpu_accel cannot compute are
// still loaded (`inspect` shows them); the model loader rejects them.
#include <algorithm>
#include <limits>
#include <utility>

#include "core/mapped_file.h"
#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"
#include "model/formats/gguf_cursor.h"

namespace ga::gguf {
namespace {

constexpr int kMaxArrayDepth = 8;       // arrays of arrays: real files use at most 2 levels
constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr uint32_t kLastValueType = 12; // F64
// Array items over the whole file. A parsed item costs ~48 bytes against its >= 1 byte in the file,
// so a hostile multi-GB file of u8 arrays could otherwise cost ~50x its size in RAM. The largest
// real vocabularies (~262k tokens, with scores, types and merges) hold about a million items.
constexpr uint64_t kMaxMetadataItems = uint64_t{1} << 24;
// Smallest encodings, for plausibility checks of counts before reserving memory.
constexpr uint64_t kMinStringBytes = 8;                // u64 length, empty string
constexpr uint64_t kMinArrayBytes = 4 + 8;             // elem type + count, no items
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;        // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, one ne, type, offset

// Bytes the smallest value of type t takes in the file.
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return kMinStringBytes;
    case ValueType::ARRAY: return kMinArrayBytes;
  }
  return 1;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xe0) == 0xc0) { extra = 1; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { extra = 2; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { extra = 3; cp = c & 0x07; }
    else return false;
    if (extra >= s.size() - i) return false;  // truncated sequence
    for (size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // reject overlong encodings, surrogates and code points past U+10FFFF
    static constexpr uint32_t kMinForLength[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace

class Parser {
 public:
  explicit Parser(File& file) : file_(file), cur_(file.bytes_) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_data_section();
  }

 private:
  File& file_;
  Cursor cur_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t n_items_ = 0;  // array items read so far (all arrays, all depths)

  void read_header() {
    const uint32_t magic = cur_.u32("magic");
    if (magic != kMagic) {
      std::string shown;
      for (int i = 0; i < 4; ++i) {
        const auto ch = static_cast<char>((magic >> (8 * i)) & 0xffu);
        shown += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
      }
      GA_THROW(InvalidFormat, "gguf: bad magic '", shown, "' at offset 0 (expected 'GGUF'): not a GGUF file");
    }
    const uint32_t version = cur_.u32("version");
    GA_CHECK(version != 1, Unsupported,
             "gguf: version 1 files are not supported (only v2 and v3); re-convert the model with a current llama.cpp");
    GA_CHECK(version != 0x02000000u && version != 0x03000000u, Unsupported,
             "gguf: the version at offset 4 is byte-swapped: big-endian GGUF files are not supported");
    GA_CHECK(version != 0, InvalidFormat, "gguf: invalid version 0 at offset 4");
    GA_CHECK(version <= 3, Unsupported, "gguf: version ", version, " at offset 4 is not supported (only v2 and v3)");
    file_.version_ = version;
    const uint64_t at_counts = cur_.pos();
    n_tensors_ = cur_.u64("tensor count");
    n_kv_ = cur_.u64("metadata count");
    // Plausibility: each KV and each tensor info takes a minimum number of bytes.
    const uint64_t left = cur_.left();
    GA_CHECK(n_kv_ <= left / kMinKvBytes, InvalidFormat, "gguf: metadata count ", n_kv_, " at offset ", at_counts + 8,
             " is impossible with ", left, " bytes left");
    GA_CHECK(n_tensors_ <= (left - n_kv_ * kMinKvBytes) / kMinTensorInfoBytes, InvalidFormat, "gguf: tensor count ",
             n_tensors_, " at offset ", at_counts, " is impossible with ", left, " bytes left");
  }

  ValueType read_type(std::string_view what) {
    const uint64_t at = cur_.pos();
    const uint32_t raw = cur_.u32(what);
    GA_CHECK(raw <= kLastValueType, InvalidFormat, "gguf: unknown ", what, " ", raw, " at offset ", at);
    return static_cast<ValueType>(raw);
  }

  Value read_value(ValueType type, int depth) {
    switch (type) {
      case ValueType::U8: return Value::u8(cur_.read<uint8_t>("u8 value"));
      case ValueType::I8: return Value::i8(cur_.read<int8_t>("i8 value"));
      case ValueType::U16: return Value::u16(cur_.read<uint16_t>("u16 value"));
      case ValueType::I16: return Value::i16(cur_.read<int16_t>("i16 value"));
      case ValueType::U32: return Value::u32(cur_.read<uint32_t>("u32 value"));
      case ValueType::I32: return Value::i32(cur_.read<int32_t>("i32 value"));
      case ValueType::F32: return Value::f32(cur_.read<float>("f32 value"));
      case ValueType::U64: return Value::u64(cur_.read<uint64_t>("u64 value"));
      case ValueType::I64: return Value::i64(cur_.read<int64_t>("i64 value"));
      case ValueType::F64: return Value::f64(cur_.read<double>("f64 value"));
      case ValueType::BOOL: {
        const uint64_t at = cur_.pos();
        const uint8_t b = cur_.u8("bool value");
        GA_CHECK(b <= 1, InvalidFormat, "gguf: bool value ", unsigned{b}, " at offset ", at, " is neither 0 nor 1");
        return Value::boolean(b != 0);
      }
      case ValueType::STRING: return Value::string(cur_.string("string value"));
      case ValueType::ARRAY: return read_array(depth);
    }
    GA_THROW(Internal, "gguf: unhandled value type ", static_cast<uint32_t>(type));
  }

  Value read_array(int depth) {
    const uint64_t at = cur_.pos();
    GA_CHECK(depth < kMaxArrayDepth, InvalidFormat, "gguf: arrays nested deeper than ", kMaxArrayDepth, " at offset ",
             at);
    const ValueType elem = read_type("array element type");
    const uint64_t count_at = cur_.pos();
    const uint64_t count = cur_.u64("array count");
    const uint64_t min_bytes = min_value_bytes(elem);
    GA_CHECK(count <= cur_.left() / min_bytes, InvalidFormat, "gguf: array count ", count, " at offset ", count_at,
             " needs at least ", min_bytes, " bytes per ", value_type_name(elem), " item but only ", cur_.left(),
             " bytes are left");
    GA_CHECK(count <= kMaxMetadataItems - n_items_, InvalidFormat, "gguf: array count ", count, " at offset ",
             count_at, " brings the metadata past ", kMaxMetadataItems, " array items in total");
    n_items_ += count;
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) items.push_back(read_value(elem, depth + 1));
    return Value::array(elem, std::move(items));
  }

  void read_metadata() {
    file_.kvs_.reserve(static_cast<size_t>(n_kv_));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const uint64_t at = cur_.pos();
      std::string key = cur_.string("metadata key");
      GA_CHECK(!key.empty(), InvalidFormat, "gguf: empty metadata key at offset ", at);
      GA_CHECK(is_valid_utf8(key), InvalidFormat, "gguf: metadata key at offset ", at, " is not valid UTF-8");
      GA_CHECK(file_.kv_index_.find(key) == file_.kv_index_.end(), InvalidFormat, "gguf: duplicate metadata key '", key,
               "' at offset ", at);
      const ValueType type = read_type("metadata value type");
      Value value = read_value(type, 0);
      file_.kv_index_.emplace(key, file_.kvs_.size());
      file_.kvs_.push_back(KeyValue{std::move(key), std::move(value)});
    }
  }

  void read_alignment() {
    const Value* v = file_.find("general.alignment");
    if (v == nullptr) return;
    GA_CHECK(v->type == ValueType::U32, InvalidFormat, "gguf: general.alignment has type ", value_type_name(v->type),
             ", expected u32");
    const uint32_t a = std::get<uint32_t>(v->data);
    GA_CHECK(a != 0 && (a & (a - 1)) == 0, InvalidFormat, "gguf: general.alignment ", a,
             " is not a nonzero power of two");
    file_.alignment_ = a;
  }

  void read_tensor_infos() {
    file_.tensors_.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      const uint64_t at = cur_.pos();
      TensorInfo t;
      t.name = cur_.string("tensor name");
      GA_CHECK(!t.name.empty(), InvalidFormat, "gguf: empty name of tensor ", i, " at offset ", at);
      GA_CHECK(file_.tensor_index_.find(t.name) == file_.tensor_index_.end(), InvalidFormat,
               "gguf: duplicate tensor name '", t.name, "' at offset ", at);
      const uint64_t dims_at = cur_.pos();
      const uint32_t n_dims = cur_.u32("tensor n_dims");
      GA_CHECK(n_dims >= 1 && n_dims <= kMaxDims, InvalidFormat, "gguf: tensor '", t.name, "' has n_dims ", n_dims,
               " at offset ", dims_at, " (must be 1..", kMaxDims, ")");
      uint64_t n_elements = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const uint64_t ne_at = cur_.pos();
        const uint64_t ne = cur_.u64("tensor dimension");
        GA_CHECK(ne != 0, InvalidFormat, "gguf: tensor '", t.name, "' has a zero dimension ne[", d, "] at offset ",
                 ne_at);
        GA_CHECK(ne <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n_elements, InvalidFormat,
                 "gguf: tensor '", t.name, "' element count overflows: ne[", d, "] = ", ne, " at offset ", ne_at);
        n_elements *= ne;
        t.ne.push_back(ne);
      }
      const uint64_t type_at = cur_.pos();
      const uint32_t type_id = cur_.u32("tensor type");
      const auto traits = dtype_traits(type_id);
      GA_CHECK(traits.has_value() && is_gguf_type(traits->type), InvalidFormat, "gguf: tensor '", t.name,
               "' has unknown type id ", type_id, " at offset ", type_at);
      GA_CHECK(t.ne[0] % traits->block_size == 0, InvalidFormat, "gguf: tensor '", t.name, "' row length ne[0] = ",
               t.ne[0], " is not a multiple of the ", traits->name, " block size ", traits->block_size);
      t.type = traits->type;
      t.n_elements = n_elements;
      // bytes = (ne[0] / block_size * type_size) * rows, each product checked for u64 overflow.
      const uint64_t blocks_per_row = t.ne[0] / traits->block_size;
      const uint64_t rows = n_elements / t.ne[0];
      GA_CHECK(blocks_per_row <= std::numeric_limits<uint64_t>::max() / traits->type_size, InvalidFormat,
               "gguf: tensor '", t.name, "' byte size overflows (ne[0] = ", t.ne[0], ")");
      const uint64_t row = blocks_per_row * traits->type_size;
      GA_CHECK(rows <= std::numeric_limits<uint64_t>::max() / row, InvalidFormat, "gguf: tensor '", t.name,
               "' byte size overflows");
      t.nbytes = row * rows;
      const uint64_t offset_at = cur_.pos();
      t.offset = cur_.u64("tensor offset");
      GA_CHECK(t.offset % file_.alignment_ == 0, InvalidFormat, "gguf: tensor '", t.name, "' data offset ", t.offset,
               " at offset ", offset_at, " is not a multiple of the alignment ", file_.alignment_, " (misaligned)");
      file_.tensor_index_.emplace(t.name, file_.tensors_.size());
      file_.tensors_.push_back(std::move(t));
    }
  }

  void place_data_section() {
    const uint64_t end_of_infos = cur_.pos();
    const uint64_t a = file_.alignment_;
    const uint64_t pad = (a - end_of_infos % a) % a;
    file_.data_offset_ = end_of_infos + pad;  // cannot overflow: end_of_infos <= file size
    if (file_.tensors_.empty()) return;       // vocab-only files may end without padding
    const uint64_t size = cur_.size();
    GA_CHECK(file_.data_offset_ <= size, InvalidFormat, "gguf: the data section at offset ", file_.data_offset_,
             " starts past the end of the file (", size, " bytes)");
    const uint64_t data_bytes = size - file_.data_offset_;
    for (const auto& t : file_.tensors_) {
      GA_CHECK(t.offset <= data_bytes && t.nbytes <= data_bytes - t.offset, InvalidFormat, "gguf: tensor '", t.name,
               "' data (offset ", t.offset, ", ", t.nbytes,
               " bytes) lies past the end of the file: the data section at offset ", file_.data_offset_, " holds ",
               data_bytes, " bytes");
    }
    // Overlap check on the ranges sorted by start.
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(file_.tensors_.size());
    for (const auto& t : file_.tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* x, const TensorInfo* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const TensorInfo& prev = *by_offset[i - 1];
      const TensorInfo& next = *by_offset[i];
      GA_CHECK(next.offset >= prev.offset + prev.nbytes, InvalidFormat, "gguf: tensors '", prev.name, "' [",
               prev.offset, ", ", prev.offset + prev.nbytes, ") and '", next.name, "' [", next.offset, ", ",
               next.offset + next.nbytes, ") overlap in the data section at offset ", file_.data_offset_);
    }
  }
};

File File::parse(std::span<const uint8_t> bytes) {
  File f;
  f.bytes_ = bytes;
  Parser(f).run();
  return f;
}

File File::open(const std::string& path) {
  auto mapping = MappedFile::open(path);
  File f;
  try {
    f = parse(mapping->bytes());
  } catch (const Error& e) {
    // Name the file: the parser only knows offsets.
    throw Error(e.kind(), path + ": " + e.message(), e.file(), e.line());
  }
  f.path_ = path;
  f.storage_ = std::move(mapping);
  return f;
}

const Value* File::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ga::gguf
