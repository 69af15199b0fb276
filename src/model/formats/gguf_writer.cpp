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
//
// write() streams: the header is built in memory (it is small), then each tensor's bytes go to the
// file in order. Deferred tensors are filled into a buffer on the calling thread while a background
// thread writes the previous buffer, so producing (quantizing, generating) and disk I/O overlap and
// at most two tensor buffers exist at any time.
#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
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

constexpr size_t kStdioBufferBytes = size_t{8} << 20;

// Writes buffers to a FILE* on its own thread, one buffer in flight: submit() waits until the
// previous buffer is written, so the producer is at most one buffer ahead. The first write error is
// kept and reported by submit()/finish() as a ga::Error(Io).
class AsyncFileSink {
 public:
  AsyncFileSink(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~AsyncFileSink() {
    stop();
  }
  AsyncFileSink(const AsyncFileSink&) = delete;
  AsyncFileSink& operator=(const AsyncFileSink&) = delete;

  // Queues `owned` (moved in) followed by `pad` zero bytes; returns a free buffer for reuse.
  std::vector<uint8_t> submit(std::vector<uint8_t> owned, uint64_t pad) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] { return !job_.has_value(); });
    throw_if_failed();
    std::vector<uint8_t> recycled = std::move(spare_);
    job_ = Job{std::move(owned), nullptr, 0, pad};
    work_cv_.notify_one();
    return recycled;
  }
  // Queues bytes the caller keeps alive until finish().
  void submit_view(const uint8_t* data, uint64_t n, uint64_t pad) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] { return !job_.has_value(); });
    throw_if_failed();
    job_ = Job{{}, data, n, pad};
    work_cv_.notify_one();
  }
  // Waits for everything queued; throws the first write error.
  void finish() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [this] { return !job_.has_value(); });
    throw_if_failed();
  }

 private:
  struct Job {
    std::vector<uint8_t> owned;
    const uint8_t* view = nullptr;
    uint64_t view_bytes = 0;
    uint64_t pad = 0;
  };

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  void throw_if_failed() const {
    GA_CHECK(!failed_, Io, "gguf writer: cannot write to '", path_, "': ", std::strerror(error_));
  }
  void loop() {
    static const uint8_t kZeros[256] = {};
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_cv_.wait(lock, [this] { return job_.has_value() || stopping_; });
        if (!job_.has_value()) return;
        job = std::move(*job_);
      }
      const uint8_t* p = job.view ? job.view : job.owned.data();
      const uint64_t n = job.view ? job.view_bytes : job.owned.size();
      bool ok = n == 0 || std::fwrite(p, 1, n, file_) == n;
      for (uint64_t left = job.pad; ok && left > 0;) {
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, sizeof kZeros));
        ok = std::fwrite(kZeros, 1, chunk, file_) == chunk;
        left -= chunk;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (!ok && !failed_) {
        failed_ = true;
        error_ = errno;
      }
      spare_ = std::move(job.owned);
      job_.reset();
      idle_cv_.notify_all();
    }
  }

  std::FILE* file_;
  std::string path_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable work_cv_, idle_cv_;
  std::optional<Job> job_;
  std::vector<uint8_t> spare_;
  bool stopping_ = false;
  bool failed_ = false;
  int error_ = 0;
};

uint64_t padding(uint64_t n, uint64_t align) { return (align - n % align) % align; }

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

void Writer::remove(std::string_view key) {
  for (auto it = kvs_.begin(); it != kvs_.end(); ++it) {
    if (it->key == key) {
      kvs_.erase(it);
      return;
    }
  }
}

