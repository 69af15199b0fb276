// GGUF v2/v3 reader and writer.
//
// The reader maps the file and validates everything it reads before trusting it: magic, version,
// counts, string lengths, value types, nested arrays, tensor dims and element-count overflow,
// tensor types, alignment, data ranges inside the file, overlaps and duplicate names. Any problem
// throws ga::Error(InvalidFormat) whose message names the problem and the byte offset. Sizes read
// from the file are checked against the bytes that remain before anything is allocated, so a
// corrupt header can never make the reader allocate unbounded memory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gpu_accel/dtype.h"

namespace ga::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint64_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);

struct Value;

struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Value> items;  // each item's type is elem_type (arrays may nest)
};

struct Value {
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, Array, uint64_t, int64_t, double>;
  ValueType type = ValueType::U8;
  Storage data;

  static Value u8(uint8_t v) { return {ValueType::U8, v}; }
  static Value i8(int8_t v) { return {ValueType::I8, v}; }
  static Value u16(uint16_t v) { return {ValueType::U16, v}; }
  static Value i16(int16_t v) { return {ValueType::I16, v}; }
  static Value u32(uint32_t v) { return {ValueType::U32, v}; }
  static Value i32(int32_t v) { return {ValueType::I32, v}; }
  static Value f32(float v) { return {ValueType::F32, v}; }
  static Value boolean(bool v) { return {ValueType::BOOL, v}; }
  static Value string(std::string v) { return {ValueType::STRING, std::move(v)}; }
  static Value u64(uint64_t v) { return {ValueType::U64, v}; }
  static Value i64(int64_t v) { return {ValueType::I64, v}; }
  static Value f64(double v) { return {ValueType::F64, v}; }
  static Value array(ValueType elem_type, std::vector<Value> items) {
    return {ValueType::ARRAY, Array{elem_type, std::move(items)}};
  }
  static Value string_array(const std::vector<std::string>& items);
  static Value f32_array(const std::vector<float>& items);
  static Value i32_array(const std::vector<int32_t>& items);

  // Human-readable rendering for `inspect` (long arrays are abbreviated to max_items).
  std::string to_string(size_t max_items = 8) const;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> ne;  // ggml order: ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;       // relative to the start of the data section
  uint64_t n_elements = 0;
  uint64_t nbytes = 0;
};

// A parsed GGUF file. Tensor data stays in the mapping (or caller's buffer) and is not copied.
class File {
 public:
  // Maps and parses a file. Throws Io if it cannot be opened, InvalidFormat if it is corrupt.
  static File open(const std::string& path);
  // Parses bytes held by the caller, who keeps them alive while the File is used (fuzzing, tests).
  static File parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  uint64_t file_size() const { return bytes_.size(); }
  const std::string& path() const { return path_; }

  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const Value* find(std::string_view key) const;

  // Typed getters: nullopt when the key is absent; InvalidFormat when it has an incompatible type.
  // get_uint/get_int accept any integer type whose value fits; get_float accepts F32 and F64.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Arrays: empty optional when absent; InvalidFormat when the element type does not fit.
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Pointer to the tensor's bytes (validated to lie inside the file).
  const uint8_t* tensor_data(const TensorInfo& t) const { return bytes_.data() + data_offset_ + t.offset; }

  // Keeps the mapping alive for views that outlive this object (weights point into it).
  std::shared_ptr<const void> storage() const { return storage_; }

 private:
  std::string path_;
  std::shared_ptr<const void> storage_;  // owns the mapping when opened from a path
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend class Parser;
};

// Builds a GGUF v3 file. Metadata keeps insertion order; setting a key twice replaces it.
// Tensor data is copied when added, so callers may free their buffers.
//
// Streaming: a tensor added with add_tensor_deferred() has no data until write(), which calls its
// fill function in insertion order with a buffer of exactly the tensor's bytes and writes that
// buffer (on a background thread, while the next tensor is filled). Memory use is then bounded by
// two tensors, so a model larger than RAM can be written (quantize, make-model).
class Writer {
 public:
  // Writes the tensor's bytes (row_bytes(type, ne[0]) * rows) to dst. May throw: write() then
  // removes the partial file and rethrows.
  using FillFn = std::function<void(uint8_t* dst)>;

  void set(std::string key, Value value);
  // Removes a key if present (for tools that re-append a key at the end, as llama.cpp does).
  void remove(std::string_view key);
  // Copies every key/value of a parsed file (e.g. the tokenizer when re-quantizing).
  void copy_metadata(const File& from, std::string_view prefix = {});
  // ne in ggml order; nbytes must equal the size the type implies (checked).
  void add_tensor(std::string name, DType type, std::vector<uint64_t> ne, const void* data, uint64_t nbytes);
  // The same tensor, with its bytes produced by fill() when the file is written (see above).
  void add_tensor_deferred(std::string name, DType type, std::vector<uint64_t> ne, FillFn fill);

  std::vector<uint8_t> to_bytes() const;
  // Writes atomically: to path + ".tmp", then renames, so a failure leaves no partial file.
  void write(const std::string& path) const;

 private:
  std::vector<KeyValue> kvs_;
  struct PendingTensor {
    TensorInfo info;
    std::vector<uint8_t> data;
    FillFn fill;  // set for deferred tensors (data stays empty)
  };
  std::vector<PendingTensor> tensors_;
  uint64_t alignment() const;
  TensorInfo checked_info(std::string name, DType type, std::vector<uint64_t> ne) const;
  // Header, metadata, tensor infos and the padding before the data section.
  std::vector<uint8_t> header_bytes(uint64_t align) const;
};

}  // namespace ga::gguf
