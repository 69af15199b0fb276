// Read-only memory mapping of a whole file (weights are used in place, never copied).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ga {

class MappedFile {
 public:
  // Throws ga::Error(Io) naming the path and the OS error.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into memory: config.json, tokenizer.json, fixtures.
std::string read_text_file(const std::string& path);

}  // namespace ga
