// Bounds-checked little-endian reader over a byte span (private to the GGUF reader).
//
// Every read of the GGUF parser goes through this cursor, so no corrupt length, count or offset
// can make the parser touch memory outside the caller's bytes: each read first checks that the
// bytes it needs are left, and throws ga::Error(InvalidFormat) naming what was being read and the
// byte offset where it starts. Values are copied with memcpy (the file gives no alignment
// guarantee). GGUF is little-endian; big-endian hosts are refused at compile time.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "gpu_accel/error.h"

namespace ga::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t left() const { return bytes_.size() - pos_; }

  // Throws unless n more bytes are left; `what` names the field for the message.
  void need(uint64_t n, std::string_view what) const {
    GA_CHECK(n <= left(), InvalidFormat, "gguf: ", what, " at offset ", pos_, " needs ", n, " bytes but only ", left(),
             " are left (truncated file?)");
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  uint8_t u8(std::string_view what) { return read<uint8_t>(what); }
  uint32_t u32(std::string_view what) { return read<uint32_t>(what); }
  uint64_t u64(std::string_view what) { return read<uint64_t>(what); }

  // GGUF string: u64 byte length, then the bytes (no terminator). The length is checked against
  // the bytes left before anything is allocated.
  std::string string(std::string_view what) {
    const uint64_t at = pos_;
    const uint64_t len = u64(what);
    GA_CHECK(len <= left(), InvalidFormat, "gguf: ", what, " length ", len, " at offset ", at, " exceeds the ", left(),
             " bytes left");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

}  // namespace ga::gguf
