// safetensors writer, used by tests and tools to build checkpoints and Hugging Face folders.
//
// The output is what the reference Python writer produces: contiguous data with no holes (the
// reference reader refuses holes), the header padded with spaces to a multiple of 8 bytes, and
// "__metadata__" only when metadata was set. Sizes are checked as tensors are added, so a writer
// bug surfaces at the call that caused it rather than as an unreadable file.
#include <cstdio>
#include <fstream>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "gpu_accel/error.h"
#include "model/formats/safetensors.h"

namespace ga::safetensors {

using nlohmann::json;

namespace {
constexpr uint64_t kHeaderAlignment = 8;
}

void Writer::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void Writer::add_tensor(std::string name, DType type, std::vector<uint64_t> shape, const void* data,
                        uint64_t nbytes) {
  add_tensor(std::move(name), std::string(ga_to_dtype(type)), std::move(shape), data, nbytes);
}

void Writer::add_tensor(std::string name, std::string dtype, std::vector<uint64_t> shape, const void* data,
                        uint64_t nbytes) {
  GA_CHECK(name != kMetadataKey, InvalidArgument, "a tensor cannot be named ", kMetadataKey);
  for (const auto& t : tensors_) {
    GA_CHECK(t.name != name, InvalidArgument, "safetensors writer: tensor '", name, "' added twice");
  }
  if (const auto size = dtype_size(dtype)) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    GA_CHECK(n * *size == nbytes, InvalidArgument, "safetensors writer: tensor '", name, "' (", dtype, ") needs ",
             n * *size, " bytes, got ", nbytes);
  }
  Pending p;
  p.name = std::move(name);
  p.dtype = std::move(dtype);
  p.shape = std::move(shape);
  const auto* bytes = static_cast<const uint8_t*>(data);
  p.data.assign(bytes, bytes + nbytes);
  tensors_.push_back(std::move(p));
}

std::vector<uint8_t> Writer::to_bytes() const {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!metadata_.empty()) header[std::string(kMetadataKey)] = metadata_;

  std::string text = header.dump();
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');

  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& t : tensors_) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

void Writer::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GA_CHECK(out.good(), Io, "cannot create '", tmp, "'");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      out.close();
      std::remove(tmp.c_str());
      GA_THROW(Io, "cannot write '", tmp, "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    GA_THROW(Io, "cannot rename '", tmp, "' to '", path, "'");
  }
}

std::string index_json(const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

}  // namespace ga::safetensors
