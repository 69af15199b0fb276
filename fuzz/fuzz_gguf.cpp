// libFuzzer target for the GGUF reader (and, on inputs that parse, the writer).
//
// Contract under test: File::parse on any bytes either returns a File whose every view lies inside
// the input or throws ga::Error; nothing else (no crash, no other exception, no sanitizer report,
// no unbounded allocation: run with -rss_limit_mb). A File that parses is exercised through every
// getter, to_string and every tensor byte, then re-written with the Writer and parsed again: the
// round trip must succeed and keep all keys and tensor bytes (a failure there traps).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "gpu_accel/error.h"
#include "gpu_accel/gguf.h"

namespace {

using ga::gguf::File;

// Calls a getter that may legitimately refuse a key of another kind.
template <typename F>
size_t try_get(F&& get) {
  try {
    return get() ? 1 : 0;
  } catch (const ga::Error&) {
    return 0;
  }
}

uint64_t exercise(const File& f) {
  uint64_t sum = f.version() + f.alignment() + f.data_offset() + f.file_size();
  for (const auto& kv : f.metadata()) {
    const std::string_view key = kv.key;
    sum += kv.value.to_string(3).size();
    sum += (f.find(key) == &kv.value) ? 1 : 0;
    sum += try_get([&] { return f.get_string(key).has_value(); });
    sum += try_get([&] { return f.get_uint(key).has_value(); });
    sum += try_get([&] { return f.get_int(key).has_value(); });
    sum += try_get([&] { return f.get_float(key).has_value(); });
    sum += try_get([&] { return f.get_bool(key).has_value(); });
    sum += try_get([&] { return f.get_string_array(key).has_value(); });
    sum += try_get([&] { return f.get_f32_array(key).has_value(); });
    sum += try_get([&] { return f.get_int_array(key).has_value(); });
  }
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    const uint8_t* p = f.tensor_data(t);
    for (uint64_t i = 0; i < t.nbytes; ++i) sum += p[i];  // ASan checks every byte is in the input
  }
  return sum;
}

void round_trip(const File& f) {
  ga::gguf::Writer w;
  w.copy_metadata(f);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.nbytes);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File back = File::parse(bytes);  // must not throw: anything the reader accepts, the writer reproduces
  if (back.metadata().size() != f.metadata().size() || back.tensors().size() != f.tensors().size()) __builtin_trap();
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    if (back.metadata()[i].key != f.metadata()[i].key) __builtin_trap();
    if (back.metadata()[i].value.to_string(64) != f.metadata()[i].value.to_string(64)) __builtin_trap();
  }
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& a = f.tensors()[i];
    const auto& b = back.tensors()[i];
    if (a.name != b.name || a.type != b.type || a.ne != b.ne || a.nbytes != b.nbytes) __builtin_trap();
    if (std::memcmp(f.tensor_data(a), back.tensor_data(b), a.nbytes) != 0) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  File f;
  try {
    f = File::parse(std::span<const uint8_t>(data, size));
  } catch (const ga::Error&) {
    return 0;  // rejected cleanly: the expected outcome for most inputs
  }
  volatile uint64_t sink = exercise(f);
  (void)sink;
  round_trip(f);
  return 0;
}