TensorInfo Writer::checked_info(std::string name, DType type, std::vector<uint64_t> ne) const {
  GA_CHECK(!name.empty(), InvalidArgument, "gguf writer: empty tensor name");
  for (const auto& t : tensors_) {
    GA_CHECK(t.info.name != name, InvalidArgument, "gguf writer: duplicate tensor name '", name, "'");
  }
  GA_CHECK(!ne.empty() && ne.size() <= kMaxDims, InvalidArgument, "gguf writer: tensor '", name, "' has ", ne.size(),
           " dims (must be 1..", kMaxDims, ")");
  const auto traits = dtype_traits(static_cast<uint32_t>(type));
  GA_CHECK(traits.has_value(), InvalidArgument, "gguf writer: tensor '", name, "' has unknown type id ",
           static_cast<uint32_t>(type));
  GA_CHECK(is_gguf_type(type), InvalidArgument, "gguf writer: tensor '", name, "' is ", traits->name,
           ", an in-memory type of gpu_accel that GGUF cannot hold (convert it to F16 or quantize it first)");
  uint64_t n_elements = 1;
  for (const uint64_t n : ne) {
    // 2^48 elements is far beyond any real tensor and keeps every byte count below 2^64.
    GA_CHECK(n != 0 && n <= (uint64_t{1} << 48) / n_elements, InvalidArgument, "gguf writer: tensor '", name,
             "' has a zero or too large dimension ", n);
    n_elements *= n;
  }
  TensorInfo info;
  info.nbytes = row_bytes(type, ne[0]) * (n_elements / ne[0]);
  info.name = std::move(name);
  info.type = type;
  info.ne = std::move(ne);
  info.n_elements = n_elements;
  return info;
}

void Writer::add_tensor(std::string name, DType type, std::vector<uint64_t> ne, const void* data, uint64_t nbytes) {
  PendingTensor t;
  t.info = checked_info(std::move(name), type, std::move(ne));
  GA_CHECK(nbytes == t.info.nbytes, InvalidArgument, "gguf writer: tensor '", t.info.name, "' of type ",
           dtype_name(type), " needs ", t.info.nbytes, " bytes, got ", nbytes);
  GA_CHECK(data != nullptr || nbytes == 0, InvalidArgument, "gguf writer: tensor '", t.info.name, "' has no data");
  const auto* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + nbytes);
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor_deferred(std::string name, DType type, std::vector<uint64_t> ne, FillFn fill) {
  PendingTensor t;
  t.info = checked_info(std::move(name), type, std::move(ne));
  GA_CHECK(static_cast<bool>(fill), InvalidArgument, "gguf writer: tensor '", t.info.name, "' has no fill function");
  t.fill = std::move(fill);
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

std::vector<uint8_t> Writer::header_bytes(uint64_t align) const {
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
    offset += t.info.nbytes + padding(t.info.nbytes, align);
  }
  if (tensors_.empty()) return bytes;  // like llama.cpp: a vocab-only file ends without padding
  out.pad_to(align);
  return bytes;
}

std::vector<uint8_t> Writer::to_bytes() const {
  const uint64_t align = alignment();
  std::vector<uint8_t> bytes = header_bytes(align);
  for (const auto& t : tensors_) {
    const size_t at = bytes.size();
    bytes.resize(at + t.info.nbytes + padding(t.info.nbytes, align), uint8_t{0});
    if (t.fill) {
      t.fill(bytes.data() + at);
    } else if (t.info.nbytes > 0) {
      std::memcpy(bytes.data() + at, t.data.data(), t.info.nbytes);
    }
  }
  return bytes;
}

void Writer::write(const std::string& path) const {
  const uint64_t align = alignment();
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  GA_CHECK(file != nullptr, Io, "gguf writer: cannot create '", tmp, "': ", std::strerror(errno));
  std::vector<char> stdio_buffer(kStdioBufferBytes);
  std::setvbuf(file, stdio_buffer.data(), _IOFBF, stdio_buffer.size());
  try {
    AsyncFileSink sink(file, tmp);
    std::vector<uint8_t> buffer = sink.submit(header_bytes(align), 0);
    for (const auto& t : tensors_) {
      const uint64_t pad = padding(t.info.nbytes, align);
      if (!t.fill) {
        sink.submit_view(t.data.data(), t.info.nbytes, pad);
        continue;
      }
      buffer.resize(t.info.nbytes);
      t.fill(buffer.data());
      buffer = sink.submit(std::move(buffer), pad);
    }
    sink.finish();
  } catch (...) {
    std::fclose(file);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(file) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    GA_THROW(Io, "gguf writer: cannot write '", tmp, "': ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    GA_THROW(Io, "gguf writer: cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace ga::gguf
