// safetensors reader and writer, and the sharded-checkpoint index of Hugging Face model folders.
//
// A safetensors file is: u64 little-endian header length N, N bytes of a JSON object
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
// data section; offsets are relative to the data section. The reader maps the file and checks
// everything before a tensor is handed out: the header length against the file size and a cap,
// the JSON itself (duplicate names included, which a plain JSON parser would silently merge), each
// dtype, shape * element size == end - begin (overflow-checked), ranges inside the data section
// and pairwise disjoint. Problems throw ga::Error(InvalidFormat) naming the file, the tensor and
// the problem; a dtype string we do not know throws Unsupported (we cannot check its size).
//
// Known dtypes that gpu_accel does not compute (I64, F64, F8_*, ...) still parse, so a checkpoint
// holding e.g. an int64 buffer loads; `type` is empty for them and the model loader rejects them
// only if the model needs that tensor.
//
// Shapes stay in torch order here (shape[0] is the outermost dimension); the model loader turns
// them into ggml order (ne[0] = the innermost), which for a row-major tensor is the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu_accel/dtype.h"

namespace ga::safetensors {

// Headers above this are refused before anything is parsed (the biggest real checkpoints have
// headers of a few MB; the official implementation uses the same 100 MB limit).
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
inline constexpr std::string_view kMetadataKey = "__metadata__";
inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
inline constexpr std::string_view kSingleFileName = "model.safetensors";

// Bytes per element of a safetensors dtype name ("F32", "BF16", "I64", ...); nullopt if unknown.
std::optional<uint32_t> dtype_size(std::string_view dtype);
// The gpu_accel type of a dtype name: F32, F16, BF16; nullopt for anything else.
std::optional<DType> dtype_to_ga(std::string_view dtype);
// The safetensors name of F32/F16/BF16 (throws Unsupported for other types).
const char* ga_to_dtype(DType type);

struct TensorInfo {
  std::string name;
  std::string dtype;           // as written in the header: "F32", "BF16", "I64", ...
  std::optional<DType> type;   // F32/F16/BF16; nullopt for dtypes gpu_accel does not compute
  std::vector<uint64_t> shape; // torch order: shape.back() is the contiguous dimension
  uint64_t begin = 0;          // byte range relative to the data section
  uint64_t end = 0;
  uint64_t n_elements = 0;

  uint64_t nbytes() const { return end - begin; }
};

// A parsed safetensors file; tensor data stays in the mapping (or the caller's buffer).
class File {
 public:
  // Maps and parses a file. Throws Io if it cannot be opened, InvalidFormat if it is corrupt.
  static File open(const std::string& path);
  // Parses bytes the caller keeps alive while the File is used. `name` appears in error messages.
  static File parse(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

  const std::string& path() const { return path_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + header length
  uint64_t file_size() const { return bytes_.size(); }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in header order
  const TensorInfo* find_tensor(std::string_view name) const;
  const std::map<std::string, std::string, std::less<>>& metadata() const { return metadata_; }
  const uint8_t* tensor_data(const TensorInfo& t) const { return bytes_.data() + data_offset_ + t.begin; }

  // Keeps the mapping alive for views that outlive this object.
  std::shared_ptr<const void> storage() const { return storage_; }

 private:
  std::string path_;
  std::shared_ptr<const void> storage_;
  std::span<const uint8_t> bytes_;
  uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::map<std::string, std::string, std::less<>> metadata_;

  friend class HeaderParser;
};

// Builds a safetensors file. Tensors are laid out back to back in the order added, and the header
// is padded with spaces so the data section starts at a multiple of 8, as the Python writer does:
// the official reader rejects holes in the data section, so we add none (a tensor after an odd
// number of 2-byte elements may then be misaligned; the model loader copies such tensors).
// Data is copied when added.
class Writer {
 public:
  void set_metadata(std::string key, std::string value);
  // shape in torch order; nbytes must equal product(shape) * element size (checked).
  void add_tensor(std::string name, DType type, std::vector<uint64_t> shape, const void* data, uint64_t nbytes);
  // Any dtype name (for tests of other dtypes); the size is checked when the name is known.
  void add_tensor(std::string name, std::string dtype, std::vector<uint64_t> shape, const void* data,
                  uint64_t nbytes);

  std::vector<uint8_t> to_bytes() const;
  // Writes to path + ".tmp" and renames, so a failure leaves no partial file.
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    std::string dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> data;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor whose bytes are produced only when its file is written: fill(dst) writes exactly nbytes. Models too
// big for memory (a 16 GB BF16 8B model) are written this way, one tensor's buffer at a time.
struct DeferredTensor {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", ...
  std::vector<uint64_t> shape;  // torch order
  uint64_t nbytes = 0;
  std::function<void(uint8_t* dst)> fill;
};

// Writes one safetensors file (the layout of Writer::to_bytes) tensor by tensor, through path + ".tmp" and a
// rename, so a failing fill leaves no file.
void write_deferred(const std::string& path, std::span<const DeferredTensor> tensors,
                    const std::map<std::string, std::string>& metadata = {});

// transformers' largest shard ("5GB" in save_pretrained; 4 GiB keeps every shard under 32-bit offsets' range for
// readers that map them).
inline constexpr uint64_t kDefaultMaxShardBytes = 4ull << 30;

// Writes a model's tensors into dir as save_pretrained lays them out: model.safetensors when they fit in one shard
// of max_shard_bytes, else model-00001-of-0000N.safetensors ... (consecutive tensors, a new shard when the next
// tensor would overflow the current one; a tensor bigger than the limit gets a shard of its own) and
// model.safetensors.index.json. Every shard carries {"format": "pt"} as transformers writes it. Returns the file
// names written (the index last).
std::vector<std::string> write_sharded(const std::string& dir, std::span<const DeferredTensor> tensors,
                                       uint64_t max_shard_bytes = kDefaultMaxShardBytes);

// All tensors of a checkpoint: one file, or the shards listed by model.safetensors.index.json
// ({"weight_map": {tensor: shard file name}}), each shard opened once.
class Checkpoint {
 public:
  // dir/model.safetensors.index.json if present, else dir/model.safetensors, else the folder's
  // only *.safetensors file; InvalidFormat/Io naming the folder otherwise.
  static Checkpoint open_dir(const std::string& dir);
  static Checkpoint open_index(const std::string& index_path);
  static Checkpoint open_file(const std::string& path);

  struct Entry {
    size_t file = 0;    // index into files()
    size_t tensor = 0;  // index into files()[file].tensors()
  };

  const std::vector<File>& files() const { return files_; }
  const std::map<std::string, Entry, std::less<>>& entries() const { return entries_; }
  const TensorInfo* find(std::string_view name) const;
  // The bytes of a tensor (throws InvalidArgument for an unknown name).
  const uint8_t* tensor_data(std::string_view name) const;
  // Where a tensor lives, for error messages (throws InvalidArgument for an unknown name).
  const std::string& path_of(std::string_view name) const;
  // The mappings of every shard, for views that outlive this object.
  std::vector<std::shared_ptr<const void>> storages() const;

 private:
  void add_file(File file, const std::string& origin);
  std::vector<File> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// The text of a model.safetensors.index.json for a weight map (tensor name -> shard file name).
std::string index_json(const std::map<std::string, std::string>& weight_map, uint64_t total_size = 0);

}  // namespace ga::safetensors
